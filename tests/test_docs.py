"""Every command is documented in README and has --help with examples; --help stays light."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import typer

from nbcli import __version__
from nbcli.cli import app
from tests.cli.helpers import invoke

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def _command_names() -> list[str]:
    group = typer.main.get_command(app)
    ctx = group.make_context("nb", [], resilient_parsing=True)
    return list(group.list_commands(ctx))


@pytest.mark.parametrize("command", _command_names())
def test_command_has_help_with_examples(command: str) -> None:
    result = invoke(command, "--help")
    assert result.exit_code == 0
    assert "Examples" in result.stdout and f"nb {command}" in result.stdout


@pytest.mark.parametrize("command", _command_names())
def test_command_documented_in_readme(command: str) -> None:
    assert f"## nb {command}" in README


def test_readme_setup_commands_match_ci() -> None:
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    for command in ("sh install.sh", "python3 -m pytest -q"):
        assert command in README and command in ci


def test_version() -> None:
    result = invoke("--version")
    assert result.stdout.strip() == f"nb {__version__}"


def test_help_does_not_import_heavy_modules() -> None:
    """--help of every command stays fast: no torch/numpy, and no pydantic (typer's coercion of an
    absent --help flag pulled it in, ~0.1 s, until the flag got a boolean default)."""
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom nbcli.cli import app\n"
            f"for args in [['--help']] + [[name, '--help'] for name in {_command_names()!r}]:\n"
            "    assert CliRunner().invoke(app, args).exit_code == 0\n"
            "names = [n for n in sys.modules if n.split('.')[0] in "
            "('torch', 'numpy', 'sentencepiece', 'matplotlib', 'pydantic')]\n"
            "print(','.join(sorted(names)))")
    heavy = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert heavy == ""
