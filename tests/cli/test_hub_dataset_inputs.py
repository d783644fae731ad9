"""Hub dataset ids as the commands' data (`--corpus`, `--valid`, count-unigrams' INPUT) from a Hugging
Face cache built on disk (tests/hub_cache.py), offline: a run from `ID:CONFIG:SPLIT` equals the run
from the same parquet files given as paths and records the snapshot's commit, and so do nb eval and
nb predict of it (--json and the Python API); a dataset missing from the cache is one line naming the
id and the fetch command, exit 1, no run directory."""

from __future__ import annotations

import json

import pytest
from huggingface_hub import ModelCard

import nbcli
from safetensors.numpy import load_file

from nbcli.counts import read_counts
from tests.cli.helpers import assert_one_line_error, invoke, run_nb
from tests.corpus.test_hub_datasets import CARD, LABELS, parquet_bytes, sentences
from tests.hub_cache import add_dataset_snapshot, commit_hash
from tests.tasks.builders import encoder_folder


@pytest.fixture
def glue(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return add_dataset_snapshot(tmp_path / "hf" / "hub", "nyu-mll/glue", {
        "README.md": CARD.encode(),
        "sst2/train-00000-of-00002.parquet": parquet_bytes(sentences(10, 1), LABELS),
        "sst2/train-00001-of-00002.parquet": parquet_bytes(sentences(6, 2), LABELS),
        "sst2/validation-00000-of-00001.parquet": parquet_bytes(sentences(6, 3), LABELS),
    }, commit_hash("glue"))


def train_args(out, corpus, valid):
    repeated = [arg for item in corpus for arg in ("--corpus", item)]
    return ["train", "--task", "classification", "-t", "words:min-freq=1", *repeated, "--valid", valid,
            "--text-field", "sentence", "--d-model", "8", "--n-head", "2", "--n-layer", "1", "--d-ff", "16",
            "--steps", "3", "--batch-size", "4", "--max-len", "16", "--device", "cpu", "--seed", "3", "--out", out,
            "--json"]


def same_run_by_id_and_by_files(tmp_path, folder) -> dict:
    """`nb train --task classification` from nyu-mll/glue:sst2's train and validation ids and from the
    parquet files in `folder` (sst2/*.parquet): asserted equal in labels (the ClassLabel names of the
    schema), metrics and weights; summary.json's `datasets` is --json's, [] for the files. The id's report."""
    by_id = invoke(*train_args(tmp_path / "id", ["nyu-mll/glue:sst2:train"], "nyu-mll/glue:sst2:validation"))
    assert by_id.exit_code == 0, by_id.output
    files = sorted(str(p) for p in (folder / "sst2").glob("train-*.parquet"))
    by_path = invoke(*train_args(tmp_path / "path", files, str(folder / "sst2" / "validation-00000-of-00001.parquet")))
    assert by_path.exit_code == 0, by_path.output
    a, b = json.loads(by_id.stdout), json.loads(by_path.stdout)
    assert a["labels"] == LABELS == b["labels"]
    assert (a["best_val_accuracy"], a["final"]) == (b["best_val_accuracy"], b["final"])
    left, right = load_file(tmp_path / "id" / "step-3.safetensors"), load_file(tmp_path / "path" / "step-3.safetensors")
    assert left.keys() == right.keys() and all((left[k] == right[k]).all() for k in left)
    assert json.loads((tmp_path / "id" / "summary.json").read_text())["datasets"] == a["datasets"]
    assert b["datasets"] == []
    return a


VALID_ID = "nyu-mll/glue:sst2:validation"


def eval_and_predict_by_id_and_by_file(tmp_path, folder) -> dict:
    """nb eval and nb predict of the run `same_run_by_id_and_by_files` trained (tmp_path/id) on sst2's
    validation split by id and by its parquet file in `folder`: equal metrics and predictions; the
    id's reports record the dataset in `datasets` alike through --json and the Python API, the file's
    record []. The id's record."""
    run, valid_file = tmp_path / "id", folder / "sst2" / "validation-00000-of-00001.parquet"
    reports = {}
    for name, corpus in (("id", VALID_ID), ("path", valid_file)):
        evaluated = invoke("eval", "--task", "classification", run, "--corpus", corpus, "--json")
        assert evaluated.exit_code == 0, evaluated.output
        predicted = invoke("predict", run, "--corpus", corpus, "--json")
        assert predicted.exit_code == 0, predicted.output
        reports[name] = json.loads(evaluated.stdout), json.loads(predicted.stdout)
    (eval_id, predict_id), (eval_path, predict_path) = reports["id"], reports["path"]
    assert (eval_id["loss"], eval_id["accuracy"]) == (eval_path["loss"], eval_path["accuracy"])
    assert predict_id["predictions"] == predict_path["predictions"] and predict_id["records"] == 6
    assert eval_path["datasets"] == predict_path["datasets"] == []
    [record] = eval_id["datasets"]
    assert predict_id["datasets"] == [record] and record["input"] == VALID_ID
    assert nbcli.evaluate_classifier(run, VALID_ID).datasets == nbcli.predict_labels(run, VALID_ID).datasets == [record]
    assert nbcli.evaluate_classifier(run, valid_file).datasets == []
    return record


def test_a_classification_run_from_dataset_ids_equals_the_run_from_its_files(glue, tmp_path) -> None:
    report = same_run_by_id_and_by_files(tmp_path, glue)
    config = json.loads((tmp_path / "id" / "config.json").read_text())
    assert "nyu-mll/glue:sst2:train" in json.dumps(config)
    # the snapshot, as a field of its own
    recorded = [(d["repo_id"], d["commit"], d["config"], d["split"], d["cache"], d["files"]) for d in report["datasets"]]
    assert recorded == [
        ("nyu-mll/glue", commit_hash("glue"), "sst2", "train", "hub",
         ["sst2/train-00000-of-00002.parquet", "sst2/train-00001-of-00002.parquet"]),
        ("nyu-mll/glue", commit_hash("glue"), "sst2", "validation", "hub", ["sst2/validation-00000-of-00001.parquet"])]
    # nb eval and nb predict of the run on the validation id record the same snapshot
    assert eval_and_predict_by_id_and_by_file(tmp_path, glue) == report["datasets"][1]


def test_count_unigrams_of_a_dataset_id_equals_its_files(glue, tmp_path, sp_model) -> None:
    files = sorted(str(p) for p in (glue / "sst2").glob("train-*.parquet"))
    for name, inputs in (("id", ["nyu-mll/glue:sst2"]), ("path", files)):
        result = invoke("count-unigrams", *inputs, "--field", "sentence", "-t", sp_model, "-o",
                        tmp_path / f"{name}.safetensors")
        assert result.exit_code == 0, result.output
    by_id, by_path = read_counts(tmp_path / "id.safetensors"), read_counts(tmp_path / "path.safetensors")
    assert by_id.total == by_path.total > 0 and (by_id.counts == by_path.counts).all()


def test_a_dataset_missing_from_the_cache_is_one_line_through_real_nb(glue, tmp_path) -> None:
    out = tmp_path / "run"
    proc = run_nb(*train_args(out, ["org/absent:default:train"], "nyu-mll/glue:sst2:validation"))
    assert proc.returncode == 1 and proc.stdout == b""
    assert_one_line_error(proc.stderr.decode(), "org/absent:default:train", "hf download --repo-type dataset org/absent")
    assert not out.exists()


def test_an_output_into_a_dataset_snapshot_is_refused(glue, tmp_path, sp_model, monkeypatch) -> None:
    from nbcli.resolve import inside_hub_cache

    before = sorted(p.name for p in (glue / "sst2").iterdir())
    out = glue / "sst2" / "counts.safetensors"
    result = invoke("count-unigrams", "nyu-mll/glue:sst2", "--field", "sentence", "-t", sp_model, "-o", out)
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, str(out))
    assert sorted(p.name for p in (glue / "sst2").iterdir()) == before
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "another-cache"))    # a copy laid out as a cache, anywhere
    assert inside_hub_cache(glue / "sst2" / "new.parquet") and not inside_hub_cache(tmp_path / "new.parquet")


def test_the_model_card_of_a_run_from_a_dataset_id_names_the_dataset(glue, tmp_path) -> None:
    bert = encoder_folder(tmp_path / "bert", "bert")
    trained = invoke("train", "--task", "classification", "--init", bert, "--corpus", "nyu-mll/glue:sst2:train",
                     "--valid", "nyu-mll/glue:sst2:validation", "--text-field", "sentence", "--steps", "1",
                     "--batch-size", "4", "--max-len", "16", "--device", "cpu", "--out", tmp_path / "run")
    assert trained.exit_code == 0, trained.output
    exported = invoke("export", tmp_path / "run", "-o", tmp_path / "exported")
    assert exported.exit_code == 0, exported.output
    assert ModelCard.load(tmp_path / "exported" / "README.md").data.datasets == ["nyu-mll/glue"]
