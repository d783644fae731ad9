"""The pairs a translation run reports: train_pairs and valid_pairs as used (long pairs skipped), in
summary.json and --json, against a count of a tiny parallel corpus made here by its own rules (a
line blank on both sides is no pair; a pair with a side over --max-len is skipped; without --valid
every round(1/F)-th pair, 0-based, is held out), with a --valid file and with the held-out split."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from nbcli.tasks.registry import get_task
from tests.cli.helpers import invoke
from tests.cli.test_train_translation import FAST

MAX_LEN = 24
LONG_WORDS = 60   # a side of 60 words has more than 24 pieces whatever the tokenizer (a piece per word at most)


def write_pairs(folder: Path, name: str, n: int, seed: int, words: list[str]) -> list[tuple[str, str]]:
    """PREFIX.de / PREFIX.en with `n` lines: short pairs, some with a long source or target, some blank
    on both sides; the pairs as written (blank ones included)."""
    rng = random.Random(seed)
    pairs = []
    for i in range(n):
        kind = rng.choice(["short"] * 6 + ["long-src", "long-tgt", "blank"])
        short = lambda: " ".join(rng.choice(words) for _ in range(rng.randint(1, 4)))  # noqa: E731
        long = " ".join(rng.choice(words) for _ in range(LONG_WORDS))
        pairs.append(("", "") if kind == "blank" else (long if kind == "long-src" else short(),
                                                      long if kind == "long-tgt" else short()))
    for side, lang in ((0, "de"), (1, "en")):
        (folder / f"{name}.{lang}").write_text("".join(p[side] + "\n" for p in pairs), encoding="utf-8")
    return pairs


def count(pairs: list[tuple[str, str]], held_out_every: int | None = None) -> tuple[int, int, int]:
    """(pairs read, kept for training, kept for validation) by the rules of the module doc."""
    read = [p for p in pairs if p[0] or p[1]]
    fits = [len(p[0].split()) < LONG_WORDS and len(p[1].split()) < LONG_WORDS for p in read]
    if held_out_every is None:
        return len(read), sum(fits), 0
    valid = [i % held_out_every == held_out_every - 1 for i in range(len(read))]
    return (len(read), sum(f for f, v in zip(fits, valid) if not v), sum(f for f, v in zip(fits, valid) if v))


@pytest.mark.parametrize("held_out", [False, True])
def test_train_and_valid_pairs_are_the_pairs_used(tmp_path: Path, parallel_corpus: Path, held_out: bool) -> None:
    words = (parallel_corpus / "train.de").read_text(encoding="utf-8").split()[:200]
    train = write_pairs(tmp_path, "train", 90, 1, words)
    valid = [] if held_out else write_pairs(tmp_path, "valid", 23, 2, words)
    args = ["train", "--task", "translation", "--corpus", tmp_path / "train", "--src-lang", "de", "--tgt-lang", "en",
            "-t", parallel_corpus / "joint.model", "--max-len", str(MAX_LEN), "--out", tmp_path / "run", "--json",
            *FAST, *(["--val-fraction", "0.2"] if held_out else ["--valid", tmp_path / "valid"])]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    reported, summary = json.loads(result.stdout), json.loads((tmp_path / "run" / "summary.json").read_text())
    if held_out:
        read, train_kept, valid_kept = count(train, held_out_every=5)
    else:
        (read, train_kept, _), (read_valid, valid_kept, _) = count(train), count(valid)
        read += read_valid
    assert 0 < valid_kept and 0 < train_kept < read                  # the corpus has long pairs on either split
    for got in (reported, summary):
        assert (got["train_pairs"], got["valid_pairs"]) == (train_kept, valid_kept)
        assert got["pairs"] == read and got["skipped_long_pairs"] == read - train_kept - valid_kept
    view = dict(get_task("translation").summary_view(summary).rows)
    assert view["training / validation pairs used"] == f"{train_kept} / {valid_kept}"
