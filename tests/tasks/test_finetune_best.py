"""A classification run keeps its best step (by --select-by) as DIR/best.safetensors, and nb predict,
nb eval and nb export given the run directory read that step, not the last: the same outputs as
giving them step-BEST.safetensors itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from nbcli.tasks.data import DataSpec
from nbcli.tasks.finetune import FinetuneConfig, finetune
from nbcli.tasks.inference import evaluate_classifier, load_classifier
from nbcli.train.state import load_model_tensors
from tests.cli.helpers import invoke
from tests.tasks.builders import encoder_folder, write_corpus
from tests.tasks.test_finetune import pairs


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """8 updates at a rate high enough that the validation loss does not fall to the end, evaluated and
    saved after every update, the best by the lowest validation loss."""
    folder = tmp_path_factory.mktemp("best")
    bert = encoder_folder(folder / "bert", "bert")
    train = write_corpus(folder / "train.jsonl", pairs(24), "jsonl")
    valid = write_corpus(folder / "valid.tsv", pairs(16, 3), "tsv")
    cfg = FinetuneConfig(data=DataSpec(text_field="sentence1", pair_field="sentence2"), init=str(bert), batch_size=8,
                         lr=0.05, steps=8, eval_every=1, save_every=1, select_by="val_loss", seed=1)
    finetune(cfg, [str(train)], {"dev": str(valid)}, folder / "run")
    return folder / "run"


def _best_by_log(run: Path) -> int:
    evals = [r for r in map(json.loads, (run / "log.jsonl").read_text().splitlines()) if "val_loss" in r]
    return min(evals, key=lambda r: r["val_loss"])["step"]   # min: the earliest of equal values


def test_best_checkpoint_is_the_best_step_and_not_the_last(run: Path) -> None:
    summary = json.loads((run / "summary.json").read_text())
    best = summary["best_step"]
    assert best == _best_by_log(run) and 0 < best < summary["steps"]   # the validation loss peaks mid-run
    assert summary["best_checkpoint"] == str(run / "best.safetensors")
    kept, meta = load_model_tensors(run / "best.safetensors")
    at_best, _ = load_model_tensors(run / f"step-{best}.safetensors")
    last, _ = load_model_tensors(run / f"step-{summary['steps']}.safetensors")
    assert kept.keys() == at_best.keys() and all(torch.equal(kept[k], at_best[k]) for k in kept)
    assert any(not torch.equal(kept[k], last[k]) for k in kept)


def test_eval_and_predict_of_the_run_read_the_best_step(run: Path, tmp_path: Path) -> None:
    summary = json.loads((run / "summary.json").read_text())
    step_file = run / f"step-{summary['best_step']}.safetensors"
    corpus = write_corpus(tmp_path / "test.tsv", pairs(12, 4), "tsv")
    by_run = evaluate_classifier(load_classifier(run), [str(corpus)], 8)
    by_step = evaluate_classifier(load_classifier(step_file), [str(corpus)], 8)
    last = evaluate_classifier(load_classifier(run / f"step-{summary['steps']}.safetensors"), [str(corpus)], 8)
    assert by_run["loss"] == by_step["loss"] and by_run["loss"] != last["loss"]
    for face in ("eval", "predict"):
        of_run = invoke(face, run, "--corpus", corpus, "-o", tmp_path / f"{face}-run.jsonl", "--json") \
            if face == "predict" else invoke(face, run, "--corpus", corpus, "--json")
        of_step = invoke(face, step_file, "--corpus", corpus, "-o", tmp_path / f"{face}-step.jsonl", "--json") \
            if face == "predict" else invoke(face, step_file, "--corpus", corpus, "--json")
        assert of_run.exit_code == 0 and of_step.exit_code == 0, of_run.stderr + of_step.stderr
        assert _scores(of_run.stdout) == _scores(of_step.stdout)
    predicted = [(tmp_path / f"predict-{x}.jsonl").read_text() for x in ("run", "step")]
    assert predicted[0] == predicted[1] and predicted[0]


def _scores(text: str) -> object:
    """A --json report without the paths it names."""
    def strip(value: object) -> object:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("checkpoint", "run", "model", "path", "output")}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value
    return strip(json.loads(text))


def test_export_of_the_run_is_the_best_step(run: Path, tmp_path: Path) -> None:
    summary = json.loads((run / "summary.json").read_text())
    done = invoke("export", run, "-o", tmp_path / "hf", "--json")
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["step"] == summary["best_step"]
    exported, _ = load_model_tensors(tmp_path / "hf" / "model.safetensors")
    direct = invoke("export", run / f"step-{summary['best_step']}.safetensors", "-o", tmp_path / "hf2", "--json")
    assert direct.exit_code == 0, direct.stderr
    again, _ = load_model_tensors(tmp_path / "hf2" / "model.safetensors")
    assert exported.keys() == again.keys() and all(torch.equal(exported[k], again[k]) for k in exported)


def test_export_card_has_the_best_steps_metrics(run: Path, tmp_path: Path) -> None:
    from nbcli.checkpoint.runs import read_log_records
    from nbcli.tasks.classifier_export import scores_at

    summary = json.loads((run / "summary.json").read_text())
    records = read_log_records(run / "log.jsonl")
    at_best = next(r for r in records if r["step"] == summary["best_step"] and "val_loss" in r)
    assert scores_at(summary["best_step"], summary, records, ["dev"]) == \
        {"dev": {"accuracy": at_best["val_dev_accuracy"], "f1": at_best["val_dev_f1"]}}
    assert scores_at(summary["steps"], summary, records, ["dev"]) == summary["final"]
    assert scores_at(summary["steps"] + 5, summary, records, ["dev"]) == {}
    done = invoke("export", run, "-o", tmp_path / "hf")
    assert done.exit_code == 0, done.stderr
    card = (tmp_path / "hf" / "README.md").read_text()
    assert f"value: {at_best['val_dev_accuracy']}" in card, card
