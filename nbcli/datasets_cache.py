"""`datasets`' own cache, read without importing `datasets`: the Arrow files `datasets.load_dataset(ID,
CONFIG)` prepared, where a dataset id is looked up when the hub snapshot lacks it (docs/corpora.md,
"Hub datasets by id").

    $HF_DATASETS_CACHE/ORG___NAME/CONFIG/VERSION/HASH/dataset_info.json
                                                     NAME-SPLIT.arrow, or NAME-SPLIT-00000-of-00002.arrow ...

HF_DATASETS_CACHE, else $HF_HOME/datasets, else $XDG_CACHE_HOME/huggingface/datasets; NAME in snake
case (`datasets.naming.camelcase_to_snakecase`); an id without an owner is NAME alone. For a Hub
repo HASH is the commit `datasets` read the repo at; VERSION is the config's (0.0.0 for a repo of
data files). A HASH folder is a build of CONFIG when its dataset_info.json names CONFIG (a folder
`CONFIG-0123abcd` holds a build with other options, which nb does not take; `HASH.incomplete` is a
build under way). Of several builds of a config the newest (folder mtime) is read, as `datasets` reads
its cache offline; `ID@HASH` (a prefix will do) names another. The Arrow files are IPC streams
(`datasets`' ArrowWriter), read as any Arrow corpus file.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CachedBuild", "build_splits", "cache_name", "cached_builds", "datasets_cache_dir", "newest_builds"]

_UPPER_UPPER = re.compile(r"([A-Z]+)([A-Z][a-z])")
_LOWER_UPPER = re.compile(r"([a-z\d])([A-Z])")
_SPLIT_FILE = re.compile(r"^(?P<split>\w+(?:\.\w+)*?)(?:-(?P<shard>\d{5})-of-(?P<of>\d{5}))?\.(?:arrow|parquet)$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def datasets_cache_dir() -> Path:
    """The folder `datasets` prepares datasets in, read from the environment now (module doc)."""
    if os.environ.get("HF_DATASETS_CACHE"):
        return Path(os.path.expanduser(os.environ["HF_DATASETS_CACHE"]))
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    return Path(os.path.expanduser(home)) / "datasets"


def snake_case(name: str) -> str:
    """`datasets.naming.camelcase_to_snakecase`: the dataset name in its cache folder and file names."""
    return _LOWER_UPPER.sub(r"\1_\2", _UPPER_UPPER.sub(r"\1_\2", name)).lower()


def cache_name(repo_id: str) -> str:
    """The cache folder of a repo id: `ORG___NAME` (NAME in snake case), `NAME` without an owner."""
    *owner, name = repo_id.split("/")
    return "___".join([*owner, snake_case(name)])


@dataclass(frozen=True)
class CachedBuild:
    """One prepared build of one config: …/ORG___NAME/CONFIG/VERSION/HASH."""

    config: str
    version: str
    folder: Path
    dataset_name: str     # the NAME its files start with

    @property
    def hash(self) -> str:
        return self.folder.name

    @property
    def commit(self) -> str | None:
        """The Hub commit the build was prepared from (HASH is one for a Hub repo), else None."""
        return self.hash if _COMMIT.match(self.hash) else None

    @property
    def mtime(self) -> float:
        try:
            return self.folder.stat().st_mtime
        except OSError:
            return 0.0


def _info(folder: Path) -> dict[str, object] | None:
    try:
        info = json.loads((folder / "dataset_info.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def cached_builds(repo_id: str) -> list[CachedBuild]:
    """Every complete build of a config of `repo_id` in `datasets`' cache (module doc), [] when none."""
    root = datasets_cache_dir() / cache_name(repo_id)
    builds = []
    try:
        folders = sorted(root.glob("*/*/*"))
    except OSError:
        return []
    for folder in folders:
        config, version = folder.parent.parent.name, folder.parent.name
        if folder.name.endswith(".incomplete") or not folder.is_dir():
            continue
        info = _info(folder)
        if info is None or info.get("config_name") != config:
            continue
        name = info.get("dataset_name")
        builds.append(CachedBuild(config, version, folder, name if isinstance(name, str) and name
                                  else snake_case(repo_id.split("/")[-1])))
    return builds


def newest_builds(builds: Sequence[CachedBuild]) -> dict[str, CachedBuild]:
    """config -> its newest build (folder mtime, then the name: the order is never left to chance)."""
    newest: dict[str, CachedBuild] = {}
    for build in sorted(builds, key=lambda b: (b.mtime, b.version, b.hash)):
        newest[build.config] = build
    return newest


def build_splits(build: CachedBuild) -> dict[str, list[Path]]:
    """split -> its files in shard order: the splits dataset_info.json lists (else those the file names
    show); [] for a split whose files are missing or whose shards are not all there."""
    found: dict[str, list[tuple[int, int, Path]]] = {}
    prefix = build.dataset_name + "-"
    for path in build.folder.iterdir():
        if not path.name.startswith(prefix) or (match := _SPLIT_FILE.match(path.name[len(prefix):])) is None:
            continue
        shard, of = (int(match["shard"]), int(match["of"])) if match["shard"] else (0, 1)
        found.setdefault(match["split"], []).append((shard, of, path))
    listed = (_info(build.folder) or {}).get("splits")
    names = [str(s) for s in listed] if isinstance(listed, dict) and listed else sorted(found)
    splits = {}
    for name in names:
        shards = sorted(found.get(name, []))
        complete = bool(shards) and [(s, o) for s, o, _ in shards] == [(i, len(shards)) for i in range(len(shards))]
        splits[name] = [p for _, _, p in shards] if complete else []
    return splits
