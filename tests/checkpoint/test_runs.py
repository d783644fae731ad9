"""A run directory read back: its saved steps and THE checkpoint it stands for (best, else last step)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbcli.checkpoint.runs import BEST, is_run_directory, run_checkpoint, saved_steps
from nbcli.errors import CheckpointError


def test_saved_steps_are_the_step_files_by_number(tmp_path: Path) -> None:
    for name in ("step-10.safetensors", "step-2.safetensors", "step-x.safetensors", "train-state.safetensors"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "step-3.safetensors").mkdir()
    assert list(saved_steps(tmp_path)) == [2, 10]


def test_a_run_stands_for_its_best_checkpoint_else_its_last_step(tmp_path: Path) -> None:
    for name in ("step-2.safetensors", "step-10.safetensors", "counts.safetensors"):
        (tmp_path / name).write_bytes(b"")
    assert is_run_directory(tmp_path) and run_checkpoint(tmp_path) == tmp_path / "step-10.safetensors"
    (tmp_path / BEST).write_bytes(b"")
    assert run_checkpoint(tmp_path) == tmp_path / BEST
    (tmp_path / "step-10.safetensors").unlink()
    (tmp_path / "step-2.safetensors").unlink()
    assert is_run_directory(tmp_path) and run_checkpoint(tmp_path) == tmp_path / BEST


def test_a_file_is_itself_and_a_folder_without_checkpoints_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "model.safetensors"
    file.write_bytes(b"")
    assert run_checkpoint(file) == file and not is_run_directory(tmp_path) and not is_run_directory(file)
    with pytest.raises(CheckpointError, match=f"{tmp_path}: no best.safetensors or step-N.safetensors"):
        run_checkpoint(tmp_path)
