"""The shell completion scripts in completions/ are what the app generates, and they work."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from nbcli.cli import app
from nbcli.cli.completions import SCRIPTS

COMPLETIONS = Path(__file__).resolve().parents[2] / "completions"


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_completion_scripts_are_current(name: str) -> None:
    expected = SCRIPTS[name](app)
    assert (COMPLETIONS / name).read_text() == expected, (
        f"completions/{name} is out of date: run `python -m nbcli.cli.completions completions`"
    )


def _bash_complete(words: list[str]) -> list[str]:
    script = (f"source {COMPLETIONS / 'nb.bash'}; COMP_WORDS=({' '.join(words)}); "
              f"COMP_CWORD={len(words) - 1}; _nb; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout
    return [w for w in out.splitlines() if w]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completion_completes_commands_and_options() -> None:
    assert "count-unigrams" in _bash_complete(["nb", "cou"])
    assert _bash_complete(["nb", "count-unigrams", "--tok"]) == ["--tokenizer"]
    assert "--json" in _bash_complete(["nb", "merge-counts", "--"])
