"""Build `datasets`' own cache on disk with `datasets` itself, offline, as `datasets.load_dataset(ID,
CONFIG)` leaves it for a Hub repo:

    <cache>/ORG___NAME/CONFIG/0.0.0/COMMIT/NAME-SPLIT[-NNNNN-of-NNNNN].arrow + dataset_info.json

`load_dataset(ID)` needs the Hub to list the repo, so the module is made by `datasets`' local factory
from a folder of the repo's files (the same card `configs:` -> builder configs path the Hub factory
takes, and the same packaged parquet/json builder), then built with what the Hub factory sets
otherwise (`datasets.load.HubDatasetModuleFactory`): dataset_name = NAME in snake case and hash = the
repo's commit. The `ORG___` of the folder, which a builder writes from `repo_id`, is made by renaming
NAME/ to ORG___NAME/ (a builder given `repo_id` insists its data files be hf:// URLs).
`read_back_with_datasets` is the check that the result is what `datasets` reads as the id's cache.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


def prepare(source: Path, repo_id: str, commit: str, cache: Path, config: str | None = None,
            max_shard_size: int | None = None) -> Path:
    """Prepare `config` (None: the default) of the repo whose files are in `source`, as `repo_id` at
    `commit`, into `datasets`' cache `cache`; the build folder (…/CONFIG/VERSION/COMMIT)."""
    from datasets.load import dataset_module_factory, get_dataset_builder_class
    from datasets.naming import camelcase_to_snakecase

    module = dataset_module_factory(str(source))
    name = camelcase_to_snakecase(repo_id.split("/")[-1])
    builder_class = get_dataset_builder_class(module, dataset_name=name)
    builder = builder_class(cache_dir=str(cache), config_name=config, hash=commit,
                            **{**module.builder_kwargs, "dataset_name": name})
    builder.download_and_prepare(max_shard_size=max_shard_size)
    build = Path(builder.cache_dir)
    if "/" not in repo_id:
        return build
    moved = cache / (repo_id.split("/")[0] + "___" + name) / build.parent.parent.name / build.parent.name / build.name
    moved.parent.mkdir(parents=True, exist_ok=True)
    build.rename(moved)            # the folder keeps its mtime, which orders builds
    shutil.rmtree(cache / name)    # what is left: the empty NAME/CONFIG/VERSION and the builder's lock files
    return moved


def read_back_with_datasets(repo_id: str, config: str, split: str, cache: Path,
                            monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    """`datasets.load_dataset(repo_id, config, split=split)` offline: the rows `datasets` itself finds in
    its cache for the id (its CachedDatasetModuleFactory: the newest build of the config)."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)   # read at import; the Hub is never asked
    return datasets.load_dataset(repo_id, config, split=split, cache_dir=str(cache)).to_dict()
