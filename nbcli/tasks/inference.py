"""A classifier or tagger of `nb train --task classification|tagging` at work: the logits and loss of
a whole file or some of its records (`run_model`, `model_outputs`), its predictions and metrics
(`predictions`, `file_metrics`: scikit-learn / seqeval), and a saved run
loaded for `nb predict` / `nb eval` (`load_classifier`, `predict_file`, `evaluate_classifier`).
Training is `nbcli.tasks.finetune`; both read the checkpoint format FORMAT (nb-classifier/1).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nbcli import jsonsafe
from nbcli.corpus.records import ReadStats
from nbcli.errors import CheckpointError, naming
from nbcli.models.heads import Classifier
from nbcli.tasks.classification import classification_loss, classification_metrics
from nbcli.tasks.data import DataSpec, Encoded, encode_file, padding_id, read_records
from nbcli.tasks.labels import LabelSet
from nbcli.tasks.tagging import tagging_loss, tagging_metrics, word_tags

__all__ = ["FORMAT", "LoadedClassifier", "evaluate_classifier", "file_metrics", "load_classifier", "model_outputs",
           "predict_file", "predict_report", "prediction_metrics", "predictions", "run_model"]

FORMAT = "nb-classifier/1"


# Each task's loss (its module's): cross-entropy of [B, L] sentence or [B, T, L] token logits.
TASK_LOSSES = {"classification": classification_loss, "tagging": tagging_loss}


def _loss(task: str, logits: torch.Tensor, labels: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    return TASK_LOSSES[task](logits, labels, reduction)


@torch.no_grad()
def model_outputs(model: Classifier, data: Encoded, pad_id: int, batch_size: int, device: torch.device,
                  rows: Sequence[int] | None = None) -> tuple[list[torch.Tensor], float, int]:
    """Logits of the records `rows` (default: every record) in that order ([L] or [T_i, L] each,
    float32 on the CPU), the summed loss over their labelled targets and the number of those targets,
    in eval mode, `batch_size` records at a time."""
    rows = list(range(len(data.items))) if rows is None else list(rows)
    training = model.training
    model.eval()
    outputs: list[torch.Tensor] = []
    total: torch.Tensor | float = 0.0
    count = 0
    try:
        for start in range(0, len(rows), batch_size):
            chunk = rows[start:start + batch_size]
            host = data.batch(chunk, pad_id)
            labelled = int((host.labels >= 0).sum())          # counted on the host: no device sync
            batch = host.to(device)
            logits = model(batch.ids, batch.key_mask, batch.type_ids)
            if labelled:
                total = total + _loss(data_task(data), logits, batch.labels, "sum").double()  # summed on the device
                count += labelled
            on_host = logits.cpu()                                # one copy per batch, not one per record
            for i, row in enumerate(chunk):
                outputs.append(on_host[i, :len(data.items[row][0])] if logits.dim() == 3 else on_host[i])
    finally:
        model.train(training)
    return outputs, float(total), count


def run_model(model: Classifier, data: Encoded, pad_id: int, batch_size: int, device: torch.device,
              ) -> tuple[list[torch.Tensor], float | None]:
    """Logits of every record in order ([L] or [T_i, L] each, float32 on the CPU) and the mean loss
    over labelled targets (None when unlabelled), in eval mode (`model_outputs`)."""
    outputs, total, count = model_outputs(model, data, pad_id, batch_size, device)
    return outputs, (total / count if count else None)


def data_task(data: Encoded) -> str:
    return "tagging" if data.records and hasattr(data.records[0], "tags") else "classification"


def predictions(task: str, data: Encoded, logits: Sequence[torch.Tensor], rows: Sequence[int] | None = None,
                ) -> list[Any]:
    """What the model predicts for the records `rows` (default: every record) from their logits:
    classification the label id, tagging the tag id of every word (`word_tags`; -1: cut off)."""
    rows = range(len(data.items)) if rows is None else rows
    if task == "tagging":
        return [word_tags(lg, data.items[r][2], len(data.records[r].tokens)) for lg, r in zip(logits, rows)]
    return [int(lg.argmax()) for lg in logits]


def prediction_metrics(task: str, data: Encoded, predicted: Sequence[Any], labels: LabelSet) -> dict[str, Any]:
    """The metrics of a whole file (tasks.classification / tasks.tagging) from `predictions` of every record."""
    if task == "tagging":
        pred = [[labels.names[t] if t >= 0 else "O" for t in tags] for tags in predicted]
        return tagging_metrics([rec.tags for rec in data.records], pred)
    return classification_metrics([item[2] for item in data.items], list(predicted), len(labels.names))


def file_metrics(task: str, data: Encoded, logits: Sequence[torch.Tensor], labels: LabelSet) -> dict[str, Any]:
    """The metrics of a whole file (tasks.classification / tasks.tagging) from its logits."""
    return prediction_metrics(task, data, predictions(task, data, logits), labels)


@dataclass
class LoadedClassifier:
    model: Classifier
    labels: LabelSet
    spec: DataSpec
    tokenizer: Any
    path: Path
    step: int | None = None     # the checkpoint's nb.step


def load_classifier(run_or_checkpoint: Path | str, device: str = "cpu") -> LoadedClassifier:
    """A run directory (its checkpoint: `nbcli.checkpoint.runs.run_checkpoint`) or a step-N.safetensors,
    with its labels (metadata) and the run's tokenizer and config beside it."""
    from nbcli.checkpoint.runs import run_checkpoint
    from nbcli.models.lm import ModelConfig, Transformer
    from nbcli.models.heads import EncoderSpec, family
    from nbcli.tasks.encoders import task_head
    from nbcli.tokenizers import load_tokenizer
    from nbcli.train.runtime import resolve_device
    from nbcli.train.state import load_model_tensors

    file = run_checkpoint(Path(run_or_checkpoint))
    tensors, meta = load_model_tensors(file)
    if meta.get("nb.format") != FORMAT:
        raise CheckpointError(f"{file}: not a classifier checkpoint of nb train --task classification|tagging")
    try:
        with naming(f"{file}: metadata nb.labels"):
            labels = LabelSet.from_metadata(meta)
        enc, fcfg = jsonsafe.parse(meta["nb.encoder"]), jsonsafe.parse(meta["nb.finetune_config"])
        spec = DataSpec(**fcfg["data"])
    except (KeyError, TypeError, ValueError) as err:  # ValueError: jsonsafe.JsonProblem
        raise CheckpointError(f"{file}: unreadable classifier metadata ({type(err).__name__}: {err})") from None
    tok_file = next((file.parent / n for n in ("tokenizer.json", "tokenizer.model") if (file.parent / n).is_file()), None)
    if tok_file is None:
        raise CheckpointError(f"{file}: no tokenizer.json or tokenizer.model beside it (the run's own)")
    with naming(f"{file}: metadata nb.encoder"):
        row = family(enc["style"])
        head_cls = task_head(spec.task, row)
    if enc["kind"] == "nb":
        config = dict(enc["config"])
        config["special_ids"] = tuple(config.get("special_ids", ()))
        encoder: torch.nn.Module = Transformer(ModelConfig(**config))
    else:
        import transformers

        config = transformers.AutoConfig.for_model(**enc["config"])
        kwargs = {"add_pooling_layer": head_cls.reads_pooler} if row.pooling_flag else {}
        encoder = transformers.AutoModel.from_config(config, **kwargs)
    d = encoder.cfg.d_model if enc["kind"] == "nb" else int(enc["config"].get("hidden_size") or enc["config"]["dim"])
    head = head_cls(d, len(labels.names), enc["dropout"], enc["pooling"])
    model = Classifier(encoder, head, EncoderSpec(enc["kind"], row.name, enc["config"], None))
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    if [m for m in missing if "position_ids" not in m] or unexpected:
        raise CheckpointError(f"{file}: tensors do not match the classifier (missing {missing[:3]}, "
                              f"unexpected {unexpected[:3]})")
    model.to(resolve_device(device)).eval()
    step = meta.get("nb.step")
    return LoadedClassifier(model, labels, spec, load_tokenizer(tok_file), file, None if step is None else int(step))


def predict_file(loaded: LoadedClassifier, corpus: Sequence[str], batch_size: int = 32,
                 stats: ReadStats | None = None) -> list[dict[str, Any]]:
    """One record per input record, in order: classification {label, probs {name: p}}; tagging
    {tokens, tags, probs [per token {name: p}]}. Labels by name. `stats`: filled by the read."""
    spec = loaded.spec
    records = read_records(spec, corpus, labelled=False, stats=stats)
    data = encode_file(spec, loaded.tokenizer, records, None)
    device = next(loaded.model.parameters()).device
    logits, _ = run_model(loaded.model, data, padding_id(loaded.tokenizer), batch_size, device)
    names = loaded.labels.names
    out = []
    for lg, item, rec, predicted in zip(logits, data.items, records, predictions(spec.task, data, logits)):
        if spec.task == "tagging":
            first = [t for t, label in enumerate(item[2]) if label != -100]
            probs = torch.softmax(lg[first], dim=-1).tolist() if first else []
            out.append({"tokens": list(rec.tokens), "tags": [names[t] if t >= 0 else "O" for t in predicted],
                        "probs": [dict(zip(names, p)) for p in probs] + [None] * (len(rec.tokens) - len(probs))})
        else:
            p = torch.softmax(lg, dim=-1).tolist()
            out.append({"label": names[predicted], "probs": dict(zip(names, p))})
    return out


def evaluate_classifier(loaded: LoadedClassifier, corpus: Sequence[str], batch_size: int = 32) -> dict[str, Any]:
    """The metrics of a labelled file (every record): loss, accuracy, F1 (and Matthews / entity
    precision and recall), with the labels by name."""
    spec = loaded.spec
    stats = ReadStats()
    records = read_records(spec, corpus, names=loaded.labels.names, stats=stats)
    data = encode_file(spec, loaded.tokenizer, records, loaded.labels)
    device = next(loaded.model.parameters()).device
    logits, loss = run_model(loaded.model, data, padding_id(loaded.tokenizer), batch_size, device)
    return {"task": spec.task, "checkpoint": str(loaded.path), "corpus": list(corpus), "loss": loss,
            **file_metrics(spec.task, data, logits, loaded.labels), "labels": list(loaded.labels.names),
            "warnings": stats.notes(", ".join(corpus))}


def predict_report(checkpoint: Path | str, corpus: Sequence[str], output: Path | str | None, *, batch_size: int = 32,
                   device: str = "cpu") -> dict[str, Any]:
    """`nb predict`: predictions of every record of `corpus`, written to `output` as JSON lines in
    input order (atomically; `-`: standard output; None: kept in the report only)."""
    from nbcli.outputs import guard_outputs, model_inputs, write_text_output

    guard_outputs([output], [*model_inputs(checkpoint), *corpus], stdout=True)  # before any work: no input overwritten
    loaded = load_classifier(checkpoint, device)
    stats = ReadStats()
    labelled = predict_file(loaded, corpus, batch_size, stats)
    if output is not None:
        write_text_output(output, "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in labelled))
    return {"task": loaded.spec.task, "checkpoint": str(loaded.path), "corpus": list(corpus),
            "output": None if output is None else str(output), "records": len(labelled),
            "labels": list(loaded.labels.names), "predictions": labelled if output is None else None,
            "warnings": stats.notes(", ".join(corpus))}
