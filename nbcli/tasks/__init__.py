"""The papers' downstream tasks, one module per task: what a batch is, its loss and its metrics.

`classification` (sentences and pairs), `tagging` (CoNLL token classification); `labels`: the label
names they keep end to end and their padded batches; `finetune`: building, running and predicting
with an encoder and its head.
"""
