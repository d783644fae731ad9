"""Language-model runtime for `nb eval` and `nb generate` (paper 003 sec. 3.3).

    runner.py      one interface over nb's own checkpoints and Hugging Face causal LMs: logits for a
                   batch, an incremental KV-cache step (`nbcli.decoding.kv_cache`), surgery applied in
                   memory; the decoding rules are `nbcli.decoding.sampling`'s
    diversity.py   Distinct-n and n-gram diversity D (eqs. 5-6) over words, NLTK's word tokenizer
    perplexity.py  streamed, batched, sliding-window loss over a held-out corpus; table 1's KL
    arms.py        the arms of a study (one per lambda; logit adjustment tau), their surgery and
                   log-prior, and opening a study (model, tokenizer, counts)
    evaluation.py  `nb eval`: every arm scored on the corpus (eval_report), with the KL columns and
                   the per-token figures
    frequency_report.py  eval's per-token figures (paper 003 fig. 1, paper 000 fig. 4), their PNGs,
                   and plot-by-frequency's overlay
    generation.py  continuations of held-out prompts per lambda: the table of paper 003 table 2
"""
