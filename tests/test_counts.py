"""The counts file format, merging, and the one smoothing formula."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from nbcli.counts import (
    UnigramCounts, counts_tsv, log_unigram, merge_counts, merge_counts_files, pad_counts, parse_smoothing, read_counts,
    unigram_entropy, write_counts,
)
from nbcli.errors import ConfigError, CountsError, OutputError

counts_arrays = arrays(np.int64, st.integers(1, 60), elements=st.integers(0, 10**9))


@settings(max_examples=200, deadline=None)
@given(counts=counts_arrays, k=st.floats(min_value=1e-6, max_value=10))
def test_log_unigram_matches_hand_computation(counts: np.ndarray, k: float) -> None:
    expected = [math.log((int(c) + k) / (int(counts.sum()) + k * len(counts))) for c in counts]
    got = log_unigram(counts, k)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    assert np.all(np.isfinite(got))
    assert math.isclose(float(np.exp(got).sum()), 1.0, rel_tol=1e-9)


def test_log_unigram_k0_refuses_zeros() -> None:
    np.testing.assert_allclose(log_unigram(np.array([1, 3]), 0.0), np.log([0.25, 0.75]))
    with pytest.raises(ConfigError, match="-inf"):
        log_unigram(np.array([0, 3]), 0.0)


@given(counts=counts_arrays, extra=st.integers(0, 20))
def test_pad_counts_appends_zero_rows_and_refuses_longer_counts(counts: np.ndarray, extra: int) -> None:
    padded = pad_counts(counts, counts.size + extra)
    assert padded.dtype == np.int64 and padded.shape == (counts.size + extra,)
    np.testing.assert_array_equal(padded[:counts.size], counts)
    assert not padded[counts.size:].any()
    with pytest.raises(CountsError, match="another tokenizer"):
        pad_counts(counts, counts.size - 1)


def test_parse_smoothing() -> None:
    assert parse_smoothing("add-k:0.5") == 0.5
    for bad in ("laplace", "add-k:x", "add-k:-1", "add-k:nan"):
        with pytest.raises(ConfigError):
            parse_smoothing(bad)


@given(counts=counts_arrays)
def test_entropy_matches_scipy(counts: np.ndarray) -> None:
    from scipy.stats import entropy

    expected = float(entropy(counts.astype(float))) if counts.sum() > 0 else 0.0
    assert math.isclose(unigram_entropy(counts), expected, rel_tol=1e-9, abs_tol=1e-12)


def _file(tmp_path: Path, name: str, counts: list[int], sha: str = "a" * 64, extra: dict | None = None) -> Path:
    path = tmp_path / name
    write_counts(path, UnigramCounts(np.array(counts, dtype=np.int64),
                                     {"nb.tokenizer_sha256": sha, "nb.vocab_size": str(len(counts)),
                                      "nb.documents": "1", "nb.bytes_read": "10", **(extra or {})}))
    return path


def test_roundtrip_and_merge(tmp_path: Path) -> None:
    a = read_counts(_file(tmp_path, "a.safetensors", [1, 0, 5]))
    b = read_counts(_file(tmp_path, "b.safetensors", [2, 2, 0]))
    assert a.is_nb_file and a.tokenizer_sha256 == "a" * 64
    merged = merge_counts([a, b])
    np.testing.assert_array_equal(merged.counts, [3, 2, 5])
    assert merged.metadata["nb.documents"] == "2"
    with pytest.raises(CountsError, match="vocab size 2 differs"):
        merge_counts([a, read_counts(_file(tmp_path, "c.safetensors", [1, 1]))])
    with pytest.raises(CountsError, match=r"tokenizer .*sha256 bbbbbbbbbbbb.* differs from .*sha256 aaaaaaaaaaaa"):
        merge_counts([a, read_counts(_file(tmp_path, "d.safetensors", [1, 1, 1], sha="b" * 64))])


def test_merge_accepts_a_resaved_tokenizer_and_refuses_another(tmp_path: Path) -> None:
    """Counts made with a re-saved copy of the tokenizer (other sha256, same fingerprint) merge."""
    fp = {"nb.tokenizer_fingerprint": "nbtok1:" + "c" * 64}
    a = read_counts(_file(tmp_path, "a.safetensors", [1, 0, 5], extra=fp))
    b = read_counts(_file(tmp_path, "b.safetensors", [2, 2, 0], sha="b" * 64, extra=fp))
    merged = merge_counts([a, b])
    assert merged.tokenizer_fingerprint == fp["nb.tokenizer_fingerprint"] and merged.total == 10
    other = read_counts(_file(tmp_path, "o.safetensors", [1, 1, 1], sha="e" * 64,
                              extra={"nb.tokenizer_fingerprint": "nbtok1:" + "d" * 64}))
    with pytest.raises(CountsError, match="differs"):
        merge_counts([a, other])
    with pytest.raises(CountsError, match="none recorded"):
        merge_counts([a, UnigramCounts(np.ones(3, dtype=np.int64), {}, tmp_path / "f.safetensors")])


def test_foreign_and_bad_files(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    foreign = tmp_path / "foreign.safetensors"
    save_file({"counts": np.array([1, 2, 3], dtype=np.int32)}, str(foreign))
    with pytest.raises(CountsError, match="expected 'unigram-counts/1'"):
        read_counts(foreign)
    assert read_counts(foreign, allow_foreign=True).counts.dtype == np.int64
    other = tmp_path / "weights.safetensors"
    save_file({"w": np.zeros(3, dtype=np.float32)}, str(other))
    with pytest.raises(CountsError, match="no 'counts' tensor"):
        read_counts(other, allow_foreign=True)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a safetensors file at all")
    with pytest.raises(CountsError, match="junk.safetensors: not a safetensors counts file"):
        read_counts(junk)


def test_tsv(tmp_path: Path) -> None:
    text = counts_tsv(np.array([3, 0, 1]), ["a", "tab\there", "c"], 1.0)
    rows = [line.split("\t") for line in text.splitlines()[2:]]
    assert [r[0] for r in rows] == ["0", "1", "2"]
    assert rows[1][1] == "tab\\there"
    assert math.isclose(float(rows[1][3]), math.log(1 / 7), rel_tol=1e-8)


def test_merge_counts_files_writes_the_sum_and_reports_it(tmp_path: Path) -> None:
    inputs = [_file(tmp_path, "a.safetensors", [1, 0, 5]), _file(tmp_path, "b.safetensors", [2, 2, 0])]
    report = merge_counts_files(inputs, tmp_path / "m.safetensors")
    assert report == {"output": str(tmp_path / "m.safetensors"), "inputs": [str(p) for p in inputs], "tokens": 10,
                      "vocab_size": 3, "tokenizer_sha256": "a" * 64, "tokenizer_fingerprint": None}
    np.testing.assert_array_equal(read_counts(tmp_path / "m.safetensors").counts, [3, 2, 5])
    before = inputs[0].read_bytes()
    with pytest.raises(OutputError, match="same file as the input"):
        merge_counts_files(inputs, inputs[0])
    assert inputs[0].read_bytes() == before
    bad = _file(tmp_path, "c.safetensors", [1, 1])
    with pytest.raises(CountsError, match="vocab size 2 differs"):
        merge_counts_files([inputs[0], bad], tmp_path / "n.safetensors")
    assert not (tmp_path / "n.safetensors").exists()
