"""`nb train --task classification|tagging`: fine-tune an encoder with a head (papers 001 tables 1,
2, 4; 002 table 1); `nb predict` / `nb eval` with the result are `nbcli.tasks.inference`.

The options: `nbcli.tasks.finetune_config.FinetuneConfig`. The run: read and check every file
(nothing is created before), build the classifier (`tasks.encoders`), then hand it to the shared
orchestration the LM and translation use (`nbcli.train.loop.run_training`): batches in the sampler's (seed, epoch) order, AdamW (no decay on
1-D tensors; betas (--adam-beta1, --adam-beta2), default (0.9, 0.999), eps --adam-eps, default 1e-8)
under linear warm-up over ceil(`warmup_ratio` x updates) and linear decay to 0 (transformers'
get_linear_schedule_with_warmup: `train.step.learning_rate` with --lr-schedule linear; or another
--lr-schedule), --grad-accum micro-batches per update, dropout seeded by (seed, step,
micro-batch), evaluation on the WHOLE of every validation set at update 0, every `eval_every` updates
(default: once per epoch) and at the end (under torchrun each record on one rank: `shared_metrics`).
Files in the run directory:

    config.json          the options, the labels by name, the inputs
    tokenizer.json|.model the tokenizer's bytes (predict finds it beside a step-N.safetensors); a
                         `-t words:min-freq=K[,lower]` vocabulary is built here from the TRAINING
                         records' texts (text and pair fields; tagging: the CoNLL tokens), not --valid's
    step-N.safetensors   the classifier (metadata nb.format nb-classifier/1, nb.labels, nb.encoder)
    best.safetensors     the classifier at best_step (with --valid), which nb predict / eval / export
                         read from the run directory (`nbcli.checkpoint.runs.run_checkpoint`)
    train-state.*        AdamW moments and the position (`train.state`), for --resume: a resumed run
                         repeats the uninterrupted one
    log.jsonl            per update {step, loss, lr, tokens_per_s}; evaluations add {val_loss,
                         val_accuracy, val_f1, val_<NAME>_loss|accuracy|f1} (the first set gives the
                         unprefixed keys)
    summary.json         best_step, best_epoch: the scheduled evaluation chosen by --select-by (default
                         val_accuracy, the FIRST validation set's highest accuracy; a loss is minimised;
                         the earliest on a tie), best_val_accuracy: the first set's accuracy there,
                         best_by_set: every set's own best of the same metric with its step and epoch
                         (`nbcli.train.best.BestBySet`), and the final metrics per set

A new run that fails before its first saved state leaves no run directory (`removed_on_failure`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from nbcli.checkpoint.runs import BEST
from nbcli.corpus.records import ReadStats
from nbcli.errors import CheckpointError, ConfigError, OutputError
from nbcli.models.heads import Classifier
from nbcli.tasks.data import (
    Encoded, encode_file, known_labels, make_labels, padding_id, read_records, unnamed_tags,
)
from nbcli.tasks.finetune_config import (
    ENCODER_OPTIONS, RESUMABLE, SET_METRICS, FinetuneConfig, learning_rate, train_config,
)
from nbcli.tasks.inference import (FORMAT, evaluate_classifier, load_classifier, model_outputs, predict_file,
                                   predict_report, prediction_metrics, predictions)
from nbcli.tasks.labels import LabelledBatch, LabelSet
from nbcli.tasks.options import MAX_STEPS

if TYPE_CHECKING:
    from nbcli.train.best import BestBySet
    from nbcli.train.callbacks import Callback
    from nbcli.train.loop import Finished, TaskRun
    from nbcli.train.runtime import Runtime

# the options live in tasks.finetune_config and predict/evaluate in tasks.inference; named here too, with the run
__all__ = ["ENCODER_OPTIONS", "FORMAT", "FinetuneConfig", "FinetuneResult", "classifier_forward", "evaluate_classifier",
           "finetune", "learning_rate", "load_classifier", "predict_file", "predict_report", "train_config",
           "train_report"]


@dataclass
class FinetuneResult:
    out: Path
    steps: int
    best_val_accuracy: float | None
    best_step: int | None
    final: dict[str, dict[str, Any]]
    checkpoint: Path
    tokens: int
    seconds: float
    tokens_per_s: float
    """training tokens (real, unpadded) per second of the updates, evaluation and saving excluded"""
    best_epoch: float | None = None
    steps_per_epoch: int = 0
    resumed_from: int | None = None
    device: str = "cpu"
    warnings: list[str] = field(default_factory=list)
    task: str = "classification"
    labels: list[str] = field(default_factory=list)
    seed: int = 0
    parameters: int = 0
    # --embedding-init pretrained:VECTORS: the vectors' coverage of the vocabulary, as nb train's LM run
    # reports it ({"input": nbcli.vectors.vocabulary.vector_embedding's report})
    embedding_coverage: dict[str, Any] | None = None
    select_by: str = "val_accuracy"       # the metric best_step was chosen by (--select-by)
    # every --valid set's best of the same metric, {name: {metric, value, step, epoch}} (paper 002 sec. 4: MNLI's
    # best matched and best mismatched accuracy, each maximised on its own)
    best_by_set: dict[str, dict[str, Any]] = field(default_factory=dict)
    preset_overridden: dict[str, Any] = field(default_factory=dict)   # --preset's values an option replaced
    best_checkpoint: Path | None = None   # DIR/best.safetensors: the model at best_step (None: no --valid)
    datasets: list[dict[str, Any]] = field(default_factory=list)   # the Hub datasets read (run_training)

    def as_dict(self) -> dict[str, Any]:
        """summary.json's content (paths as strings)."""
        best = None if self.best_checkpoint is None else str(self.best_checkpoint)
        return {**asdict(self), "out": str(self.out), "checkpoint": str(self.checkpoint), "best_checkpoint": best}


def finetune_selection(cfg: FinetuneConfig, sets: Sequence[str]) -> BestBySet:
    """The run's best: best_step by --select-by (default val_accuracy, the first set's highest accuracy;
    a loss is minimised), and each --valid set's best of the same metric (`nbcli.train.best`).
    ConfigError for a metric the run does not log."""
    from nbcli.train.best import select_by_sets

    return select_by_sets(cfg.select_by, "val_accuracy", list(sets), SET_METRICS, cfg.data.task)


def classifier_forward(net: torch.nn.Module, batch: LabelledBatch, guidance: Any, rt: Any) -> tuple[torch.Tensor, None]:
    """The logits of one micro-batch under the run's autocast (the task's `nbcli.train.step.Forward`;
    classification and tagging have no attention guidance)."""
    from nbcli.precision import autocast

    with autocast(rt.device, rt.amp_dtype):
        return net(batch.ids, batch.key_mask, batch.type_ids), None


def _tokenizer_for(cfg: FinetuneConfig, train_records: Sequence[Any]) -> Any:
    """-t, else the --init transformers folder's own; `-t words:...` is built from `train_records`."""
    from nbcli.tokenizers import load_tokenizer
    from nbcli.tasks.data import training_texts
    from nbcli.tasks.encoders import init_path, is_transformers_folder

    init = None if cfg.init is None else init_path(cfg.init)  # a missing --init says so, not "--tokenizer"
    if cfg.tokenizer is not None:
        return load_tokenizer(cfg.tokenizer, texts=lambda: training_texts(cfg.data, train_records))
    if init is not None and is_transformers_folder(init):
        return load_tokenizer(init)
    raise ConfigError("--tokenizer is needed for an nb --init or a model trained from scratch")


def _build(cfg: FinetuneConfig, tokenizer: Any, num_labels: int, coverage: dict[str, Any] | None = None,
           ) -> Classifier:
    from nbcli.tasks.encoders import encoder_from_scratch, freeze_embeddings, input_embedding_of, open_encoder

    torch.manual_seed(cfg.seed)
    if cfg.init is None:
        model = encoder_from_scratch(tokenizer, cfg.data.task, num_labels, preset=cfg.preset, seq_len=cfg.data.max_len,
                                     dropout=cfg.dropout, embedding_init=cfg.embedding_init, positions=cfg.positions,
                                     pooling=cfg.pooling, seed=cfg.seed, d_model=cfg.d_model, n_head=cfg.n_head,
                                     missing=cfg.embedding_missing, coverage=coverage,
                                     options=cfg.encoder_options)  # type: ignore[arg-type]
    else:
        model = open_encoder(cfg.init, cfg.data.task, num_labels, pooling=cfg.pooling, dropout=cfg.dropout)  # type: ignore[arg-type]
    rows = input_embedding_of(model).shape[0]
    if tokenizer.vocab_size > rows:
        raise ConfigError(f"--init {cfg.init}: the tokenizer's {tokenizer.vocab_size} tokens do not fit the encoder's "
                          f"{rows}-row embedding; give the tokenizer the encoder was trained with (-t)")
    if cfg.freeze_embeddings:
        freeze_embeddings(model)
    return model


def _metadata(cfg: FinetuneConfig, labels: LabelSet, model: Classifier, step: int) -> dict[str, str]:
    from nbcli.provenance import tool_version, utc_now

    spec = model.spec
    return {"nb.format": FORMAT, "nb.task": cfg.data.task, **labels.to_metadata(),
            "nb.encoder": json.dumps({"kind": spec.kind, "style": spec.style, "config": spec.config,
                                      "pooling": cfg.pooling, "dropout": cfg.dropout}, sort_keys=True),
            "nb.finetune_config": json.dumps(cfg.to_dict(), sort_keys=True), "nb.step": str(step),
            "nb.version": tool_version(), "nb.created": utc_now()}


def shared_metrics(model: Classifier, task: str, data: Encoded, labels: LabelSet, pad_id: int, batch_size: int,
                   rt: Runtime) -> dict[str, Any]:
    """The loss and metrics of a whole validation file, each record run once over all ranks: rank r
    runs records r, r + R, r + 2R, ... (one process: all of them), the summed loss and its count are
    all-reduced and the predictions all-gathered, so every rank gets the metrics of the whole file
    (`prediction_metrics`), as one process computes them."""
    from nbcli.train.runtime import all_gather_texts, all_reduce_sum

    mine = list(range(rt.rank, len(data.items), rt.world))
    logits, total, count = model_outputs(model, data, pad_id, batch_size, rt.device, mine)
    sums = all_reduce_sum(torch.tensor([total, count], dtype=torch.float64, device=rt.device), rt).tolist()
    shared = all_gather_texts([(row, json.dumps(p)) for row, p in zip(mine, predictions(task, data, logits, mine))], rt)
    every = [json.loads(text) for _, text in sorted(shared)]
    return {"loss": sums[0] / sums[1] if sums[1] else None, **prediction_metrics(task, data, every, labels)}


def _fingerprint(train: Encoded) -> str:
    """sha256 of the encoded training items (--resume checks the data is the run's)."""
    digest = hashlib.sha256()
    for ids, types, label in train.items:
        digest.update(json.dumps([ids, types, label]).encode("ascii") + b"\n")
    return digest.hexdigest()


def _check_out(out: Path, resume: bool, cfg: FinetuneConfig, inputs: Sequence[str]) -> None:
    """`out` may hold no earlier run (unless --resume, which needs the same options) and no input."""
    from nbcli.jsonsafe import load_file
    from nbcli.outputs import inputs_inside

    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out}: exists and is not a directory")
    inside = inputs_inside(out, [p for p in inputs if p != "-"])
    if inside is not None:
        raise OutputError(f"--out {out}: the input {inside} lies in this run directory; choose another --out")
    if not resume:
        if out.exists() and any(out.iterdir()):
            raise OutputError(f"--out {out}: exists and is not empty (give a new directory, or --resume)")
        return
    if not (out / "train-state.json").is_file():
        raise OutputError(f"--resume: {out} has no train-state.json (no saved state to continue)")
    saved = load_file(out / "config.json", error=CheckpointError, what="run config", max_bytes=1 << 24)
    now, defaults = cfg.to_dict(), FinetuneConfig().to_dict()   # an option newer than the run: its default
    diff = sorted(k for k in now if k not in RESUMABLE and isinstance(saved, dict)
                  and saved.get(k, defaults[k]) != now[k])
    if not isinstance(saved, dict) or diff:
        details = ", ".join(f"{k}: {saved.get(k)!r} -> {now[k]!r}" for k in diff[:4]) if diff else "not an object"
        raise ConfigError(f"--resume: options differ from {out / 'config.json'} ({details}); resume with the "
                          "run's own options")


def finetune(cfg: FinetuneConfig, train_files: Sequence[str], valid: dict[str, str], out: Path | str, *,
             resume: bool = False, stop_at: int | None = None,
             on_step: Callable[[int, dict[str, Any]], None] | None = None,
             on_warning: Callable[[str], None] | None = None, callbacks: Sequence[Callback] = ()) -> FinetuneResult:
    """Fine-tune (module doc) on the shared orchestration (`nbcli.train.loop.run_training`); `callbacks`
    hear every evaluation and log record. Every
    input is read and checked before `out` is created; a failure before the first saved state leaves
    no run directory. `stop_at` stops after that many updates (state saved) while the schedule
    follows the whole run; `resume` continues from the saved state. `on_step(step, record)` gets
    every log record."""
    from nbcli.train.loop import run_training

    out = Path(out)
    finetune_selection(cfg, list(valid))   # an unknown --select-by is refused before any work

    def prepare(rt: Runtime, warn: Callable[[str], None]) -> TaskRun:
        return prepare_run(cfg, train_files, valid, out, rt, warn)

    return run_training(cfg, out, resume=resume, stop_at=stop_at, prepare=prepare, on_step=on_step,
                        on_warning=on_warning, callbacks=callbacks, inputs=[*train_files, *valid.values()],
                        check_directory=lambda: _check_out(out, resume, cfg, [*train_files, *valid.values()]))


def read_sets(cfg: FinetuneConfig, train_files: Sequence[str], valid: dict[str, str], warn: Callable[[str], None],
              ) -> tuple[Any, LabelSet, Encoded, dict[str, Encoded]]:
    """The tokenizer (a words vocabulary from the training records), the labels, the encoded training
    set and each validation set; what the reads replaced or skipped, said through `warn`."""
    spec = cfg.data
    train_stats, valid_stats = ReadStats(), {name: ReadStats() for name in valid}
    train_records = read_records(spec, train_files, names=known_labels(spec, cfg.label_names, train_files),
                                 stats=train_stats)
    tokenizer = _tokenizer_for(cfg, train_records)
    labels = make_labels(spec, train_records, cfg.label_names, train_files)
    train = encode_file(spec, tokenizer, train_records, labels)
    sets = {name: encode_file(spec, tokenizer, read_records(spec, [path], names=labels.names,
                                                            stats=valid_stats[name]), labels)
            for name, path in valid.items()}
    for note in [*train_stats.notes(", ".join(train_files)),
                 *(n for name, path in valid.items() for n in valid_stats[name].notes(f"--valid {path}"))]:
        warn(note)
    if (unnamed := unnamed_tags(spec, labels)) is not None:
        warn(unnamed)
    return tokenizer, labels, train, sets


def prepare_run(cfg: FinetuneConfig, train_files: Sequence[str], valid: dict[str, str], out: Path, rt: Runtime,
                warn: Callable[[str], None]) -> TaskRun:
    """Read and encode every file, build the classifier: what the shared run needs of a fine-tuning
    task (its evaluation on the whole of every validation set; the best by --select-by, and each set's)."""
    from nbcli.train.data import TrainSampler
    from nbcli.train.loop import TaskRun
    from nbcli.train.runtime import host_sum
    from nbcli.train.step import global_micro
    from nbcli.train.updates import Updates

    spec = cfg.data
    tokenizer, labels, train, sets = read_sets(cfg, train_files, valid, warn)
    per_epoch = math.ceil(len(train.items) / cfg.batch_size)
    total = cfg.steps or max(1, math.ceil(cfg.epochs * per_epoch))
    if total > MAX_STEPS:
        raise ConfigError(f"--epochs {cfg.epochs} of {per_epoch} updates each: {total} updates, more than the "
                          f"{MAX_STEPS:,} nb allows; give fewer --epochs or --steps")
    tcfg = train_config(cfg, total, cfg.eval_every or per_epoch)
    coverage: dict[str, Any] = {}
    model = _build(cfg, tokenizer, len(labels.names), coverage).to(rt.device)
    model.train()
    pad = padding_id(tokenizer)
    sampler = TrainSampler(len(train.items), cfg.seed)
    micro = cfg.batch_size // (cfg.grad_accum * rt.world)
    best = finetune_selection(cfg, list(sets))
    final: dict[str, dict[str, Any]] = {}

    def batches(step: int, seqs: int) -> list[Any]:
        return [train.batch(sampler.blocks(seqs + global_micro(tcfg, rt, m) * micro, micro), pad).to(rt.device)
                for m in range(cfg.grad_accum)]

    def tokens(step_batches: list[Any]) -> int:   # counted on the host as the batches were built: no sync
        return int(host_sum(sum(b.tokens for b in step_batches), rt))

    def evaluate(step: int) -> dict[str, Any]:
        record: dict[str, Any] = {}
        for index, (name, data) in enumerate(sets.items()):
            metrics = shared_metrics(model, spec.task, data, labels, pad, cfg.batch_size, rt)
            final[name] = metrics
            for key in ("loss", "accuracy", "f1"):
                record[f"val_{name}_{key}"] = metrics[key]
                if index == 0:
                    record[f"val_{key}"] = metrics[key]
        return record

    params = sum(p.numel() for p in model.parameters())
    train_fingerprint = _fingerprint(train)   # --resume's data check and config.json's `examples`
    updates = Updates(cfg=tcfg, rt=rt, out=out, model=model, batches=batches,
                      forward=classifier_forward, evaluate=evaluate, metadata=lambda step: _metadata(cfg, labels, model, step),
                      fingerprint=train_fingerprint, guidance=None, log_u=torch.zeros(len(labels.names)),
                      vocab_size=len(labels.names), tokens=tokens, flops_per_token=6.0 * params, warn=warn,
                      save_initial=False)

    def write_files(resumed_step: int | None) -> None:
        from nbcli.atomic import write_bytes_atomic, write_text_atomic
        from nbcli.train.rundir import truncate_log

        if resumed_step is not None:
            truncate_log(out / "log.jsonl", resumed_step)
            return
        write_text_atomic(out / "config.json", json.dumps({
            **cfg.to_dict(), "labels": labels.to_json(), "train": list(train_files), "valid": valid,
            # what the files held (nb plot-run groups seeds by it, not by the paths as typed)
            "examples": {"train": train_fingerprint, "valid": {name: _fingerprint(e) for name, e in sets.items()}}},
            indent=2) + "\n")
        name = "tokenizer.json" if tokenizer.kind == "tokenizer.json" else "tokenizer.model"
        write_bytes_atomic(out / name, tokenizer.data)

    def finish(end: Finished) -> FinetuneResult:
        position = end.position
        seconds = position.seconds   # the updates' own time: evaluation and saving excluded
        return FinetuneResult(out, end.last_step, best.at_best("val_accuracy"), best.step, final, end.checkpoint,
                              position.tokens,
                              seconds, position.tokens / seconds if seconds > 0 else 0.0,
                              best_epoch=None if best.step is None else best.step / per_epoch,
                              select_by=best.key, best_by_set=best.by_set(per_epoch),
                              preset_overridden=cfg.preset_overridden,
                              best_checkpoint=out / BEST if best.step is not None else None,
                              steps_per_epoch=per_epoch, resumed_from=position.resumed_from, device=str(rt.device),
                              warnings=end.warnings, task=spec.task, labels=list(labels.names), seed=cfg.seed,
                              parameters=params, embedding_coverage={"input": coverage} if coverage else None)

    return TaskRun(updates, write_files, finish, best=best, keep_best_model=bool(sets))


def train_report(cfg: FinetuneConfig, train_files: Sequence[str], valid: dict[str, str], out: Path | str, *,
                 resume: bool = False, stop_at: int | None = None,
                 on_step: Callable[[int, dict[str, Any]], None] | None = None,
                 on_warning: Callable[[str], None] | None = None) -> dict[str, Any]:
    """`nb train --task classification|tagging`: the run's summary (summary.json's content)."""
    result = finetune(cfg, train_files, valid, out, resume=resume, stop_at=stop_at, on_step=on_step,
                      on_warning=on_warning)
    return result.as_dict()
