"""The run directory: refusals before anything is written, the log truncated on resume, a failed new run cleaned up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nbcli.errors import ConfigError, OutputError
from nbcli.train.config import build_config
from nbcli.train.rundir import check_run_directory, read_log, removed_on_failure, truncate_log


def test_refusals_name_the_directory(tmp_path: Path, sp_model: Path, train_corpus: Path) -> None:
    cfg = build_config("tiny")
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="exists and is not a directory"):
        check_run_directory(tmp_path / "file", cfg, [str(train_corpus)], sp_model, False)
    with pytest.raises(OutputError, match="lies in this run directory"):
        check_run_directory(train_corpus.parent, cfg, [str(train_corpus)], sp_model, False)
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(ConfigError, match="config.json not found"):
        check_run_directory(run, cfg, [str(train_corpus)], sp_model, True)
    (run / "log.jsonl").write_text('{"step": 0}\n')
    with pytest.raises(OutputError, match="already holds a run"):
        check_run_directory(run, cfg, [str(train_corpus)], sp_model, False)
    (run / "config.json").write_text(json.dumps({**cfg.to_dict(), "lr": cfg.lr * 2}))
    with pytest.raises(ConfigError, match="options differ"):
        check_run_directory(run, cfg, [str(train_corpus)], sp_model, True)


def test_truncate_log_keeps_the_steps_before(tmp_path: Path) -> None:
    (tmp_path / "log.jsonl").write_text("".join(json.dumps({"step": s, "loss": 1.0 / (s + 1)}) + "\n"
                                                for s in range(5)))
    truncate_log(tmp_path / "log.jsonl", 3)
    assert [r["step"] for r in read_log(tmp_path)] == [0, 1, 2]


def test_a_failed_new_run_removes_only_what_it_created(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(RuntimeError), removed_on_failure(tmp_path, resume=False):
        (tmp_path / "log.jsonl").write_text("")
        (tmp_path / "step-1.safetensors").write_bytes(b"")
        raise RuntimeError("boom")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]
    fresh = tmp_path / "fresh"
    with pytest.raises(RuntimeError), removed_on_failure(fresh, resume=False):
        fresh.mkdir()
        (fresh / "config.json").write_text("{}")
        raise RuntimeError("boom")
    assert not fresh.exists()
    with pytest.raises(RuntimeError), removed_on_failure(tmp_path, resume=False):  # a saved state stays
        (tmp_path / "train-state.json").write_text("{}")
        raise RuntimeError("boom")
    assert (tmp_path / "train-state.json").exists()
