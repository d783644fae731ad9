"""Decoding the encoder-decoder (`nb translate`, validation BLEU during `nb train --task translation`).

    search.py    greedy and length-normalised beam search over any stepper
    seq2seq.py   the encoder-decoder's KV-cached stepper (`translate_ids`)
"""
