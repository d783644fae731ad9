"""`nb reproduce --download`: a data role not given takes the recipe's Hub source, and a dataset split
missing from the local cache is fetched into it (the card and that split's files only) before any run.
The Hub is a fake here: huggingface_hub's snapshot_download and HfApi.list_repo_files answer from a dict
of repo files, writing what they "download" into the test's cache in huggingface_hub's own layout
(tests/hub_cache.py) and choosing files with huggingface_hub's own allow_patterns filter; reading the
cache (local_files_only) is the real function. No test touches the network."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from nbcli.errors import ConfigError
from nbcli.resolve import HubError
from nbcli.resolve_datasets import dataset_split, fetch_dataset
from nbcli.sweeps.items import item_recipe
from nbcli.sweeps.plan import check_data
from tests.cli.helpers import run_cli
from tests.corpus.test_hub_datasets import CARD, parquet_bytes
from tests.hub_cache import add_dataset_snapshot, add_snapshot, commit_hash


def table(path: Path) -> bytes:
    """A TSV of sentence<TAB>label as GLUE's parquet."""
    rows = [line.split("\t") for line in path.read_text().splitlines()[1:]]
    return parquet_bytes({"sentence": [r[0] for r in rows], "label": [int(r[1]) for r in rows]})


class FakeHub:
    """Dataset repos as {repo_id: {path: bytes}}; what was asked of it, in `calls`."""

    def __init__(self, cache: Path, repos: dict[str, dict[str, bytes]], fail: BaseException | None = None) -> None:
        self.cache, self.repos, self.fail = cache, repos, fail
        self.calls: list[tuple[str, str, tuple[str, ...]]] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import huggingface_hub

        real = huggingface_hub.snapshot_download

        def snapshot_download(repo_id: str, *args: Any, **kwargs: Any) -> str:
            if kwargs.get("local_files_only"):
                return real(repo_id, *args, **kwargs)       # the cache is read for real
            patterns = tuple(kwargs.get("allow_patterns") or ())
            self.calls.append(("download", repo_id, patterns))
            if self.fail is not None:
                raise self.fail
            from huggingface_hub.utils import filter_repo_objects

            files = self.repos[repo_id]
            chosen = set(filter_repo_objects(list(files), allow_patterns=list(patterns) or None))
            return str(add_dataset_snapshot(self.cache, repo_id, {p: files[p] for p in chosen}, commit_hash(repo_id)))

        def list_repo_files(api: Any, repo_id: str, **kwargs: Any) -> list[str]:
            self.calls.append(("list", repo_id, ()))
            if self.fail is not None:
                raise self.fail
            return sorted(self.repos[repo_id])

        monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
        monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", list_repo_files)


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sst2: dict[str, Path]) -> FakeHub:
    """An empty cache under tmp_path, no network, and a fake Hub holding nyu-mll/glue (a card with
    configs) and org/plain (no card: splits from the file names, and a loading script)."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    def no_network(*args: Any, **kwargs: Any) -> Any:
        raise OSError(101, "Network is unreachable (no network in tests)")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    fake = FakeHub(tmp_path / "hf" / "hub", {
        "nyu-mll/glue": {"README.md": CARD.encode(), "sst2/train-00000-of-00001.parquet": table(sst2["train"]),
                         "sst2/validation-00000-of-00001.parquet": table(sst2["valid"]),
                         "cola/train-00000-of-00001.parquet": table(sst2["train"])},
        "org/plain": {"data/train-00000-of-00001.parquet": table(sst2["train"]),
                      "data/test-00000-of-00001.parquet": table(sst2["valid"]), "plain.py": b"raise SystemExit\n"}})
    fake.install(monkeypatch)
    return fake


def snapshot_files(cache: Path, repo: str) -> set[str]:
    snapshots = cache / f"datasets--{repo.replace('/', '--')}" / "snapshots"
    return {p.relative_to(s).as_posix() for s in snapshots.iterdir() for p in s.rglob("*") if not p.is_dir()}


def test_fetch_takes_the_card_and_that_split_only_then_reads_offline(hub: FakeHub) -> None:
    split = fetch_dataset("nyu-mll/glue:sst2:validation")
    assert (split.config, split.split) == ("sst2", "validation")
    assert snapshot_files(hub.cache, "nyu-mll/glue") == {"README.md", "sst2/validation-00000-of-00001.parquet"}
    assert [c[0] for c in hub.calls] == ["download", "download"]        # the card, then the split's files
    assert fetch_dataset("nyu-mll/glue:sst2:validation").files == split.files and len(hub.calls) == 2  # cached now
    assert dataset_split("nyu-mll/glue:sst2:validation").files == split.files   # the offline reader agrees


def test_fetch_without_a_card_lists_the_repo_and_never_takes_a_script(hub: FakeHub) -> None:
    split = fetch_dataset("org/plain::test")
    assert split.split == "test" and [Path(f).name for f in split.files] == ["test-00000-of-00001.parquet"]
    assert snapshot_files(hub.cache, "org/plain") == {"data/test-00000-of-00001.parquet"}
    with pytest.raises(Exception) as err:
        fetch_dataset("nyu-mll/glue:sst2:test")
    assert "no split 'test'" in str(err.value) and "nyu-mll/glue" in str(err.value)


@pytest.mark.parametrize("how", ["offline", "network"])
def test_a_fetch_that_cannot_reach_the_hub_is_one_line(hub: FakeHub, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    if how == "offline":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    else:
        hub.fail = OSError(101, "Network is unreachable")
    with pytest.raises(HubError) as err:
        fetch_dataset("nyu-mll/glue:sst2:train")
    message = str(err.value)
    assert "\n" not in message and "nyu-mll/glue" in message
    assert ("HF_HUB_OFFLINE" if how == "offline" else "Network is unreachable") in message


def test_roles_take_their_hub_source_only_with_download(hub: FakeHub, sst2: dict[str, Path]) -> None:
    recipe = item_recipe("002-table1")
    needed = {"sst2_train", "sst2_valid", "bert"}
    with pytest.raises(ConfigError) as err:                       # without --download: named, not fetched
        check_data(recipe, {"bert": str(sst2["bert"])}, needed)
    assert "needs --data sst2_train=PATH sst2_valid=PATH" in str(err.value)
    assert "--download fetches sst2_train, sst2_valid from the Hub" in str(err.value) and not hub.calls
    bound = check_data(recipe, {"bert": str(sst2["bert"])}, needed, download=True)
    assert bound == {"sst2_train": "nyu-mll/glue:sst2:train", "sst2_valid": "nyu-mll/glue:sst2:validation",
                     "bert": str(sst2["bert"])}                    # a role given by --data keeps its path
    assert snapshot_files(hub.cache, "nyu-mll/glue") == {"README.md", "sst2/train-00000-of-00001.parquet",
                                                        "sst2/validation-00000-of-00001.parquet"}
    given = check_data(recipe, {"sst2_train": "nyu-mll/glue:cola:train"}, {"sst2_train"}, download=True)
    assert given == {"sst2_train": "nyu-mll/glue:cola:train"}       # an id given by --data: kept, and fetched
    assert "cola/train-00000-of-00001.parquet" in snapshot_files(hub.cache, "nyu-mll/glue")
    with pytest.raises(ConfigError) as err:                       # glove has no Hub source: still needed
        check_data(recipe, {}, {"glove"}, download=True)
    assert "needs --data glove=PATH" in str(err.value) and "no Hub source" in str(err.value)


def test_reproduce_download_runs_from_the_hub_sources(hub: FakeHub, tmp_path: Path, sst2: dict[str, Path]) -> None:
    """The item with no --data at all: GLUE's splits fetched, BERT's repo id read from the cache (a model
    repo is fetched by nb's model resolver when first read), the runs' options naming the ids."""
    add_snapshot(hub.cache, "google-bert/bert-base-uncased", sst2["bert"], commit_hash("bert"))
    out = tmp_path / "r"
    result = run_cli(["reproduce", "002-table1", "--scale", "smoke", "--arms", "SST2/BERT/BERT", "--seeds", "0",
                      "--download", "--out", out, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["data_roles"] == {"bert": "google-bert/bert-base-uncased", "sst2_train": "nyu-mll/glue:sst2:train",
                                    "sst2_valid": "nyu-mll/glue:sst2:validation"}
    config = json.loads((out / report["runs"][0]["run"] / "config.json").read_text())
    assert config["train"] == ["nyu-mll/glue:sst2:train"] and config["valid"] == {"dev": "nyu-mll/glue:sst2:validation"}
    listed = run_cli(["reproduce", "--list", "002-table1", "--json"])
    roles = {r["role"]: r for r in json.loads(listed.stdout)["items"][0]["data"]}
    assert roles["sst2_train"]["hub"] == "nyu-mll/glue:sst2:train" and roles["glove"]["hub"] is None
    assert roles["bert"]["licence"] == "apache-2.0"


def test_a_recipe_hub_source_must_be_an_id_with_a_licence(tmp_path: Path) -> None:
    from nbcli.sweeps.recipe import load_recipe

    text = (Path(item_recipe("002-table3").path).read_text()
            .replace('[data.glove]\n', '[data.glove]\nhub = "not a repo id"\nlicence = "mit"\n', 1))
    path = tmp_path / "r.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_recipe(path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message and "[data.glove].hub" in message and "neither" in message
    path.write_text(text.replace('hub = "not a repo id"\nlicence = "mit"\n', 'hub = "stanfordnlp/glove"\n', 1))
    with pytest.raises(ConfigError) as err:
        load_recipe(path)
    assert "[data.glove].licence" in str(err.value)
