"""Where the graph-mode searches spend their time, how much of it goes to examples already done,
and what dropping them (`decoding.COMPACT_AT`) buys.

  python benchmarks/search_profile.py --mode=profile  # op shares and the finished-row waste
  python benchmarks/search_profile.py --mode=policy   # tokens/s for each compaction policy
  python benchmarks/search_profile.py --mode=exports --exports=before=DIR,after=DIR
  # any mode on a trained run and real sentences:
  python benchmarks/search_profile.py --run_dir=runs/multi30k --texts_file=test.de

Model: a trained run's (--run_dir, its tokenizer on --texts_file), or a Transformer of --size
with fixed random weights whose END is never chosen, so each example writes exactly its own
limit (its source length + extra_decode_length) on --source_lengths drawn uniformly. Batches of
--batch sentences, in file order or sorted by length (--order). Library modes call
`decoding.beam_search` / `token_loop` in a `tf.function` (graph mode, the graph export's path);
`exports` calls SavedModels' `translate_ids` (e.g. one exported by main's code, one by this).

Waste: row-steps spent on examples whose search is over (settled beams, finished greedy rows),
counted as the rows each decoding step computes with no compaction against with compaction
after every step (then a step computes only the examples still searching).
"""

import cli

import collections
import dataclasses
import glob
import os
import tempfile
import time
from typing import List, Optional

from absl import flags

from settings import setting

POLICIES = ("never", "1.0", "0.9", "0.75", "0.5")
# Name scopes of tfattn.decoding whose op time is reported apart.
SCOPES = ("reorder_beams", "compact")
CONTAINERS = ("While", "If", "StatelessIf", "PartitionedCall", "StatefulPartitionedCall")
BASE = dict(d_model=512, num_heads=8, dff=2048, num_encoder_layers=6, num_decoder_layers=6)
TINY = dict(d_model=16, num_heads=2, dff=32, num_encoder_layers=1, num_decoder_layers=1)


@dataclasses.dataclass(frozen=True)
class SearchProfileFlags:
  """The flags of `benchmarks/search_profile.py`."""

  mode: str = setting(
    "profile", "profile, policy or exports.", choices=("profile", "policy", "exports")
  )
  run_dir: Optional[str] = setting(None, "A trained seq2seq run (default: random weights).")
  texts_file: Optional[str] = setting(None, "Source sentences for --run_dir, one a line.")
  size: str = setting("base", "The random model's size.", choices=("base", "tiny"))
  vocab_size: int = setting(32000, "The random model's vocabulary.")
  source_lengths: List[str] = setting(("5", "40"), "The random sentences' lengths, low,high.")
  sentences: int = setting(256, "How many sentences.", minimum=1)
  batch: int = setting(32, "Sentences a batch.", minimum=1)
  beam: int = setting(4, "Beam size (1: greedy).", minimum=1)
  order: List[str] = setting(("sorted", "unsorted"), "Batch orders to time.")
  policies: List[str] = setting(POLICIES, "compact_at values (never: no compaction).")
  exports: List[str] = setting((), "name=SavedModel dir pairs to time (--mode=exports).")
  rounds: int = setting(3, "Timed rounds (best of).", minimum=1)
  threads: int = setting(2, "Intra- and inter-op threads (0: TensorFlow's choice).", minimum=0)


def _define_flags():
  cli.define_flags(SearchProfileFlags)


def _model_and_sentences(args):
  """(model, source id lists, DecodeOptions) for the random model or the trained run."""
  import numpy as np
  import tensorflow as tf

  import tfattn
  from tfattn.decode_options import DecodeOptions

  if args.run_dir:
    import common

    from serving.export.trained_run import load_trained, run_decode_options

    run = load_trained(args.run_dir)
    texts = common.read_texts(args.texts_file)[: args.sentences]
    rows = run.tokenizers["source"].tokenize(tf.constant(texts)).to_list()
    cap = run.model.config.max_length
    options = run_decode_options(args.run_dir)
    return run.model, [row[:cap] for row in rows], options
  config = tfattn.TransformerConfig(
    **(BASE if args.size == "base" else TINY),
    source_vocab_size=args.vocab_size,
    target_vocab_size=args.vocab_size,
    share_embeddings=True,
    tie_output_embedding=False,
    max_length=256,
    dropout_rate=0.0,
  )
  model = tfattn.Transformer(config)
  bias = np.zeros([args.vocab_size], np.float32)
  bias[[config.eos_id, config.pad_id, config.bos_id]] = -1e4  # each output runs to its limit
  model.output_projection.bias.assign(bias)
  rng = np.random.default_rng(0)
  low, high = (int(x) for x in args.source_lengths)
  rows = [
    rng.integers(4, args.vocab_size, rng.integers(low, high + 1)).tolist()
    for _ in range(args.sentences)
  ]
  return model, rows, DecodeOptions()


def batches(rows, size, order):
  """int32 arrays `[<= size, longest]` of `rows`, in file order or sorted by length."""
  import numpy as np

  rows = sorted(rows, key=len) if order == "sorted" else list(rows)
  out = []
  for first in range(0, len(rows), size):
    part = rows[first : first + size]
    ids = np.zeros([len(part), max(1, max(map(len, part)))], np.int32)
    for i, row in enumerate(part):
      ids[i, : len(row)] = row
    out.append(ids)
  return out


def _policy(name):
  return None if name == "never" else float(name)


def searcher(model, options, compact_at, rows_seen=None):
  """A graph-mode function: source ids `[batch, s_len]` -> output ids, beam or greedy as
  `options` say; `rows_seen` (a tf.Variable) counts the rows every step computes."""
  import tensorflow as tf

  from tfattn import decoding

  def counted(start):
    if rows_seen is None:
      return start

    def step_fn(ids, last_tokens, step, cache, memory):
      with tf.control_dependencies([rows_seen.assign_add(tf.shape(last_tokens, tf.int64)[0])]):
        return start.step_fn(ids, last_tokens, step, cache, memory)

    return start._replace(step_fn=step_fn)

  @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)], autograph=False)
  def search(source_ids):
    if options.beam_size > 1:
      start = counted(model.start_decoding(source_ids, options, beams=options.beam_size))
      return decoding.first_beam(decoding.beam_search(start, options, compact_at=compact_at)).ids
    start = counted(model.start_decoding(source_ids, options))
    return decoding.token_loop(start, options, compact_at=compact_at).ids

  return search


def output_tokens(ids, eos_id=2, pad_id=0):
  """Tokens written before END (CTranslate2's protocol counts tokenized output)."""
  import numpy as np

  ids = np.asarray(ids)
  ended = np.cumsum((ids == eos_id) | (ids == pad_id), axis=-1) > 0
  return int((~ended).sum())


def _options(args, base):
  strategy = "beam" if args.beam > 1 else "greedy"
  return base.replace(strategy=strategy, beam_size=max(args.beam, 1), alpha=0.0)


def waste(args, model, rows, options, log=print):
  """{order: share of row-steps spent on examples already done} (no compaction)."""
  import tensorflow as tf

  result = {}
  for order in args.order:
    counts = {}
    for policy in ("never", "1.0"):
      seen = tf.Variable(0, dtype=tf.int64)
      search = searcher(model, options, _policy(policy), seen)
      for ids in batches(rows, args.batch, order):
        search(ids)
      counts[policy] = int(seen.numpy())
    result[order] = 1 - counts["1.0"] / counts["never"]
    log(
      f"{order}: {counts['never']:,} row-steps computed, {counts['1.0']:,} of them on examples "
      f"still searching: waste {result[order]:.1%}"
    )
  return result


def op_shares(args, model, rows, options, policy, log=print, top=12):
  """{op type: share of op time} of the search over the first batches, by the TF profiler."""
  import tensorflow as tf
  from tensorflow.tsl.profiler.protobuf import xplane_pb2

  search = searcher(model, options, _policy(policy))
  work = batches(rows, args.batch, args.order[0])[:3]
  search(work[0])
  space = xplane_pb2.XSpace()
  with tempfile.TemporaryDirectory(prefix="search_profile_") as logdir:  # read, then removed
    tf.profiler.experimental.start(logdir)
    for ids in work:
      search(ids)
    tf.profiler.experimental.stop()
    with open(sorted(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True))[-1], "rb") as f:
      space.ParseFromString(f.read())
  by_type, by_scope = collections.Counter(), collections.Counter()
  for plane in space.planes:
    if "host" not in plane.name.lower():
      continue
    for line in plane.lines:
      for event in line.events:
        name = plane.event_metadata[event.metadata_id].name
        if ":" not in name or "::" in name:
          continue  # TF ops only: "scope/name:Type" (not the executor's own events)
        op_type = name.rsplit(":", 1)[1]
        if op_type in CONTAINERS or (not op_type[:1].isalpha() and op_type[:1] != "_"):
          continue  # a loop or a call holds other ops' time; " __inference..": a function
        if op_type.startswith("__"):
          continue
        by_type[op_type] += event.duration_ps
        for scope in SCOPES:
          if f"{scope}/" in name:
            by_scope[scope] += event.duration_ps
  total = sum(by_type.values()) or 1
  shares = {k: v / total for k, v in by_type.most_common()}
  log(f"op time by type ({policy}, {args.order[0]}, {len(work)} batches, {total / 1e9:.0f} ms):")
  for op_type, share in list(shares.items())[:top]:
    log(f"  {op_type:28s} {share:6.1%}")
  for scope in SCOPES:
    shares[f"scope:{scope}"] = by_scope[scope] / total
    log(f"  in {scope + '/':25s} {by_scope[scope] / total:6.1%}")
  return shares


def interleaved(functions, work, rounds):
  """{name: (best wall seconds, best process CPU seconds, tokens)} of a pass over `work`:
  every function once a round, in turn (the same load). CPU time counts every thread of this
  process: less moved by other programs on a shared machine than the wall."""
  for fn in functions.values():
    fn(work[0])  # traced and warm
  best = {name: (float("inf"), float("inf"), 0) for name in functions}
  for _ in range(rounds):
    for name, fn in functions.items():
      wall, cpu = time.perf_counter(), time.process_time()
      tokens = sum(output_tokens(fn(ids)) for ids in work)
      wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
      best[name] = (min(best[name][0], wall), min(best[name][1], cpu), tokens)
  return best


def _report(order, results, log):
  names = list(results)
  first_wall, first_cpu, _ = results[names[0]]
  for name, (wall, cpu, tokens) in results.items():
    log(
      f"{order:9s} {name:8s} {tokens / wall:8.1f} tokens/s wall (x{first_wall / wall:.3f}), "
      f"{tokens / cpu:8.1f} per CPU s (x{first_cpu / cpu:.3f})  {tokens} tokens"
    )


def policy_table(args, model, rows, options, log=print):
  """{order: {policy: (wall, CPU seconds, tokens)}}: the library search under each policy."""
  functions = {p: searcher(model, options, _policy(p)) for p in args.policies}
  table = {}
  for order in args.order:
    table[order] = interleaved(functions, batches(rows, args.batch, order), args.rounds)
    _report(order, table[order], log)
  return table


def export_table(args, rows, log=print):
  """{order: {name: (wall, CPU seconds, tokens)}}: each SavedModel's `translate_ids`."""
  import tensorflow as tf
  import tensorflow_text  # noqa: F401 (the exports' tokenizer ops)

  functions = {}
  for pair in args.exports:
    name, path = pair.split("=", 1)
    signature = tf.saved_model.load(path).signatures["translate_ids"]
    functions[name] = lambda ids, s=signature: s(source_ids=tf.constant(ids))["ids"].numpy()
  table = {}
  for order in args.order:
    table[order] = interleaved(functions, batches(rows, args.batch, order), args.rounds)
    _report(order, table[order], log)
  return table


def main(argv):
  del argv
  cli.start_tensorflow_quietly()  # the flags are good: now TensorFlow, quietly
  import tensorflow as tf

  args = flags.FLAGS
  tf.config.threading.set_intra_op_parallelism_threads(args.threads)
  tf.config.threading.set_inter_op_parallelism_threads(args.threads)
  print(f"load {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs")
  # Each policy is its own tf.function by design: TensorFlow's retracing advice is noise here.
  cli.drop_log_lines(["triggered tf.function retracing"])
  model, rows, base = _model_and_sentences(args)
  if args.mode == "exports":
    export_table(args, rows)
    return
  options = _options(args, base)
  if args.mode == "profile":
    waste(args, model, rows, options)
    for policy in ("never", args.policies[-1]):
      op_shares(args, model, rows, options, policy)
  else:
    policy_table(args, model, rows, options)


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
