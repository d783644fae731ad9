"""`nb train --task classification|tagging`: fine-tune an encoder with a head (papers 001 tables 1,
2, 4; 002 table 1), and `nb predict` / `nb eval` with the result.

The run: read and check every file (nothing is created before), build the classifier
(`tasks.encoders`), then for each update take a batch in the (seed, epoch) order, step AdamW under
linear warm-up (`warmup_ratio` of the updates) and linear decay to 0 (the usual fine-tuning schedule,
as transformers' get_linear_schedule_with_warmup), and evaluate on the WHOLE of every validation set
every `eval_every` updates and at the end. Files in the run directory:

    config.json          the options, the labels by name, the encoder's description
    tokenizer.json|.model the tokenizer's bytes (predict finds it beside a step-N.safetensors)
    step-N.safetensors   the classifier (metadata nb.format nb-classifier/1, nb.labels, nb.encoder)
    train-state.*        AdamW moments and the position, for --resume (a resumed run repeats the
                         uninterrupted one: the order is a function of (seed, epoch), dropout is drawn
                         from a generator seeded by (seed, step))
    log.jsonl            {step, lr, loss} per update; {step, val_loss, val_accuracy, val_f1,
                         val_<NAME>_accuracy, ...} at evaluations (the first set gives the unprefixed keys)
    summary.json         best_val_accuracy, best_step (first set's accuracy), final metrics per set

This module runs its own update loop (the task-agnostic `train/` loop is being reworked, issue 31's
note); it shares train/'s run-directory rules (`removed_on_failure`, atomic writes).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from nbcli.errors import CheckpointError, ConfigError, OutputError
from nbcli.models.heads import Classifier
from nbcli.tasks.classification import classification_loss, classification_metrics
from nbcli.tasks.data import DataSpec, Encoded, encode_file, make_labels, order, padding_id, read_records
from nbcli.tasks.labels import LabelSet
from nbcli.tasks.tagging import tagging_loss, tagging_metrics, word_tags

__all__ = ["FinetuneConfig", "FinetuneResult", "evaluate_classifier", "finetune", "learning_rate",
           "load_classifier", "predict_file", "predict_report", "train_report"]

FORMAT = "nb-classifier/1"


@dataclass
class FinetuneConfig:
    """Everything `nb train --task classification|tagging` needs besides the files."""

    data: DataSpec = field(default_factory=DataSpec)
    init: str | None = None               # --init BASE; None: from scratch
    tokenizer: str | None = None          # needed without a transformers --init
    label_names: str | None = None
    epochs: float = 3.0
    steps: int = 0                        # 0: epochs
    batch_size: int = 32
    lr: float = 2e-5
    warmup_ratio: float = 0.06
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    dropout: float = 0.1
    pooling: str = "first"
    eval_every: int = 0                   # 0: once per epoch
    save_every: int = 0
    seed: int = 0
    preset: str = "tiny"                  # from scratch
    embedding_init: str = "normal"
    positions: str = "learned"
    freeze_embeddings: bool = False
    device: str = "cpu"

    def __post_init__(self) -> None:
        checks = [(self.batch_size >= 1, "--batch-size must be >= 1"), (self.lr > 0, "--lr must be > 0"),
                  (0 <= self.warmup_ratio < 1, "--warmup-ratio must be in [0, 1)"),
                  (self.epochs > 0 or self.steps > 0, "--epochs or --steps must be > 0"),
                  (self.pooling in ("first", "mean"), "--pooling must be first or mean"),
                  (self.positions in ("learned", "sinusoidal", "none"), "--positions must be learned, sinusoidal or none"),
                  (0 <= self.dropout < 1, "--dropout must be in [0, 1)")]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)
        if self.init is not None and self.positions != "learned":
            raise ConfigError("--positions applies to an encoder trained from scratch (no --init)")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["data"] = self.data.to_dict()
        return out


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


def learning_rate(step: int, total: int, peak: float, warmup_ratio: float) -> float:
    """Linear warm-up over the first ceil(warmup_ratio * total) updates, then linear decay to 0 at
    `total` (transformers' get_linear_schedule_with_warmup); `step` counts from 0."""
    warmup = math.ceil(warmup_ratio * total)
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * max(0.0, (total - step) / max(1, total - warmup))


def _tokenizer_for(cfg: FinetuneConfig) -> Any:
    from nbcli.tokenizers import load_tokenizer
    from nbcli.tasks.encoders import is_transformers_folder
    from nbcli.resolve import local_path

    if cfg.tokenizer is not None:
        return load_tokenizer(cfg.tokenizer)
    if cfg.init is not None and is_transformers_folder(local_path(cfg.init, "model")):
        return load_tokenizer(local_path(cfg.init, "model"))
    raise ConfigError("--tokenizer is needed for an nb --init or a model trained from scratch")


def _build(cfg: FinetuneConfig, tokenizer: Any, num_labels: int) -> Classifier:
    from nbcli.tasks.encoders import encoder_from_scratch, freeze_embeddings, open_encoder

    torch.manual_seed(cfg.seed)
    if cfg.init is None:
        model = encoder_from_scratch(tokenizer, cfg.data.task, num_labels, preset=cfg.preset, seq_len=cfg.data.max_len,
                                     dropout=cfg.dropout, embedding_init=cfg.embedding_init, positions=cfg.positions,
                                     pooling=cfg.pooling, seed=cfg.seed)  # type: ignore[arg-type]
    else:
        model = open_encoder(cfg.init, cfg.data.task, num_labels, pooling=cfg.pooling, dropout=cfg.dropout)  # type: ignore[arg-type]
    if cfg.freeze_embeddings:
        freeze_embeddings(model)
    return model


def _optimizer(model: Classifier, cfg: FinetuneConfig) -> torch.optim.AdamW:
    """AdamW; no weight decay on biases and norm gains (1-D tensors), as BERT's fine-tuning recipe."""
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = [{"params": [p for n, p in params if p.ndim >= 2], "weight_decay": cfg.weight_decay},
              {"params": [p for n, p in params if p.ndim < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.999), eps=1e-8)


def _loss(task: str, logits: torch.Tensor, labels: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    return tagging_loss(logits, labels, reduction) if task == "tagging" else \
        classification_loss(logits, labels, reduction)


@torch.no_grad()
def run_model(model: Classifier, data: Encoded, pad_id: int, batch_size: int, device: torch.device,
              ) -> tuple[list[torch.Tensor], float | None]:
    """Logits of every record in order ([L] or [T_i, L] each, float32 on the CPU) and the mean loss
    over labelled targets (None when unlabelled), in eval mode."""
    training = model.training
    model.eval()
    outputs: list[torch.Tensor] = []
    total: torch.Tensor | float = 0.0
    count = 0
    try:
        for start in range(0, len(data.items), batch_size):
            rows = list(range(start, min(start + batch_size, len(data.items))))
            host = data.batch(rows, pad_id)
            labelled = int((host.labels >= 0).sum())          # counted on the host: no device sync
            batch = host.to(device)
            logits = model(batch.ids, batch.key_mask, batch.type_ids)
            if labelled:
                total = total + _loss(data_task(data), logits, batch.labels, "sum").double()  # summed on the device
                count += labelled
            on_host = logits.cpu()                                # one copy per batch, not one per record
            for i, row in enumerate(rows):
                outputs.append(on_host[i, :len(data.items[row][0])] if logits.dim() == 3 else on_host[i])
    finally:
        model.train(training)
    return outputs, (float(total) / count if count else None)


def data_task(data: Encoded) -> str:
    return "tagging" if data.records and hasattr(data.records[0], "tags") else "classification"


def file_metrics(task: str, data: Encoded, logits: Sequence[torch.Tensor], labels: LabelSet) -> dict[str, Any]:
    """The metrics of a whole file (tasks.classification / tasks.tagging) from its logits."""
    if task == "tagging":
        pred = [[labels.names[t] if t >= 0 else "O" for t in word_tags(lg, item[2], len(rec.tokens))]
                for lg, item, rec in zip(logits, data.items, data.records)]
        return tagging_metrics([rec.tags for rec in data.records], pred)
    return classification_metrics([item[2] for item in data.items], [int(lg.argmax()) for lg in logits],
                                  len(labels.names))


def _log(out: Path, record: dict[str, Any]) -> None:
    with (out / "log.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def _metadata(cfg: FinetuneConfig, labels: LabelSet, model: Classifier, step: int) -> dict[str, str]:
    from nbcli.provenance import tool_version, utc_now

    spec = model.spec
    return {"nb.format": FORMAT, "nb.task": cfg.data.task, "nb.labels": json.dumps(labels.to_json()),
            "nb.encoder": json.dumps({"kind": spec.kind, "style": spec.style, "config": spec.config,
                                      "pooling": cfg.pooling, "dropout": cfg.dropout}, sort_keys=True),
            "nb.finetune_config": json.dumps(cfg.to_dict(), sort_keys=True), "nb.step": str(step),
            "nb.version": tool_version(), "nb.created": utc_now()}


def _tensors(model: Classifier) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in model.state_dict().items()}


def _save_state(out: Path, step: int, model: Classifier, optimizer: torch.optim.AdamW, meta: dict[str, str]) -> None:
    """step-N.safetensors and train-state.{safetensors,json} (AdamW moments by parameter name)."""
    from nbcli.atomic import write_text_atomic
    from nbcli.checkpoint.writer import save_tensors

    save_tensors(out / f"step-{step}.safetensors", _tensors(model), meta)
    names = {id(p): n for n, p in model.named_parameters()}
    moments: dict[str, torch.Tensor] = {}
    counts: dict[str, float] = {}
    for p, st in optimizer.state.items():
        name = names[id(p)]
        moments[f"exp_avg/{name}"] = st["exp_avg"].detach().cpu().float().contiguous()
        moments[f"exp_avg_sq/{name}"] = st["exp_avg_sq"].detach().cpu().float().contiguous()
        counts[name] = float(st["step"])
    save_tensors(out / "train-state.safetensors", moments, {"nb.format": "nb-finetune-state/1"})
    write_text_atomic(out / "train-state.json", json.dumps({"step": step, "adam_steps": counts}) + "\n")


def _load_state(out: Path, model: Classifier, optimizer: torch.optim.AdamW) -> int:
    from nbcli.train.state import load_model_tensors

    state = json.loads((out / "train-state.json").read_text(encoding="utf-8"))
    step = int(state["step"])
    tensors, _meta = load_model_tensors(out / f"step-{step}.safetensors")
    model.load_state_dict(tensors)
    moments, _ = load_model_tensors(out / "train-state.safetensors")
    for n, p in model.named_parameters():
        if n in state["adam_steps"]:
            optimizer.state[p] = {"step": torch.tensor(state["adam_steps"][n]),
                                  "exp_avg": moments[f"exp_avg/{n}"].to(p), "exp_avg_sq": moments[f"exp_avg_sq/{n}"].to(p)}
    return step


def finetune(cfg: FinetuneConfig, train_files: Sequence[str], valid: dict[str, str], out: Path | str, *,
             resume: bool = False, progress: Callable[[dict[str, Any]], None] | None = None) -> FinetuneResult:
    """Fine-tune (module doc). Every input is read and checked before `out` is created; a failure
    before the first saved state leaves no run directory."""
    from nbcli.atomic import write_bytes_atomic, write_text_atomic
    from nbcli.train.rundir import create_run_directory, removed_on_failure, truncate_log, write_summary
    from nbcli.train.runtime import resolve_device

    out = Path(out)
    if not resume and out.exists() and any(out.iterdir()):
        raise OutputError(f"--out {out}: exists and is not empty (give a new directory, or --resume)")
    if resume and not (out / "train-state.json").is_file():
        raise OutputError(f"--resume: {out} has no train-state.json")
    spec = cfg.data
    tokenizer = _tokenizer_for(cfg)
    train_records = read_records(spec, train_files)
    labels = make_labels(spec, train_records, cfg.label_names, train_files)
    train = encode_file(spec, tokenizer, train_records, labels)
    sets = {name: encode_file(spec, tokenizer, read_records(spec, [path]), labels) for name, path in valid.items()}
    model = _build(cfg, tokenizer, len(labels.names))
    device = resolve_device(cfg.device)
    model.to(device).train()
    pad = padding_id(tokenizer)
    per_epoch = math.ceil(len(train.items) / cfg.batch_size)
    total = cfg.steps or max(1, math.ceil(cfg.epochs * per_epoch))
    eval_every = cfg.eval_every or per_epoch
    optimizer = _optimizer(model, cfg)
    with removed_on_failure(out, resume):
        create_run_directory(out)
        start = 0
        if resume:
            start = _load_state(out, model, optimizer)
            truncate_log(out / "log.jsonl", start + 1)
        else:
            write_text_atomic(out / "config.json", json.dumps({**cfg.to_dict(), "labels": labels.to_json(),
                                                               "train": list(train_files), "valid": valid},
                                                              indent=2) + "\n")
            name = "tokenizer.json" if tokenizer.kind == "tokenizer.json" else "tokenizer.model"
            write_bytes_atomic(out / name, tokenizer.data)
        best: tuple[float, int] | None = None
        final: dict[str, dict[str, Any]] = {}
        tokens, began, aside = 0, time.perf_counter(), 0.0   # aside: evaluation and saving, not training

        def evaluate(step: int) -> None:
            nonlocal best
            record: dict[str, Any] = {"step": step}
            for index, (name, data) in enumerate(sets.items()):
                logits, loss = run_model(model, data, pad, cfg.batch_size, device)
                metrics = {"loss": loss, **file_metrics(spec.task, data, logits, labels)}
                final[name] = metrics
                for key in ("loss", "accuracy", "f1"):
                    record[f"val_{name}_{key}"] = metrics[key]
                    if index == 0:
                        record[f"val_{key}"] = metrics[key]
            if sets:
                _log(out, record)
                if best is None or record["val_accuracy"] > best[0]:
                    best = (record["val_accuracy"], step)
                if progress:
                    progress(record)

        for step in range(start, total):
            epoch, position = divmod(step * cfg.batch_size, max(1, len(train.items)))
            rows = order(len(train.items), cfg.seed, epoch)
            picked = [rows[(position + i) % len(rows)] for i in range(min(cfg.batch_size, len(rows)))]
            batch = train.batch(picked, pad).to(device)
            lr = learning_rate(step, total, cfg.lr, cfg.warmup_ratio)
            for group in optimizer.param_groups:
                group["lr"] = lr
            torch.manual_seed(cfg.seed * 1_000_003 + step)   # dropout of this update
            loss = _loss(spec.task, model(batch.ids, batch.key_mask, batch.type_ids), batch.labels)
            if not torch.isfinite(loss):
                raise ConfigError(f"step {step}: the loss is {float(loss)} (lower --lr)")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], cfg.grad_clip)
            optimizer.step()
            tokens += int(batch.key_mask.sum())
            _log(out, {"step": step + 1, "lr": lr, "loss": float(loss.detach())})
            done = step + 1
            paused = time.perf_counter()
            if done % eval_every == 0 or done == total:
                evaluate(done)
            if done == total or (cfg.save_every and done % cfg.save_every == 0):
                _save_state(out, done, model, optimizer, _metadata(cfg, labels, model, done))
            aside += time.perf_counter() - paused
        seconds = time.perf_counter() - began - aside
        checkpoint = out / f"step-{total}.safetensors"
        result = FinetuneResult(out, total, best[0] if best else None, best[1] if best else None, final, checkpoint,
                                tokens, seconds, tokens / seconds if seconds > 0 else 0.0)
        write_summary(out, {**{k: v for k, v in asdict(result).items() if k not in ("out", "checkpoint")},
                            "checkpoint": str(checkpoint), "labels": labels.to_json(), "task": spec.task,
                            "seed": cfg.seed})
    return result


# ---------------------------------------------------------------------------------------------
# A trained classifier: predict and evaluate


@dataclass
class LoadedClassifier:
    model: Classifier
    labels: LabelSet
    spec: DataSpec
    tokenizer: Any
    path: Path


def load_classifier(run_or_checkpoint: Path | str, device: str = "cpu") -> LoadedClassifier:
    """A run directory (its last step-N) or a step-N.safetensors, with its labels (metadata) and the
    run's tokenizer and config beside it."""
    from nbcli.model import ModelConfig, Transformer
    from nbcli.models.heads import EncoderSpec, head_for
    from nbcli.tasks.encoders import run_checkpoint
    from nbcli.tokenizers import load_tokenizer
    from nbcli.train.runtime import resolve_device
    from nbcli.train.state import load_model_tensors

    file = run_checkpoint(Path(run_or_checkpoint))
    tensors, meta = load_model_tensors(file)
    if meta.get("nb.format") != FORMAT:
        raise CheckpointError(f"{file}: not a classifier checkpoint of nb train --task classification|tagging")
    labels = LabelSet(tuple(json.loads(meta["nb.labels"])))
    enc = json.loads(meta["nb.encoder"])
    fcfg = json.loads(meta["nb.finetune_config"])
    spec = DataSpec(**fcfg["data"])
    tok_file = next((file.parent / n for n in ("tokenizer.json", "tokenizer.model") if (file.parent / n).is_file()), None)
    if tok_file is None:
        raise CheckpointError(f"{file}: no tokenizer.json or tokenizer.model beside it (the run's own)")
    if enc["kind"] == "nb":
        config = dict(enc["config"])
        config["special_ids"] = tuple(config.get("special_ids", ()))
        encoder: torch.nn.Module = Transformer(ModelConfig(**config))
    else:
        import transformers

        config = transformers.AutoConfig.for_model(**enc["config"])
        kwargs = {"add_pooling_layer": enc["style"] == "bert" and spec.task == "classification"} \
            if enc["style"] in ("bert", "roberta") else {}
        encoder = transformers.AutoModel.from_config(config, **kwargs)
    d = encoder.cfg.d_model if enc["kind"] == "nb" else int(enc["config"].get("hidden_size") or enc["config"]["dim"])
    head = head_for(spec.task, enc["style"], d, len(labels.names), enc["dropout"], enc["pooling"])
    model = Classifier(encoder, head, EncoderSpec(enc["kind"], enc["style"], enc["config"], None))
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    if [m for m in missing if "position_ids" not in m] or unexpected:
        raise CheckpointError(f"{file}: tensors do not match the classifier (missing {missing[:3]}, "
                              f"unexpected {unexpected[:3]})")
    model.to(resolve_device(device)).eval()
    return LoadedClassifier(model, labels, spec, load_tokenizer(tok_file), file)


def predict_file(loaded: LoadedClassifier, corpus: Sequence[str], batch_size: int = 32,
                 ) -> list[dict[str, Any]]:
    """One record per input record, in order: classification {label, probs {name: p}}; tagging
    {tokens, tags, probs [per token {name: p}]}. Labels by name."""
    spec = loaded.spec
    records = read_records(spec, corpus, labelled=False)
    data = encode_file(spec, loaded.tokenizer, records, None)
    device = next(loaded.model.parameters()).device
    logits, _ = run_model(loaded.model, data, padding_id(loaded.tokenizer), batch_size, device)
    names = loaded.labels.names
    out = []
    for lg, item, rec in zip(logits, data.items, records):
        if spec.task == "tagging":
            first = [t for t, label in enumerate(item[2]) if label != -100]
            probs = torch.softmax(lg[first], dim=-1).tolist() if first else []
            tags = [names[t] if t >= 0 else "O" for t in word_tags(lg, item[2], len(rec.tokens))]
            out.append({"tokens": list(rec.tokens), "tags": tags,
                        "probs": [dict(zip(names, p)) for p in probs] + [None] * (len(rec.tokens) - len(probs))})
        else:
            p = torch.softmax(lg, dim=-1).tolist()
            out.append({"label": names[int(lg.argmax())], "probs": dict(zip(names, p))})
    return out


def evaluate_classifier(loaded: LoadedClassifier, corpus: Sequence[str], batch_size: int = 32) -> dict[str, Any]:
    """The metrics of a labelled file (every record): loss, accuracy, F1 (and Matthews / entity
    precision and recall), with the labels by name."""
    spec = loaded.spec
    records = read_records(spec, corpus)
    data = encode_file(spec, loaded.tokenizer, records, loaded.labels)
    device = next(loaded.model.parameters()).device
    logits, loss = run_model(loaded.model, data, padding_id(loaded.tokenizer), batch_size, device)
    return {"task": spec.task, "checkpoint": str(loaded.path), "corpus": list(corpus), "loss": loss,
            **file_metrics(spec.task, data, logits, loaded.labels), "labels": list(loaded.labels.names)}


def predict_report(checkpoint: Path | str, corpus: Sequence[str], output: Path | str | None, *, batch_size: int = 32,
                   device: str = "cpu") -> dict[str, Any]:
    """`nb predict`: predictions of every record of `corpus`, written to `output` as JSON lines in
    input order (atomically; None: kept in the report only)."""
    from nbcli.atomic import write_text_atomic

    loaded = load_classifier(checkpoint, device)
    if output is not None and any(Path(output).resolve() == Path(c).resolve() for c in corpus if c != "-"):
        raise OutputError(f"-o {output}: is an input; choose another file")
    predictions = predict_file(loaded, corpus, batch_size)
    if output is not None:
        write_text_atomic(output, "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in predictions))
    return {"task": loaded.spec.task, "checkpoint": str(loaded.path), "corpus": list(corpus),
            "output": None if output is None else str(output), "records": len(predictions),
            "labels": list(loaded.labels.names), "predictions": predictions if output is None else None}


def train_report(cfg: FinetuneConfig, train_files: Sequence[str], valid: dict[str, str], out: Path | str, *,
                 resume: bool = False, progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """`nb train --task classification|tagging`: the run's summary (summary.json's content)."""
    result = finetune(cfg, train_files, valid, out, resume=resume, progress=progress)
    return {**asdict(result), "out": str(result.out), "checkpoint": str(result.checkpoint), "task": cfg.data.task}
