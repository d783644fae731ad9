"""--threads on every command that computes (nbcli.threads): one definition, honoured inside the command
(torch's and the BLAS pool's counts while the core runs), restored after; nb train records it
(tests/train/test_cli.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from nbcli.errors import ConfigError
from nbcli.threads import MAX_THREADS, THREADS_HELP, check_threads
from tests.cli.helpers import invoke

COMPUTING = ("train lm", "train translation", "train classification", "translate", "predict", "generate", "eval", "analogy", "embedding-stats", "attention-maps",
             "patch-checkpoint", "transplant-embeddings", "probe-bias")


@pytest.mark.parametrize("command", COMPUTING)
def test_every_computing_command_has_the_one_threads_option(command: str) -> None:
    result = invoke(*command.split(), "--help")
    assert result.exit_code == 0, result.output
    flowed = " ".join(result.stdout.split())
    assert "--threads N" in flowed and " ".join(THREADS_HELP.split()) in flowed, command


def test_bounds() -> None:
    assert check_threads(3) == 3 and check_threads(None) >= 1
    for bad in (0, -1, MAX_THREADS + 1, True, 1.5):
        with pytest.raises(ConfigError, match="--threads"):
            check_threads(bad)  # type: ignore[arg-type]
    result = invoke("analogy", "v.txt", "--questions", "q.txt", "--threads", "0")
    assert result.exit_code == 2 and "--threads" in result.stderr


def _seen_threads() -> tuple[int, list[int]]:
    from threadpoolctl import threadpool_info

    return torch.get_num_threads(), [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]


def test_analogy_computes_on_its_threads_and_restores_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import nbcli.vectors.analogy as analogy
    from tests.vectors.writers import write

    words = ["man", "king", "woman", "queen", "apple"]
    vectors = write(tmp_path / "v.txt", "glove", words, np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32))
    (tmp_path / "q.txt").write_text(": royal\nman king woman queen\n")
    seen: list[tuple[int, list[int]]] = []
    real = analogy.analogy_report
    monkeypatch.setattr(analogy, "analogy_report", lambda *a, **k: (seen.append(_seen_threads()), real(*a, **k))[1])
    before = _seen_threads()
    for threads in (["--threads", "1"], []):
        result = invoke("analogy", vectors, "--questions", tmp_path / "q.txt", "--json", *threads)
        assert result.exit_code == 0, result.output
        assert _seen_threads() == before                                   # restored
    assert seen[0][0] == 1 and all(n == 1 for n in seen[0][1])             # torch and BLAS, inside the command
    assert seen[1] == before                                               # no --threads: as the libraries start

