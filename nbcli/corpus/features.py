"""The class names the `datasets` library stores beside its data (its "features"): the `ClassLabel`
names of a field, for the readers of labelled records (`records.iter_sentences`, `tasks.labels`).

A field names classes when its feature is a `ClassLabel` (`label`: {"names": [...], "_type":
"ClassLabel"}) or a list of them (`ner_tags`: {"feature": {"names": [...], "_type": "ClassLabel"},
"_type": "List"}, "Sequence" before datasets 4, or a one-element JSON list). The features are read from:

- a parquet or Arrow file's schema metadata, key `huggingface`: {"info": {"features": {...}}} (what
  `datasets` writes into every parquet and Arrow file it saves, the Hub's parquet conversions too);
- a dataset_info.json ({"features": {...}}): a `save_to_disk` folder's, beside its Arrow files, or
  one beside a JSONL/parquet file; or a bare features object.

Names that repeat are refused, naming the file and field: class i and class j would be one label.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nbcli.corpus.columnar_files import columnar_schema
from nbcli.corpus.sources import CorpusSource
from nbcli.errors import CorpusError, NbError

__all__ = ["classlabel_names", "features_file_names", "repeated", "source_class_names"]

METADATA_KEY = b"huggingface"


def classlabel_names(features: Any, field: str) -> list[str] | None:
    """The ClassLabel names of `field` in a features object (dict: field -> feature), also through
    a list feature (`ner_tags`); None when it names none."""
    entry = features.get(field) if isinstance(features, dict) else None
    if isinstance(entry, list) and len(entry) == 1:  # [ClassLabel]: a list feature written as a JSON list
        entry = entry[0]
    if isinstance(entry, dict) and entry.get("_type") in ("List", "Sequence", "LargeList"):
        entry = entry.get("feature")
    names = entry.get("names") if isinstance(entry, dict) else None
    if isinstance(names, list) and names and all(isinstance(n, str) for n in names):
        return names
    return None


def repeated(names: list[str]) -> str | None:
    """The first name that occurs twice in `names`, else None."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None


def _distinct(names: list[str] | None, where: str, field: str, error: type[NbError]) -> list[str] | None:
    """`names`, refused with `error` naming `where` and `field` when one repeats."""
    if names is not None and (twice := repeated(names)) is not None:
        raise error(f"{where}: the ClassLabel names of {field!r} repeat {twice!r} ({len(names)} names: "
                    f"{', '.join(names[:8])}{', ...' if len(names) > 8 else ''}); each class needs its own name")
    return names


def _features_of(data: Any) -> Any:
    """The features object of a dataset_info.json, of schema metadata ({"info": ...}) or itself."""
    if isinstance(data, dict) and isinstance(data.get("info"), dict):
        data = data["info"]
    return data.get("features", data) if isinstance(data, dict) else None


def features_file_names(path: Path | str, field: str, error: type[NbError] = CorpusError) -> list[str] | None:
    """The ClassLabel names of `field` in a dataset_info.json (or a bare features object); None when
    the file names none; `error` when it is not JSON."""
    from nbcli import jsonsafe

    try:
        data = jsonsafe.load_file(path, error=error, what="features file")
    except OSError as err:
        raise error(f"{path}: not a readable features file ({err.strerror or err})") from None
    return _distinct(classlabel_names(_features_of(data), field), str(path), field, error)


def source_class_names(source: CorpusSource, field: str) -> list[str] | None:
    """The ClassLabel names of `field` for one source: its schema metadata (parquet, Arrow), else a
    dataset_info.json beside it (local files); None when neither names them."""
    if source.columnar:
        raw = (columnar_schema(source).metadata or {}).get(METADATA_KEY)
        if raw is not None:
            from nbcli import jsonsafe

            data = jsonsafe.load_bytes(raw if isinstance(raw, bytes) else str(raw).encode("utf-8"), source.path,
                                       error=CorpusError, what="schema metadata 'huggingface'")
            names = classlabel_names(_features_of(data), field)
            names = _distinct(names, f"{source.path}: schema metadata 'huggingface'", field, CorpusError)
            if names is not None:
                return names
    if source.remote or source.path == "-":
        return None
    info = Path(source.path).parent / "dataset_info.json"
    return features_file_names(info, field) if info.is_file() else None
