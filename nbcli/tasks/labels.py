"""What classification and tagging share: label names kept end to end, and padded batches.

Label names come from, first found: `--label-names` (a comma-separated list, or a features file:
the `datasets` library's dataset_info.json or a features JSON, whose `ClassLabel` field names them),
a dataset_info.json beside a training file or the ClassLabel names in a parquet/Arrow file's schema
metadata (`tasks.data.known_labels`), or the training data's own label strings sorted. Every label leaves nb by its name (predictions, metrics, exported config.json id2label).
A stored label is read as (`LabelSet.index`):

    a name of the set                      itself
    an int i with given names              names[i]   (the datasets schema: integer class ids)
    a digit string "i" with given names    names[i]   (a GLUE TSV of 0/1 with --label-names)
    an int i with collected names          the name "i" (labels 0, 2, 5 are three classes named so)

anything else is a one-line error naming FILE:LINE.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nbcli.corpus.features import features_file_names, repeated
from nbcli.corpus.records import Origin
from nbcli.errors import ConfigError, CorpusError
from nbcli.padding import pad_rows
from nbcli.train.runtime import to_device

__all__ = ["LabelSet", "LabelledBatch", "collate_labelled", "features_label_names", "is_id", "label_names_option"]


def is_id(name: str) -> bool:
    """A label or tag that is an integer id written plainly ("0", "12"; not "012")."""
    return name.isascii() and name.isdigit() and name == str(int(name))


@dataclass(frozen=True)
class LabelSet:
    """The label names in id order; `given`: named by the user or a features file (ints and digit
    strings then index them), not collected from the training data."""

    names: tuple[str, ...]
    given: bool = False

    def __post_init__(self) -> None:
        if not self.names:
            raise ConfigError("no labels: the training data has none (every label null, or a number with a fraction) "
                              "and no --label-names were given")
        if len(set(self.names)) != len(self.names):
            raise ConfigError(f"label names repeat: {', '.join(self.names)}")

    def index(self, label: Any, origin: Origin | str, what: str = "label") -> int:
        """The id of a stored label (module doc); CorpusError naming `origin` when it is not one."""
        is_int = isinstance(label, int) and not isinstance(label, bool)
        name = str(label) if is_int and not self.given else label   # collected names: an int's digits name it
        if isinstance(name, str) and name in self.names:
            return self.names.index(name)
        number = label if is_int and self.given else \
            int(label) if isinstance(label, str) and label.isdigit() and self.given else None
        if number is not None and 0 <= number < len(self.names):
            return number
        if label is None:
            raise CorpusError(f"{origin}: no {what} (null)")
        if isinstance(label, float):
            raise CorpusError(f"{origin}: {what} {label!r} is a number with a fraction; classification needs "
                              "class labels (regression tasks such as STS-B are not supported)")
        known = ", ".join(self.names[:8]) + (", ..." if len(self.names) > 8 else "")
        raise CorpusError(f"{origin}: {what} {label!r} was never seen in training (labels: {known})")

    def to_json(self) -> list[str]:
        return list(self.names)

    def to_metadata(self) -> dict[str, str]:
        """The checkpoint metadata that keeps the set: nb.labels (names in id order) and nb.labels_given."""
        return {"nb.labels": json.dumps(self.to_json()), "nb.labels_given": "1" if self.given else "0"}

    @classmethod
    def from_metadata(cls, meta: dict[str, str]) -> LabelSet:
        """The set `to_metadata` wrote. A checkpoint from before nb.labels_given: names that are all
        plain integers were collected from integer labels, others given or collected from strings
        (where ints index names, as they did then)."""
        from nbcli.jsonsafe import parse

        names = tuple(parse(meta["nb.labels"]))
        given = meta.get("nb.labels_given")
        if given is None:
            return cls(names, given=not all(is_id(n) for n in names))
        return cls(names, given=given == "1")


def features_label_names(path: Path | str, field: str = "label") -> list[str] | None:
    """The `ClassLabel` names of `field` in a datasets dataset_info.json (or a bare features
    object; `corpus.features`); None when the file names none. ConfigError when the file is not JSON."""
    return features_file_names(path, field, ConfigError)


def label_names_option(spec: str | None, train_inputs: Sequence[str], label_field: str = "label") -> list[str] | None:
    """The names `--label-names` gives (a list, or a features file), else those of a
    dataset_info.json beside a training file; None: collect them from the training data."""
    if spec:
        if Path(spec).is_file():
            names = features_label_names(spec, label_field)
            if names is None:
                raise ConfigError(f"--label-names {spec}: no ClassLabel names for field {label_field!r} in it")
            return names
        names = [n.strip() for n in spec.split(",")]
        if not all(names):
            raise ConfigError(f"--label-names {spec!r}: an empty name")
        if (twice := repeated(names)) is not None:
            raise ConfigError(f"--label-names {spec!r}: {twice!r} is given twice (a class has one name)")
        return names
    for item in train_inputs:
        info = Path(item).parent / "dataset_info.json" if Path(item).is_file() else Path(item) / "dataset_info.json"
        if info.is_file():
            return features_label_names(info, label_field)
    return None


def collected_names(labels: Iterable[Any]) -> tuple[str, ...]:
    """The training data's own label strings, sorted (ints as their digits, sorted as numbers). A
    class is its name: the int 1 and the string "1" of one file are one class "1" (`LabelSet.index`
    reads an int by its digits where names are collected)."""
    seen = {label for label in labels if label is not None and not isinstance(label, float)}
    if all(isinstance(label, int) for label in seen):
        return tuple(str(label) for label in sorted(seen))
    return tuple(sorted({str(label) for label in seen}))


@dataclass
class LabelledBatch:
    """Padded model inputs: ids, key_mask (True on real tokens), type_ids [B, T]; labels [B]
    (classification) or [B, T] (tagging, -100 where no tag is predicted); `tokens`: the real tokens,
    counted on the host as the batch is built (no device sync to count them)."""

    ids: torch.Tensor
    key_mask: torch.Tensor
    type_ids: torch.Tensor
    labels: torch.Tensor
    tokens: int

    def to(self, device: torch.device) -> LabelledBatch:
        """On `device`; on CUDA copied from page-locked memory without blocking (`to_device`)."""
        return LabelledBatch(to_device(self.ids, device), to_device(self.key_mask, device),
                             to_device(self.type_ids, device), to_device(self.labels, device), self.tokens)


def collate_labelled(items: Sequence[tuple[list[int], list[int], Any]], pad_id: int) -> LabelledBatch:
    """Right-pad (ids, type_ids, label) items to the longest (`nbcli.padding.pad_rows`): ids with
    `pad_id`, type ids with 0, token labels with -100."""
    ids = pad_rows([seq for seq, _t, _l in items], pad_id)
    types = pad_rows([type_ids for _s, type_ids, _l in items], 0).ids
    if isinstance(items[0][2], list):
        labels = pad_rows([label for _s, _t, label in items], -100).ids
    else:
        labels = torch.tensor([label for _s, _t, label in items], dtype=torch.long)
    return LabelledBatch(ids.ids, ids.mask, types, labels, int(ids.lengths.sum()))
