"""count_to_file: `nb count-unigrams` as one core function (guard, count, write, summary)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nbcli.counting import CountOptions, count_corpus, count_to_file
from nbcli.counts import read_counts
from nbcli.errors import OutputError
from nbcli.tokenizers import load_tokenizer
from tests.conftest import english_like_lines


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n".join(english_like_lines(40, seed=5)) + "\n", encoding="utf-8")
    return path


def test_counts_written_equal_the_count_and_the_report(tmp_path: Path, sp_model: Path, corpus: Path) -> None:
    seen: list[int] = []
    report, counts = count_to_file([str(corpus)], sp_model, tmp_path / "c.safetensors", tmp_path / "c.tsv",
                                   CountOptions(), smoothing_k=0.5, workers=1,
                                   progress=lambda n, total: seen.append(n))
    expected = count_corpus([str(corpus)], load_tokenizer(sp_model), CountOptions(), workers=1).counts
    np.testing.assert_array_equal(counts.counts, expected)
    on_disk = read_counts(tmp_path / "c.safetensors")
    np.testing.assert_array_equal(on_disk.counts, expected)
    assert on_disk.metadata["nb.options"].count("add-k:0.5") == 1
    assert report["tokens"] == int(expected.sum()) and report["documents"] == 40
    assert report["output"] == str(tmp_path / "c.safetensors") and report["tsv"] == str(tmp_path / "c.tsv")
    assert len((tmp_path / "c.tsv").read_text().splitlines()) >= len(expected)
    assert sum(seen) == corpus.stat().st_size


def test_outputs_are_checked_before_anything_is_read(tmp_path: Path, sp_model: Path, corpus: Path) -> None:
    before = corpus.read_bytes()
    with pytest.raises(OutputError, match="same file as the input"):
        count_to_file([str(corpus)], sp_model, corpus, None, CountOptions(), workers=1)
    with pytest.raises(OutputError, match="same file as the output"):
        count_to_file([str(corpus)], sp_model, tmp_path / "c.safetensors", tmp_path / "c.safetensors", CountOptions())
    assert corpus.read_bytes() == before and not (tmp_path / "c.safetensors").exists()
