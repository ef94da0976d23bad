"""English words for non-negative integers: the built-in text task's targets."""

_ONES = (
  "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
  "fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ((10**9, "billion"), (10**6, "million"), (1000, "thousand"))


def _below_thousand(n):
  words = []
  if n >= 100:
    words += [_ONES[n // 100], "hundred"]
    n %= 100
  if n >= 20:
    words.append(_TENS[n // 10])
    n %= 10
    if n:
      words.append(_ONES[n])
  elif n or not words:
    words.append(_ONES[n])
  return words


def number_to_words(n: int) -> str:
  """1234 -> 'one thousand two hundred thirty four' (no 'and', no hyphens)."""
  if not 0 <= n < 10**12:
    raise ValueError(f"number_to_words supports 0 <= n < 10**12, got {n}")
  if n == 0:
    return "zero"
  words = []
  for value, name in _SCALES:
    if n >= value:
      words += [*_below_thousand(n // value), name]
      n %= value
  if n:
    words += _below_thousand(n)
  return " ".join(words)
