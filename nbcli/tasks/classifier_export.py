"""`nb export` of a classifier or tagger run (`nb train --task classification|tagging`): a transformers
model folder that `AutoModelForSequenceClassification` / `AutoModelForTokenClassification` loads with
the same logits.

A run fine-tuned from a transformers encoder (BERT, RoBERTa, DistilBERT, MiniLM, ...) already has that
architecture's head, parameter for parameter (`nbcli.models.heads`), so the export is a rename
(`Classifier.export_tensors`) plus files:

    model.safetensors       the encoder under its base_model_prefix, the head under transformers' names
    config.json             the encoder's config.json with architectures [<Family>For{Sequence,Token}
                            Classification], num_labels, id2label / label2id by the run's label names
                            (ids in the run's label order) and problem_type single_label_classification
    tokenizer.json          the run's tokenizer (the encoder's own), with tokenizer_config.json naming
                            PreTrainedTokenizerFast, the special tokens it holds and model_max_length
                            the run's --max-len, so `AutoTokenizer(..., truncation=True)` cuts a long
                            text where nb predict does (longest_first for a pair) and the labels agree
    README.md               the model card (`classifier_card`, `nbcli.hf.model_card`)

The encoder family's row (`nbcli.models.heads.FAMILIES`) names the transformers class (the encoder
config's own architecture name where it has one, e.g. XLMRoberta, else the row's) and the head
class its suffix and extra config (problem_type of a sentence head). nb's own encoder (trained
from scratch or fine-tuned from an nb MLM run; a row without an export class) is refused: pre-LN it has
a LayerNorm before each sublayer and a final one, post-LN no embedding LayerNorm, while BERT, RoBERTa
and DistilBERT are post-LN with an embedding LayerNorm, so no transformers encoder computes its logits.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbcli.errors import ConfigError

if TYPE_CHECKING:
    from nbcli.models.heads import EncoderFamily, Head

__all__ = ["ClassifierExportReport", "export_classifier", "classifier_task", "hf_classifier_config"]

# Special tokens by their usual spellings (BERT's, RoBERTa's / SentencePiece's) -> tokenizer_config keys.
_SPECIALS = {"[PAD]": "pad_token", "<pad>": "pad_token", "[UNK]": "unk_token", "<unk>": "unk_token",
             "[CLS]": "cls_token", "<s>": "cls_token", "[SEP]": "sep_token", "</s>": "sep_token",
             "[MASK]": "mask_token", "<mask>": "mask_token"}


@dataclass
class ClassifierExportReport:
    checkpoint: str
    out: str
    step: int | None
    layout: str          # the architecture written, e.g. BertForSequenceClassification
    task: str
    labels: list[str]
    tensors: int
    parameters: int
    files: list[str]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def classifier_task(path: Path) -> str | None:
    """The task ("classification" | "tagging", its metadata `nb.task`) when RUN_OR_CKPT is a run (or
    step-N.safetensors) of nb train --task classification|tagging; None for any other path."""
    from nbcli.checkpoint.reader import open_checkpoint
    from nbcli.checkpoint.runs import run_checkpoint
    from nbcli.errors import CheckpointError
    from nbcli.tasks.inference import FORMAT

    try:
        file = run_checkpoint(path)
        if file.suffix != ".safetensors":
            return None
        with open_checkpoint(file) as ckpt:
            if ckpt.metadata.get("nb.format") != FORMAT:
                return None
            return ckpt.metadata.get("nb.task") or "classification"
    except (CheckpointError, OSError):
        return None


def hf_classifier_config(encoder_config: dict[str, Any], row: EncoderFamily, head: type[Head],
                         labels: list[str]) -> dict[str, Any]:
    """config.json of the exported classifier: the encoder's, with the head's architecture (module doc)
    and labels by name."""
    arch = (encoder_config.get("architectures") or [""])[0]
    name = re.sub(r"(For[A-Za-z]+|Model)$", "", arch) or row.export_class
    out = {k: v for k, v in encoder_config.items() if k not in ("id2label", "label2id", "num_labels", "_name_or_path")}
    out.update({"architectures": [f"{name}{head.export_kind}"], "id2label": {str(i): n for i, n in enumerate(labels)},
                "label2id": {n: i for i, n in enumerate(labels)}, **head.export_config})
    return out


def _tokenizer_files(folder: Path, max_len: int) -> dict[str, bytes]:
    """The run's tokenizer, loadable by AutoTokenizer (module doc)."""
    if (folder / "tokenizer.json").is_file():
        data = (folder / "tokenizer.json").read_bytes()
        specials: dict[str, str] = {}
        for token in json.loads(data).get("added_tokens", []):
            key = _SPECIALS.get(token.get("content"))
            if key is not None and token.get("special", False):
                specials.setdefault(key, token["content"])
        if specials.get("cls_token") == "<s>":
            specials.update(bos_token="<s>", eos_token=specials.get("sep_token", "</s>"))
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_len, **specials}
        return {"tokenizer.json": data, "tokenizer_config.json": (json.dumps(config, indent=2) + "\n").encode()}
    raise ConfigError(f"{folder}: the run's tokenizer is a SentencePiece tokenizer.model, which transformers' "
                      "AutoTokenizer does not load on its own; nb export writes runs with a tokenizer.json")


USAGE = """\
import torch
from transformers import AutoModelFor{kind}, AutoTokenizer

path = "{path}"   # this folder, from its parent (or the Hub repo it is pushed to)
tokenizer = AutoTokenizer.from_pretrained(path)
model = AutoModelFor{kind}.from_pretrained(path)
batch = tokenizer({example}, truncation=True, return_tensors="pt")   # cut at the run's --max-len, as nb predict
with torch.no_grad():
    ids = model(**batch).logits.argmax(-1)
print({show})
"""


def scores_at(step: int | None, summary: dict[str, Any], records: list[dict[str, Any]],
              sets: list[str]) -> dict[str, dict[str, Any]]:
    """Each --valid set's metrics at the exported `step`: summary.json's `final` at the run's last step,
    else the evaluation log.jsonl records there (accuracy and F1 by set: the best checkpoint's); none
    when the step was not evaluated."""
    if step is not None and summary.get("steps") == step and isinstance(summary.get("final"), dict):
        return summary["final"]
    record = next((r for r in records if r.get("step") == step and "val_loss" in r), None)
    if record is None:
        return {}
    return {name: {key: record[f"val_{name}_{key}"] for key in ("accuracy", "f1") if f"val_{name}_{key}" in record}
            for name in sets}


def classifier_card(checkpoint: Path, step: int | None, task: str, labels: list[str], layout: str,
                    out: Path) -> bytes:
    """README.md of a classifier or tagger export (`nbcli.hf.model_card`): the base model, the run's
    settings and data, its metrics on each --valid set at the exported step (summary.json's `final`
    for the run's last checkpoint)."""
    from nbcli.hf.model_card import CardFacts, Metric, file_names, hub_datasets, hub_model, model_card, papers_used
    from nbcli.hf.model_card import run_files

    config, summary, records = run_files(checkpoint)
    valid = config.get("valid") if isinstance(config.get("valid"), dict) else {}
    train = [str(x) for x in config.get("train") or []]
    metrics = []
    for name, scores in scores_at(step, summary, records, list(valid)).items():
        f1 = f"F1 ({scores.get('f1_average', 'entity')})" if task == "classification" else "entity F1 (seqeval)"
        metrics += [Metric(name, Path(str(valid.get(name, name))).name, kind, shown, float(scores[key]))
                    for key, kind, shown in (("accuracy", "accuracy", "accuracy"), ("f1", "f1", f1),
                                             ("matthews", "matthews_correlation", "Matthews correlation"),
                                             ("precision", "precision", "precision"), ("recall", "recall", "recall"))
                    if isinstance(scores.get(key), (int, float))]
    kind = "SequenceClassification" if task == "classification" else "TokenClassification"
    show = ("[model.config.id2label[int(i)] for i in ids]" if task == "classification" else
            "[[model.config.id2label[int(i)] for i in row] for row in ids]   # a label per token (word pieces too)")
    pair = (config.get("data") or {}).get("pair_field")
    example = ('["A sentence to tag ."]' if task == "tagging" else
               '["A first text."], ["A second text."]' if pair else '["A text to classify."]')
    init = config.get("init")
    facts = CardFacts(
        name=out.name, task=task, summary=f"A {layout} ({len(labels)} labels: {', '.join(labels[:8])}"
                                          f"{', ...' if len(labels) > 8 else ''}) from step {step} of an nb {task} run.",
        usage=USAGE.format(kind=kind, path=out.name, example=example, show=show), base_model=hub_model(init),
        datasets=hub_datasets([*train, *map(str, valid.values())]), papers=papers_used(config), metrics=metrics,
        settings=[("task", task), ("fine-tuned from", hub_model(init) or (Path(str(init)).name if init else "-")),
                  ("updates", str(summary.get("steps", "-"))),
                  ("batch", str(config.get("batch_size", "-"))),
                  ("learning rate", f"{config.get('lr', '-')} (linear, warm-up ratio {config.get('warmup_ratio', '-')})"),
                  ("max length (tokens)", str((config.get("data") or {}).get("max_len", "-"))),
                  ("seed", str(config.get("seed", "-"))), ("training data", file_names(train)),
                  ("validation data", ", ".join(f"{k}={Path(str(v)).name}" for k, v in valid.items()) or "-")])
    return model_card(facts)


def export_classifier(checkpoint: Path | str, out: Path | str) -> ClassifierExportReport:
    """`nb export RUN_OR_CKPT -o DIR` for a classifier or tagger run (module doc)."""
    from nbcli.checkpoint.writer import write_model_folder
    from nbcli.outputs import guard_outputs, model_inputs
    from nbcli.provenance import tool_version
    from nbcli.tasks.inference import load_classifier

    guard_outputs([], model_inputs(checkpoint), folder=out)
    loaded = load_classifier(checkpoint, "cpu")
    spec = loaded.model.spec
    if spec.family.export_class is None:
        raise ConfigError(f"{loaded.path}: nb's own encoder has no embedding LayerNorm (and pre-LN a LayerNorm before "
                          "each sublayer and a final one), while BERT, RoBERTa and DistilBERT are post-LN with one, so "
                          "no transformers architecture computes its logits: use nb predict / nb eval on this run")
    task = loaded.spec.task
    labels = list(loaded.labels.names)
    tensors = loaded.model.export_tensors()
    config = hf_classifier_config(dict(spec.config), spec.family, type(loaded.model.head), labels)
    files = {"config.json": (json.dumps(config, indent=2, ensure_ascii=False) + "\n").encode("utf-8"),
             **_tokenizer_files(loaded.path.parent, loaded.spec.max_len),  # nb predict cuts there too
             "README.md": classifier_card(loaded.path, loaded.step, task, labels, config["architectures"][0],
                                          Path(out))}
    step = loaded.step          # read with the checkpoint by load_classifier
    metadata = {"format": "pt", "nb.version": tool_version(), "nb.exported_from": str(loaded.path),
                **({"nb.step": str(step)} if step is not None else {})}
    written = write_model_folder(out, tensors, metadata, files)
    return ClassifierExportReport(checkpoint=str(loaded.path), out=str(out), step=step,
                                  layout=config["architectures"][0], task=task, labels=labels, tensors=len(tensors),
                                  parameters=sum(t.numel() for t in tensors.values()), files=[p.name for p in written])
