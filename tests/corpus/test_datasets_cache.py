"""Hub dataset ids read from `datasets`' own cache (the Arrow files `datasets.load_dataset` prepares),
built by `datasets` itself offline (tests/datasets_cache.py), with no hub snapshot or beside one: the
layout `datasets` reads back, the records equal to the parquet files', the newest build of several,
precedence, provenance, and one-line errors naming what is missing and where."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbcli.corpus import iter_examples, iter_pairs
from nbcli.datasets_cache import cache_name, cached_builds, snake_case
from nbcli.errors import InputError
from nbcli.resolve_datasets import dataset_files, dataset_inputs, dataset_split
from tests.corpus.test_hub_datasets import CARD, LABELS, parquet_bytes, sentences
from tests.datasets_cache import prepare, read_back_with_datasets
from tests.hub_cache import add_dataset_snapshot, commit_hash

COMMIT = commit_hash("glue in datasets' cache")
FILES = {"sst2/train-00000-of-00002.parquet": (5, 1), "sst2/train-00001-of-00002.parquet": (4, 2),
         "sst2/validation-00000-of-00001.parquet": (3, 3), "cola/train-00000-of-00001.parquet": (2, 4)}


@pytest.fixture
def caches(tmp_path, monkeypatch):
    """An empty hub cache and `datasets`' cache, found through the environment as nb and `datasets` find them."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf" / "datasets"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "hf" / "hub", tmp_path / "hf" / "datasets"


@pytest.fixture
def repo(tmp_path) -> Path:
    """The files of nyu-mll/glue's repo (its card names sst2 and cola), as a folder."""
    folder = tmp_path / "glue-repo"
    for name, (n, seed) in FILES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(parquet_bytes(sentences(n, seed), LABELS if name.startswith("sst2") else None))
    (folder / "README.md").write_text(CARD)
    return folder


@pytest.fixture
def glue(caches, repo) -> Path:
    """sst2 of nyu-mll/glue prepared by `datasets` at COMMIT: the build folder."""
    return prepare(repo, "nyu-mll/glue", COMMIT, caches[1], "sst2")


def rows(files) -> list[tuple[str, str]]:
    return [(ex.text, ex.label) for ex in iter_examples(list(map(str, files)), text_field="sentence")]


def test_the_build_is_what_datasets_reads_as_the_ids_cache(glue, caches, monkeypatch) -> None:
    assert glue == caches[1] / "nyu-mll___glue" / "sst2" / "0.0.0" / COMMIT
    assert sorted(p.name for p in glue.glob("*.arrow")) == ["glue-train.arrow", "glue-validation.arrow"]
    back = read_back_with_datasets("nyu-mll/glue", "sst2", "validation", caches[1], monkeypatch)
    assert back["sentence"] == sentences(3, 3)["sentence"]


def test_the_split_comes_from_datasets_cache_when_the_hub_has_no_snapshot(glue, repo) -> None:
    found = dataset_split("nyu-mll/glue:sst2:validation")
    assert found.folder == glue and found.files == (glue / "glue-validation.arrow",)
    assert found.to_dict() == {
        "repo_id": "nyu-mll/glue", "revision": None, "commit": COMMIT, "config": "sst2", "split": "validation",
        "cache": "datasets", "version": "0.0.0", "hash": COMMIT, "folder": str(glue),
        "files": ["glue-validation.arrow"]}
    assert dataset_split("nyu-mll/glue").split == "train"          # the only config, its train split
    assert rows(["nyu-mll/glue:sst2:train"]) == rows(sorted(repo.glob("sst2/train-*.parquet")))


def test_shards_are_read_in_order(caches, repo) -> None:
    build = prepare(repo, "nyu-mll/glue", COMMIT, caches[1], "sst2", max_shard_size=100)
    shards = sorted(p.name for p in build.glob("glue-train-*.arrow"))
    assert len(shards) > 1 and shards[0] == f"glue-train-00000-of-{len(shards):05d}.arrow"
    assert [p.name for p in dataset_split("nyu-mll/glue:sst2:train").files] == shards
    assert rows(["nyu-mll/glue:sst2:train"]) == rows(sorted(repo.glob("sst2/train-*.parquet")))


def test_the_hub_snapshot_comes_first_and_datasets_cache_fills_what_it_lacks(glue, caches) -> None:
    snapshot = add_dataset_snapshot(caches[0], "nyu-mll/glue", {
        "README.md": CARD.encode(), "sst2/train-00000-of-00002.parquet": parquet_bytes(sentences(5, 1), LABELS),
        "sst2/train-00001-of-00002.parquet": parquet_bytes(sentences(4, 2), LABELS)}, commit_hash("hub"))
    assert dataset_split("nyu-mll/glue:sst2:train").folder == snapshot
    found = dataset_split("nyu-mll/glue:sst2:validation")   # the snapshot lacks the file: the build has it
    assert found.folder == glue and found.to_dict()["cache"] == "datasets"


def test_of_several_builds_the_newest_is_read_and_a_hash_picks_another(caches, repo) -> None:
    old = prepare(repo, "nyu-mll/glue", commit_hash("old"), caches[1], "sst2")
    new = prepare(repo, "nyu-mll/glue", commit_hash("new"), caches[1], "sst2")
    os.utime(old, (1_000, 1_000))
    os.utime(new, (2_000, 2_000))
    assert dataset_split("nyu-mll/glue:sst2").folder == new
    assert dataset_split(f"nyu-mll/glue@{commit_hash('old')[:10]}:sst2").folder == old
    os.utime(old, (3_000, 3_000))
    assert dataset_split("nyu-mll/glue:sst2").commit == commit_hash("old")


def test_a_build_with_other_options_or_under_way_is_not_taken(glue, caches) -> None:
    (glue.parent / (COMMIT[:-1] + "0.incomplete")).mkdir()            # a build under way
    other = glue.parent.parent.parent / "sst2-0a1b2c3d" / "0.0.0" / COMMIT
    other.mkdir(parents=True)                                           # a build with other options
    (other / "dataset_info.json").write_text('{"config_name": "sst2"}')
    assert [b.folder for b in cached_builds("nyu-mll/glue")] == [glue]


@pytest.mark.parametrize("name, folder", [
    ("nyu-mll/glue", "nyu-mll___glue"), ("SetFit/SST2", "SetFit___sst2"),
    ("stanfordnlp/IMDBReviews", "stanfordnlp___imdb_reviews"), ("squad", "squad")])
def test_cache_folder_names_are_datasets_own(name, folder) -> None:
    from datasets.naming import camelcase_to_snakecase

    assert cache_name(name) == folder and snake_case(name.split("/")[-1]) == camelcase_to_snakecase(name.split("/")[-1])


@given(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,20}", fullmatch=True))
def test_snake_case_is_datasets_own_on_any_name(name) -> None:
    from datasets.naming import camelcase_to_snakecase

    assert snake_case(name) == camelcase_to_snakecase(name)


def test_provenance_of_the_inputs(glue, tmp_path) -> None:
    (tmp_path / "local.txt").write_text("a line\n")
    records = dataset_inputs(["nyu-mll/glue:sst2:train", "local.txt", "nyu-mll/glue:sst2:train", "-",
                              "hf://datasets/x/y/a.parquet"])
    assert [(r["input"], r["commit"], r["split"], r["files"]) for r in records] == [
        ("nyu-mll/glue:sst2:train", COMMIT, "train", ["glue-train.arrow"])]


# ---------------------------------------------------------------------------------------------
# One line naming what is missing


def one_line(text: str) -> str:
    with pytest.raises(InputError) as err:
        dataset_files(text)
    message = str(err.value)
    assert message.startswith(text + ": ") and "\n" not in message
    return message


def test_an_id_in_neither_cache_names_both_and_the_fetch_command(caches) -> None:
    message = one_line("org/absent:cfg:train")
    assert str(caches[0]) in message and str(caches[1]) in message
    assert "hf download --repo-type dataset org/absent" in message


@pytest.mark.parametrize("spec, fragments", [
    ("nyu-mll/glue:cola:train", ["no config 'cola'", "its configs: sst2"]),
    ("nyu-mll/glue:sst2:test", ["no split 'test'", "its splits: train, validation", "`datasets`' cache"]),
    ("nyu-mll/glue@0123abc:sst2", ["revision '0123abc'", COMMIT]),
])
def test_what_datasets_cache_lacks_is_one_line(glue, spec, fragments) -> None:
    message = one_line(spec)
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_a_missing_shard_is_named(caches, repo) -> None:
    build = prepare(repo, "nyu-mll/glue", COMMIT, caches[1], "sst2", max_shard_size=100)
    sorted(build.glob("glue-train-*.arrow"))[-1].unlink()
    assert "lacks Arrow files of split 'train'" in one_line("nyu-mll/glue:sst2:train")


def test_a_split_both_caches_lack_names_both(glue, caches) -> None:
    add_dataset_snapshot(caches[0], "nyu-mll/glue", {"README.md": CARD.encode()}, commit_hash("hub"))
    message = one_line("nyu-mll/glue:sst2:test")
    assert "no split 'test' in the cached dataset" in message and "from `datasets`' cache" in message


def test_the_parquet_files_read_by_pyarrow_equal_the_arrow_files(glue, repo) -> None:
    """The cross-check of the reader: `datasets`' Arrow stream read by nb, the parquet by pyarrow itself."""
    table = pq.read_table(repo / "sst2" / "validation-00000-of-00001.parquet").to_pydict()
    assert rows(["nyu-mll/glue:sst2:validation"]) == list(zip(table["sentence"], table["label"]))


def test_a_script_only_snapshot_reads_what_datasets_prepared(glue, caches) -> None:
    """Loading-script repos: the snapshot holds the script, which nb never runs; `datasets` ran it once."""
    add_dataset_snapshot(caches[0], "nyu-mll/glue", {"glue.py": b"import datasets\n"}, commit_hash("hub"))
    assert dataset_split("nyu-mll/glue:sst2:train").folder == glue
    assert dataset_split(f"nyu-mll/glue@{COMMIT}:sst2:train").folder == glue   # a build's hash beside a hub ref


def test_several_configs_and_none_named_lists_them(glue, caches, repo) -> None:
    prepare(repo, "nyu-mll/glue", COMMIT, caches[1], "cola")
    assert "has 2 configs (cola, sst2); name one" in one_line("nyu-mll/glue")
    assert dataset_split("nyu-mll/glue:cola").files[0].name == "glue-train.arrow"


def test_translation_pairs_from_a_build_of_a_translation_dataset(caches, tmp_path) -> None:
    rows = [{"de": f"satz {i}", "en": f"sentence {i}"} for i in range(5)]
    folder = tmp_path / "wmt16-repo"
    (folder / "de-en").mkdir(parents=True)
    (folder / "de-en" / "validation-00000-of-00001.parquet").write_bytes(parquet_bytes({"translation": rows}))
    (folder / "README.md").write_text("---\nconfigs:\n- config_name: de-en\n  data_files:\n  - split: validation\n"
                                      "    path: de-en/validation-*\n---\n")
    prepare(folder, "wmt/wmt16", commit_hash("wmt"), caches[1], "de-en")
    pairs = list(iter_pairs(["wmt/wmt16:de-en:validation"], "en", "de"))
    assert [(p.source, p.target) for p in pairs] == [(r["en"], r["de"]) for r in rows]
