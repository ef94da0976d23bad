"""Special tokens, defined once: ids 0..3 of every vocabulary, the defaults of
`TransformerConfig.pad_id/bos_id/eos_id` and of the losses' `pad_id`. Kept free of TensorFlow
imports so the config can use them."""

PAD, START, END, UNK = "[PAD]", "[START]", "[END]", "[UNK]"
RESERVED_TOKENS = (PAD, START, END, UNK)
PAD_ID, START_ID, END_ID, UNK_ID = range(len(RESERVED_TOKENS))
