"""Word vectors against a tokenizer's vocabulary (nbcli.vectors.vocabulary): whole-word pieces, the
embedding of `--embedding-init pretrained:VECTORS` (case rule, coverage, --missing) and a checkpoint's
embedding read as word vectors."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from nbcli.checkpoint.writer import save_tensors
from nbcli.errors import ConfigError
from nbcli.tokenizers import load_tokenizer
from nbcli.transplant import xavier_rows
from nbcli.vectors.reader import is_vector_file
from nbcli.vectors.vocabulary import checkpoint_vectors, piece_words, vector_embedding
from tests.vectors.writers import FORMATS, write

TEXTS = ["The cat sat on the mat .", "the dog sat on the cat .", "Berlin is big , the cat is small ."]


@pytest.fixture()
def words_tok():  # noqa: ANN201
    return load_tokenizer("words:min-freq=1", texts=lambda: iter(TEXTS))


def vectors_of(words: list[str], d: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(len(words), d)).astype(np.float32)


def test_word_level_pieces_are_words_and_specials_are_not(words_tok) -> None:  # noqa: ANN001
    words = piece_words(words_tok)
    assert words[:4] == [None] * 4
    assert words[4:] == words_tok.pieces()[4:]


def test_subword_families_keep_word_start_pieces(sp_model: Path, hf_bytelevel_json: Path, hf_bert_json: Path) -> None:
    """A word-start piece's word is what the tokenizer's own decoder makes of it (the space dropped)."""
    for path, marker in ((sp_model, "\u2581"), (hf_bytelevel_json, "\u0120")):
        tok = load_tokenizer(path)
        words = piece_words(tok)
        for i, piece in enumerate(tok.pieces()):
            if i in tok.special_ids or not piece.startswith(marker):
                assert words[i] is None, piece
            elif words[i] is not None:
                assert tok.decode([i]).strip() == words[i], piece
        assert sum(w is not None for w in words) > 10
    bert = load_tokenizer(hf_bert_json)
    words = piece_words(bert)
    for i, piece in enumerate(bert.pieces()):
        if piece.startswith("##") or i in bert.special_ids:
            assert words[i] is None
        elif not piece.startswith("["):
            assert words[i] == piece


@pytest.mark.parametrize("kind", FORMATS)
def test_rows_are_the_words_vectors_by_the_case_rule(tmp_path: Path, words_tok, kind: str) -> None:  # noqa: ANN001
    vocab = ["the", "cat", "sat", "berlin", "The", "zebra", "."]         # 'Berlin' only lower-cased; 'The' exact
    x = vectors_of(vocab, 6)
    path = write(tmp_path / f"v.{kind}", kind, vocab, x, compress="gzip" if kind == "word2vec-binary" else None)
    emb, cov = vector_embedding(path, words_tok, 6, "xavier", seed=3)
    pieces = words_tok.pieces()
    where = {w: i for i, w in enumerate(vocab)}
    expected_hits = 0
    for i, piece in enumerate(pieces):
        j = None if i < 4 else where.get(piece, where.get(piece.lower()))
        if j is not None:
            expected_hits += 1
            assert torch.allclose(emb[i], torch.from_numpy(x[j])), piece
    assert torch.equal(emb[pieces.index("The")], torch.from_numpy(x[where["The"]]))
    assert torch.equal(emb[pieces.index("Berlin")], torch.from_numpy(x[where["berlin"]]))
    assert cov["matched"] == expected_hits and cov["matched_lowercased"] == 1
    assert cov["words"] == len(pieces) - 4 and cov["initialised"] == len(pieces) - expected_hits
    assert math.isclose(cov["matched_fraction"], expected_hits / (len(pieces) - 4))
    missing = [i for i, p in enumerate(pieces) if i < 4 or (p not in where and p.lower() not in where)]
    assert torch.equal(emb[missing], xavier_rows(len(missing), 6, len(pieces), 3))


def test_missing_mean_and_one_line_errors(tmp_path: Path, words_tok) -> None:  # noqa: ANN001
    vocab = ["cat", "dog", "unused"]
    x = vectors_of(vocab, 4)
    path = write(tmp_path / "v.txt", "glove", vocab, x)
    emb, _ = vector_embedding(path, words_tok, 4, "mean")
    kept_mean = torch.from_numpy(x[:2].astype(np.float64).mean(0).astype(np.float32))   # only the vocabulary's rows
    assert torch.allclose(emb[0], kept_mean)
    with pytest.raises(ConfigError, match="dimension 4 but the model's d_model is 8"):
        vector_embedding(path, words_tok, 8)
    with pytest.raises(ConfigError, match="--missing neighbours"):
        vector_embedding(path, words_tok, 4, "neighbours")  # type: ignore[arg-type]


def test_vector_files_are_told_from_checkpoints(tmp_path: Path) -> None:
    x = vectors_of(["a", "b"], 3)
    for kind in FORMATS:
        assert is_vector_file(write(tmp_path / kind, kind, ["a", "b"], x))
    assert is_vector_file(write(tmp_path / "g.gz", "glove", ["a", "b"], x, compress="gzip"))
    save_tensors(tmp_path / "m.safetensors", {"w": torch.zeros(2, 3)}, {})
    assert not is_vector_file(tmp_path / "m.safetensors")
    assert not is_vector_file(tmp_path) and not is_vector_file(tmp_path / "absent")
    (tmp_path / "prose.txt").write_text("just some words\n")
    assert is_vector_file(tmp_path / "prose.txt")       # named as GloVe ships: the vector reader refuses it
    (tmp_path / "prose.weights").write_text("just some words\n")
    assert not is_vector_file(tmp_path / "prose.weights")
    (tmp_path / "pytorch_model.bin").write_bytes(b"PK\x03\x04torch.save zip")
    assert not is_vector_file(tmp_path / "pytorch_model.bin")   # a checkpoint (refused: never unpickled)


def test_checkpoint_rows_as_word_vectors(tmp_path: Path, words_tok) -> None:  # noqa: ANN001
    V = words_tok.vocab_size
    rows = torch.randn(V, 5)
    (tmp_path / "m").mkdir()
    save_tensors(tmp_path / "m" / "emb.safetensors", {"tok_emb.weight": rows}, {})
    (tmp_path / "m" / "tokenizer.json").write_bytes(words_tok.serialized())
    wv = checkpoint_vectors(tmp_path / "m" / "emb.safetensors")
    assert wv.words == words_tok.pieces()[4:]
    assert np.array_equal(wv.vectors, rows[4:].numpy())
