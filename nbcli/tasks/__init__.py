"""The papers' tasks beyond language modelling, one module per task: what a batch is, its loss and
its metrics.

    classification.py     sentences and sentence pairs (fine-tuning an encoder with a head)
    tagging.py            CoNLL token classification
    labels.py             the label names classification and tagging keep end to end, padded batches
    data.py               a classification or tagging data set as the model sees it
    encoders.py           the encoders those heads sit on (nb's MLM or a transformers encoder)
    finetune.py           building and running (on `nbcli.train.loop.run_updates`) an encoder and its head
    inference.py          a classifier on a whole file (logits, loss, metrics); loading a run for
                          nb predict / nb eval
    classifier_export.py  nb export of a run fine-tuned from a transformers encoder (its family's
                          For{Sequence,Token}Classification folder)
    translation.py        nb train --task translation: the encoder-decoder on the task-agnostic update
                          loop (`nbcli.train.loop.run_updates`), BLEU / chrF validation
    translation_data.py   its sentence pairs: tokenised, split, counted, batched
"""
