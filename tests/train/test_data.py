"""Data pipeline: documents, split, training-unigram counts, blocks, the exact data order."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from nbcli.errors import ConfigError, CorpusError
from nbcli.tokenizers import load_tokenizer
from nbcli.train.data import BlockStream, TrainSampler, tokenize_corpus


def test_counts_are_the_training_stream_unigrams(sp_model: Path, train_corpus: Path) -> None:
    tok = load_tokenizer(sp_model)
    data = tokenize_corpus([str(train_corpus)], tok, "clm", 0.1)
    lines = [line for line in train_corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    # independent computation: encode each document alone, documents 9, 19, ... are validation
    expected_train, expected_val = [], []
    for i, line in enumerate(lines):
        doc = tok.encode(line) + [tok.eos_id]
        (expected_val if i % 10 == 9 else expected_train).extend(doc)
    assert data.documents == len(lines)
    np.testing.assert_array_equal(data.train, expected_train)
    np.testing.assert_array_equal(data.val, expected_val)
    np.testing.assert_array_equal(data.counts, np.bincount(expected_train, minlength=tok.vocab_size))


def test_mlm_documents_get_bos_which_is_not_counted(sp_model: Path, tmp_path: Path) -> None:
    tok = load_tokenizer(sp_model)
    corpus = tmp_path / "c.txt.gz"
    with gzip.open(corpus, "wt", encoding="utf-8") as handle:
        handle.write("the model.\n\n  \nthe bias of the model.\nthird one\n")
    data = tokenize_corpus([str(corpus)], tok, "mlm", 0.3)  # every 3rd document to validation
    assert data.documents == 3
    assert data.train[0] == tok.bos_id and data.val[0] == tok.bos_id
    assert data.counts[tok.bos_id] == 0 and data.counts[tok.eos_id] == 2
    assert data.counts.sum() == len(data.train) - 2


def test_jsonl_documents_and_bad_lines(sp_model: Path, tmp_path: Path) -> None:
    tok = load_tokenizer(sp_model)
    good = tmp_path / "d.jsonl"
    good.write_text('{"text": "the model"}\n{"text": "a bias"}\n')
    assert tokenize_corpus([str(good)], tok, "clm", 0.4).documents == 2
    bad = tmp_path / "e.jsonl"
    bad.write_text('{"text": "ok"}\n{"txt": 1}\n')
    with pytest.raises(CorpusError, match=r"e\.jsonl:2"):
        tokenize_corpus([str(bad)], tok, "clm", 0.4)


def test_blocks_clm_shift_and_padded_partial_block() -> None:
    tokens = np.arange(1, 24, dtype=np.int32)          # 23 tokens
    stream = BlockStream(tokens, 5, "clm", pad_id=0, name="val", allow_partial=True)
    assert stream.n_full == 4 and stream.n_blocks == 5
    x, y, n = stream.block(0)
    assert list(x) == [1, 2, 3, 4, 5] and list(y) == [2, 3, 4, 5, 6] and n == 5
    x, y, n = stream.block(4)
    assert n == 2 and list(x) == [21, 22, 0, 0, 0] and list(y) == [22, 23, -100, -100, -100]
    batch = stream.batch([3, 4], device="cpu")
    assert batch.lengths.tolist() == [5, 2]
    assert stream.batch([0, 1], device="cpu").lengths is None
    with pytest.raises(ConfigError, match="fewer than one block"):
        BlockStream(tokens[:5], 5, "clm", pad_id=0, name="training")


def test_sampler_is_a_pure_function_of_seed_and_index() -> None:
    a = TrainSampler(7, seed=3)
    order = a.blocks(0, 21)
    assert sorted(order[:7]) == list(range(7)) and sorted(order[7:14]) == list(range(7))
    assert TrainSampler(7, seed=3).blocks(10, 5) == order[10:15]
    assert TrainSampler(7, seed=4).blocks(0, 7) != order[:7]
