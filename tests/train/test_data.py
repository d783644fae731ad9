"""Data pipeline: documents, split, training-unigram counts, blocks, the exact data order."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from nbcli.errors import ConfigError, CorpusError
from nbcli.tokenizers import load_tokenizer
from nbcli.train.data import BlockStream, TrainSampler, block_prefix, never_predicted, tokenize_corpus


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


def test_mlm_counts_only_what_mlm_predicts_and_blocks_start_with_bos(sp_model: Path, tmp_path: Path) -> None:
    tok = load_tokenizer(sp_model)
    corpus = tmp_path / "c.txt.gz"
    with gzip.open(corpus, "wt", encoding="utf-8") as handle:
        handle.write("the model.\n\n  \nthe bias of the model.\nthird one\n")
    data = tokenize_corpus([str(corpus)], tok, "mlm", 0.3)  # every 3rd document to validation
    assert data.documents == 4  # the whitespace-only line is a document, as count-unigrams counts it
    docs = [tok.encode_batch([t])[0] + [tok.eos_id] for t in ("the model.", "  ", "third one")]
    np.testing.assert_array_equal(data.train, np.concatenate(docs))          # documents end with EOS
    specials = never_predicted(tok)
    assert {tok.bos_id, tok.eos_id} <= specials
    predicted = [i for i in data.train.tolist() if i not in specials]
    np.testing.assert_array_equal(data.counts, np.bincount(predicted, minlength=tok.vocab_size))
    assert data.counts[tok.eos_id] == 0 and data.counts[tok.bos_id] == 0
    clm = tokenize_corpus([str(corpus)], tok, "clm", 0.3)
    assert clm.counts[tok.eos_id] == 3                                         # CLM predicts EOS
    # RoBERTa blocks: <s> then T-1 stream tokens, every block
    prefix = block_prefix(tok, "mlm")
    assert prefix == tok.bos_id and block_prefix(tok, "clm") is None
    stream = BlockStream(data.train, 4, "mlm", pad_id=0, name="t", allow_partial=True, prefix=prefix)
    for b in range(stream.n_blocks):
        x, y, n = stream.block(b)
        assert x[0] == tok.bos_id
        assert list(x[1:n]) == data.train[3 * b:3 * b + n - 1].tolist()


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
    mlm = BlockStream(tokens, 5, "mlm", pad_id=0, name="val", allow_partial=True, prefix=99)
    assert mlm.n_full == 5 and mlm.n_blocks == 6                     # 23 tokens, 4 a block
    assert list(mlm.block(1)[0]) == [99, 5, 6, 7, 8] and mlm.block(1)[2] == 5
    x, y, n = mlm.block(5)
    assert n == 4 and list(x) == [99, 21, 22, 23, 0] and list(y) == [99, 21, 22, 23, -100]


def test_sampler_is_a_pure_function_of_seed_and_index() -> None:
    a = TrainSampler(7, seed=3)
    order = a.blocks(0, 21)
    assert sorted(order[:7]) == list(range(7)) and sorted(order[7:14]) == list(range(7))
    assert TrainSampler(7, seed=3).blocks(10, 5) == order[10:15]
    assert TrainSampler(7, seed=4).blocks(0, 7) != order[:7]
