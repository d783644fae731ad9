"""Hugging Face `tokenizer.json`: loading (`load_hf`) and the EOS default of its template.

Each family's chunk rule is in `nbcli.tokenizers.hf_rules`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nbcli.errors import TokenizerError
from nbcli.jsonsafe import load_bytes
from nbcli.tokenizers.hf_rules import hf_segmenter, pipeline_components
from nbcli.tokenizers.segment import EncodeFn


def eos_default(config: dict[str, Any]) -> tuple[bool, str]:
    """Whether a model built on this tokenizer.json predicts EOS at document ends, from its
    post-processor (the template the library wraps each text in).

    A `[CLS] $A [SEP]` template (BertProcessing, RobertaProcessing, or a TemplateProcessing with
    special tokens on both sides of the text) marks a masked-LM encoder: it is given [SEP]/</s> as
    input and never predicts it, so no EOS per document by default. Anything else (no template,
    ByteLevel, `<s> $A`) is a causal LM, which predicts EOS at each document end.
    """
    for proc in pipeline_components(config.get("post_processor"), "processors"):
        kind = proc.get("type")
        if kind in ("BertProcessing", "RobertaProcessing"):
            return False, f"{kind} template: a masked-LM encoder never predicts its end token"
        if kind == "TemplateProcessing":
            items = proc.get("single", [])
            names = ["$A" if "Sequence" in item else item.get("SpecialToken", {}).get("id", "?")
                     for item in items if isinstance(item, dict)]
            if "$A" in names and 0 < names.index("$A") < len(names) - 1:
                return False, (f"template {' '.join(names)}: a masked-LM encoder never predicts "
                               "the end token at document ends")
    return True, "causal template: a language model predicts EOS at each document end"


def _one_line(err: BaseException) -> str:
    """An exception's message on one line (the tokenizers library's messages may span several)."""
    return " ".join(str(err).split())[:300]


def _special_by_name(vocab: dict[str, int], names: tuple[str, ...]) -> int | None:
    for name in names:
        if name in vocab:
            return vocab[name]
    return None


def _encoder(tok: Any, path: Path) -> EncodeFn:
    """Token ids of texts by a `tokenizers.Tokenizer` (no special tokens); errors name `path`."""

    def encode(texts: list[str]) -> list[list[int]]:
        try:
            encodings = tok.encode_batch_fast(texts, add_special_tokens=False)
        except Exception as err:  # tokenizers raises bare Exceptions (e.g. a missing unk token)
            if type(err) is not Exception:
                raise
            raise TokenizerError(f"{path}: tokenizer failed to encode text: {_one_line(err)}") from None
        return [enc.ids for enc in encodings]

    return encode


#: Fields that change offsets only, never ids (dropped from the identity).
_OFFSET_ONLY = frozenset({"trim_offsets"})
#: Model fields that hold the vocabulary and the merges (kept as they are, only put in id order).
_TABLES = ("vocab", "merges")
_ADDED_TOKEN_FIELDS = ("id", "content", "single_word", "lstrip", "rstrip", "normalized", "special")


def _settings(value: Any) -> Any:
    """A component's settings without offset-only fields and without null, false or "" values: the
    library writes every field, so an absent one and its falsy default mean the same (an absent subword
    prefix written as null or "", a flag a newer library version adds as false)."""
    if isinstance(value, dict):
        return {k: _settings(v) for k, v in value.items()
                if k not in _OFFSET_ONLY and v is not None and v is not False and v != ""}
    if isinstance(value, list):
        return [_settings(v) for v in value]
    return value


def hf_identity(tok: Any) -> dict[str, Any]:
    """What decides a tokenizer.json's ids (`tok`: its `tokenizers.Tokenizer`), independent of how the
    file was written: the model (type, vocabulary with ids, BPE merges or unigram scores, unknown
    token, affixes, byte fallback), the normaliser, the pre-tokeniser and the added tokens with their
    ids and matching flags, all as the installed library serialises them (so key order, the merges'
    spelling and fields written with their default values do not matter).

    Left out: the post-processor (nb encodes without the template), the decoder, padding and
    truncation (nb switches them off), and offset-only flags. transformers' `save_pretrained` changes
    only these (e.g. adds a TemplateProcessing, writes "" for an absent subword prefix), so a
    re-saved tokenizer.json has the same identity."""
    canonical = json.loads(tok.to_str())
    model = canonical.get("model") or {}
    vocab = model.get("vocab")
    if isinstance(vocab, dict):  # piece -> id as [id, piece] in id order (sorting 50k keys took 0.5 s)
        vocab = sorted([i, p] for p, i in vocab.items())
    added = sorted(({k: t.get(k) for k in _ADDED_TOKEN_FIELDS} for t in canonical.get("added_tokens") or []
                    if isinstance(t, dict)), key=lambda t: (t["id"], str(t["content"])))
    return {"family": "tokenizer.json", "vocab": vocab, "merges": model.get("merges"),
            "model": _settings({k: v for k, v in model.items() if k not in _TABLES}),
            "normalizer": _settings(canonical.get("normalizer")),
            "pre_tokenizer": _settings(canonical.get("pre_tokenizer")), "added_tokens": _settings(added)}


def load_hf(data: bytes, body: bytes, path: Path) -> dict[str, Any]:
    """The fields of a `Tokenizer` for a tokenizer.json (`body`: its bytes without a BOM)."""
    from tokenizers import Tokenizer as HFTokenizer

    config = load_bytes(body, path, error=TokenizerError, what="tokenizer.json")
    text = body.decode("utf-8")  # load_bytes checked it
    if not isinstance(config, dict) or not isinstance(config.get("model"), dict):
        raise TokenizerError(
            f"{path}: not a tokenizer.json (JSON without a \"model\" object; vocabulary files such as "
            "encoder.json or vocab.json are not enough: pass the tokenizer.json or the model folder)")
    try:
        tok = HFTokenizer.from_str(text)
    except Exception as err:  # tokenizers raises a bare Exception for schema errors
        if type(err) is not Exception:
            raise
        raise TokenizerError(f"{path}: not a valid tokenizer.json: {_one_line(err)}") from None
    try:  # a model can load and still fail on every text (WordLevel whose unk token is missing)
        # encode, not encode_batch: a batch may start the library's thread pool, and count-unigrams
        # forks its workers after loading (the library warns in a child forked after its pool ran)
        tok.encode("nb probe: Aa 0 ?! é 日本 \U0001f642", add_special_tokens=False)
    except Exception as err:
        if type(err) is not Exception:
            raise
        raise TokenizerError(f"{path}: tokenizer.json loads but cannot encode text: {_one_line(err)}") from None
    try:
        special = frozenset(int(a["id"]) for a in config.get("added_tokens") or []
                            if isinstance(a, dict) and a.get("special"))
    except (KeyError, TypeError, ValueError):
        raise TokenizerError(f"{path}: added_tokens entries need an integer 'id'") from None
    # Counting needs every token of every document and nothing added.
    adjustments = []
    if config.get("padding"):
        tok.no_padding()
        strategy = config["padding"].get("strategy", "")
        adjustments.append(f"padding ({strategy if isinstance(strategy, str) else json.dumps(strategy)}, "
                           f"{config['padding'].get('pad_token', '?')}) switched off")
    if config.get("truncation"):
        tok.no_truncation()
        adjustments.append(f"truncation (max_length {config['truncation'].get('max_length', '?')}) switched off")
    vocab = tok.get_vocab(with_added_tokens=True)

    def encoder_for(variant: dict[str, Any]) -> EncodeFn:
        """The encoder of a variant of this tokenizer.json (continuing parts, see hf_segmenter)."""
        other = HFTokenizer.from_str(json.dumps({**variant, "padding": None, "truncation": None}))
        return _encoder(other, path)

    encode = _encoder(tok, path)
    segmenter, reason = hf_segmenter(config, vocab, encode, encoder_for)
    eos_on, eos_reason = eos_default(config)
    return dict(
        kind="tokenizer.json", vocab_size=tok.get_vocab_size(with_added_tokens=True),
        bos_id=_special_by_name(vocab, ("<s>", "<|begin_of_text|>", "<bos>", "[CLS]", "<|endoftext|>")),
        eos_id=_special_by_name(vocab, ("</s>", "<|end_of_text|>", "<eos>", "[SEP]", "<|endoftext|>")),
        pad_id=_special_by_name(vocab, ("<pad>", "[PAD]", "<|pad|>")),
        unk_id=_special_by_name(vocab, ("<unk>", "[UNK]")),
        special_ids=special,
        segmenter=segmenter, method_reason=segmenter.reason if segmenter else reason,
        encode_documents=encode, id_to_piece=lambda i: tok.id_to_token(i) or "", impl=tok,
        eos_default=eos_on, eos_default_reason=eos_reason, adjustments=tuple(adjustments),
    )
