"""`DecodeOptions`: every choice about how a model generates text, in one object that travels from
the command line (`python -m train`, `python -m serving.export`) through the library
(`tfattn.decoding`) into the export. Each value has one default, so evaluation judges exactly
what is served.
"""

import dataclasses
import json
from typing import Optional

from settings import check, setting

GREEDY, BEAM, SAMPLE = "greedy", "beam", "sample"
STRATEGIES = (GREEDY, BEAM, SAMPLE)
# How an export's searches run: graph mode at any length, or compiled with XLA over padded
# source length buckets (`decoding.decode(..., padded_decode=True)`).
DECODE_MODES = ("graph", "xla")


@dataclasses.dataclass(frozen=True)
class DecodeOptions:
  """How a sequence-to-sequence model turns a source into an output.

  Every hypothesis has a `log_prob` (the sum of its tokens' log-probabilities under the model)
  and a `score` (log_prob / ((5 + length) / 6)^alpha, what beam search ranks by), whatever the
  strategy that found it.
  """

  strategy: str = setting(
    BEAM,
    "How outputs are generated: greedy (the most likely token each step), beam (beam "
    "search, the paper's), or sample (draw each token from the softmax; see --temperature, "
    "--top_k, --top_p, --sample_seed).",
    choices=STRATEGIES,
    flag="decode_strategy",
  )
  beam_size: int = setting(
    4,
    "Beam search: hypotheses kept per example (1 is exactly greedy); also how many "
    "translate_nbest returns.",
    minimum=1,
  )
  alpha: float = setting(
    0.6,
    "Length penalty exponent: hypotheses are ranked by log_prob / ((5 + length) / 6)^alpha "
    "(the paper: 0.6).",
    minimum=0,
  )
  extra_decode_length: int = setting(
    20,
    "Tokens an output may have beyond its own source's length (capped by the model's max_length).",
    minimum=0,
  )
  max_decode_length: Optional[int] = setting(
    None,
    "A fixed output length limit for every example instead of source length + "
    "--extra_decode_length.",
    minimum=1,
  )
  temperature: float = setting(
    1.0,
    "Sampling: logits are divided by this; below 1 sharpens the distribution, towards 0 "
    "it becomes greedy (below float32's smallest normal, 1.2e-38, it is greedy: the most "
    "likely token, or one of several tied for it).",
    above=0,
  )
  no_repeat_ngram_size: int = setting(
    0,
    "Every search: never produce an n-gram of this many tokens twice in one output (the start "
    "token counts, the prompt does not); 0 = off. Reported log-probabilities stay the model's.",
    minimum=0,
  )
  top_k: int = setting(
    0, "Sampling: draw only from the k most likely tokens (0 = no limit).", minimum=0
  )
  top_p: float = setting(
    1.0,
    "Sampling: draw only from the smallest set of most likely tokens whose probability "
    "reaches p, the nucleus (1 = no limit).",
    above=0,
    maximum=1,
  )
  seed: int = setting(
    0,
    "Sampling: an export's serving_default and the evaluation draw each source with this "
    "seed mixed with a fingerprint of the source's tokens (the same text gets the same answer, "
    "whatever else is in its batch); the export's sample signature takes a seed per row; the "
    "library's decoding.decode draws row i with seed + i unless given per-row seeds.",
    minimum=0,
    maximum=2**63 - 1,
    flag="sample_seed",
  )

  def __post_init__(self):
    check(self, prefix="")

  def replace(self, **changes) -> "DecodeOptions":
    return dataclasses.replace(self, **changes)

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)

  @classmethod
  def from_dict(cls, values: dict) -> "DecodeOptions":
    known = {field.name for field in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
      raise ValueError(f"unknown DecodeOptions fields {unknown}")
    return cls(**values)

  @classmethod
  def of_run(cls, run_config: dict) -> "DecodeOptions":
    """The options a training run evaluated with, from its saved `run_config.json` values:
    its "decode" entry, or for runs saved before DecodeOptions existed, their
    `eval_beam_size` / `eval_alpha` (greedy when the beam was 1 or unset; greedy keeps the
    default beam_size, which then only sizes an export's translate_nbest)."""
    if run_config.get("decode") is not None:
      return cls.from_dict(run_config["decode"])
    beam_size = run_config.get("eval_beam_size") or 1
    alpha = run_config.get("eval_alpha")
    alpha = 0.6 if alpha is None else alpha
    if beam_size > 1:
      return cls(strategy=BEAM, beam_size=beam_size, alpha=alpha)
    return cls(strategy=GREEDY, alpha=alpha)

  def __str__(self) -> str:
    return json.dumps(self.to_dict(), sort_keys=True)
