"""SentencePiece `.model`: loading (`load_sentencepiece`) and the choice of its chunk rule.

The rules themselves are in `nbcli.tokenizers.sentencepiece` (BPE) and `nbcli.tokenizers.unigram`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nbcli.errors import TokenizerError


def load_sentencepiece(data: bytes, path: Path) -> dict[str, Any]:
    """The `Tokenizer` fields of a SentencePiece `.model` file's bytes; TokenizerError if they are not one."""
    import sentencepiece as spm

    from nbcli.tokenizers.sentencepiece import sentencepiece_segmenter, special_ids

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
