"""The texts of an export's warm-up requests: a few vocabulary pieces, and with XLA one text per
source length bucket, so no live request pays a compilation."""


def bucket_warmup_texts(tokenizer, buckets):
  """One text per source length bucket whose token count (after truncation to the last bucket,
  max_length) falls in that bucket, so replaying them compiles every XLA program a request can
  need at that batch size. Texts repeat one vocabulary word; the repeat count comes from the
  measured tokens of 1 and 2 repeats, and the resulting counts are checked."""
  import tensorflow as tf

  from tfattn import text

  reserved = len(text.RESERVED_TOKENS)
  lower_bounds = (0, *tuple(buckets[:-1]))

  def count(texts):
    return tokenizer.tokenize(tf.constant(texts)).row_lengths().numpy()

  for piece in range(reserved, min(tokenizer.vocab_size, reserved + 200)):
    word = tokenizer.detokenize(tf.constant([[piece]]))[0].numpy().decode().strip()
    if not word:
      continue
    for joiner in (" ", ""):
      one, two = count([word, joiner.join([word] * 2)])
      per_repeat, base = two - one, 2 * one - two  # tokens = base + per_repeat * repeats
      if per_repeat < 1:
        continue
      texts = [joiner.join([word] * max(1, (bucket - base) // per_repeat)) for bucket in buckets]
      if all(
        low < min(length, buckets[-1]) <= high
        for low, length, high in zip(lower_bounds, count(texts), buckets)
      ):
        return texts
  raise ValueError(
    "found no vocabulary word whose repetitions fill every source length bucket "
    f"{buckets}; export with --decode=graph"
  )


def warmup_requests(module, source_tokenizer, texts, batch_sizes):
  """A first request for every text signature; with XLA, one per length bucket, batch size and
  compiled search, so no live request pays a compilation."""
  import tensorflow as tf

  from tfattn import text

  if texts is None:  # a few vocabulary pieces as text, and the empty string
    first_pieces = tf.range(len(text.RESERVED_TOKENS), min(source_tokenizer.vocab_size, 12))
    texts = [source_tokenizer.detokenize(first_pieces[tf.newaxis])[0].numpy().decode(), ""]
  requests = module.warmup_requests(texts)
  if module.decode_mode == "xla":
    bucket_texts = bucket_warmup_texts(source_tokenizer, module.length_buckets)
    requests += [
      request
      for size in sorted(set(batch_sizes))
      for one in bucket_texts
      for request in module.warmup_requests([one] * size, compiled_only=True)
    ]
  return requests
