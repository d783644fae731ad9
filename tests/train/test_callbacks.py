"""The update loop's seams (nbcli.train.callbacks): a callback hears every log record (the same as
log.jsonl), every evaluation with whether it was scheduled, and the end, for each task; the best
checkpoint is itself a callback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nbcli.tasks.base import TrainHooks
from nbcli.tasks.runs import train_task
from nbcli.train.best import BestCheckpoint
from nbcli.train.callbacks import Callback, Events, KeepBest
from nbcli.train.rundir import read_log


class Recorder(Callback):
    def __init__(self) -> None:
        self.logged: list[dict[str, Any]] = []
        self.evaluated: list[tuple[int, bool]] = []
        self.ended = 0

    def on_log(self, record: dict[str, Any]) -> None:
        self.logged.append(dict(record))

    def on_evaluate(self, step: int, record: dict[str, Any], scheduled: bool) -> None:
        assert "val_loss" in record
        self.evaluated.append((step, scheduled))

    def on_train_end(self) -> None:
        self.ended += 1


def test_lm_callback_hears_every_record_and_scheduled_evaluations(tmp_path: Path, sp_model: Path,
                                                                  train_corpus: Path) -> None:
    recorder = Recorder()
    train_task("lm", {"corpus": [str(train_corpus)], "tokenizer": str(sp_model), "out": tmp_path / "r",
                      "steps": 5, "eval_every": 2, "stop_at": 3, "seq_len": 32, "batch_size": 8, "device": "cpu"},
               TrainHooks(callbacks=[recorder]))
    assert recorder.logged == read_log(tmp_path / "r")
    # every --eval-every step is scheduled; the --stop-at stop at 3 is not (it is not the run's last step)
    assert recorder.evaluated == [(0, True), (2, True), (3, False)]
    assert recorder.ended == 1


def test_translation_and_classification_callbacks(tmp_path: Path, parallel_corpus: Path) -> None:
    from tests.tasks.builders import bert_tokenizer, write_corpus

    tokenizer = tmp_path / "tokenizer.json"
    bert_tokenizer().save(str(tokenizer))
    rows = [(f"good {i} fine", None, "pos") if i % 2 else (f"bad {i} awful", None, "neg") for i in range(12)]
    tasks = {
        "translation": {"corpus": [str(parallel_corpus / "train")], "valid": [str(parallel_corpus / "valid")],
                        "src_lang": "de", "tgt_lang": "en", "src_tokenizer": str(parallel_corpus / "joint.model"),
                        "tgt_tokenizer": str(parallel_corpus / "joint.model"), "d_model": 32, "d_ff": 64,
                        "eval_sentences": 4, "batch_size": 8},
        "classification": {"corpus": [str(write_corpus(tmp_path / "train.tsv", rows, "tsv"))],
                           "valid": [str(write_corpus(tmp_path / "valid.tsv", rows[:6], "tsv"))],
                           "tokenizer": str(tokenizer), "batch_size": 4, "lr": 1e-3}}
    for name, options in tasks.items():
        recorder = Recorder()
        summary = train_task(name, {**options, "out": tmp_path / name, "steps": 2, "eval_every": 1,
                                    "device": "cpu"}, TrainHooks(callbacks=[recorder]))
        assert recorder.logged == read_log(tmp_path / name), name
        assert recorder.evaluated == [(0, True), (1, True), (2, True)], name
        assert recorder.ended == 1 and summary["steps"] == 2


def test_callbacks_end_even_when_the_run_fails(tmp_path: Path, sp_model: Path, train_corpus: Path) -> None:
    class Failing(Recorder):
        def on_log(self, record: dict[str, Any]) -> None:
            super().on_log(record)
            if record["step"] == 1:
                raise RuntimeError("tracker down")

    failing = Failing()
    with pytest.raises(RuntimeError, match="tracker down"):
        train_task("lm", {"corpus": [str(train_corpus)], "tokenizer": str(sp_model), "out": tmp_path / "f",
                          "steps": 4, "seq_len": 32, "batch_size": 8, "device": "cpu"},
                   TrainHooks(callbacks=[failing]))
    assert failing.ended == 1 and [r["step"] for r in failing.logged] == [0, 1]
    assert not (tmp_path / "f").exists()      # no saved state: the new run's directory is removed


def test_keep_best_saves_only_scheduled_improvements() -> None:
    saved: list[int] = []
    keep = KeepBest(BestCheckpoint("val_loss"), saved.append)
    events = Events([keep], is_main=True)
    for step, loss, scheduled in ((0, 3.0, True), (1, 2.0, False), (2, 2.5, True), (3, 1.0, True), (4, 1.5, True)):
        events.evaluated(step, {"val_loss": loss}, scheduled)
    events.evaluated(5, {}, True)          # a task without a validation set: no callback sees it
    assert saved == [0, 2, 3] and keep.best.step == 3 and keep.best.value == 1.0


def test_log_records_reach_callbacks_on_rank_0_only() -> None:
    recorder = Recorder()
    Events([recorder], is_main=False).logged({"step": 0, "loss": 1.0})
    Events([recorder], is_main=True).logged({"step": 1, "loss": 1.0})
    assert [r["step"] for r in recorder.logged] == [1]
