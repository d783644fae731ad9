"""nb train classification|tagging --select-by: the best step by a logged metric (a loss minimised),
every --valid set's own best (paper 002 sec. 4: MNLI matched and mismatched, each maximised), bad
metrics refused in one line before any work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nbcli.errors import ConfigError
from nbcli.tasks.data import DataSpec
from nbcli.tasks.finetune import FinetuneConfig, finetune
from nbcli.train.best import BestBySet, select_by_sets
from tests.cli.helpers import assert_one_line_error, invoke
from tests.tasks.builders import encoder_folder, write_corpus
from tests.tasks.test_finetune import pairs


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> Path:
    return encoder_folder(tmp_path_factory.mktemp("enc") / "bert", "bert")


def _run(tmp_path: Path, bert: Path, name: str, select_by: str | None) -> tuple[dict, list[dict]]:
    train = write_corpus(tmp_path / "train.jsonl", pairs(24), "jsonl")
    matched = write_corpus(tmp_path / "m.tsv", pairs(12, 1), "tsv")
    mismatched = write_corpus(tmp_path / "mm.tsv", pairs(12, 2), "tsv")
    cfg = FinetuneConfig(data=DataSpec(text_field="sentence1", pair_field="sentence2"), init=str(bert), batch_size=8,
                         lr=3e-3, steps=8, eval_every=1, select_by=select_by)
    finetune(cfg, [str(train)], {"matched": str(matched), "mismatched": str(mismatched)}, tmp_path / name)
    summary = json.loads((tmp_path / name / "summary.json").read_text())
    evals = [r for r in map(json.loads, (tmp_path / name / "log.jsonl").read_text().splitlines())
             if "val_loss" in r]
    return summary, evals


def _best(evals: list[dict], key: str, minimise: bool) -> tuple[float, int]:
    """(value, step) of the best evaluation by a hand loop: the earliest on a tie."""
    value, step = evals[0][key], evals[0]["step"]
    for r in evals[1:]:
        if (r[key] < value) if minimise else (r[key] > value):
            value, step = r[key], r["step"]
    return value, step


def test_select_by_val_loss_picks_the_min_loss_step_and_each_set_gets_its_own_maximum(tmp_path, bert) -> None:
    summary, evals = _run(tmp_path, bert, "loss", "val_loss")
    assert len(evals) == 9   # step 0 .. 8
    loss, step = _best(evals, "val_loss", minimise=True)
    assert summary["select_by"] == "val_loss" and summary["best_step"] == step
    assert summary["best_val_accuracy"] == next(r["val_accuracy"] for r in evals if r["step"] == step)
    assert summary["best_epoch"] == step / summary["steps_per_epoch"]
    # one best per --valid set, of the same metric, each on its own
    assert set(summary["best_by_set"]) == {"matched", "mismatched"}
    for name, best in summary["best_by_set"].items():
        value, at = _best(evals, f"val_{name}_loss", minimise=True)
        assert best == {"metric": f"val_{name}_loss", "value": value, "step": at, "epoch": at / summary["steps_per_epoch"]}


def test_default_selection_is_the_first_sets_accuracy_and_two_sets_give_two_maxima(tmp_path, bert) -> None:
    summary, evals = _run(tmp_path, bert, "acc", None)
    accuracy, step = _best(evals, "val_accuracy", minimise=False)
    assert summary["select_by"] == "val_accuracy"
    assert (summary["best_val_accuracy"], summary["best_step"]) == (accuracy, step)
    maxima = {name: _best(evals, f"val_{name}_accuracy", minimise=False) for name in ("matched", "mismatched")}
    assert {name: (b["value"], b["step"]) for name, b in summary["best_by_set"].items()} == maxima
    # the log's first-set aliases are the matched set's
    assert all(r["val_accuracy"] == r["val_matched_accuracy"] for r in evals)


def test_select_by_a_named_set(tmp_path, bert) -> None:
    summary, evals = _run(tmp_path, bert, "mm", "val_mismatched_f1")
    f1, step = _best(evals, "val_mismatched_f1", minimise=False)
    assert summary["select_by"] == "val_mismatched_f1" and summary["best_step"] == step
    assert summary["best_by_set"]["mismatched"]["value"] == f1
    assert summary["best_by_set"]["matched"]["metric"] == "val_matched_f1"


@pytest.mark.parametrize("metric", ["val_bleu", "val_matthews", "val_other_accuracy", "accuracy"])
def test_a_metric_the_task_does_not_log_is_refused_naming_what_it_logs(metric: str) -> None:
    with pytest.raises(ConfigError, match=f"--select-by {metric}: nb train classification logs val_loss, "
                                          "val_accuracy, val_f1"):
        select_by_sets(metric, "val_accuracy", ["m", "mm"], ("loss", "accuracy", "f1"), "classification")


def test_select_by_without_a_validation_set_is_refused() -> None:
    with pytest.raises(ConfigError, match="without --valid"):
        select_by_sets("val_loss", "val_accuracy", [], ("loss", "accuracy", "f1"), "tagging")
    assert isinstance(select_by_sets(None, "val_accuracy", [], ("loss",), "tagging"), BestBySet)


def test_best_by_set_counts_only_scheduled_evaluations() -> None:
    best = BestBySet("val_loss", {"a": "val_a_loss"})
    best.better(0, {"val_loss": 2.0, "val_a_loss": 2.0, "val_accuracy": 0.25}, scheduled=True)
    best.better(3, {"val_loss": 1.0, "val_a_loss": 0.5, "val_accuracy": 0.5}, scheduled=False)  # a --stop-at end
    assert (best.step, best.value, best.at_best("val_accuracy")) == (0, 2.0, 0.25)
    assert best.by_set()["a"] == {"metric": "val_a_loss", "value": 2.0, "step": 0}


def test_cli_unknown_select_by_is_one_line_and_creates_nothing(tmp_path, bert) -> None:
    train = write_corpus(tmp_path / "train.jsonl", pairs(8), "jsonl")
    valid = write_corpus(tmp_path / "valid.tsv", pairs(4, 1), "tsv")
    for task in ("classification", "tagging"):
        result = invoke("train", task, "--init", bert, "--corpus", train, "--valid", f"dev={valid}",
                        "--select-by", "val_bleu", "--out", tmp_path / task)
        assert result.exit_code != 0
        assert_one_line_error(result.stderr, "--select-by val_bleu", f"nb train {task} logs", "(dev)")
        assert not (tmp_path / task).exists()
