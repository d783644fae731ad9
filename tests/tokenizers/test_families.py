"""Each tokenizer family's segmenter against the tokenizer library's own encoding, bit for bit.

For every family (fixtures in tests/conftest.py, built with the family's published settings), counts
made through the segmenter (text lines on the byte and str paths, JSONL documents with newlines, tabs
and CRs inside) equal the counts of the library encoding each document alone, with no special tokens,
no padding and no truncation.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import RAW_DOC_LINES
import nbcli.counting.blocks as blocks
from nbcli.counting import BlockCounter, CountOptions
from nbcli.errors import CorpusError
from nbcli.tokenizers import load_tokenizer
from tests.tokenizers.test_loader import ADVERSARIAL, library_encoder

# What real text holds and chunk rules trip on: runs of spaces, tabs, CR/LF (inside JSONL fields),
# Unicode spaces, digits, characters outside the vocabulary (byte fallback), CJK, emoji, combining
# marks, punctuation before line breaks, literal "▁", trailing spaces, very long words.
RAW = ADVERSARIAL + [
    "  ", "   ", "    ", "        ", "\t\t", "\n", "\n\n", "\r\n", ".\n", "!\r\n", ":\n  ", "\u0301\n",
    "\u0958\n", "क़", "12345", "2024-05-01", "3.14", "日本語のテキスト", "🎉🎉", "👩\u200d💻", "a\u0308\u0301",
    "\u2581", "\u2581 ", " \u2581", "x" * 120, "supercalifragilistic" * 3, "def f(x):", "    return", "# ",
    "==", "->", "...", "'ll", "'S", "don't", "ｆｕｌｌ", "ﬁ", "\u00a0\u00a0", "\u3000",
]
raw_text = st.lists(st.sampled_from(RAW), min_size=0, max_size=30).map("".join)

FAMILIES = {
    # fixture: the segmenter it must get
    "sp_model": "sp",
    "sp_llama2_model": "sp-space-runs",
    "sp_unigram_model": "sp-unigram-certified",
    "hf_bytelevel_json": "bytelevel",
    "hf_gpt2_prefix_json": "bytelevel",
    "hf_llama3_json": "split-regex",
    "hf_qwen2_json": "split-regex",
    "hf_o200k_json": "split-regex",
    "hf_bert_json": "whitespace",
    "hf_bert_hub_json": "whitespace",
    "hf_metaspace_unigram_json": "metaspace",
    "hf_metaspace_runs_json": "metaspace-runs",
    "hf_prepend_runs_json": "prepend-runs",
}


def _reference(path: Path, documents: list[str], size: int) -> np.ndarray:
    encode = library_encoder(path)
    reference = np.zeros(size, dtype=np.int64)
    for doc in documents:
        np.add.at(reference, np.asarray(encode(doc), dtype=np.int64), 1)
    return reference


@contextlib.contextmanager
def small_slices(size: int = 61) -> Iterator[None]:
    """Key blocks in slices of `size` bytes (SLICE_BYTES), so that small test blocks take the
    many-slice path (keys merged across slices, dirty lines found slice by slice)."""
    old = blocks.SLICE_BYTES
    blocks.SLICE_BYTES = size
    try:
        yield
    finally:
        blocks.SLICE_BYTES = old


def assert_exact(path: Path, documents: list[str]) -> None:
    """Counts through the segmenter == the library's own encoding of each document, for the text
    format (documents without line breaks, byte path where the family has one) and JSONL."""
    tok = load_tokenizer(path)
    assert tok.segmenter is not None, tok.method_reason
    counter = BlockCounter(tok, CountOptions(eos=False, unigram_certificate=True))
    lines = [d for d in (d.replace("\n", " ").replace("\r", " ") for d in documents) if d]
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    as_text = counter.count_block("raw.txt", data, 1, 0)
    np.testing.assert_array_equal(as_text.counts, _reference(path, lines, tok.vocab_size))
    with small_slices():
        sliced = BlockCounter(tok, CountOptions(eos=False, unigram_certificate=True)).count_block("raw.txt", data, 1, 0)
    np.testing.assert_array_equal(sliced.counts, as_text.counts)
    assert sliced.documents == as_text.documents == len(lines)
    jsonl = "".join(json.dumps({"text": d}) + "\n" for d in documents).encode("utf-8")
    as_jsonl = BlockCounter(tok, CountOptions(eos=False, unigram_certificate=True, format="jsonl")).count_block("raw.jsonl", jsonl, 1, 0)
    np.testing.assert_array_equal(as_jsonl.counts, _reference(path, [d for d in documents if d], tok.vocab_size))


@pytest.mark.parametrize("fixture", list(FAMILIES))
def test_family_gets_its_segmenter(fixture: str, request: pytest.FixtureRequest) -> None:
    tok = load_tokenizer(request.getfixturevalue(fixture))
    assert tok.chunk_rule == FAMILIES[fixture], tok.method_reason


@pytest.mark.parametrize("fixture", list(FAMILIES))
@settings(max_examples=60, deadline=None)
@given(documents=st.lists(raw_text, min_size=1, max_size=6))
def test_family_counts_equal_the_library(fixture: str, documents: list[str], request: pytest.FixtureRequest) -> None:
    assert_exact(request.getfixturevalue(fixture), documents)


@pytest.mark.parametrize("fixture", list(FAMILIES))
def test_family_exact_on_indented_raw_text(fixture: str, request: pytest.FixtureRequest) -> None:
    cases = RAW_DOC_LINES + [
        "   leading", "trailing   ", " ", "   ", "a  b   c    d", "word \t word", "end.\nnext", "x.\r\ny",
        "a\u2581 b", "\u2581\u2581x", "list:\n    - item\n    - item  \n", "é\n", "\u0958\nqa", "9\n\n\n",
    ]
    assert_exact(request.getfixturevalue(fixture), cases)


def test_whole_document_families_say_why(tmp_path: Path, sp_unigram_model: Path, hf_llama3_json: Path) -> None:
    kept_spaces = tmp_path / "kept-spaces.model"  # NormalizerSpec.remove_extra_whitespaces = false (merged)
    kept_spaces.write_bytes(sp_unigram_model.read_bytes() + b"\x1a\x02\x20\x00")
    tok = load_tokenizer(kept_spaces)
    assert tok.segmenter is None and "unigram" in tok.method_reason
    config = json.loads(hf_llama3_json.read_text())
    config["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\s+|\S+"  # not a known regex
    other = tmp_path / "tokenizer.json"
    other.write_text(json.dumps(config))
    tok = load_tokenizer(other)
    assert tok.segmenter is None and "unrecognised regex" in tok.method_reason


def test_space_run_vocabulary_checked(tmp_path: Path, hf_metaspace_runs_json: Path) -> None:
    """A whole-text BPE whose vocabulary holds a piece across a space run's start gets no rule."""
    config = json.loads(hf_metaspace_runs_json.read_text())
    config["model"]["vocab"]["a\u2581b"] = len(config["model"]["vocab"])
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(config))
    tok = load_tokenizer(path)
    assert tok.segmenter is None and "spans the start of a space run" in tok.method_reason


# Lines the byte path must hand to the str path, among lines it counts itself.
DIRTY_LINES = [b"bad \xff\xfe byte", b"crlf line\r", b"lone \r cr", "nbsp\u00a0here".encode(),
               "ideographic\u3000space".encode(), "literal \u2581 metaspace".encode(), b"truncated \xc3"]


@pytest.mark.parametrize("fixture", list(FAMILIES))
@settings(max_examples=25, deadline=None)
@given(picks=st.lists(st.tuples(st.booleans(), st.integers(0, 10**6)), min_size=1, max_size=40))
def test_dirty_lines_among_clean_lines(fixture: str, picks: list[tuple[bool, int]], request: pytest.FixtureRequest) -> None:
    """A block mixing clean lines with lines the byte rule cannot cut (invalid UTF-8, CR, Unicode
    spaces, a literal '▁') counts as the library encodes each line, CRLF read as a line end and
    invalid bytes replaced; the --strict error names the first bad line's number."""
    path = request.getfixturevalue(fixture)
    tok = load_tokenizer(path)
    clean = [line.encode() for line in RAW_DOC_LINES if line]
    lines = [(DIRTY_LINES if dirty else clean)[i % len(DIRTY_LINES if dirty else clean)] for dirty, i in picks]
    data = b"\n".join(lines) + b"\n"
    result = BlockCounter(tok, CountOptions(eos=False, unigram_certificate=True)).count_block("mixed.txt", data, 1, 0)
    texts = [t for t in (line.decode("utf-8", errors="replace").removesuffix("\r") for line in lines) if t]
    np.testing.assert_array_equal(result.counts, _reference(path, texts, tok.vocab_size))
    bad = [n for n, line in enumerate(lines, 1) if b"\xff" in line or line.endswith(b"\xc3")]
    assert (result.documents, result.bad_utf8_lines) == (len(texts), len(bad))
    with small_slices():
        sliced = BlockCounter(tok, CountOptions(eos=False, unigram_certificate=True)).count_block("mixed.txt", data, 1, 0)
    np.testing.assert_array_equal(sliced.counts, result.counts)
    assert (sliced.documents, sliced.bad_utf8_lines) == (len(texts), len(bad))
    if bad:
        for size in (blocks.SLICE_BYTES, 61):
            with small_slices(size), pytest.raises(CorpusError, match=rf"^mixed.txt:{bad[0] + 6}: invalid UTF-8"):
                BlockCounter(tok, CountOptions(strict=True, unigram_certificate=True)).count_block("mixed.txt", data, 7, 0)


# Code and prose where letters, digits, punctuation and apostrophes meet (the byte path's cuts
# between ASCII classes), with some non-ASCII letters next to them.
CODE_PIECES = list("aZq09_'\"().,:;!?-+*/=<>[]{}#@$%&|\\^`~ ") + [
    "'s", "'T", "'re", "'ll", "don't", "x1", "1x", "x.y", "3.14", "a,b", "f(x)", "->", "==", "...",
    "é", "ß", "日", "٣", "\u0301", "\t", "  ", "ǅ", "Ⅻ", "<s>", "</s>", "<unk>", "<|endoftext|>", "[SEP]",
]
code_text = st.lists(st.sampled_from(CODE_PIECES), min_size=1, max_size=40).map("".join)


@pytest.mark.parametrize("fixture", list(FAMILIES))
@settings(max_examples=60, deadline=None)
@given(documents=st.lists(code_text, min_size=1, max_size=8))
def test_family_exact_where_classes_meet(fixture: str, documents: list[str], request: pytest.FixtureRequest) -> None:
    assert_exact(request.getfixturevalue(fixture), documents)


@pytest.mark.parametrize("fixture", ["sp_model", "sp_llama2_model", "hf_bytelevel_json", "hf_llama3_json",
                                     "hf_qwen2_json", "hf_o200k_json", "hf_bert_json", "hf_metaspace_runs_json"])
def test_byte_path_cuts_inside_chunks(fixture: str, request: pytest.FixtureRequest) -> None:
    """The families with cuts inside chunks make them on code-like text (so the exactness tests above
    exercise those cuts), and the parts tile each chunk's bytes."""
    tok = load_tokenizer(request.getfixturevalue(fixture))
    assert tok.segmenter is not None
    data = b"f(x)=g.h[1]+x2, y:z; call(foo) x.y\n"
    starts, ends, _ = tok.segmenter.spans(data)
    assert len(starts) > len(data.split()), (fixture, starts, ends)
    assert all(a < b for a, b in zip(starts, ends)) and all(e <= s for e, s in zip(ends, starts[1:]))
