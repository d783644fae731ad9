"""Shared valid inputs for the fuzz suite (the figure printed at the end of the run: tests/conftest.py,
which gathers it from every pytest-xdist worker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fuzz import cases, inputs


@pytest.fixture(scope="session")
def fuzz_shared(tmp_path_factory: pytest.TempPathFactory, sp_model: Path, hf_bytelevel_json: Path) -> dict[str, Path]:
    """{SP}, {HF}, {CORPUS}, {CKPT}, {COUNTS}: valid inputs every case may read (and must not change)."""
    root = tmp_path_factory.mktemp("fuzz-shared")
    corpus = root / "corpus.txt"
    corpus.write_bytes(cases.CORPUS_TEXT)
    ckpt = root / "model.safetensors"
    ckpt.write_bytes(inputs.valid_checkpoint())
    counts = root / "counts.safetensors"
    counts.write_bytes(inputs.valid_counts())
    cases.HF_BYTES["hf"] = hf_bytelevel_json.read_bytes()
    return {"SP": sp_model, "HF": hf_bytelevel_json, "CORPUS": corpus, "CKPT": ckpt, "COUNTS": counts}


@pytest.fixture(scope="session")
def fuzz_run(tmp_path_factory: pytest.TempPathFactory, fuzz_shared: dict[str, Path]) -> None:
    """A training run stopped at step 2 of 4 with its state saved; resume cases damage a copy."""

    from tests.cli.helpers import run_cli

    out = tmp_path_factory.mktemp("fuzz-run") / "run"
    args = ["train", "--corpus", str(fuzz_shared["CORPUS"]), "-t", str(fuzz_shared["SP"]), "--out", str(out),
            *cases.TRAIN_FAST, *cases.RUN_STEPS, "--stop-at", "2"]
    result = run_cli(args)
    assert result.exit_code == 0, result.output
    cases.RUN_FILES.update({p.name: p.read_bytes() for p in out.iterdir() if p.is_file()})
    assert "train-state.json" in cases.RUN_FILES and "step-2.safetensors" in cases.RUN_FILES
