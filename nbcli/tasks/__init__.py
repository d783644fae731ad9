"""The tasks nb trains, and the seam they plug into (fairseq's FairseqTask): a task declares its
options once (a dataclass: the CLI's flags, the API's keywords) and trains through the shared loop.

    base.py               Task: name, option groups, train(values, hooks), summary_view; TrainHooks
    options.py            how an option is declared (`option()`: flag, help, bounds) and checked
    common_options.py     the option groups tasks share (run, output layer, guidance) and their config keywords
    presets.py            the translation and classification presets, the papers' exactly as their appendices
    registry.py           the built-in tasks and those of other packages (entry points `nbcli.tasks`)
    runs.py               what the faces call: train a task by name, the task a run records, its eval/predict
    lm.py                 nb train lm: the decoder-only / MLM Transformer (the run: language_model.py)
    translation_task.py   nb train translation: its options and summary (the run: translation.py)
    finetune_tasks.py     nb train classification | tagging: their options and summary (the run: finetune.py)

What a batch is, its loss and its metrics, per task:

    classification.py     sentences and sentence pairs (fine-tuning an encoder with a head)
    tagging.py            CoNLL token classification
    labels.py             the label names classification and tagging keep end to end, padded batches
    data.py               a classification or tagging data set as the model sees it
    encoders.py           the encoders those heads sit on (nb's MLM or a transformers encoder)
    language_model.py     the LM's run: blocks of documents, nb's Transformer, validation loss and divergences
    finetune.py           building and running (on `nbcli.train.loop.run_training`) an encoder and its head
    finetune_config.py    its options as the run takes them (FinetuneConfig) and the TrainConfig they make
    inference.py          a classifier on a whole file (logits, loss, metrics); loading a run for
                          nb predict / nb eval
    classifier_export.py  nb export of a run fine-tuned from a transformers encoder (its family's
                          For{Sequence,Token}Classification folder)
    translation.py        nb train translation: the encoder-decoder on the shared orchestration
                          (`nbcli.train.loop.run_training`), BLEU / chrF validation
    translation_config.py its options as the run takes them, its presets and the TrainConfig they make
    translation_data.py   its sentence pairs: tokenised, split, counted, batched
"""
