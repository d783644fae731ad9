"""nb's reference models beyond the decoder-only / MLM Transformer of `nbcli.model`.

`seq2seq`: the encoder-decoder of Vaswani et al. (2017), the papers' translation model.
"""
