"""Decoding: the rules that choose a token, the searches over a model's steps, and the KV cache.

    sampling.py  one small function per decoding rule (greedy, temperature, top-k, top-p, logit
                 adjustment) and the seeded inverse-CDF sampler (`nb generate`, paper 003 app. B)
    search.py    greedy and length-normalised beam search over any stepper
    seq2seq.py   the encoder-decoder's KV-cached stepper (`translate_ids`: `nb translate`, validation BLEU)
    kv_cache.py  the keys/values of the positions seen so far, grown and reordered (both models)
"""
