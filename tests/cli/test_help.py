"""Help and tables read whole at 80 columns (the width of a pipe or a narrow terminal)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
import typer.main

from nbcli.cli import app
from tests.cli.helpers import run_cli
from tests.checkpoint.builders import save

COMMANDS = [[]] + [[name] for name in typer.main.get_command(app).commands]
BANNED = ("…", "<bool>", "<int", "<float", "<list", "<path>", "<text>", "{IN}", "[x>=", "[x<=")


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "nb")
def test_help_reads_whole_at_80_columns(command: list[str]) -> None:
    result = run_cli([*command, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    text = result.stdout
    for line in text.splitlines():
        assert len(line) <= 80, line
    for banned in BANNED:
        assert banned not in text, banned
    params = typer.main.get_command(app).commands[command[0]].params if command else []
    for param in params:  # every option name appears whole
        for name in getattr(param, "opts", []) + getattr(param, "secondary_opts", []):
            if name.startswith("-"):
                assert name in text.replace("\n", " "), name


def test_help_examples_copy_and_paste_and_markup_brackets_stay() -> None:
    text = run_cli(["probe-bias", "--help"], env={"COLUMNS": "80"}).stdout
    assert "pip install 'nbcli[plot]'" in " ".join(text.split())
    assert "[bold]" not in text and "[/]" not in text
    lines = text.splitlines()
    for i, line in enumerate(lines):  # a continued example line ends with a backslash
        if line.startswith("  nb ") and i + 1 < len(lines) and lines[i + 1].startswith("      ") and \
                not lines[i + 1].strip().startswith("nb "):
            assert line.endswith(" \\"), line
    train = run_cli(["train", "--help"], env={"COLUMNS": "80"}).stdout
    joined = train.replace("\\\n", "")
    stop = next(line for line in joined.splitlines() if "--stop-at" in line and line.strip().startswith("nb train"))
    resume = next(line for line in joined.splitlines() if "--resume" in line and line.strip().startswith("nb train"))
    assert " ".join(stop.replace("--stop-at 100", "").split()) == " ".join(resume.replace("--resume", "").split())


def test_help_subprocess_at_80_columns() -> None:
    env = {**os.environ, "COLUMNS": "80"}
    proc = subprocess.run(["nb", "patch-checkpoint", "--help"], capture_output=True, env=env, timeout=60)
    assert proc.returncode == 0
    text = proc.stdout.decode()
    assert "--standardise-embeddings" in text and "--remove-frequency-direction" in text
    assert "--no-hash-inputs" in text and "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_patch_table_does_not_cut_tensor_names(tmp_path: Path) -> None:
    name = "model.decoder.layers.final_output_projection.really_long_bias_name"
    src = save(tmp_path / "m.safetensors", {"wte.weight": torch.randn(40, 8), "ln_f.weight": torch.ones(8),
                                            "ln_f.bias": torch.randn(8), name: torch.randn(40)})
    result = run_cli(["patch-checkpoint", str(src), "--dry-run", "--rescale-w", "fro",
                                      "--map", f"output_bias={name}"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout
    assert all(len(line) <= 80 for line in result.stdout.splitlines())
    inspect = run_cli(["inspect", str(src)], env={"COLUMNS": "80"})
    assert inspect.exit_code == 0 and "…" not in inspect.stdout
    first_column = "".join(line.split("│")[1].strip() for line in inspect.stdout.splitlines()
                           if line.startswith("│") and len(line.split("│")) > 2)
    assert name in first_column  # folded over lines, never cut


def test_quickstart_json_output_is_a_path_or_null() -> None:
    result = run_cli(["quickstart", "--json", "-j", "1"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["output"] is None
