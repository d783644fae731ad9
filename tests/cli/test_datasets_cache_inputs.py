"""Hub dataset ids as the commands' data from `datasets`' own cache, built by `datasets` itself offline
(tests/datasets_cache.py): a classification run and a count from `ID:CONFIG:SPLIT` equal those from
the same parquet files given as paths, and record the dataset (repo, commit, config, split) as a field
of summary.json, --json and the counts file; so do nb eval and nb predict from an id (--json and the
Python API); an id in neither cache is one line naming both, exit 1."""

from __future__ import annotations

import json

import pytest

import nbcli
from nbcli.counts import read_counts
from tests.cli.helpers import assert_one_line_error, invoke, run_nb
from tests.cli.test_hub_dataset_inputs import eval_and_predict_by_id_and_by_file, same_run_by_id_and_by_files
from tests.corpus.test_hub_datasets import CARD, LABELS, parquet_bytes, sentences
from tests.datasets_cache import prepare
from tests.hub_cache import commit_hash

COMMIT = commit_hash("glue prepared by datasets")


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """nyu-mll/glue's files (sst2: train in two shards, validation), and sst2 prepared from them by
    `datasets` into its cache at COMMIT; the hub cache is empty."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf" / "datasets"))
    folder = tmp_path / "glue-repo"
    (folder / "sst2").mkdir(parents=True)
    for name, (n, seed) in {"train-00000-of-00002": (10, 1), "train-00001-of-00002": (6, 2),
                            "validation-00000-of-00001": (6, 3)}.items():
        (folder / "sst2" / f"{name}.parquet").write_bytes(parquet_bytes(sentences(n, seed), LABELS))
    (folder / "README.md").write_text(CARD)
    prepare(folder, "nyu-mll/glue", COMMIT, tmp_path / "hf" / "datasets", "sst2")
    return folder


def test_a_classification_run_from_datasets_cache_equals_the_run_from_the_parquet_files(repo, tmp_path) -> None:
    report = same_run_by_id_and_by_files(tmp_path, repo)
    assert [(d["input"], d["repo_id"], d["commit"], d["config"], d["split"], d["cache"], d["version"], d["files"])
            for d in report["datasets"]] == [
        ("nyu-mll/glue:sst2:train", "nyu-mll/glue", COMMIT, "sst2", "train", "datasets", "0.0.0", ["glue-train.arrow"]),
        ("nyu-mll/glue:sst2:validation", "nyu-mll/glue", COMMIT, "sst2", "validation", "datasets", "0.0.0",
         ["glue-validation.arrow"])]
    assert eval_and_predict_by_id_and_by_file(tmp_path, repo) == report["datasets"][1]


def test_count_unigrams_from_datasets_cache_equals_its_parquet_files(repo, tmp_path, sp_model) -> None:
    files = sorted(str(p) for p in (repo / "sst2").glob("train-*.parquet"))
    reports = {}
    for name, inputs in (("id", ["nyu-mll/glue:sst2"]), ("path", files)):
        result = invoke("count-unigrams", *inputs, "--field", "sentence", "-t", sp_model, "-o",
                        tmp_path / f"{name}.safetensors", "--json")
        assert result.exit_code == 0, result.output
        reports[name] = json.loads(result.stdout)
    by_id, by_path = read_counts(tmp_path / "id.safetensors"), read_counts(tmp_path / "path.safetensors")
    assert by_id.total == by_path.total > 0 and (by_id.counts == by_path.counts).all()
    [record] = reports["id"]["datasets"]
    assert (record["input"], record["commit"], record["split"]) == ("nyu-mll/glue:sst2", COMMIT, "train")
    assert json.loads(by_id.metadata["nb.datasets"]) == reports["id"]["datasets"]
    assert reports["path"]["datasets"] == [] and "nb.datasets" not in by_path.metadata


def test_an_id_in_neither_cache_is_one_line_through_real_nb(repo, tmp_path, sp_model) -> None:
    out = tmp_path / "absent.safetensors"
    proc = run_nb("count-unigrams", "org/absent:default:train", "-t", sp_model, "-o", out)
    assert proc.returncode == 1 and proc.stdout == b""
    assert_one_line_error(proc.stderr.decode(), "org/absent:default:train", str(tmp_path / "hf" / "hub"),
                          str(tmp_path / "hf" / "datasets"), "hf download --repo-type dataset org/absent")
    assert not out.exists()


def test_a_split_missing_from_datasets_cache_lists_those_there(repo, tmp_path, sp_model) -> None:
    result = invoke("count-unigrams", "nyu-mll/glue:sst2:test", "-t", sp_model, "-o", tmp_path / "c.safetensors")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "nyu-mll/glue:sst2:test", "no split 'test'", "train, validation")


def test_a_language_model_run_from_datasets_cache_records_the_build(repo, tmp_path, sp_model, sample_lines) -> None:
    """The LM task goes through the same run orchestration: the id's run equals the parquet file's and records it."""
    folder = tmp_path / "wiki-repo"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "train-00000-of-00001.parquet").write_bytes(parquet_bytes({"text": sample_lines[:400]}))
    prepare(folder, "org/wiki", commit_hash("wiki"), tmp_path / "hf" / "datasets")
    reports = {}
    for name, corpus in (("id", "org/wiki"), ("path", folder / "data" / "train-00000-of-00001.parquet")):
        result = invoke("train", "--corpus", corpus, "-t", sp_model, "--out", tmp_path / name, "--steps", "2",
                        "--seq-len", "16", "--batch-size", "4", "--eval-every", "2", "--eval-batches", "1", "--json")
        assert result.exit_code == 0, result.output
        reports[name] = json.loads(result.stdout)
    assert reports["id"]["final_val_loss"] == reports["path"]["final_val_loss"]
    [record] = json.loads((tmp_path / "id" / "summary.json").read_text())["datasets"]
    assert (record["repo_id"], record["commit"], record["config"], record["split"], record["cache"]) == (
        "org/wiki", commit_hash("wiki"), "default", "train", "datasets")
    # nb eval of the run's checkpoint on the id: the file's figures, the build recorded (--json and the API)
    evals = {}
    for name, corpus in (("id", "org/wiki"), ("path", folder / "data" / "train-00000-of-00001.parquet")):
        result = invoke("eval", tmp_path / "id" / "step-2.safetensors", "--corpus", corpus, "-t", sp_model,
                        "--device", "cpu", "--json")
        assert result.exit_code == 0, result.output
        evals[name] = json.loads(result.stdout)
    assert evals["id"]["rows"] == evals["path"]["rows"] and evals["path"]["datasets"] == []
    assert evals["id"]["datasets"] == [record] == nbcli.evaluate(
        tmp_path / "id" / "step-2.safetensors", "org/wiki", sp_model, device="cpu").datasets
