"""Unigram SentencePiece models under the per-line certificate (nbcli.tokenizers.unigram), on a model
whose scores are edited to plant near-ties: words whose best segmentation wins by one float32 step."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from nbcli.counting import BlockCounter, CountOptions, count_corpus
from nbcli.tokenizers import load_tokenizer
from nbcli.tokenizers.sentencepiece import _read_varint as _varint

PLANTED = ["and", "the", "for", "was", "with"]
FILLER = ["frequency", "transformer", "embedding", "attention", "corpus", "model", "layer"]


def score_offsets(buf: bytes | bytearray) -> dict[str, int]:
    """Piece text -> offset of its float32 score (SentencePiece.score, field 2) in a ModelProto."""
    out: dict[str, int] = {}
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        wire = key & 7
        if wire == 2:
            length, pos = _varint(buf, pos)
            if key >> 3 == 1:  # ModelProto.pieces
                inner, end, text, at = pos, pos + length, "", -1
                while inner < end:
                    k, inner = _varint(buf, inner)
                    if k & 7 == 2:
                        n, inner = _varint(buf, inner)
                        text = bytes(buf[inner:inner + n]).decode() if k >> 3 == 1 else text
                        inner += n
                    elif k & 7 == 5:
                        at = inner if k >> 3 == 2 else at
                        inner += 4
                    else:
                        _, inner = _varint(buf, inner)
                out[text] = at
            pos += length
        elif wire == 0:
            _, pos = _varint(buf, pos)
        else:
            pos += 4 if wire == 5 else 8
    return out


@pytest.fixture(scope="module")
def planted_model(sp_unigram_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The unigram fixture with each PLANTED word's one-piece segmentation rescored to one float32
    step from its runner-up's score (above it for some words, below for others)."""
    import sentencepiece as spm

    data = bytearray(sp_unigram_model.read_bytes())
    offsets = score_offsets(data)
    sp = spm.SentencePieceProcessor(model_proto=bytes(data))
    for k, word in enumerate(PLANTED):
        first, second = sp.nbest_encode_as_ids(word, nbest_size=2)
        assert len(first) == 1, (word, first)  # a one-piece word: rescore that piece
        runner_up = np.float32(sum(np.float64(sp.get_score(i)) for i in second))
        score = np.nextafter(runner_up, np.float32(0 if k % 2 == 0 else -np.inf))
        at = offsets[sp.id_to_piece(first[0])]
        data[at:at + 4] = np.float32(score).tobytes()
    path = tmp_path_factory.mktemp("planted") / "planted.model"
    path.write_bytes(bytes(data))
    return path


def _whole(path: Path, lines: list[str]) -> np.ndarray:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(path))
    counts = np.zeros(sp.get_piece_size(), dtype=np.int64)
    for ids in sp.encode(lines):
        np.add.at(counts, np.asarray(ids, dtype=np.int64), 1)
    return counts


def _line(prefix: int, words: list[str]) -> str:
    return " ".join([FILLER[i % len(FILLER)] for i in range(prefix)] + words)


def test_planted_near_ties_segment_differently_in_a_line(planted_model: Path) -> None:
    """Teeth: after a long prefix, a planted word encoded alone differs from its place in the line;
    the certificate refuses it there, and nb still counts the lines exactly."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(planted_model))
    diverging = [line for line in (_line(k, [w]) for k in range(1, 300) for w in PLANTED[:2])
                 if sp.encode(line) != [i for chunk in line.split(" ") for i in sp.encode(chunk)]]
    assert diverging, "no line where chunks alone differ from the whole line: the planted ties have no teeth"
    tok = load_tokenizer(planted_model)
    _, margin, _, _ = tok.segmenter.certify(PLANTED)
    assert (np.abs(margin) < 1e-5).all()  # one float32 step at scores of ~10
    counter = BlockCounter(tok, CountOptions(eos=False, unigram_certificate=True))
    data = "".join(line + "\n" for line in diverging * 2).encode()  # twice: the second time from the table
    assert np.array_equal(counter.count_block("t.txt", data, 1, 0).counts, _whole(planted_model, diverging * 2))


lines_strategy = st.lists(
    st.tuples(st.sampled_from([0, 1, 5, 40, 150, 400]),
              st.lists(st.sampled_from(PLANTED + FILLER + ["And", "the,", "x", "  "]), min_size=1, max_size=6)),
    min_size=1, max_size=12).map(lambda specs: [_line(k, words) for k, words in specs])


@pytest.mark.parametrize("workers", [1, 2])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=lines_strategy)
def test_counts_equal_whole_lines_with_planted_ties(planted_model: Path, tmp_path: Path, workers: int,
                                                  lines: list[str]) -> None:
    """Text and JSONL corpora mixing planted words with long prefixes count as SentencePiece encodes
    each whole document."""
    tok = load_tokenizer(planted_model)
    assert tok.chunk_rule == "sp-unigram-certified"
    text = tmp_path / "c.txt"
    text.write_text("".join(line + "\n" for line in lines * 3))
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text("".join(json.dumps({"text": line}) + "\n" for line in lines * 3))
    reference = _whole(planted_model, [line for line in lines * 3 if line])
    for path, fmt in ((text, "text"), (jsonl, "jsonl")):
        result = count_corpus([str(path)], tok, CountOptions(eos=False, format=fmt, unigram_certificate=True), workers=workers)
        np.testing.assert_array_equal(result.counts, reference)


@settings(max_examples=150, deadline=None)
@given(words=st.lists(st.text(alphabet="aehnrstdo\u00e9\uff46.'-", min_size=1, max_size=12), min_size=1, max_size=20))
def test_margins_match_sentencepiece_nbest(sp_unigram_model: Path, words: list[str]) -> None:
    """The lattice nb builds is SentencePiece's: a word's margin is the score of its ids minus the
    score of SentencePiece's second-best segmentation (where both hold only normal pieces)."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(sp_unigram_model))
    encoded, margin, best, chars = load_tokenizer(sp_unigram_model).segmenter.certify(words)
    normal = [i for i in range(sp.get_piece_size()) if not (sp.is_unknown(i) or sp.is_control(i) or sp.is_byte(i))]

    def score(ids: list[int]) -> float:
        return float(sum(np.float64(sp.get_score(i)) for i in ids))

    for word, ids, m, b, n in zip(words, encoded, margin, best, chars):
        assert ids == sp.encode(word)
        if not np.isfinite(m) and m < 0:
            assert not set(ids) <= set(normal) or n > 128
            continue
        assert abs(b - abs(score(ids))) < 1e-9 and n == len("".join(sp.id_to_piece(ids)))
        nbest = sp.nbest_encode_as_ids(word, nbest_size=2)
        if m > 1e-4:
            assert nbest[0] == ids
        if len(nbest) == 2 and m > 1e-4 and set(nbest[1]) <= set(normal):
            assert abs(m - (score(ids) - score(nbest[1]))) < 1e-4
        elif len(nbest) == 1:
            assert m == np.inf
