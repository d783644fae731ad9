"""SentencePiece `.model`: loading (`load_sentencepiece`) and the choice of its chunk rule.

The rules themselves are in `nbcli.tokenizers.sentencepiece` (BPE) and `nbcli.tokenizers.unigram`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nbcli.errors import TokenizerError
from nbcli.tokenizers.sentencepiece import (
    SentencePieceSpaceRuns, SentencePieceWords, first_spanning_piece, read_model_settings, special_ids,
    text_pieces,
)


def load_sentencepiece(data: bytes, path: Path) -> dict[str, Any]:
    """The `Tokenizer` fields of a SentencePiece `.model` file's bytes; TokenizerError if they are not one."""
    import sentencepiece as spm

    if not data.strip():  # SentencePiece would log to fd 2 (absl) before refusing it
        raise TokenizerError(f"{path}: empty file, not a tokenizer")
    try:
        sp = spm.SentencePieceProcessor(model_proto=data)
    except RuntimeError:
        raise TokenizerError(
            f"{path}: not a tokenizer (neither a SentencePiece .model nor a tokenizer.json)"
        ) from None
    size = sp.get_piece_size()
    if size == 0:
        raise TokenizerError(f"{path}: SentencePiece model has an empty vocabulary")

    def opt(value: int) -> int | None:
        return value if value >= 0 else None

    segmenter, reason = sentencepiece_segmenter(data, sp)
    return dict(
        kind="sentencepiece", vocab_size=size,
        bos_id=opt(sp.bos_id()), eos_id=opt(sp.eos_id()), pad_id=opt(sp.pad_id()), unk_id=opt(sp.unk_id()),
        special_ids=special_ids(data, sp),
        segmenter=segmenter, method_reason=segmenter.reason if segmenter else reason,
        encode_documents=lambda texts: sp.encode(texts, num_threads=1), id_to_piece=sp.id_to_piece, impl=sp,
        eos_default_reason="SentencePiece model: a language model predicts EOS at each document end",
    )


def sentencepiece_segmenter(data: bytes, sp: Any) -> tuple[Any, str]:
    """The segmenter for this model and why, or (None, why not) for whole-document counting.

    Reads the model's TrainerSpec (field 2) and NormalizerSpec (field 3) from the protobuf.
    """
    try:
        settings = read_model_settings(data)
    except (ValueError, IndexError, TypeError):
        return None, "could not read the model's settings; encoding whole documents"
    trainer, normalizer = settings.trainer, settings.normalizer
    checks = {
        "split_by_whitespace": _flag(trainer, 22, True),
        "add_dummy_prefix": _flag(normalizer, 3, True),
        "escape_whitespaces": _flag(normalizer, 5, True),
        "not treat_whitespace_as_suffix": not _flag(trainer, 24, False),
    }
    failed = [name for name, ok in checks.items() if not ok]
    if failed:
        return None, f"SentencePiece setting(s) {', '.join(failed)} prevent chunked counting"
    unigram = trainer.get(3, [1])[-1] == 1  # TrainerSpec.model_type: UNIGRAM = 1 (the default), BPE = 2
    if not unigram and trainer.get(3, [1])[-1] != 2:
        return None, "neither a unigram nor a BPE model; encoding whole documents"
    collapse = _flag(normalizer, 4, True)  # remove_extra_whitespaces
    if unigram and not collapse:
        return None, ("unigram model with remove_extra_whitespaces=false (no chunk rule proven); "
                      "encoding whole documents")
    if unigram and len(settings.pieces) != sp.get_piece_size():
        return None, "unigram model whose pieces could not be read; encoding whole documents"
    name = normalizer.get(1, [b"nmt_nfkc"])[-1]
    rule_name = name.decode("utf-8", "replace") if isinstance(name, bytes) else "?"
    if not collapse and rule_name != "identity":
        return None, (f"remove_extra_whitespaces=false with the {rule_name} normaliser (the space-run "
                      "rule is proven for the identity normaliser only); encoding whole documents")
    spanning = first_spanning_piece(text_pieces(settings, sp), collapse)
    if spanning is not None:
        i, piece = spanning
        return None, f"piece {i} ({piece!r}) spans a word boundary; encoding whole documents"
    if unigram:
        from nbcli.tokenizers.unigram import SentencePieceUnigram

        return SentencePieceUnigram(sp, data, "unigram model: space-delimited chunks encode alone in exact "
                                    "arithmetic; a line is counted from its chunks' cached ids only where "
                                    "every chunk's margin over its second-best segmentation exceeds the "
                                    "float32 rounding the line can bring (certificate), else encoded "
                                    "whole"), ""
    if collapse:
        return SentencePieceWords(sp, data, "split_by_whitespace with dummy prefix: each "
                                  "space-delimited chunk encodes alone, and is cut between ASCII pairs "
                                  "no piece joins"), ""
    return SentencePieceSpaceRuns(sp, data, "remove_extra_whitespaces=false (Llama-2/Mistral form): words are a "
                                  "run of spaces and the word after it; cut before each run, and between "
                                  "ASCII pairs no piece joins"), ""


def _flag(fields: dict[int, list[int | bytes]], number: int, default: bool) -> bool:
    values = fields.get(number)
    return bool(values[-1]) if values else default
