"""Tokenizer identity by vocabulary (nbcli.tokenizers.identity): a re-saved tokenizer keeps its
fingerprint, a tokenizer that decides ids differently gets another."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nbcli.tokenizers import load_tokenizer, tokenizer_from_bytes
from nbcli.tokenizers.identity import (
    FINGERPRINT_KEY, SHA256_KEY, TokenizerIdentity, compare, identity_metadata, recorded_identity,
)
from nbcli.tokenizers.sentencepiece import without_dummy_prefix

TEXTS = ["The frequency of a token, the bias.", "  two  spaces and café 日本 🙂", "<|endoftext|>model"]


def _quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()


def test_resaved_tokenizer_json_keeps_its_fingerprint(tmp_path: Path, hf_bytelevel_json: Path) -> None:
    """GPT-2-style byte-level BPE re-saved by transformers: PreTrainedTokenizerFast (adds a
    post-processor) and AutoTokenizer's GPT2Tokenizer (also writes "" for the absent affixes)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    _quiet_transformers()
    original = load_tokenizer(hf_bytelevel_json)
    PreTrainedTokenizerFast(tokenizer_file=str(hf_bytelevel_json), eos_token="<|endoftext|>").save_pretrained(
        tmp_path / "fast")
    source = tmp_path / "gpt2"
    source.mkdir()
    (source / "tokenizer.json").write_bytes(hf_bytelevel_json.read_bytes())
    (source / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "GPT2Tokenizer", "eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>", "add_prefix_space": False}))
    AutoTokenizer.from_pretrained(str(source)).save_pretrained(tmp_path / "auto")
    for folder in (tmp_path / "fast", tmp_path / "auto"):
        resaved = load_tokenizer(folder)
        assert resaved.sha256 != original.sha256  # other bytes: the sha256 check refused these
        assert resaved.fingerprint == original.fingerprint
        assert resaved.encode_batch(TEXTS) == original.encode_batch(TEXTS)


def test_resaved_sentencepiece_keeps_its_fingerprint(tmp_path: Path, sp_model: Path) -> None:
    from transformers.models.bert_generation import BertGenerationTokenizer

    _quiet_transformers()
    original = load_tokenizer(sp_model)
    copy = tmp_path / "spiece.model"
    copy.write_bytes(sp_model.read_bytes())
    tok = BertGenerationTokenizer(vocab_file=str(copy))
    copy.unlink()  # save_pretrained then writes the loaded model's serialised proto
    tok.save_pretrained(str(tmp_path / "out"))
    resaved = load_tokenizer(tmp_path / "out" / "spiece.model")
    assert resaved.fingerprint == original.fingerprint
    # the same model written another way (the NormalizerSpec given twice; protobuf merges them)
    data = sp_model.read_bytes()
    rewritten = tokenizer_from_bytes(without_dummy_prefix(data) + b"\x1a\x02\x18\x01", "rewritten.model")
    assert rewritten.sha256 != original.sha256 and rewritten.fingerprint == original.fingerprint
    assert rewritten.encode_batch(TEXTS) == original.encode_batch(TEXTS)
    # a normaliser setting that changes the ids changes the fingerprint
    no_prefix = tokenizer_from_bytes(without_dummy_prefix(data), "no-prefix.model")
    assert no_prefix.encode_batch(TEXTS) != original.encode_batch(TEXTS)
    assert no_prefix.fingerprint != original.fingerprint


def _variant(config: dict[str, Any], change: Any) -> str:
    changed = json.loads(json.dumps(config))
    change(changed)
    return tokenizer_from_bytes(json.dumps(changed).encode(), "variant.json").fingerprint


def _swap_two_ids(config: dict[str, Any]) -> None:
    vocab = config["model"]["vocab"]
    a, b = list(vocab)[300:302]
    vocab[a], vocab[b] = vocab[b], vocab[a]


def _set(path: tuple[str, ...], value: Any) -> Any:
    def change(config: dict[str, Any]) -> None:
        target = config
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return change


def test_what_decides_the_ids_changes_the_fingerprint(hf_bytelevel_json: Path, sp_model: Path) -> None:
    config = json.loads(hf_bytelevel_json.read_text(encoding="utf-8"))
    base = load_tokenizer(hf_bytelevel_json).fingerprint
    assert load_tokenizer(sp_model).fingerprint != base  # the Mistral-vs-GPT-2 kind of mismatch
    deciding = {
        "pre-tokeniser": _set(("pre_tokenizer", "add_prefix_space"), True),
        "normaliser": _set(("normalizer",), {"type": "Lowercase"}),
        "merges": lambda c: c["model"]["merges"].pop(),
        "ids": _swap_two_ids,
        "special flag": lambda c: c["added_tokens"][0].update(special=False),
        "added token": lambda c: c["added_tokens"].append({
            "id": len(c["model"]["vocab"]), "content": "<pad>", "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": False, "special": True}),
        "byte fallback": _set(("model", "byte_fallback"), True),
    }
    for name, change in deciding.items():
        assert _variant(config, change) != base, name
    not_deciding = {  # decoding, templates, padding, offsets and layout never change ids
        "decoder": _set(("decoder",), None),
        "post-processor": _set(("post_processor",), {"type": "ByteLevel", "add_prefix_space": True,
                                                     "trim_offsets": False, "use_regex": True}),
        "padding": _set(("padding",), {"strategy": "BatchLongest", "direction": "Right", "pad_to_multiple_of": None,
                                       "pad_id": 0, "pad_type_id": 0, "pad_token": "<|endoftext|>"}),
        "trim offsets": _set(("pre_tokenizer", "trim_offsets"), False),
        "merges as strings": lambda c: c["model"].update(merges=[" ".join(m) for m in c["model"]["merges"]]),
        "empty affix": _set(("model", "continuing_subword_prefix"), ""),
    }
    for name, change in not_deciding.items():
        assert _variant(config, change) == base, name


def test_recorded_identities_and_compare(hf_bytelevel_json: Path) -> None:
    tok = load_tokenizer(hf_bytelevel_json)
    meta = identity_metadata(tok)
    assert meta[SHA256_KEY] == tok.sha256 and meta[FINGERPRINT_KEY] == tok.fingerprint
    assert tok.fingerprint.startswith("nbtok1:") and len(tok.fingerprint) == len("nbtok1:") + 64
    recorded = recorded_identity({**meta, "nb.vocab_size": "7"}, "counts")
    assert recorded is not None and recorded.vocab_size == 7 and not recorded.legacy
    assert recorded_identity({}, "x") is None
    other_bytes = TokenizerIdentity("b", sha256="f" * 64, recorded_fingerprint=tok.fingerprint)
    assert compare(recorded, other_bytes).same and compare(recorded, other_bytes).by == "fingerprint"
    legacy = TokenizerIdentity("old", sha256=tok.sha256)
    assert legacy.legacy and compare(legacy, recorded).same and compare(legacy, other_bytes).same is False
    assert compare(legacy, other_bytes).by == "sha256"
    future = TokenizerIdentity("future", sha256="e" * 64, recorded_fingerprint="nbtok9:" + "0" * 64)
    assert compare(future, recorded).by == "sha256"  # fingerprints of other versions are not compared
    assert compare(TokenizerIdentity("a"), TokenizerIdentity("b")).same is None
    assert "fingerprint" in recorded.describe() and "sha256" in legacy.describe()


def test_unreadable_sentencepiece_pieces_are_a_tokenizer_error(sp_model: Path) -> None:
    from nbcli.errors import TokenizerError

    tok = load_tokenizer(sp_model)
    tok.data = b"\x0a\xff"  # pieces nb cannot parse (the library object is left as it was)
    with pytest.raises(TokenizerError, match="fingerprint"):
        _ = tok.fingerprint
