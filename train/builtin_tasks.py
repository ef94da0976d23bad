"""Built-in tasks, generated offline and deterministically from a seed: `numbers` (digits ->
English words, the default), `copy`, `reverse`, `sort` (digit sequences) and `addition`.

Validation and test examples are held out: no source appears in two roles.
"""

import random

from train.flag_choices import BUILTIN_TASKS  # the names of MAKERS, in order
from train.number_words import number_to_words
from train.task import BUILTIN_DEFAULTS, SEQ2SEQ, Task, strings_dataset


def _algorithmic(transform, min_len=3, max_len=12):
  def make_example(rng):
    digits = [str(rng.randrange(10)) for _ in range(rng.randint(min_len, max_len))]
    return " ".join(digits), " ".join(transform(digits))

  return make_example


def _addition(rng):
  a, b = rng.randrange(10 ** rng.randint(1, 5)), rng.randrange(10 ** rng.randint(1, 5))

  def spaced(n):
    return " ".join(str(n))

  return f"{spaced(a)} + {spaced(b)}", spaced(a + b)


def _numbers(max_digits):
  """Digit count uniform in 1..max_digits, so short numbers are as common as long ones."""

  def make_example(rng):
    digits = rng.randint(1, max_digits)
    n = rng.randrange(10 ** (digits - 1) if digits > 1 else 0, 10**digits)
    return str(n), number_to_words(n)

  return make_example


MAKERS = {
  "numbers": _numbers(6),
  "copy": _algorithmic(lambda d: d),
  "reverse": _algorithmic(lambda d: d[::-1]),
  "sort": _algorithmic(sorted),
  "addition": _addition,
}


def _always(source):
  del source
  return True


def _can_hold_out(name):
  """Numbers below 1000 are each a word pattern of their own: all stay in training, and the
  held-out sets measure generalisation to unseen 4-6 digit numbers."""
  return (lambda source: len(source) >= 4) if name == "numbers" else _always


def held_out_split(make_example, seed, num_train, num_eval, can_hold_out=_always):
  """Draws distinct examples; eval examples never appear in train. Only sources passing
  `can_hold_out` may go to eval (a task's tiny cases must all stay trainable)."""
  rng = random.Random(seed)
  seen, eval_pairs, train_pairs = set(), [], []
  attempts = 0
  while len(eval_pairs) < num_eval or len(train_pairs) < num_train:
    attempts += 1
    if attempts > 50 * (num_train + num_eval):
      raise ValueError("task space too small for the requested train/eval sizes")
    pair = make_example(rng)
    if not can_hold_out(pair[0]):
      train_pairs.append(pair)
      continue
    if pair[0] in seen:
      if len(eval_pairs) >= num_eval:
        train_pairs.append(pair)  # repeats are fine in train, never shared with eval
      continue
    seen.add(pair[0])
    (eval_pairs if len(eval_pairs) < num_eval else train_pairs).append(pair)
  eval_sources = {source for source, _ in eval_pairs}
  train_pairs = [p for p in train_pairs if p[0] not in eval_sources]
  return train_pairs, eval_pairs


def _fresh_examples(make_example, seed, count, taken, can_hold_out):
  """`count` distinct examples whose sources are not in `taken`, from their own random stream
  (so adding the test role left the train and validation examples of a seed unchanged)."""
  rng = random.Random(f"test-{seed}")
  found, sources = [], set(taken)
  for _ in range(50 * count):
    if len(found) == count:
      return found
    pair = make_example(rng)
    if can_hold_out(pair[0]) and pair[0] not in sources:
      sources.add(pair[0])
      found.append(pair)
  raise ValueError("task space too small for the requested test size")


def builtin_task(name, seed=0, num_train=50_000, num_eval=1_000, num_test=1_000) -> Task:
  """The built-in task `name`: `num_train` training examples, `num_eval` held-out validation
  and `num_test` held-out test examples, all drawn from `seed`."""
  if name not in MAKERS:
    raise ValueError(f"unknown built-in task {name!r}; choose one of {list(BUILTIN_TASKS)}")
  make_example, can_hold_out = MAKERS[name], _can_hold_out(name)
  train_pairs, validation_pairs = held_out_split(
    make_example, seed, num_train, num_eval, can_hold_out
  )
  taken = {source for source, _ in train_pairs + validation_pairs}
  test_pairs = _fresh_examples(make_example, seed, num_test, taken, can_hold_out)
  return Task(
    name,
    SEQ2SEQ,
    lambda: strings_dataset(train_pairs),
    lambda: strings_dataset(validation_pairs),
    lambda: strings_dataset(test_pairs),
    defaults=BUILTIN_DEFAULTS,
  )
