"""nb transplant-embeddings (paper 002 sec. 3.3): piece matching across space markers, copied rows,
neighbour means, coverage, the output `nb train` reads, and the CLI's errors."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from nbcli.checkpoint.writer import save_tensors
from nbcli.checkpoint.reader import open_checkpoint
from tests import forked_nb
from tests.cli.helpers import run_cli
from nbcli.counts import COUNTS_FORMAT, UnigramCounts, write_counts
from nbcli.errors import ConfigError, OutputError
from nbcli.tokenizers import load_tokenizer
from nbcli.transplant import (
    SOURCE_ROW, TENSOR, match_pieces, piece_key, transplant, transplant_rows, vocabulary_family,
)

D = 6


def gpt2_table() -> dict[int, str]:
    """GPT-2's bytes_to_unicode, written out independently."""
    printable = set(range(33, 127)) | set(range(161, 173)) | set(range(174, 256))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def gpt2_spelling(text: str) -> str:
    """Byte-level BPE spelling of `text`."""
    table = gpt2_table()
    return "".join(table[b] for b in text.encode("utf-8"))


def test_piece_keys_across_space_markers() -> None:
    assert piece_key("\u2581the", "sentencepiece") == ("the", True)
    assert piece_key("the", "sentencepiece") == ("the", False)
    assert piece_key("\u0120the", "byte-level") == ("the", True)
    assert piece_key("the", "byte-level") == ("the", False)
    assert piece_key("the", "wordpiece") == ("the", True)
    assert piece_key("##the", "wordpiece") == ("the", False)
    assert piece_key(gpt2_spelling(" café"), "byte-level") == ("café", True)
    half = gpt2_spelling("é")[:1]                       # half a character: never equal to text
    assert piece_key(half, "byte-level") == ("\x00" + half, False)


@given(word=st.text(st.characters(blacklist_categories=("Cs", "Zs", "Cc")), min_size=1, max_size=8))
def test_byte_level_and_sentencepiece_spellings_meet(word: str) -> None:
    assert piece_key(gpt2_spelling(" " + word), "byte-level") == piece_key("\u2581" + word, "sentencepiece")
    assert piece_key(gpt2_spelling(word), "byte-level") == piece_key(word, "sentencepiece")
    assert piece_key(word, "wordpiece") == piece_key("\u2581" + word, "sentencepiece")


def _text_of(piece: str, family: str) -> str:
    """Independent normalisation for the check below: the piece's text with a leading space for word starts."""
    if family == "sentencepiece":
        return piece.replace("\u2581", " ")
    if family == "byte-level":
        inverse = {c: b for b, c in gpt2_table().items()}
        try:
            return bytes(inverse[c] for c in piece).decode("utf-8")
        except (KeyError, UnicodeDecodeError):
            return "\x00" + piece
    raise AssertionError(family)


def test_match_pieces_sentencepiece_to_byte_level(sp_model: Path, hf_bytelevel_json: Path) -> None:
    sp, bl = load_tokenizer(sp_model), load_tokenizer(hf_bytelevel_json)
    assert vocabulary_family(sp.pieces(), sp.kind) == "sentencepiece"
    assert vocabulary_family(bl.pieces(), bl.kind) == "byte-level"
    match = match_pieces(sp, bl)
    assert match.shape == (bl.vocab_size,)
    matched = np.nonzero(match >= 0)[0]
    assert len(matched) > 50
    sp_texts = {_text_of(p, "sentencepiece"): i for i, p in enumerate(sp.pieces()) if i not in sp.special_ids}
    for t in range(bl.vocab_size):
        if t in bl.special_ids:
            continue
        text = _text_of(bl.piece(t), "byte-level")
        if text in sp_texts:
            assert match[t] >= 0 and _text_of(sp.piece(int(match[t])), "sentencepiece") == text, bl.piece(t)
        else:
            assert match[t] == -1, bl.piece(t)
    the = bl.pieces().index("\u0120the") if "\u0120the" in bl.pieces() else None
    if the is not None and "\u2581the" in sp.pieces():
        assert match[the] == sp.pieces().index("\u2581the")
    # EOS matches EOS by role (</s> vs <|endoftext|>)
    if bl.eos_id is not None and sp.eos_id is not None:
        assert match[bl.eos_id] == sp.eos_id


def test_rows_copied_and_neighbours_are_weighted_means(sp_model: Path, hf_bytelevel_json: Path) -> None:
    """Independent check: copied rows equal the source rows; each `neighbours` row equals the mean of
    the source rows of sentencepiece's own encoding of the piece's text, weighted by piece length."""
    import sentencepiece as spm

    sp, bl = load_tokenizer(sp_model), load_tokenizer(hf_bytelevel_json)
    g = torch.Generator().manual_seed(0)
    rows = torch.randn(sp.vocab_size + 1, D, generator=g)           # + an appended <mask> row, ignored
    emb, match, cov = transplant_rows(rows, sp, bl, "neighbours")
    copied = match >= 0
    torch.testing.assert_close(emb[torch.from_numpy(np.nonzero(copied)[0])], rows[torch.from_numpy(match[copied])])
    proc = spm.SentencePieceProcessor(model_file=str(sp_model))
    checked = 0
    for t in np.nonzero(~copied)[0].tolist()[:60]:
        text = _text_of(bl.piece(t), "byte-level")
        if text.startswith("\x00"):
            continue
        ids = [i for i in proc.encode(text) if not (proc.is_control(i) or proc.is_unknown(i))]
        if not ids:
            continue
        w = torch.tensor([max(1, len(proc.id_to_piece(i).lstrip("\u2581"))) for i in ids], dtype=torch.float64)
        expected = (rows[ids].double() * w[:, None]).sum(0) / w.sum()
        torch.testing.assert_close(emb[t].double(), expected, atol=1e-6, rtol=1e-6)
        checked += 1
    assert checked >= 10
    assert cov.matched == int(copied.sum()) and cov.initialised == bl.vocab_size - cov.matched
    mean, _, _ = transplant_rows(rows, sp, bl, "mean")
    torch.testing.assert_close(mean[torch.from_numpy(np.nonzero(~copied)[0])][0], rows[:sp.vocab_size].mean(0))
    xav, _, _ = transplant_rows(rows, sp, bl, "xavier", seed=3)
    bound = math.sqrt(6 / (bl.vocab_size + D))
    assert float(xav[torch.from_numpy(np.nonzero(~copied)[0])].abs().max()) <= bound


def test_counts_mass_and_min_count(sp_model: Path, hf_bytelevel_json: Path) -> None:
    sp, bl = load_tokenizer(sp_model), load_tokenizer(hf_bytelevel_json)
    rows = torch.randn(sp.vocab_size, D)
    counts = np.arange(bl.vocab_size, dtype=np.int64) % 7
    _, match, cov = transplant_rows(rows, sp, bl, "mean", counts=counts)
    assert cov.mass_matched == pytest.approx(counts[match >= 0].sum() / counts.sum())
    _, match3, cov3 = transplant_rows(rows, sp, bl, "mean", counts=counts, min_count=3)
    roles = {i for i in (bl.eos_id, bl.bos_id) if i is not None}
    expect = (match >= 0) & ((counts >= 3) | np.isin(np.arange(bl.vocab_size), list(roles)))
    np.testing.assert_array_equal(match3 >= 0, expect)
    assert cov3.dropped_below_min_count == int((match >= 0).sum() - expect.sum())


def _counts_file(path: Path, tok_path: Path) -> Path:
    tok = load_tokenizer(tok_path)
    write_counts(path, UnigramCounts(counts=np.ones(tok.vocab_size, dtype=np.int64) * 2,
                                     metadata={"nb.format": COUNTS_FORMAT, "nb.tokenizer_sha256": tok.sha256}))
    return path


def test_cli_json_output_is_read_by_nb_train(tmp_path: Path, sp_model: Path, hf_bytelevel_json: Path) -> None:
    from nbcli.train.init import pretrained_rows

    sp, bl = load_tokenizer(sp_model), load_tokenizer(hf_bytelevel_json)
    src = tmp_path / "src.safetensors"
    save_tensors(src, {"tok_emb.weight": torch.randn(sp.vocab_size, 16), "pos_emb.weight": torch.randn(8, 16),
                       "head.bias": torch.zeros(sp.vocab_size)}, {"nb.format": "nb-model/1"})
    before = src.read_bytes()
    out = tmp_path / "out.safetensors"
    counts = _counts_file(tmp_path / "c.safetensors", hf_bytelevel_json)
    result = run_cli(["transplant-embeddings", str(src), "--source-tokenizer", str(sp_model),
                                      "--target-tokenizer", str(hf_bytelevel_json), "-o", str(out), "--missing",
                                      "neighbours", "--counts", str(counts), "--standardise", "xavier", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["coverage"]["target_pieces"] == bl.vocab_size and 0 < report["coverage"]["matched_fraction"] < 1
    assert report["coverage"]["mass_matched"] == pytest.approx(report["coverage"]["matched_fraction"])
    assert src.read_bytes() == before
    with open_checkpoint(out) as ckpt:
        assert set(ckpt.names()) == {TENSOR, SOURCE_ROW}
        prov = json.loads(ckpt.metadata["nb.provenance"])
        emb = ckpt.get_float(TENSOR)
    assert prov["source_tokenizer"]["sha256"] == sp.sha256 and prov["options"]["missing"] == "neighbours"
    assert float(emb.double().std()) == pytest.approx(math.sqrt(2 / (bl.vocab_size + 16)), rel=1e-3)
    rows = pretrained_rows(f"pretrained:{out}", bl.vocab_size, 16)                # what nb train reads
    torch.testing.assert_close(rows, emb)
    # table output, via a real subprocess
    proc = forked_nb.run([sys.executable, "-m", "nbcli", "transplant-embeddings", str(src), "--source-tokenizer",
                           str(sp_model), "--target-tokenizer", str(hf_bytelevel_json), "-o",
                           str(tmp_path / "t.safetensors")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "pieces matched" in proc.stdout and (tmp_path / "t.safetensors").exists()


def test_cli_errors_are_one_line_and_write_nothing(tmp_path: Path, sp_model: Path, hf_bytelevel_json: Path) -> None:
    sp = load_tokenizer(sp_model)
    src = tmp_path / "src.safetensors"
    save_tensors(src, {"emb": torch.randn(sp.vocab_size - 10, 4)})
    out = tmp_path / "out.safetensors"
    base = ["transplant-embeddings", str(src), "--source-tokenizer", str(sp_model), "--target-tokenizer",
            str(hf_bytelevel_json), "-o", str(out)]
    for extra, fragment in ((["--min-count", "2"], "--min-count needs --counts"),
                            ([], "500 tokens do not fit the 490 vocabulary rows of"),
                            (["--standardise", "match:x"], "x: no such local path")):
        result = run_cli(base + extra)
        assert result.exit_code != 0
        assert fragment in result.output and "Traceback" not in result.output
        assert not out.exists()
    wrong_counts = _counts_file(tmp_path / "c.safetensors", sp_model)
    save_tensors(src, {"emb": torch.randn(sp.vocab_size, 4)})
    kept = src.read_bytes()
    result = run_cli(base + ["--counts", str(wrong_counts)])
    assert result.exit_code != 0 and not out.exists()
    rows = load_tokenizer(hf_bytelevel_json).vocab_size
    assert f"do not fit the {rows} vocabulary rows of --target-tokenizer {hf_bytelevel_json}" in result.output
    with pytest.raises(ConfigError, match="--missing"):
        transplant_rows(torch.randn(sp.vocab_size, 4), sp, sp, "zeros")  # type: ignore[arg-type]
    with pytest.raises(OutputError, match="same file as the input"):
        transplant(src, sp_model, sp_model, src)
    assert src.read_bytes() == kept
