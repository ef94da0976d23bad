"""`DecodeOptions`: every choice about how a model generates text, in one object that travels from
the command line (`python -m train`, `python -m serving.export`) through the library
(`tfattn.decoding`) into the export. Each value has one default, so evaluation judges exactly
what is served.
"""

import dataclasses
import json
from typing import Optional

import settings
from settings import check, setting

GREEDY, BEAM, SAMPLE = "greedy", "beam", "sample"
STRATEGIES = (GREEDY, BEAM, SAMPLE)
EVERY = STRATEGIES
# How a hypothesis' score divides its log-probability by its length (`decoding.length_penalty`).
LENGTH_PENALTIES = ("gnmt", "power")
# When a beam search stops (`decoding.beam_search`).
BEAM_STOPS = ("bound", "current")
# How an export's searches run: graph mode at any length, or compiled with XLA over padded
# source length buckets (`decoding.decode(..., padded_decode=True)`).
DECODE_MODES = ("graph", "xla")


def option(default, help: str, *, read_by, **checks):
  """A decoding option: `settings.setting` plus the strategies that read it (`read_by`, a
  tuple of STRATEGIES; required): a run's start shows an option only to the strategies that
  read it (`DecodeOptions.read`)."""
  if not read_by or set(read_by) - set(STRATEGIES):
    raise ValueError(f"read_by must name some of {STRATEGIES}, got {read_by!r}")
  return setting(default, help, read_by=tuple(read_by), **checks)


@dataclasses.dataclass(frozen=True)
class DecodeOptions:
  """How a sequence-to-sequence model turns a source into an output.

  Every hypothesis has a `log_prob` (the sum of its tokens' log-probabilities under the model)
  and a `score` (log_prob / ((5 + length) / 6)^alpha, or log_prob / length^alpha, what beam
  search ranks by), whatever the strategy that found it.

  A field added after exports and runs were saved declares `when_missing` (what those saves
  meant); `from_dict` gives a field a save lacks that value.
  """

  strategy: str = option(
    BEAM,
    "How outputs are generated: greedy (the most likely token each step), beam (beam "
    "search, the paper's), or sample (draw each token from the softmax; see --temperature, "
    "--top_k, --top_p, --sample_seed).",
    choices=STRATEGIES,
    flag="decode_strategy",
    read_by=EVERY,
  )
  beam_size: int = option(
    4,
    "Beam search: hypotheses kept per example (1 is exactly greedy); also how many "
    "translate_nbest returns.",
    minimum=1,
    read_by=(BEAM,),
  )
  alpha: float = option(
    0.6,
    "Length penalty exponent: hypotheses are ranked by log_prob / ((5 + length) / 6)^alpha "
    "(the paper: 0.6), or with --length_penalty=power by log_prob / length^alpha.",
    minimum=0,
    read_by=(BEAM,),
  )
  length_penalty: str = option(
    "gnmt",
    "The length penalty's form: gnmt = ((5 + length) / 6)^alpha (Wu et al. 2016, the paper's); "
    "power = length^alpha (transformers' length_penalty, Marian's and OPUS-MT's, with alpha = "
    "their length_penalty); length counts the output's tokens, END included.",
    choices=LENGTH_PENALTIES,
    when_missing="gnmt",
    read_by=(BEAM,),
  )
  beam_stop: str = option(
    "bound",
    "When beam search stops: bound = when no live hypothesis can beat the worst finished one "
    "even at the length limit (exact); current = transformers' early_stopping=False: when the "
    "best live one's score at its current length cannot, and from then on that example takes "
    "no more finished hypotheses (faster, what generate() answers).",
    choices=BEAM_STOPS,
    when_missing="bound",
    read_by=(BEAM,),
  )
  min_decode_length: int = option(
    0,
    "Every search: an output has at least this many tokens before END (END is not counted; "
    "CTranslate2's min_decoding_length): END is never chosen earlier. The output's limit still "
    "applies. Reported log-probabilities stay the model's.",
    minimum=0,
    when_missing=0,
    read_by=EVERY,
  )
  never_generate: str = option(
    "",
    "Token ids no search ever produces, comma-separated (e.g. Marian's pad id, transformers' "
    "bad_words_ids): they leave the model's distribution, whose softmax then runs over the "
    "other ids (log-probabilities reported accordingly, as transformers' renormalize_logits).",
    when_missing="",
    read_by=EVERY,
  )
  end_at_limit: bool = option(
    False,
    "An output that reaches its length limit ends with END: its last token is forced to END, "
    "which adds nothing to its log-probability (transformers' forced_eos_token_id).",
    when_missing=False,
    read_by=EVERY,
  )
  extra_decode_length: int = option(
    20,
    "Tokens an output may have beyond its own source's length (capped by the model's max_length).",
    minimum=0,
    read_by=EVERY,
  )
  max_decode_length: Optional[int] = option(
    None,
    "A fixed output length limit for every example instead of source length + "
    "--extra_decode_length.",
    minimum=1,
    read_by=EVERY,
  )
  temperature: float = option(
    1.0,
    "Sampling: logits are divided by this; below 1 sharpens the distribution, towards 0 "
    "it becomes greedy (below float32's smallest normal, 1.2e-38, it is greedy: the most "
    "likely token, or one of several tied for it).",
    above=0,
    read_by=(SAMPLE,),
  )
  no_repeat_ngram_size: int = option(
    0,
    "Every search: never produce an n-gram of this many tokens twice in one output (the start "
    "token counts, the prompt does not); 0 = off. Reported log-probabilities stay the model's.",
    minimum=0,
    read_by=EVERY,
  )
  top_k: int = option(
    0,
    "Sampling: draw only from the k most likely tokens (0 = no limit).",
    minimum=0,
    read_by=(SAMPLE,),
  )
  top_p: float = option(
    1.0,
    "Sampling: draw only from the smallest set of most likely tokens whose probability "
    "reaches p, the nucleus (1 = no limit).",
    above=0,
    maximum=1,
    read_by=(SAMPLE,),
  )
  seed: int = option(
    0,
    "Sampling: an export's serving_default and the evaluation draw each source with this "
    "seed mixed with a fingerprint of the source's tokens (the same text gets the same answer, "
    "whatever else is in its batch); the export's sample signature takes a seed per row; the "
    "library's decoding.decode draws row i with seed + i unless given per-row seeds.",
    minimum=0,
    maximum=2**63 - 1,
    flag="sample_seed",
    read_by=(SAMPLE,),
  )

  def __post_init__(self):
    check(self, prefix="")
    _ = self.banned_ids  # raises on a malformed list

  @property
  def banned_ids(self) -> tuple:
    """`never_generate` as a tuple of ints (a ValueError for a malformed list)."""
    try:
      ids = tuple(int(part) for part in self.never_generate.split(",") if part.strip())
    except ValueError:
      ids = (-1,)
    if any(i < 0 for i in ids):
      raise ValueError(
        f"never_generate must be comma-separated token ids >= 0, got {self.never_generate!r}"
      )
    return ids

  def read(self) -> dict:
    """{option: value} of the options this strategy reads (a run's start shows only these)."""
    return {
      field.name: getattr(self, field.name)
      for field, spec in settings.declared(self)
      if self.strategy in spec.extra["read_by"]
    }

  def replace(self, **changes) -> "DecodeOptions":
    return dataclasses.replace(self, **changes)

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)

  @classmethod
  def from_dict(cls, values: dict) -> "DecodeOptions":
    """Options as saved (`to_dict`), by this version or an earlier one: a field the save lacks
    takes its declared `when_missing`."""
    known = {field.name for field in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
      raise ValueError(f"unknown DecodeOptions fields {unknown}")
    return settings.from_saved(cls, values)

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
