"""nb's one policy for a vocabulary beside a model (nbcli.checkpoint.vocab): size, identity, padding."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbcli.checkpoint.vocab import (
    ModelVocab, Vocabulary, check_vocab, counts_vocabulary, fit_counts, model_vocab, padding_multiples,
)
from nbcli.counts import UnigramCounts, write_counts
from nbcli.errors import CountsError, TokenizerError
from nbcli.provenance import sha256_file
from nbcli.tokenizers import load_tokenizer
from nbcli.tokenizers.identity import TokenizerIdentity, identity_metadata

A, B = "nbtok1:" + "a" * 64, "nbtok1:" + "b" * 64


def fake(metadata: dict[str, str] | None = None, model_dir: Path | None = None, config: dict | None = None):  # noqa: ANN201
    return SimpleNamespace(path="m.safetensors", metadata=metadata or {}, model_dir=model_dir, model_config=config)


def expected(size: int, rows: int, relation: str, allow: bool, multiples: tuple[int, ...], ref_size: int) -> str:
    """The module docstring's three rules, restated independently of the code."""
    if size > rows:
        return "size"
    if relation == "different" and not allow:
        return "identity"
    padded = any(math.ceil(size / m) * m == rows for m in multiples)
    covers = relation != "model names none" and size == ref_size  # the model's tokenizer has as many pieces
    if size < rows and relation != "same" and not padded and not covers:
        return "padding"
    return "accepted"


def outcome(size: int, rows: int, relation: str, allow: bool, multiples: tuple[int, ...], ref_size: int) -> str:
    mine = {"same": A, "different": B}.get(relation, A)
    identity = None if relation == "no record" else TokenizerIdentity("mine", recorded_fingerprint=mine)
    subject = Vocabulary("c", size, identity)
    refs = () if relation == "model names none" else (TokenizerIdentity("theirs", recorded_fingerprint=A,
                                                                         recorded_vocab_size=ref_size),)
    try:
        check = check_vocab(subject, ModelVocab(rows, refs, "the model", multiples), allow_mismatch=allow)
    except CountsError as err:
        message = str(err)
        assert message.startswith("c: ") and "\n" not in message
        if "do not fit" in message:
            return "size"
        if "not vocabulary padding" in message:
            assert "--allow-vocab-mismatch" not in message  # the flag cannot lift it
            return "padding"
        assert "another tokenizer" in message and "--allow-vocab-mismatch" in message
        assert "mine" in message and "theirs" in message  # names both
        return "identity"
    assert check.tokenizer == {"same": "same", "different": "different"}.get(relation, "unknown")
    assert check.padding_rows == rows - size
    return "accepted"


@given(size=st.integers(1, 5000), delta=st.integers(-40, 300),
       relation=st.sampled_from(["same", "different", "no record", "model names none"]),
       config=st.sampled_from([None, {"pad_vocab_size_multiple": 10}, {"make_vocab_size_divisible_by": 7}]),
       ref_offset=st.sampled_from([0, 1, 5]))
def test_policy_on_random_sizes(size: int, delta: int, relation: str, config: dict | None, ref_offset: int) -> None:
    rows, multiples, ref_size = max(1, size + delta), padding_multiples(config), size + ref_offset
    strict = outcome(size, rows, relation, False, multiples, ref_size)
    relaxed = outcome(size, rows, relation, True, multiples, ref_size)
    assert strict == expected(size, rows, relation, False, multiples, ref_size)
    assert relaxed == expected(size, rows, relation, True, multiples, ref_size)
    # --allow-vocab-mismatch relaxes the identity rule only: every other outcome stays as it was
    assert relaxed == strict or strict == "identity"
    assert relaxed != "identity"


def test_issue_examples() -> None:
    none = ModelVocab(50257)
    with pytest.raises(CountsError, match="not vocabulary padding"):  # 32,000 counts on GPT-2's rows
        check_vocab(Vocabulary("c", 32000, None), none)
    with pytest.raises(CountsError, match="not vocabulary padding"):  # BERT's 30,522 on Llama's 32,000
        check_vocab(Vocabulary("c", 30522, None), ModelVocab(32000))
    check = check_vocab(Vocabulary("c", 50257, None, filled="count 0"), ModelVocab(50304))  # padded GPT-2
    assert "multiple of 64" in check.warnings[-1] and "count 0" in check.warnings[-1]
    own = padding_multiples({"pad_vocab_size_multiple": 10})
    check_vocab(Vocabulary("c", 1001, None), ModelVocab(1010, multiples=own))
    # Mistral counts on GPT-2 whose tokenizer differs: refused, and with the flag still refused by size
    gpt2 = ModelVocab(50257, (TokenizerIdentity("gpt2", recorded_fingerprint=A, recorded_vocab_size=50257),), "gpt2/")
    mistral = Vocabulary("c", 32000, TokenizerIdentity("mistral", recorded_fingerprint=B))
    with pytest.raises(CountsError, match="another tokenizer"):
        check_vocab(mistral, gpt2)
    with pytest.raises(CountsError, match="not vocabulary padding"):
        check_vocab(mistral, gpt2, allow_mismatch=True)


def test_error_class_is_the_callers() -> None:
    with pytest.raises(TokenizerError, match="do not fit"):
        check_vocab(Vocabulary("-t x", 11, None, unit="tokens"), ModelVocab(10), error=TokenizerError)


def _counts(path: Path, size: int, metadata: dict[str, str]) -> Path:
    write_counts(path, UnigramCounts(counts=np.arange(size), metadata=metadata))
    return path


def test_model_vocab_sources(tmp_path: Path, hf_bytelevel_json: Path, sp_model: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes(hf_bytelevel_json.read_bytes())
    (folder / "tokenizer.model").write_bytes(sp_model.read_bytes())
    json_tok, sp_tok = load_tokenizer(hf_bytelevel_json), load_tokenizer(sp_model)
    ckpt = fake(model_dir=folder)
    for tok in (json_tok, sp_tok):  # either file of the folder matches, by fingerprint
        counts = _counts(tmp_path / "c.safetensors", tok.vocab_size, identity_metadata(tok))
        fitted = fit_counts(counts, model_vocab(ckpt, 600))
        assert fitted.check.tokenizer_checked and fitted.counts.shape == (600,)
        assert fitted.info["tokenizer_fingerprint"] == tok.fingerprint
    # the checkpoint's nb metadata comes before the folder; --tokenizer before both
    recorded = model_vocab(fake(metadata=identity_metadata(sp_tok), model_dir=folder), 600)
    assert [i.fingerprint for i in recorded.identities] == [sp_tok.fingerprint] and "nb metadata" in recorded.where
    given = model_vocab(ckpt, 600, tokenizer=hf_bytelevel_json)
    assert [i.fingerprint for i in given.identities] == [json_tok.fingerprint]
    assert model_vocab(ckpt, 600, tokenizer=folder).where == f"--tokenizer {folder}"
    with pytest.raises(TokenizerError, match="no tokenizer file"):
        model_vocab(ckpt, 600, tokenizer=tmp_path / "missing.json")
    assert model_vocab(fake(), 600).identities == ()


def test_counts_from_an_older_nb_fall_back_to_sha256(tmp_path: Path, hf_bytelevel_json: Path) -> None:
    tok = load_tokenizer(hf_bytelevel_json)
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes(hf_bytelevel_json.read_bytes())
    model = model_vocab(fake(model_dir=folder), tok.vocab_size)
    old = _counts(tmp_path / "old.safetensors", tok.vocab_size, {"nb.tokenizer_sha256": tok.sha256})
    check = fit_counts(old, model).check
    assert check.tokenizer_checked and check.compared_by == "sha256"
    assert any("no tokenizer fingerprint" in w and "older nb" in w for w in check.warnings)
    # the same tokenizer written with other bytes: by sha256 another tokenizer, and the error says why
    (folder / "tokenizer.json").write_text(tok.impl.to_str(pretty=False), encoding="utf-8")
    assert sha256_file(folder / "tokenizer.json") != tok.sha256
    with pytest.raises(CountsError, match="compared by file sha256.*older nb.*--allow-vocab-mismatch"):
        fit_counts(old, model_vocab(fake(model_dir=folder), tok.vocab_size))
    new = _counts(tmp_path / "new.safetensors", tok.vocab_size, identity_metadata(tok))
    check = fit_counts(new, model_vocab(fake(model_dir=folder), tok.vocab_size)).check
    assert check.tokenizer_checked and check.compared_by == "fingerprint" and check.warnings == []


def test_unknown_identities_warn(tmp_path: Path) -> None:
    foreign = _counts(tmp_path / "f.safetensors", 10, {})
    assert "cannot check" in fit_counts(foreign, ModelVocab(10, (TokenizerIdentity("t", sha256="x"),))).warnings[0]
    named = _counts(tmp_path / "n.safetensors", 10, {"nb.tokenizer_fingerprint": A})
    warning = fit_counts(named, model_vocab(fake(), 10, hint=" (give --tokenizer FILE)")).warnings[0]
    assert "names no tokenizer" in warning and "--tokenizer FILE" in warning
    assert counts_vocabulary(UnigramCounts(np.zeros(3, dtype=np.int64), {}), "x").identity is None
