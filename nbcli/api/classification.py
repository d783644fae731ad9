"""Classification and tagging as functions (papers 001, 002 downstream): fine-tune or train from
scratch, predict labels, evaluate a labelled file."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from nbcli.api.inputs import check_train_config, input_paths, local_path, optional_path, trained
from nbcli.api.reports import PathLike, Report, TrainReport
from nbcli.arguments import public


@public
def finetune_classifier(train: PathLike | Sequence[PathLike], out: PathLike, *,
                        task: Literal["classification", "tagging"] = "classification", init: PathLike | None = None,
                        tokenizer: PathLike | None = None, valid: Sequence[str] = (), text_field: str | None = None,
                        pair_field: str | None = None, label_field: str = "label", label_names: str | None = None,
                        max_len: int = 128, epochs: float = 3.0, steps: int = 0, batch_size: int = 32, lr: float = 2e-5,
                        warmup_ratio: float = 0.06, weight_decay: float = 0.01, dropout: float = 0.1,
                        pooling: Literal["first", "mean"] = "first", eval_every: int = 0, save_every: int = 0,
                        seed: int = 0, preset: str = "tiny", embedding_init: str = "normal",
                        positions: Literal["learned", "sinusoidal", "none"] = "learned",
                        freeze_embeddings: bool = False, device: str = "cpu", resume: bool = False,
                        grad_accum: int = 1, stop_at: int | None = None, missing: str = "xavier",
                        d_model: int | None = None, n_head: int | None = None,
                        encoder_options: Mapping[str, Any] | None = None, select_by: str | None = None,
                        adam_beta1: float = 0.9, adam_beta2: float = 0.999, adam_eps: float = 1e-8,
                        grad_clip: float = 1.0,
                        lr_schedule: Literal["cosine", "linear", "inverse-sqrt", "constant"] = "linear",
                        threads: int | None = None) -> TrainReport:
    """`nb train --task classification|tagging`: fine-tune `init` (an nb MLM run or checkpoint, a
    transformers encoder folder or repo id; None: nb's encoder from scratch, paper 002) with a head on
    `train` (GLUE TSV, CSV, JSONL, parquet/Arrow; for tagging CoNLL, or JSONL/parquet/Arrow records whose
    token and tag lists `text_field`/`label_field` name, default tokens and ner_tags; for CoNLL they
    are column numbers, "1" and "3" for CoNLL-U), validating on the whole of each
    `valid` "NAME=FILE" on nb train's update loop (`grad_accum` micro-batches per update; `stop_at`
    stops after that many updates, `resume` continues); returns the run's summary (best_step and
    best_epoch by `select_by`, default val_accuracy; best_val_accuracy; best_by_set, each `valid` set's own
    best; final metrics). AdamW (`adam_beta1`, `adam_beta2`, `adam_eps`, `weight_decay`), `grad_clip`,
    `lr_schedule` after the warm-up (paper 002 app. A.2: Adam (0.9, 0.98, 1e-9), no decay, constant). From scratch, `tokenizer` may be "words:min-freq=K[,lower]" (built
    from `train`) and `embedding_init` "pretrained:VECTORS" (word vectors; `missing`, `d_model`, `n_head`).
    `encoder_options`: tasks.finetune_config.ENCODER_OPTIONS over the preset's (n_layer, d_ff; norm, scale_embedding,
    init_scheme: paper 002 app. A.1-A.2's post-LN, x sqrt(D) and Xavier; sec. 3.4's transforms); `threads`: CPU
    threads (`--threads`; None: every core). A paper preset
    (nbcli.tasks.presets.CLASSIFICATION_PRESETS) is expanded by `with_classification_preset` into these keywords."""
    from nbcli.tasks.data import DataSpec, parse_valid
    from nbcli.tasks.finetune import FinetuneConfig, train_report

    cfg = FinetuneConfig(
        data=DataSpec(task=task, text_field=text_field, pair_field=pair_field, label_field=label_field,
                      max_len=max_len),
        init=None if init is None else os.fspath(init), tokenizer=None if tokenizer is None else os.fspath(tokenizer),
        label_names=label_names, epochs=epochs, steps=steps, batch_size=batch_size, lr=lr, warmup_ratio=warmup_ratio,
        weight_decay=weight_decay, dropout=dropout, pooling=pooling, eval_every=eval_every, save_every=save_every,
        seed=seed, preset=preset, embedding_init=embedding_init, positions=positions,
        freeze_embeddings=freeze_embeddings, device=device, grad_accum=grad_accum, embedding_missing=missing,
        d_model=d_model, n_head=n_head, encoder_options=dict(encoder_options or {}), select_by=select_by,
        adam_beta1=adam_beta1, adam_beta2=adam_beta2, adam_eps=adam_eps, grad_clip=grad_clip, lr_schedule=lr_schedule)
    check_train_config("finetune_classifier", cfg.encoder_options)
    return trained(lambda: train_report(cfg, input_paths(train), parse_valid(list(valid)), local_path(out), resume=resume,
                                        stop_at=stop_at), threads)


@public
def predict_labels(checkpoint: PathLike, corpus: PathLike | Sequence[PathLike], *, output: PathLike | None = None,
                   batch_size: int = 32, device: str = "cpu") -> Report:
    """`nb predict`: the label (by name) and class probabilities of every record of `corpus` (tags
    and per-token probabilities for a tagger), in input order, from a classifier run or its
    step-N.safetensors; written to `output` as JSON lines when given, else in `predictions`. A run of
    another task: that task's predictions (`Task.predict_report`), as nb predict gives them."""
    from nbcli.tasks.runs import predict_run

    return Report(predict_run(local_path(checkpoint), input_paths(corpus), optional_path(output), batch_size=batch_size,
                              device=device))


@public
def evaluate_classifier(checkpoint: PathLike, corpus: PathLike | Sequence[PathLike], *, batch_size: int = 32,
                        device: str = "cpu") -> Report:
    """`nb eval --task classification|tagging`: loss, accuracy, F1 and Matthews (scikit-learn) or
    entity precision/recall/F1 (seqeval) of a classifier run on every record of a labelled file, with
    the Hub datasets among `corpus` in `datasets` (`nbcli.tasks.runs.eval_run`, as nb eval)."""
    from nbcli.tasks.registry import get_task
    from nbcli.tasks.runs import eval_run, task_of_checkpoint

    run = local_path(checkpoint)
    task = task_of_checkpoint(run, "classification")   # a run of another task: refused as not a classifier's
    return Report(eval_run(get_task(task if task in ("classification", "tagging") else "classification"), run,
                           input_paths(corpus), batch_size=batch_size, device=device))
