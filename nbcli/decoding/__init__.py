"""Decoding: greedy and length-normalised beam search (`search`), and the encoder-decoder's
KV-cached stepper (`seq2seq`)."""
