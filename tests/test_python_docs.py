"""docs/python.md's examples run: every ```python block, in order, in one namespace, in an empty
directory (a block may use what an earlier one made)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

pytest.importorskip("transformers")  # in the test extras; never skipped in CI

DOC = Path(__file__).resolve().parents[1] / "docs" / "python.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL | re.MULTILINE)


def test_the_page_has_examples() -> None:
    assert len(BLOCKS) >= 6
    for name in ("count_unigrams", "probe", "patch", "evaluate", "generate", "train_model", "inspect"):
        assert any(f"nbcli.{name}(" in block for block in BLOCKS), name


@pytest.mark.slow
def test_examples_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    namespace: dict[str, object] = {"__name__": "docs_python"}
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        for i, block in enumerate(BLOCKS, 1):
            exec(compile(block, f"{DOC.name} block {i}", "exec"), namespace)  # noqa: S102
    finally:
        os.chdir(cwd)
    assert "Spearman rho" in capsys.readouterr().out
