"""nb's reference models beyond the decoder-only / MLM Transformer of `nbcli.model`.

    seq2seq.py   the encoder-decoder of Vaswani et al. (2017), the papers' translation model
    heads.py     classification and tagging heads on nb's MLM encoder or a transformers encoder
"""
