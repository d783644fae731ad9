"""A classification or tagging data set as the model sees it: read through `nbcli.corpus.records`,
labels by name (`tasks.labels`), encoded (`tasks.classification`, `tasks.tagging`), batched.

Everything is read and checked before a run directory is made: a bad file is a one-line error
naming FILE:LINE and nothing is left behind.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from nbcli.corpus.features import source_class_names
from nbcli.corpus.records import ReadStats
from nbcli.corpus.sentences import RECORD_FORMATS
from nbcli.corpus.sources import discover_inputs
from nbcli.errors import ConfigError, naming
from nbcli.tasks.classification import TextEncoder, encode_examples, read_examples
from nbcli.tasks.labels import LabelledBatch, LabelSet, collected_names, collate_labelled, is_id, label_names_option
from nbcli.tasks.tagging import TAG_FIELD, encode_sentences, is_column, read_sentences
from nbcli.tokenizers import Tokenizer
from nbcli.tokenizers.words import NamedTexts, files_of

__all__ = ["DataSpec", "Encoded", "dataset_class_names", "encode_file", "known_labels", "make_labels", "parse_valid",
           "read_records", "training_texts", "unnamed_tags"]

TASKS = ("classification", "tagging")


@dataclass(frozen=True)
class DataSpec:
    """How records are read: the task and the fields. Classification: `text_field` (None: text, else
    sentence), `pair_field`, `label_field`. Tagging (`tasks.tagging.read_sentences`): `text_field`
    and `label_field` name the token list and the tag list of JSONL/parquet/Arrow records (None and
    "label", the defaults: tokens and ner_tags), or are CoNLL column numbers ("1", "3"; defaults:
    column 0 and the last)."""

    task: str = "classification"
    text_field: str | None = None
    pair_field: str | None = None
    label_field: str = "label"
    max_len: int = 128

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ConfigError(f"--task must be classification or tagging, got {self.task!r}")
        if self.task == "tagging" and self.pair_field:
            raise ConfigError("--text-pair-field applies to --task classification (a tagged sentence is one text)")

    @property
    def tag_field(self) -> str | None:
        """Tagging: the tag field or column asked for; None for the default ("label", classification's
        default, is what every tagging run stores when none was given)."""
        return None if self.label_field == "label" else self.label_field

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

    def batch(self, rows: Sequence[int], pad_id: int) -> LabelledBatch:
        return collate_labelled([self.items[i] for i in rows], pad_id)


def read_records(spec: DataSpec, inputs: Sequence[str], labelled: bool = True,
                 names: Sequence[str] | None = None, stats: ReadStats | None = None) -> list[Any]:
    """Examples (classification) or sentences (tagging) of `inputs`, all of them. `names`: the label
    names integer tags without a ClassLabel of their own index (`known_labels`, a run's labels);
    `stats`: filled with what the read replaced (invalid UTF-8; `ReadStats.notes` words it)."""
    if spec.task == "tagging":
        return read_sentences(inputs, token_field=spec.text_field, tag_field=spec.tag_field, tag_names=names,
                              labelled=labelled, stats=stats)
    return read_examples(inputs, text_field=spec.text_field, pair_field=spec.pair_field,
                         label_field=spec.label_field if labelled else None, stats=stats)


def training_texts(spec: DataSpec, records: Sequence[Any]) -> NamedTexts:
    """The texts of records already read, what `-t words:min-freq=K` counts (nbcli.tokenizers.words):
    each example's text and its pair text; a tagging sentence's CoNLL tokens (joined by spaces, which
    the word rule splits on). They name their files (`NamedTexts`)."""
    return NamedTexts(_texts(spec, records), files_of(record.origin.path for record in records))


def _texts(spec: DataSpec, records: Sequence[Any]) -> Iterator[str]:
    for record in records:
        if spec.task == "tagging":
            yield " ".join(record.tokens)
        else:
            yield record.text
            if record.pair is not None:
                yield record.pair


def known_labels(spec: DataSpec, names_option: str | None, inputs: Sequence[str]) -> list[str] | None:
    """The label names known before the training records are read: `--label-names` (a list, or a
    features file: `label_names_option`), else the `datasets` ClassLabel names of the training
    data: the label (classification) or tag field's, in a dataset_info.json beside a training file or the
    schema metadata of a parquet/Arrow one (`dataset_class_names`)."""
    if spec.task == "classification":
        return label_names_option(names_option, inputs, spec.label_field) or \
            (None if is_column(spec.label_field) else dataset_class_names(inputs, spec.label_field))
    field = spec.tag_field if spec.tag_field is not None and not is_column(spec.tag_field) else TAG_FIELD
    return label_names_option(names_option, [], field) or dataset_class_names(inputs, field)


def dataset_class_names(inputs: Sequence[str], field: str) -> list[str] | None:
    """The ClassLabel names of `field` in the first JSONL/parquet/Arrow input that has them
    (`corpus.features`: the Hub's parquet files carry them in their schema metadata); None when none has."""
    from nbcli.corpus.folders import class_folders

    files = [item for item in inputs if class_folders(item) is None]   # a folder per class has no ClassLabel
    for source in discover_inputs(files) if files else []:
        if source.columnar or source.format in RECORD_FORMATS:
            names = source_class_names(source, field)
            if names is not None:
                return names
    return None


def make_labels(spec: DataSpec, records: Sequence[Any], names_option: str | None, inputs: Sequence[str]) -> LabelSet:
    """The label set: the names known beforehand (`known_labels`), else the training records' own,
    sorted; tags that are all integers (ids without names) are the names 0 .. the largest, so that
    tag i is label i."""
    given = known_labels(spec, names_option, inputs)
    if given is not None:
        with naming(names_option or files_of(inputs)):
            return LabelSet(tuple(given), given=True)
    with naming(files_of(record.origin.path for record in records) or files_of(inputs)):
        if spec.task == "tagging":
            tags = {tag for sent in records for tag in sent.tags}
            if tags and all(is_id(tag) for tag in tags):
                return LabelSet(tuple(str(i) for i in range(max(int(tag) for tag in tags) + 1)))
            return LabelSet(tuple(sorted(tags)))
        return LabelSet(collected_names(ex.label for ex in records))


def unnamed_tags(spec: DataSpec, labels: LabelSet) -> str | None:
    """A warning when a tagger's labels are bare integers (neither a ClassLabel feature nor
    --label-names named the tag ids), else None."""
    if spec.task != "tagging" or labels.given or not all(is_id(name) for name in labels.names):
        return None
    return (f"the tags are integer ids without names (no ClassLabel feature in the data, no --label-names): they are "
            f"named 0..{len(labels.names) - 1} in predictions, metrics and the exported id2label (entity F1 "
            "needs BIO names: give --label-names)")


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
