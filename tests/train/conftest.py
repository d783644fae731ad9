"""Fixtures for `nb train` tests: a generated corpus file next to the session's tiny SentencePiece model."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def train_corpus(tmp_path_factory: pytest.TempPathFactory, sample_lines: list[str]) -> Path:
    path = tmp_path_factory.mktemp("train-corpus") / "corpus.txt"
    path.write_text("\n".join(sample_lines) + "\n", encoding="utf-8")
    return path
