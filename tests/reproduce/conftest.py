"""Tiny data for the recipes' smoke scale, built here (no download): parallel pairs with a joint
SentencePiece model (000-fig2/3), a labelled SST-2-form corpus with a tiny BERT folder (002-table1)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.conftest import english_like_lines, reversed_words, train_sentencepiece


@pytest.fixture(scope="session")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """train (160 pairs), valid (16) and test (16) as PREFIX.de / PREFIX.en (the target: the source's
    words reversed) and joint.model, a SentencePiece BPE model of both sides."""
    folder = tmp_path_factory.mktemp("pairs")
    lines = english_like_lines(192, seed=11, unicode=False)
    for split, part in (("train", lines[:160]), ("valid", lines[160:176]), ("test", lines[176:])):
        (folder / f"{split}.de").write_text("\n".join(part) + "\n", encoding="utf-8")
        (folder / f"{split}.en").write_text("\n".join(reversed_words(s) for s in part) + "\n", encoding="utf-8")
    model = train_sentencepiece(folder, lines + [reversed_words(s) for s in lines], 400)
    model.rename(folder / "joint.model")
    return folder


def translation_data(folder: Path, test: bool = True) -> list[str]:
    """000-fig2's --data arguments for the `pairs` folder (000-fig3: without the test set)."""
    roles = ["train", "valid", *(["test"] if test else [])]
    return [arg for role in roles for arg in ("--data", f"{role}={folder / role}")] + \
        ["--data", f"tokenizer={folder / 'joint.model'}"]


@pytest.fixture(scope="session")
def sst2(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An SST-2-form corpus (sentence, label; the label decided by which half of the words a sentence
    uses) in train.tsv (64) and dev.tsv (24), and a tiny random BERT folder (hidden 16)."""
    from tests.tasks.builders import WORDS, encoder_folder, write_corpus

    folder = tmp_path_factory.mktemp("sst2")
    rng = random.Random(5)

    def rows(n: int) -> list[tuple[str, None, str]]:
        out = []
        for _ in range(n):
            label = rng.choice(["0", "1"])
            out.append((" ".join(rng.choices(WORDS[:20] if label == "0" else WORDS[20:40], k=6)), None, label))
        return out

    return {"train": write_corpus(folder / "train.tsv", rows(64), "tsv"),
            "valid": write_corpus(folder / "dev.tsv", rows(24), "tsv"),
            "bert": encoder_folder(folder / "bert", "bert")}
