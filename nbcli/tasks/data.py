"""A classification or tagging data set as the model sees it: read through `nbcli.corpus.records`,
labels by name (`tasks.labels`), encoded (`tasks.classification`, `tasks.tagging`), batched.

Everything is read and checked before a run directory is made: a bad file is a one-line error
naming FILE:LINE and nothing is left behind.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from nbcli.errors import ConfigError
from nbcli.tasks.classification import TextEncoder, encode_examples, read_examples
from nbcli.tasks.labels import Batch, LabelSet, collected_names, label_names_option, pad_batch
from nbcli.tasks.tagging import encode_sentences, read_sentences
from nbcli.tokenizers import Tokenizer

__all__ = ["DataSpec", "Encoded", "encode_file", "make_labels", "parse_valid", "read_records", "training_texts"]

TASKS = ("classification", "tagging")


@dataclass(frozen=True)
class DataSpec:
    """How records are read: the task and (classification) the fields."""

    task: str = "classification"
    text_field: str | None = None
    pair_field: str | None = None
    label_field: str = "label"
    max_len: int = 128

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ConfigError(f"--task must be classification or tagging, got {self.task!r}")
        if self.task == "tagging" and (self.text_field or self.pair_field or self.label_field != "label"):
            raise ConfigError("--text-field, --text-pair-field and --label-field apply to --task classification "
                              "(CoNLL has a token and a tag per line)")

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "text_field": self.text_field, "pair_field": self.pair_field,
                "label_field": self.label_field, "max_len": self.max_len}


@dataclass
class Encoded:
    """Encoded records of one file: (ids, type ids, label(s)) items, the records (for gold labels by
    name and origins), and how many tokens they hold."""

    items: list[tuple[list[int], list[int], Any]]
    records: list[Any]
    tokens: int = field(init=False)

    def __post_init__(self) -> None:
        self.tokens = sum(len(ids) for ids, _t, _l in self.items)

    def batch(self, rows: Sequence[int], pad_id: int) -> Batch:
        return pad_batch([self.items[i] for i in rows], pad_id)


def read_records(spec: DataSpec, inputs: Sequence[str], labelled: bool = True) -> list[Any]:
    """Examples (classification) or sentences (tagging) of `inputs`, all of them."""
    if spec.task == "tagging":
        return read_sentences(inputs)
    return read_examples(inputs, text_field=spec.text_field, pair_field=spec.pair_field,
                         label_field=spec.label_field if labelled else None)


def training_texts(spec: DataSpec, records: Sequence[Any]) -> Iterator[str]:
    """The texts of records already read, what `-t words:min-freq=K` counts (nbcli.tokenizers.words):
    each example's text and its pair text; a tagging sentence's CoNLL tokens (joined by spaces, which
    the word rule splits on)."""
    for record in records:
        if spec.task == "tagging":
            yield " ".join(record.tokens)
        else:
            yield record.text
            if record.pair is not None:
                yield record.pair


def make_labels(spec: DataSpec, records: Sequence[Any], names_option: str | None, inputs: Sequence[str]) -> LabelSet:
    """The label set: given names (`label_names_option`), else the training records' own, sorted."""
    given = label_names_option(names_option, inputs, spec.label_field) if spec.task == "classification" else \
        label_names_option(names_option, [], spec.label_field)
    if given is not None:
        return LabelSet(tuple(given), given=True)
    if spec.task == "tagging":
        return LabelSet(tuple(sorted({tag for sent in records for tag in sent.tags})))
    return LabelSet(collected_names(ex.label for ex in records))


def encode_file(spec: DataSpec, tokenizer: Tokenizer, records: Sequence[Any], labels: LabelSet | None) -> Encoded:
    """The records encoded for the model (labels None: unlabelled, for prediction)."""
    if spec.task == "tagging":
        return Encoded(encode_sentences(tokenizer, records, labels, spec.max_len), list(records))  # type: ignore[arg-type]
    return Encoded(encode_examples(TextEncoder(tokenizer, spec.max_len), records, labels), list(records))  # type: ignore[arg-type]


def parse_valid(specs: Sequence[str]) -> dict[str, str]:
    """`--valid NAME=FILE` (or a bare FILE, named `valid`) -> {name: file}, in order."""
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep:
            name, path = "valid" if "valid" not in out else f"valid{len(out)}", spec
        if not name or not path or not name.replace("_", "").replace("-", "").isalnum():
            raise ConfigError(f"--valid {spec!r}: give NAME=FILE (a name of letters, digits, - and _)")
        if name in out:
            raise ConfigError(f"--valid: the name {name!r} is given twice")
        out[name] = path
    return out


def padding_id(tokenizer: Tokenizer) -> int:
    """The id padded positions get (masked out; any id works): the tokenizer's pad, else 0."""
    return tokenizer.pad_id if tokenizer.pad_id is not None else 0
