"""A line over NB_MAX_LINE_MB, counted in pieces where the family's chunk rule allows (issue 21):
the counts equal those of the line counted whole, in every tokenizer family with a segmenter."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from nbcli.corpus import LineTooLong
from nbcli.counting.blocks import CountOptions
from nbcli.counting.long_lines import last_cut
from nbcli.counting.run import count_corpus
from nbcli.tokenizers import load_tokenizer

FAMILIES = ["sp_model", "sp_llama2_model", "hf_bytelevel_json", "hf_bert_json",
            "hf_llama3_json", "hf_qwen2_json", "hf_o200k_json", "hf_gpt2_prefix_json"]


def _long_line(seed: int, size: int) -> bytes:
    """Words, punctuation, digits, runs of spaces and tabs, non-ASCII text: ~`size` bytes."""
    rng = random.Random(seed)
    words = ["the", "Frequency", "of", "tokens", "naïve", "café", "2024", "x1", "don't", "(see", "it)", "—", "東京",
             "a,b", "...", "end.", "\tTab", "  two", "   three", "e-mail", "O'Neil", "\u00a0nbsp", "ünï", "42%"]
    out: list[str] = []
    total = 0
    while total < size:
        word = rng.choice(words)
        out.append(word)
        total += len(word.encode()) + 1
    return " ".join(out).encode()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("long") / "c.txt"
    path.write_bytes(b"a short first line\n" + _long_line(1, 2_600_000) + b"\nmiddle line\n"
                     + _long_line(2, 1_300_000) + b"\r\nlast line without newline")
    return path


@pytest.mark.parametrize("family", FAMILIES)
def test_a_long_line_counts_as_it_would_whole(family: str, corpus: Path, request: pytest.FixtureRequest,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    tokenizer = load_tokenizer(request.getfixturevalue(family))
    if tokenizer.segmenter is None:
        pytest.fail(f"{family}: expected a family with a chunk rule")
    monkeypatch.setenv("NB_MAX_LINE_MB", "16")
    whole = count_corpus([str(corpus)], tokenizer, CountOptions(), workers=1)
    monkeypatch.setenv("NB_MAX_LINE_MB", "1")  # both long lines are over it
    pieces = count_corpus([str(corpus)], tokenizer, CountOptions(), workers=1)
    assert np.array_equal(pieces.counts, whole.counts)
    assert pieces.documents == whole.documents == 5
    assert pieces.bytes_read == whole.bytes_read == corpus.stat().st_size


@pytest.mark.parametrize("family, chunked", [("sp_unigram_model", True), ("sp_model", False)])
def test_where_a_family_must_encode_whole_documents_the_line_is_refused(
        family: str, chunked: bool, corpus: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A unigram SentencePiece model's chunks are exact only under a per-line certificate (its
    segmentation sees the whole line), and --no-chunk-cache asks for whole documents: the line over
    the cap is refused there."""
    monkeypatch.setenv("NB_MAX_LINE_MB", "1")
    tokenizer = load_tokenizer(request.getfixturevalue(family))
    assert (tokenizer.chunk_rule == "sp-unigram-certified") == chunked
    with pytest.raises(LineTooLong, match=r"c\.txt:2: line is longer than 1 MB"):
        count_corpus([str(corpus)], tokenizer, CountOptions(chunked=chunked, unigram_certificate=True), workers=1)


def test_a_line_with_nowhere_to_cut_is_refused(tmp_path: Path, sp_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(b"ok\n" + b"x," * 1_500_000 + b"\n")  # 3 MB, no space at all
    monkeypatch.setenv("NB_MAX_LINE_MB", "1")
    with pytest.raises(LineTooLong, match=r"c\.txt:2:"):
        count_corpus([str(corpus)], load_tokenizer(sp_model), CountOptions(), workers=1)


def test_last_cut_is_a_space_between_a_printable_byte_and_a_letter() -> None:
    assert last_cut(b"ab cd ef") == 5
    assert last_cut(b"ab  cd") == 0  # a run of two spaces: the first follows no printable byte's cut rule
    assert last_cut(b"ab 12 ") == 0
    assert last_cut(b"\xc3\xa9 cd") == 0  # after a non-ASCII character: not cut
