"""Counting equals an independent count; any worker count, compression or cluster gives the same."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import english_like_lines
from nbcli.counting import CountOptions, count_corpus
from nbcli.errors import CorpusError
from nbcli.tokenizers import load_tokenizer


def _corpus_bytes(seed: int = 3) -> bytes:
    """Unicode, empty lines, CRLF endings, a 1 MB line, and no trailing newline."""
    rng = random.Random(seed)
    lines = english_like_lines(3000, seed=seed)
    for i in rng.sample(range(len(lines)), 300):
        lines[i] = ""
    long_line = " ".join(english_like_lines(20000, seed=seed + 1))[:1_000_000]
    lines.insert(1500, long_line)
    parts = []
    for line in lines:
        parts.append(line.encode() + (b"\r\n" if rng.random() < 0.3 else b"\n"))
    return b"".join(parts) + "last line without newline ünïcödé".encode()


def _reference_counts(model: Path, data: bytes, eos: bool = True) -> np.ndarray:
    """Independent count: sentencepiece directly, one document per line, collections.Counter."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(model))
    counter: Counter[int] = Counter()
    for raw in data.split(b"\n"):
        line = raw.decode("utf-8")
        if line.endswith("\r"):
            line = line[:-1]
        if not line:
            continue
        counter.update(sp.encode(line))
        if eos:
            counter[sp.eos_id()] += 1
    counts = np.zeros(sp.get_piece_size(), dtype=np.int64)
    for token, n in counter.items():
        counts[token] = n
    return counts


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    data = _corpus_bytes()
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_bytes(data)
    return path, data


@pytest.fixture(scope="module")
def reference(sp_model: Path, corpus: tuple[Path, bytes]) -> np.ndarray:
    return _reference_counts(sp_model, corpus[1])


def test_counts_equal_independent_count(sp_model: Path, corpus: tuple[Path, bytes], reference: np.ndarray) -> None:
    tok = load_tokenizer(sp_model)
    result = count_corpus([str(corpus[0])], tok, workers=1)
    np.testing.assert_array_equal(result.counts, reference)
    assert result.documents == int(reference[tok.eos_id])
    assert result.bytes_read == len(corpus[1])


@pytest.mark.parametrize("workers", [2, 7])
def test_same_counts_for_any_worker_count(sp_model: Path, corpus: tuple[Path, bytes], reference: np.ndarray,
                                          workers: int, monkeypatch: pytest.MonkeyPatch) -> None:
    import nbcli.corpus.text

    monkeypatch.setattr(nbcli.corpus.text, "MIN_RANGE_BYTES", 4096)  # many ranges, cutting lines everywhere
    result = count_corpus([str(corpus[0])], load_tokenizer(sp_model), workers=workers)
    assert result.counts.dtype == np.int64
    np.testing.assert_array_equal(result.counts, reference)


@pytest.mark.parametrize("suffix,compress", [
    (".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress),
    (".zst", lambda b: __import__("zstandard").ZstdCompressor().compress(b)),
])
def test_each_compression_format(tmp_path: Path, sp_model: Path, corpus: tuple[Path, bytes],
                                 reference: np.ndarray, suffix: str, compress: object) -> None:
    path = tmp_path / f"corpus.txt{suffix}"
    path.write_bytes(compress(corpus[1]))  # type: ignore[operator]
    result = count_corpus([str(path)], load_tokenizer(sp_model), workers=2)
    np.testing.assert_array_equal(result.counts, reference)


def test_whole_document_mode_agrees(sp_model: Path, corpus: tuple[Path, bytes], reference: np.ndarray) -> None:
    result = count_corpus([str(corpus[0])], load_tokenizer(sp_model), CountOptions(chunked=False), workers=1)
    np.testing.assert_array_equal(result.counts, reference)
    assert result.method == "whole documents"


def test_eos_bos_flags(tmp_path: Path, sp_model: Path) -> None:
    tok = load_tokenizer(sp_model)
    path = tmp_path / "c.txt"
    path.write_text("one two\n\nthree\n")
    plain = count_corpus([str(path)], tok, CountOptions(eos=False), workers=1)
    both = count_corpus([str(path)], tok, CountOptions(eos=True, bos=True), workers=1)
    assert plain.counts[tok.eos_id] == 0 and plain.counts[tok.bos_id] == 0
    assert both.counts[tok.eos_id] == 2 and both.counts[tok.bos_id] == 2
    np.testing.assert_array_equal(both.counts - plain.counts,
                                  np.bincount([tok.eos_id, tok.bos_id] * 2, minlength=tok.vocab_size))


def test_jsonl_field(tmp_path: Path, sp_model: Path) -> None:
    tok = load_tokenizer(sp_model)
    docs = ["first document\nwith a newline", "second  one", "ünïcödé"]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"body": d, "id": i}) + "\n" for i, d in enumerate(docs)))
    result = count_corpus([str(path)], tok, CountOptions(format="jsonl", field="body"), workers=1)
    expected = np.bincount([i for d in docs for i in tok.encode(d)] + [tok.eos_id] * 3, minlength=tok.vocab_size)
    np.testing.assert_array_equal(result.counts, expected)


def test_jsonl_bad_lines(tmp_path: Path, sp_model: Path) -> None:
    tok = load_tokenizer(sp_model)
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "good"}\nnot json\n{"other": 1}\n[1, 2]\n{"text": 5}\n{"text": "fine"}\n')
    with pytest.raises(CorpusError, match=r"bad.jsonl:2: not valid JSON"):
        count_corpus([str(path)], tok, CountOptions(format="jsonl"), workers=1)
    path.write_text('{"text": "good"}\n{"other": 1}\n')
    with pytest.raises(CorpusError, match=r"bad.jsonl:2: no field 'text'"):
        count_corpus([str(path)], tok, CountOptions(format="jsonl"), workers=2)
    path.write_text('{"text": "good"}\nnot json\n{"other": 1}\n[1, 2]\n{"text": 5}\n{"text": "fine"}\n')
    result = count_corpus([str(path)], tok, CountOptions(format="jsonl", skip_bad_lines=True), workers=1)
    assert result.skipped_lines == 4 and result.documents == 2


def test_invalid_utf8_is_replaced_and_reported(tmp_path: Path, sp_model: Path) -> None:
    tok = load_tokenizer(sp_model)
    path = tmp_path / "bad.txt"
    path.write_bytes(b"good line\nbad \xff\xfe line\nalso good\nbad again \xc3\n")
    result = count_corpus([str(path)], tok, workers=1)
    assert result.bad_utf8_lines == 2 and result.documents == 4
    expected = _reference_counts_text(tok, ["good line", "bad \ufffd\ufffd line", "also good", "bad again \ufffd"])
    np.testing.assert_array_equal(result.counts, expected)
    with pytest.raises(CorpusError, match=r"bad.txt:2: invalid UTF-8"):
        count_corpus([str(path)], tok, CountOptions(strict=True), workers=2)


def _reference_counts_text(tok: object, docs: list[str]) -> np.ndarray:
    ids = [i for d in docs for i in tok.encode(d)] + [tok.eos_id] * len(docs)  # type: ignore[attr-defined]
    return np.bincount(ids, minlength=tok.vocab_size)  # type: ignore[attr-defined]


def test_empty_corpus_is_an_error(tmp_path: Path, sp_model: Path) -> None:
    path = tmp_path / "empty.txt"
    path.write_text("\n\n\r\n")
    with pytest.raises(CorpusError, match="empty corpus"):
        count_corpus([str(path)], load_tokenizer(sp_model), workers=1)


def test_hf_tokenizer_counts(tmp_path: Path, hf_bytelevel_json: Path) -> None:
    tok = load_tokenizer(hf_bytelevel_json)
    lines = english_like_lines(500, seed=9) + ["  spaces   everywhere  ", "\ttabs\tand\u3000ideographic"]
    path = tmp_path / "c.txt"
    path.write_text("\n".join(lines) + "\n")
    result = count_corpus([str(path)], tok, workers=2)
    np.testing.assert_array_equal(result.counts, _reference_counts_text(tok, lines))


@pytest.mark.slow
def test_dask_local_cluster(sp_model: Path, corpus: tuple[Path, bytes], reference: np.ndarray,
                            tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed", reason="the [dask] extra is not installed")
    import pyarrow as pa
    import pyarrow.parquet as pq

    gz = tmp_path / "more.txt.gz"
    gz.write_bytes(gzip.compress(corpus[1]))
    parquet = tmp_path / "same.parquet"  # the same documents, a row each, in row groups read by the Dask workers
    lines = [line for line in corpus[1].decode("utf-8").replace("\r\n", "\n").split("\n") if line]
    pq.write_table(pa.table({"text": lines}), parquet, row_group_size=max(1, len(lines) // 3))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        result = count_corpus([str(corpus[0]), str(gz), str(parquet)], load_tokenizer(sp_model),
                              dask_address=cluster.scheduler_address)
    np.testing.assert_array_equal(result.counts, 3 * reference)


def _punctuated_corpus(seed: int = 5) -> bytes:
    """LF-only text (the numpy byte path), rich in punctuation, with long, mid and short parts."""
    rng = random.Random(seed)
    marks = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + ["<br>", "::", "a.b", "...", "é,", "🙂."]
    lines = []
    for line in english_like_lines(1500, seed=seed):
        words = [w + rng.choice(marks) * rng.randint(0, 3) if rng.random() < 0.4 else w for w in line.split(" ")]
        if rng.random() < 0.1:
            words.append("".join(rng.choice(marks) for _ in range(rng.randint(8, 40))))  # > 15 bytes
        lines.append(" ".join(words))
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize("cache_limit", [None, 50, 7])
def test_byte_path_with_cut_parts_is_exact(tmp_path: Path, sp_bpe_punct_model: Path, cache_limit: int | None,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks cut into parts (SentencePieceWords.cut_table) on the byte path, with the chunk table full after a
    few entries (it drops its less used half, and parts beyond the limit are encoded and counted without
    being kept): still the exact count, and the table never holds more than the limit."""
    import nbcli.counting.blocks

    if cache_limit is not None:
        monkeypatch.setattr(nbcli.counting.blocks, "CACHE_LIMIT", cache_limit)
    data = _punctuated_corpus()
    assert b"\r" not in data
    path = tmp_path / "punct.txt"
    path.write_bytes(data)
    tok = load_tokenizer(sp_bpe_punct_model)
    assert tok.segmenter.cut_table() is not None
    result = count_corpus([str(path)], tok, workers=1)
    np.testing.assert_array_equal(result.counts, _reference_counts(sp_bpe_punct_model, data))
    if cache_limit is not None:
        counter = nbcli.counting.BlockCounter(tok, CountOptions())
        total, start = np.zeros_like(result.counts), 0
        while start < len(data):  # many blocks: the table fills and is purged again and again
            end = data.find(b"\n", start + 2000) + 1 or len(data)
            total += counter.count_block(str(path), data[start:end], None, start).counts
            assert counter.table.size <= cache_limit
            assert len(counter.table.index) + len(counter.table.short) + len(counter.table.mid) == counter.table.size
            start = end
        np.testing.assert_array_equal(total, result.counts)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["u8", "S16"]),
       st.lists(st.lists(st.integers(0, 40), max_size=12), min_size=1, max_size=8),
       st.lists(st.integers(0, 60), max_size=20), st.integers(0, 2**32))
def test_sorted_keys_behave_as_a_dict(kind: str, batches: list[list[int]], queries: list[int], seed: int) -> None:
    """SortedKeys (the chunk table's index of short parts) against a dict: adds, lookups, renumbering."""
    from nbcli.counting.table import SortedKeys

    def keys_of(values: list[int]) -> np.ndarray:
        raw = np.array(values, dtype=np.uint64)
        if kind == "u8":
            return raw * np.uint64(0x9E3779B97F4A7C15)  # spread over the whole range
        pairs = np.zeros((raw.shape[0], 2), dtype=np.uint64)
        pairs[:, 1] = raw  # equal high words, trailing zero bytes: S16 must still tell keys apart
        return pairs.view("S16").ravel()

    index, model, row = SortedKeys(np.uint64 if kind == "u8" else "S16"), {}, 0
    for batch in batches:
        fresh = [v for v in dict.fromkeys(batch) if v not in model]
        index.add(keys_of(fresh), np.arange(row, row + len(fresh)))
        model.update({v: row + i for i, v in enumerate(fresh)})
        row += len(fresh)
    assert index.lookup(keys_of(queries)).tolist() == [model.get(v, -1) for v in queries]
    new_row = np.random.default_rng(seed).integers(-1, 5, size=max(row, 1))
    index.renumber(new_row)
    expected = {v: int(new_row[r]) for v, r in model.items() if new_row[r] >= 0}
    assert index.lookup(keys_of(queries)).tolist() == [expected.get(v, -1) for v in queries]
    assert len(index) == len(expected)


def rss_kb() -> int:
    """This process's resident memory in kB (Linux /proc)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmRSS from Linux /proc")
def test_a_full_size_chunk_table_costs_memory_only_as_it_fills() -> None:
    """The table's arrays are sized for 2^20 parts up front (no doubling copies) in pages the
    system fills on first write: creating one must not add their ~34 MB to the RSS."""
    from nbcli.counting.blocks import CACHE_LIMIT
    from nbcli.counting.table import ChunkTable

    before = rss_kb()
    table = ChunkTable(CACHE_LIMIT)
    assert table.ids.nbytes + table.starts.nbytes + table.lengths.nbytes + table.hits.nbytes > 30_000_000
    assert rss_kb() - before < 4_000
    table.add(["a", "b"], [[1, 2], [3]])
    assert table.ids[:4].tolist() == [1, 2, 3, 0] and table.rows(["b", "c"]).tolist() == [2, -1]


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmRSS from Linux /proc")
def test_freed_heap_goes_back_before_workers_fork() -> None:
    """What a tokenizer load frees (many small objects) stays in glibc's heap until trimmed; the
    parent trims before forking, so workers do not each count it in their RSS."""
    from nbcli.counting.run import release_free_heap

    junk, survivors = [], []
    for i in range(150_000):  # ~150 MB from malloc (not pymalloc), every 16th object kept
        junk.append(b"x" * 1000 + bytes([i % 256]))
        if i % 16 == 0:
            survivors.append(b"k" * 1000 + bytes([i % 256]))
    del junk  # freed between survivors: glibc keeps it in the heap
    held = rss_kb()
    assert release_free_heap()
    assert rss_kb() < held - 60_000, (held, rss_kb())
    assert len(survivors) == 9375

