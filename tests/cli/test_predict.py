"""nb predict and nb eval --task classification through CliRunner and a real `nb` subprocess."""

from __future__ import annotations

import json

import pytest

from nbcli.tasks.data import DataSpec
from nbcli.tasks.finetune import FinetuneConfig, finetune
from tests.cli.helpers import assert_one_line_error, invoke, run_nb
from tests.tasks.builders import encoder_folder, write_corpus
from tests.tasks.test_finetune import LABELS, pairs


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("cls")
    bert = encoder_folder(root / "bert", "bert")
    train = write_corpus(root / "train.jsonl", pairs(16), "jsonl")
    write_corpus(root / "dev.tsv", pairs(6, 1), "tsv")
    cfg = FinetuneConfig(data=DataSpec(text_field="sentence1", pair_field="sentence2"), init=str(bert), steps=2,
                         batch_size=8)
    finetune(cfg, [str(train)], {"dev": str(root / "dev.tsv")}, root / "run")
    return root


@pytest.mark.slow
def test_predict_writes_labels_by_name_in_order(run) -> None:
    out = run / "preds.jsonl"
    result = run_nb("predict", str(run / "run" / "step-2.safetensors"), "--corpus", str(run / "dev.tsv"), "-o",
                    str(out), "--json")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 6 and all(line["label"] in LABELS and set(line["probs"]) == set(LABELS) for line in lines)
    assert json.loads(result.stdout)["records"] == 6


def test_eval_classification_matches_predictions(run) -> None:
    result = invoke("eval", run / "run", "--task", "classification", "--corpus", run / "dev.tsv", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    preds = json.loads(invoke("predict", run / "run", "--corpus", run / "dev.tsv", "--json").stdout)["predictions"]
    gold = [r[2] for r in pairs(6, 1)]
    assert report["accuracy"] == sum(p["label"] == g for p, g in zip(preds, gold)) / 6
    assert set(report) >= {"accuracy", "f1", "matthews", "loss"}


def test_eval_unseen_label_is_one_line(run) -> None:
    bad = run / "bad.tsv"
    bad.write_text((run / "dev.tsv").read_text() + "the\tof\tmaybe\n")
    result = run_nb("eval", str(run / "run"), "--task", "classification", "--corpus", str(bad))
    assert result.returncode == 1
    assert_one_line_error(result.stderr.decode(), f"{bad}:8", "maybe")


def test_eval_finds_the_task_the_run_records(run, translation_run, parallel_corpus) -> None:
    """No --task for a run: nb eval reads it from the run's config.json; a --task that contradicts it
    is refused in one line."""
    given = invoke("eval", run / "run", "--task", "classification", "--corpus", run / "dev.tsv", "--json")
    found = invoke("eval", run / "run", "--corpus", run / "dev.tsv", "--json")
    assert found.exit_code == 0, found.stderr
    assert json.loads(found.stdout)["accuracy"] == json.loads(given.stdout)["accuracy"]
    mt = invoke("eval", translation_run, "--corpus", parallel_corpus / "valid", "--src-lang", "de", "--tgt-lang", "en",
                "--beam", "1", "--json")
    assert mt.exit_code == 0, mt.stderr
    assert "bleu" in json.loads(mt.stdout)
    wrong = invoke("eval", translation_run, "--task", "lm", "--corpus", parallel_corpus / "valid.en")
    assert wrong.exit_code == 1
    assert_one_line_error(wrong.stderr, "--task lm:", "nb train translation")


def test_eval_of_a_classifier_refuses_the_options_of_other_tasks(run, tmp_path) -> None:
    """--counts, --scale-ln-bias and --csv were ignored silently for a classifier run (exit 0, no CSV):
    every option another task has is refused in one line naming the task, and nothing is written."""
    result = invoke("eval", run / "run", "--corpus", run / "dev.tsv", "--counts", tmp_path / "nope.safetensors",
                    "--scale-ln-bias", "0.5", "--csv", tmp_path / "out.csv")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "--scale-ln-bias, --counts", "--csv", "not an option of --task classification")
    assert not (tmp_path / "out.csv").exists()
    result = invoke("eval", run / "run", "--corpus", run / "dev.tsv", "--beam", "3")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "--beam: not an option of --task classification")


def test_translate_on_a_classifier_run_says_what_it_is(run) -> None:
    """A classifier run is its task's (the run directory records it): the error says so and names the
    commands that read it (was: "not an nb checkpoint (no nb.format metadata)"); a lone checkpoint of
    one, by its nb.format nb-classifier/1, the same."""
    (run / "in.de").write_text("the of\n")
    result = invoke("translate", run / "run", "-i", run / "in.de", "-o", run / "out.en")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "nb train classification runs have no nb translate", "nb predict", "nb eval")
    assert "no nb.format metadata" not in result.stderr and not (run / "out.en").exists()
    lone = run / "lone.safetensors"
    lone.write_bytes((run / "run" / "step-2.safetensors").read_bytes())
    result = invoke("translate", lone, "-i", run / "in.de", "-o", run / "out.en")
    assert_one_line_error(result.stderr, "nb train classification runs have no nb translate", "nb predict")
    assert not (run / "out.en").exists()


def test_generate_on_a_classifier_run_names_nb_predict(run) -> None:
    result = invoke("generate", run / "run", "--prompts", run / "dev.tsv", "--out", run / "study")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "is a run of nb train classification: use nb predict")
    lone = run / "lone-generate.safetensors"   # out of its run directory: its metadata says what it is
    lone.write_bytes((run / "run" / "step-2.safetensors").read_bytes())
    result = invoke("generate", lone, "--prompts", run / "dev.tsv")
    assert_one_line_error(result.stderr, "is a run of nb train classification: use nb predict")
    assert not (run / "study").exists()
