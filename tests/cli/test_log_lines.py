"""Progress off a terminal (issue 43): a long job under nohup or a batch system writes a progress
line to stderr every --log-every updates (or every NB_LOG_SECONDS seconds), and nothing with --quiet."""

from __future__ import annotations

import re
from pathlib import Path

from nbcli.cli.console import log_lines
from tests.cli.helpers import run_nb


def test_lines_every_n_steps_with_count_share_and_eta(capsys, monkeypatch) -> None:
    monkeypatch.setenv("NB_LOG_SECONDS", "0")
    update = log_lines("training", 10, every=4)
    for _ in range(10):
        update(1, status="loss 1.000")
    lines = capsys.readouterr().err.splitlines()
    assert [re.match(r"nb: training: (\S+) ", line).group(1) for line in lines] == ["4/10", "8/10", "10/10"]
    assert "(40.0 %) loss 1.000" in lines[0] and "ETA" in lines[0] and "ETA" not in lines[-1]


def test_no_lines_when_neither_every_nor_seconds(capsys, monkeypatch) -> None:
    monkeypatch.setenv("NB_LOG_SECONDS", "0")
    update = log_lines("scoring", 5, every=None)
    for _ in range(5):
        update(1)
    assert capsys.readouterr().err == ""


def test_nb_train_off_a_terminal(tmp_path: Path, sp_model: Path, sample_lines: list[str]) -> None:
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(sample_lines[:200]) + "\n")
    common = ["train", "--corpus", corpus, "-t", sp_model, "--steps", "6", "--eval-every", "3", "--batch-size", "4",
              "--seq-len", "16"]
    result = run_nb(*common, "--out", tmp_path / "a", "--log-every", "2")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.decode().splitlines() if line.startswith("nb: training:")]
    assert [line.split()[2] for line in lines] == ["2/6", "4/6", "6/6"], result.stderr
    assert all("loss" in line and "tok/s" in line for line in lines)
    assert "val_loss" in lines[1]  # the evaluation at step 3 is in the next line's status
    quiet = run_nb(*common, "--out", tmp_path / "b", "--log-every", "2", "--quiet")
    assert quiet.returncode == 0 and not any(line.startswith(b"nb: training:") for line in quiet.stderr.splitlines())
