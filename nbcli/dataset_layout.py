"""How a Hugging Face dataset repo lays out its configs and splits: the dataset card's `configs:`
metadata (`data_files` patterns, `data_dir`), else the file names as the Hub writes them
(`CONFIG/SPLIT-00000-of-00001.parquet`, `data/SPLIT-*.parquet`, `CONFIG/SPLIT/0000.parquet` of the
`refs/convert/parquet` branch, or a split keyword in a name). Read by nbcli.resolve_datasets, for a
cached snapshot (`snapshot_layout`) and for a repo's file list before fetching (`inferred_layout`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path, PurePath
from typing import Any

from nbcli.errors import InputError

__all__ = ["COMPRESSED", "DATA_SUFFIXES", "Layout", "NOT_DATA", "SPLIT_ALIASES", "card_configs", "config_patterns",
           "data_files", "inferred_layout", "inferred_split", "is_data_file", "matching_files", "snapshot_layout"]

_SHARD = re.compile(r"^(?P<split>[A-Za-z0-9_][A-Za-z0-9_.]*?)-\d{5}-of-\d{5}(?:-[0-9a-f]+)?\.")
_NUMBERED = re.compile(r"^\d+\.")
# Split keywords in file names (as `datasets` infers splits), each with the split it names.
SPLIT_ALIASES = {"train": "train", "training": "train", "validation": "validation", "valid": "validation",
                 "dev": "validation", "val": "validation", "test": "test", "testing": "test", "eval": "test",
                 "evaluation": "test"}
DATA_SUFFIXES = (".parquet", ".pq", ".arrow", ".feather", ".ipc", ".jsonl", ".ndjson", ".json", ".csv", ".tsv",
                 ".txt", ".text")
NOT_DATA = {"dataset_info.json", "dataset_infos.json", "state.json", "dataset_dict.json"}
COMPRESSED = (".gz", ".bz2", ".xz", ".zst")

Layout = dict[str, dict[str, list[Path]]]   # config -> split -> files


def is_data_file(path: Path) -> bool:
    name = path.name.lower()
    if name.startswith(".") or name in NOT_DATA:
        return False
    for suffix in COMPRESSED:
        name = name.removesuffix(suffix)
    return name.endswith(DATA_SUFFIXES)


def data_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and is_data_file(p)
                  and not any(part.startswith(".") for part in p.relative_to(folder).parts))


def card_configs(folder: Path) -> list[dict[str, Any]] | None:
    """The `configs:` metadata of the dataset card (README.md), None when it has none."""
    readme = folder / "README.md"
    if not readme.is_file():
        return None
    from huggingface_hub.repocard import metadata_load

    try:
        meta = metadata_load(readme)
    except Exception as err:  # noqa: BLE001 - YAML errors of a hostile card
        raise InputError(f"{readme}: the dataset card's metadata is not valid YAML "
                         f"({' '.join(str(err).split())[:200]})") from None
    configs = meta.get("configs") if isinstance(meta, dict) else None
    if configs is None:
        return None
    if not isinstance(configs, list) or not all(isinstance(c, dict) and isinstance(c.get("config_name"), str)
                                                for c in configs):
        raise InputError(f"{readme}: `configs:` in the dataset card is not a list of entries with a config_name")
    return configs


def config_patterns(entry: dict[str, Any], readme: Path) -> dict[str, list[str]]:
    """split -> glob patterns of one `configs:` entry (`data_files` as a string, a list of them, a list of
    {split, path} or a mapping split -> path; no data_files: every file under `data_dir`)."""
    base = str(entry.get("data_dir") or "").strip("/")
    files = entry.get("data_files", f"{base}/**" if base else "**")

    def listed(value: Any) -> list[str]:
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
            raise InputError(f"{readme}: config {entry['config_name']!r}: data_files {value!r} is not a path or a list")
        return [f"{base}/{v}" if base and not v.startswith(base) else v for v in items]

    if isinstance(files, dict):
        return {str(split): listed(value) for split, value in files.items()}
    if isinstance(files, list) and files and all(isinstance(v, dict) for v in files):
        return {str(v.get("split", "train")): listed(v.get("path", [])) for v in files}
    return {"train": listed(files)}


def matching_files(folder: Path, patterns: list[str]) -> list[Path]:
    found: dict[Path, None] = {}
    for pattern in patterns:
        for path in sorted(folder.glob(pattern.lstrip("/"))):
            if path.is_file() and is_data_file(path):
                found.setdefault(path, None)
    return list(found)


def inferred_split(rel: Path) -> tuple[str, str] | None:
    """(config, split) of a data file from its path as the Hub lays data out, None when the name says no split."""
    dirs, name = [d for d in rel.parts[:-1] if d != "data"], rel.name
    if (shard := _SHARD.match(name)) is not None:      # CONFIG/SPLIT-00000-of-00001.parquet, data/SPLIT-...
        return "/".join(dirs) or "default", shard["split"]
    if _NUMBERED.match(name) and dirs:                  # CONFIG/SPLIT/0000.parquet (refs/convert/parquet)
        return "/".join(dirs[:-1]) or "default", dirs[-1]
    words = [w for w in re.split(r"[-_. /]+", rel.with_suffix("").as_posix().lower()) if w]
    for word in reversed(words):
        if word in SPLIT_ALIASES:
            return "default", SPLIT_ALIASES[word]
    return None


def snapshot_layout(folder: Path) -> tuple[Layout, str | None]:
    """config -> split -> data files of a snapshot, and the default config named by the card (if any)."""
    configs = card_configs(folder)
    layout: Layout = {}
    if configs is not None:
        readme = folder / "README.md"
        default = next((c["config_name"] for c in configs if c.get("default") is True), None)
        for entry in configs:
            layout[entry["config_name"]] = {split: matching_files(folder, patterns)
                                            for split, patterns in config_patterns(entry, readme).items()}
        return layout, default
    files = data_files(folder)
    return {config: {split: [folder / rel for rel in rels] for split, rels in splits.items()}
            for config, splits in inferred_layout([f.relative_to(folder) for f in files]).items()}, None


def inferred_layout(files: Sequence[PurePath]) -> dict[str, dict[str, list[PurePath]]]:
    """config -> split -> data files (paths relative to the repo root) from their names alone, as the Hub
    lays data out (`_inferred_split`); every file one train split when no name says a split."""
    inferred = {f: inferred_split(Path(f)) for f in files}
    if files and all(v is None for v in inferred.values()):
        return {"default": {"train": list(files)}}
    layout: dict[str, dict[str, list[PurePath]]] = {}
    for path, found in inferred.items():
        if found is not None:
            layout.setdefault(found[0], {}).setdefault(found[1], []).append(path)
    return layout
