"""THE resolver of Hub datasets: a dataset id names the data files of one config and split of a dataset
repo snapshot in the local Hugging Face cache, read offline (docs/corpora.md, "Hub datasets by id").

    ID[@REVISION][:CONFIG[:SPLIT]]      ID = name or owner/name; ID::SPLIT is the default config's split

`nyu-mll/glue:sst2:train`, `stanfordnlp/imdb:test`, `wmt/wmt16@main:de-en:validation`. A single part
after the id is a config when the repo has one of that name, else a split of the default config. No
config: the one the dataset card marks `default: true`, else `default`, else the only one. No split:
`train` when there is one, else the only one. A local path of the same name wins (`./name` is a path).

The snapshot is found by huggingface_hub (`snapshot_download(repo_type="dataset",
local_files_only=True)`: HF_HUB_CACHE / HF_HOME honoured, never the network), as `hf download
--repo-type dataset ID` or `datasets.load_dataset` leave it. Configs and splits come from the dataset
card's `configs:` metadata, else from the file names as the Hub writes them (nbcli.dataset_layout).
When the hub snapshot lacks the id (or the split), `datasets`' own cache is read: the Arrow files
`datasets.load_dataset` prepared (nbcli.datasets_cache). The files are then read as any corpus file
(nbcli.corpus.sources); `dataset_inputs` is what a run records of them. `fetch_dataset` (nb reproduce
--download, the only caller that may use the network) puts a missing split into the hub cache first.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from nbcli.dataset_layout import (
    SPLIT_ALIASES, Layout, card_configs, config_patterns, inferred_layout, is_data_file, snapshot_layout,
)
from nbcli.datasets_cache import CachedBuild, build_splits, cached_builds, datasets_cache_dir, newest_builds
from nbcli.errors import InputError
from nbcli.resolve import HubError, download_snapshot, hub_cache_dir, hub_offline, looks_like_repo_id

__all__ = ["DATASET_ID_HELP", "DatasetSpec", "DatasetSplit", "dataset_files", "dataset_inputs", "dataset_repo_ids",
           "dataset_split", "fetch_dataset", "fetch_hint", "parse_dataset_spec"]

_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$")

DATASET_ID_HELP = (
    "A Hub dataset ID[@REV][:CONFIG[:SPLIT]] (nyu-mll/glue:sst2:train; no split: train) is read offline from the "
    "local Hugging Face cache: the hub snapshot `hf download --repo-type dataset ID` fetches, else the Arrow files "
    "`datasets.load_dataset` prepared (docs/corpora.md).")
"""How --corpus, --valid, count-unigrams' INPUT and nb reproduce --data take a dataset id (module doc)."""


@dataclass(frozen=True)
class DatasetSpec:
    """A parsed dataset id: the repo, an optional revision, config and split (None: the default)."""

    repo_id: str
    revision: str | None = None
    config: str | None = None
    split: str | None = None

    @property
    def label(self) -> str:
        return self.repo_id + (f"@{self.revision}" if self.revision else "")


@dataclass(frozen=True)
class DatasetSplit:
    """One config and split of a cached dataset: its files, in order, from the hub snapshot
    (`build` None) or from a build in `datasets`' cache."""

    spec: DatasetSpec
    folder: Path         # the snapshot (…/datasets--owner--name/snapshots/COMMIT) or the build (…/VERSION/HASH)
    config: str
    split: str
    files: tuple[Path, ...]
    build: CachedBuild | None = None

    @property
    def commit(self) -> str | None:
        """The repo's commit: the snapshot's, or the one `datasets` prepared the build from (None if unknown)."""
        return self.folder.name if self.build is None else self.build.commit

    def to_dict(self) -> dict[str, object]:
        """Provenance: which repo, commit, config, split and files, from which cache (the build's version
        and hash folder for `datasets`' cache)."""
        where = {"cache": "hub"} if self.build is None else {
            "cache": "datasets", "version": self.build.version, "hash": self.build.hash}
        return {"repo_id": self.spec.repo_id, "revision": self.spec.revision, "commit": self.commit,
                "config": self.config, "split": self.split, **where, "folder": str(self.folder),
                "files": [f.relative_to(self.folder).as_posix() for f in self.files]}


def parse_dataset_spec(text: str) -> DatasetSpec | None:
    """`ID[@REVISION][:CONFIG[:SPLIT]]` parsed, or None when `text` is not written as a dataset id
    (a path, a URL, a glob, a file name with a suffix)."""
    if not text or "://" in text or any(ch in text for ch in "*?[\\"):
        return None
    repo, *parts = text.split(":")
    if len(parts) > 2 or not looks_like_repo_id(repo):
        return None
    if not all(p == "" or _PART.match(p) for p in parts) or parts[-1:] == [""]:
        return None  # `ID:` and `ID:CONFIG:` name nothing
    repo_id, _, revision = repo.partition("@")
    config = (parts[0] or None) if parts else None
    split = parts[1] if len(parts) == 2 else None
    return DatasetSpec(repo_id, revision or None, config, split)


def fetch_hint(repo_id: str, revision: str | None = None, include: str | None = None) -> str:
    """The command that puts a dataset (or some of its files) into the cache."""
    extra = (f" --revision {revision}" if revision else "") + (f" --include '{include}'" if include else "")
    return f"`hf download --repo-type dataset {repo_id}{extra}` (huggingface-cli download in older huggingface_hub)"


def _snapshot(spec: DatasetSpec) -> Path | None:
    """The cached snapshot folder of the dataset repo, None when the cache has none."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(spec.repo_id, repo_type="dataset", revision=spec.revision,
                                      cache_dir=hub_cache_dir(), local_files_only=True))
    except (LocalEntryNotFoundError, FileNotFoundError):
        return None
    except Exception as err:  # noqa: BLE001 - a library error becomes one line naming the id
        raise HubError(f"{spec.label}: cannot read the dataset from the Hugging Face cache: "
                       f"{' '.join(str(err).split())[:300]}") from None


def _cached_revisions(repo_id: str) -> list[str]:
    refs = hub_cache_dir() / f"datasets--{repo_id.replace('/', '--')}" / "refs"
    try:
        return sorted(p.relative_to(refs).as_posix() for p in refs.rglob("*") if p.is_file())
    except OSError:
        return []


def _not_cached(spec: DatasetSpec, text: str) -> HubError:
    known = _cached_revisions(spec.repo_id)
    if spec.revision and known:
        return HubError(f"{text}: revision {spec.revision!r} of the dataset {spec.repo_id} is not in the Hugging Face "
                        f"cache {hub_cache_dir()} (cached: {', '.join(known)}) nor in `datasets`' cache "
                        f"{datasets_cache_dir()}; fetch it with {fetch_hint(spec.repo_id, spec.revision)}")
    return HubError(f"{text}: no such file or directory, and the dataset {spec.label} is in neither Hugging Face cache "
                    f"(hub snapshots: {hub_cache_dir()}; `datasets`' Arrow files: {datasets_cache_dir()}; nb reads "
                    f"Hub datasets offline); fetch it with {fetch_hint(spec.repo_id, spec.revision)}, or give the path "
                    "of a local copy")


# ---------------------------------------------------------------------------------------------
# Resolution


def _choose(kind: str, wanted: str | None, available: list[str], text: str, fallback: list[str], where: str) -> str:
    if wanted is not None:
        if wanted in available:
            return wanted
        alias = SPLIT_ALIASES.get(wanted.lower()) if kind == "split" else None
        if alias in available:
            return alias  # type: ignore[return-value]
        raise InputError(f"{text}: no {kind} {wanted!r} in {where} (its {kind}s: {', '.join(available)})")
    for name in fallback:
        if name in available:
            return name
    if len(available) == 1:
        return available[0]
    raise InputError(f"{text}: {where} has {len(available)} {kind}s ({', '.join(available)}); name one: "
                     + ("ID:CONFIG[:SPLIT]" if kind == "config" else "ID:CONFIG:SPLIT or ID::SPLIT"))


def _config_and_split(spec: DatasetSpec, text: str, layout: Layout, default: str | None, where: str) -> tuple[str, str]:
    """The config and split `spec` names in `layout` (module doc: ID:SPLIT, the defaults)."""
    configs = list(layout)
    config_wanted, split_wanted = spec.config, spec.split
    if split_wanted is None and config_wanted is not None and config_wanted not in configs:
        config_wanted, split_wanted = None, spec.config   # ID:SPLIT of the default config
    config = _choose("config", config_wanted, configs, text, [default or "default", "default"], where)
    return config, _choose("split", split_wanted, list(layout[config]), text, ["train"], where)


def _snapshot_split(spec: DatasetSpec, text: str, folder: Path) -> DatasetSplit:
    layout, default = snapshot_layout(folder)
    if not layout:
        scripts = sorted(p.name for p in folder.glob("*.py"))
        what = f"a loading script ({scripts[0]}), which nb never runs" if scripts else "no data files nb reads"
        raise InputError(f"{text}: the cached snapshot {folder.name[:12]} of {spec.repo_id} holds {what}; fetch its "
                         f"parquet files with {fetch_hint(spec.repo_id, 'refs/convert/parquet')}")
    config, split = _config_and_split(spec, text, layout, default, "the cached dataset")
    if not (files := layout[config][split]):
        raise InputError(f"{text}: the cached snapshot {folder.name[:12]} of {spec.repo_id} lacks the files of config "
                         f"{config!r} split {split!r}; fetch them with {fetch_hint(spec.repo_id, spec.revision)}")
    return DatasetSplit(spec, folder, config, split, tuple(files))


def _build_split(spec: DatasetSpec, text: str, builds: list[CachedBuild]) -> DatasetSplit:
    """The split from `datasets`' cache: each config's newest build (`@HASH`: the build of that hash)."""
    where = f"`datasets`' cache of {spec.repo_id} ({datasets_cache_dir()})"
    if spec.revision:
        hashes = sorted({b.hash for b in builds})
        builds = [b for b in builds if b.hash.startswith(spec.revision)]
        if not builds:
            raise InputError(f"{text}: no build of revision {spec.revision!r} in {where} (its hashes: "
                             f"{', '.join(hashes)}); `datasets` names builds by commit, give one of these")
    newest = newest_builds(builds)
    layout = {config: build_splits(newest[config]) for config in sorted(newest)}
    config, split = _config_and_split(spec, text, layout, None, where)
    build = newest[config]
    if not (files := layout[config][split]):
        raise InputError(f"{text}: the build {build.folder} in `datasets`' cache lacks Arrow files of split {split!r} "
                         f"(missing or not all shards); prepare it again with datasets.load_dataset")
    return DatasetSplit(spec, build.folder, config, split, tuple(files), build)


def dataset_split(text: str) -> DatasetSplit:
    """The files of the config and split `text` names (module doc): from the hub snapshot, else from
    `datasets`' cache; a one-line HubError/InputError naming the id when neither has the dataset, the
    config, the split or its files."""
    spec = parse_dataset_spec(text)
    if spec is None:
        raise InputError(f"{text}: not a dataset id (ID[@REVISION][:CONFIG[:SPLIT]])")
    folder = _snapshot(spec)
    hub_error = None
    if folder is not None:
        try:
            return _snapshot_split(spec, text, folder)
        except InputError as err:
            hub_error = err
    builds = cached_builds(spec.repo_id)
    if not builds:
        raise hub_error or _not_cached(spec, text)
    try:
        return _build_split(spec, text, builds)
    except InputError as err:
        if hub_error is None:
            raise
        raise InputError(f"{hub_error} (and from `datasets`' cache: {str(err).removeprefix(text + ': ')})") from None


def dataset_files(item: str) -> list[str] | None:
    """The local files of the dataset `item` names, None when `item` is no dataset id: not written as
    one, or a bare name (no `/`, no `:`) that is not a cached dataset, which stays a missing file. Call
    only for an `item` that is no local path."""
    spec = parse_dataset_spec(item)
    if spec is None:
        return None
    if "/" not in spec.repo_id and ":" not in item and _snapshot(spec) is None and not cached_builds(spec.repo_id):
        return None
    return [str(path) for path in dataset_split(item).files]


def _cached_repo_id(path: str) -> str | None:
    """`org/name` of a file path in a dataset snapshot (…/datasets--org--name/snapshots/COMMIT/…), else None."""
    parts = Path(path).parts
    return next((parts[i][len("datasets--"):].replace("--", "/") for i in range(len(parts) - 1)
                 if parts[i].startswith("datasets--") and parts[i + 1] == "snapshots"), None)


def dataset_repo_ids(inputs: Sequence[str]) -> list[str]:
    """The Hub dataset repo ids among `inputs`: given as dataset ids (a local path of that name excluded)
    or as files of a cached dataset snapshot."""
    found = []
    for item in map(str, inputs):
        spec = parse_dataset_spec(item) if not Path(item).exists() else None
        if spec is not None and ("/" in spec.repo_id or ":" in item):
            found.append(spec.repo_id)
        elif (repo_id := _cached_repo_id(item)) is not None:
            found.append(repo_id)
    return list(dict.fromkeys(found))


def dataset_inputs(inputs: Sequence[str]) -> list[dict[str, object]]:
    """What a run records of its Hub dataset inputs (a run's summary `datasets`, count-unigrams'
    report): for each input given as a dataset id, the id as given (`input`) and `DatasetSplit.to_dict`
    (repo, commit, config, split, cache, files), in the order given, each once."""
    found = []
    for item in dict.fromkeys(map(str, inputs)):
        if os.path.lexists(item) or dataset_files(item) is None:   # a path, a URL, no dataset id
            continue
        found.append({"input": item, **dataset_split(item).to_dict()})
    return found


# ---------------------------------------------------------------------------------------------
# Fetching (nb reproduce --download): the one place nb asks the Hub for a dataset


def fetch_dataset(text: str) -> DatasetSplit:
    """The config and split `text` names, fetched into the hub cache first when neither cache has them
    (huggingface_hub's snapshot_download: only the dataset card and that split's files, never a loading
    script), then read offline as `dataset_split` reads it. A one-line HubError when the Hub cannot be
    reached (HF_HUB_OFFLINE included), an InputError naming the choices when the repo has no such config
    or split."""
    spec = parse_dataset_spec(text)
    if spec is None:
        raise InputError(f"{text}: not a dataset id (ID[@REVISION][:CONFIG[:SPLIT]])")
    try:
        return dataset_split(text)
    except (HubError, InputError):
        pass   # not cached (or not all of it): fetch below, then read it as above
    if hub_offline():
        raise HubError(f"{text}: not in the local cache, and HF_HUB_OFFLINE forbids fetching it; unset it or fetch "
                       f"it with {fetch_hint(spec.repo_id, spec.revision)}")
    card = _download_files(spec, ["README.md"])
    configs = card_configs(card)
    where = f"the Hub's {spec.label}"
    if configs is not None:
        default = next((c["config_name"] for c in configs if c.get("default") is True), None)
        patterns = {c["config_name"]: config_patterns(c, card / "README.md") for c in configs}
        config, split = _config_and_split(spec, text, patterns, default, where)  # type: ignore[arg-type]
        wanted = [p.removeprefix("./").lstrip("/") for p in patterns[config][split]]   # as matching_files reads them
    else:
        listed = [PurePosixPath(f) for f in _repo_files(spec) if is_data_file(PurePosixPath(f))]
        if not listed:
            raise HubError(f"{text}: {where} has no data files nb reads (a loading script, which nb never runs?); "
                           f"try its parquet branch: {spec.repo_id}@refs/convert/parquet")
        layout = inferred_layout(listed)
        config, split = _config_and_split(spec, text, layout, None, where)  # type: ignore[arg-type]
        wanted = [p.as_posix() for p in layout[config][split]]
    _download_files(spec, ["README.md", *wanted])
    return dataset_split(text)


def _download_files(spec: DatasetSpec, patterns: list[str]) -> Path:
    """The files matching `patterns` (fnmatch, as the Hub's allow_patterns) fetched into the hub cache;
    the snapshot folder."""
    try:
        return Path(download_snapshot(spec.repo_id, revision=spec.revision, patterns=patterns, repo_type="dataset"))
    except Exception as err:  # noqa: BLE001 - a network or Hub error becomes one line naming the id
        raise HubError(f"{spec.label}: cannot fetch the dataset from the Hub: {' '.join(str(err).split())[:300]}") \
            from None


def _repo_files(spec: DatasetSpec) -> list[str]:
    """The repo's file names at the revision (HfApi.list_repo_files)."""
    from huggingface_hub import HfApi

    try:
        return list(HfApi().list_repo_files(spec.repo_id, repo_type="dataset", revision=spec.revision))
    except Exception as err:  # noqa: BLE001 - one line, as _download_files
        raise HubError(f"{spec.label}: cannot list the dataset's files on the Hub: {' '.join(str(err).split())[:300]}") \
            from None
