"""The one tokenizer loader: a SentencePiece `.model`, a Hugging Face `tokenizer.json`, or a model folder.

Every command that needs a tokenizer calls `load_tokenizer`, which returns a `Tokenizer` with a small
common interface: ids, pieces, special ids, its fingerprint (`identity.py`: what decides the ids,
what outputs record of the tokenizer), batched encoding of whole documents, and (where it is
provably exact) a `Segmenter` (`nbcli.tokenizers.segment`): the family's chunk rule, which lets
counting encode each distinct chunk of a corpus only once. Each family's rule lives in its module
(`sentencepiece.py`, `hf_rules.py`) with its proof; a tokenizer without one gets `segmenter = None` and a
`method_reason` saying why, and counting encodes whole documents.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

from nbcli.errors import TokenizerError
from nbcli.limits import read_capped
from nbcli.provenance import sha256_bytes
from nbcli.tokenizers.segment import Segmenter

__all__ = ["DIRECTORY_CANDIDATES", "Segmenter", "Tokenizer", "load_tokenizer", "tokenizer_files",
           "tokenizer_from_bytes"]


@dataclass
class Tokenizer:
    """A loaded tokenizer with the interface nb needs. Build it with `load_tokenizer`."""

    path: Path
    kind: Literal["sentencepiece", "tokenizer.json"]
    sha256: str
    vocab_size: int
    bos_id: int | None
    eos_id: int | None
    pad_id: int | None
    unk_id: int | None
    special_ids: frozenset[int]
    segmenter: Segmenter | None  # the family's chunk rule; None: count whole documents
    method_reason: str  # why the segmenter applies, or why there is none
    encode_documents: Callable[[list[str]], list[list[int]]] = field(repr=False)
    id_to_piece: Callable[[int], str] = field(repr=False)
    impl: Any = field(repr=False)  # the library's own object (SentencePieceProcessor / tokenizers.Tokenizer)
    data: bytes = field(default=b"", repr=False)  # the file's bytes
    # Whether one EOS per document belongs in the counts by default, and why.
    eos_default: bool = True
    eos_default_reason: str = ""
    # What the loader changed in the file's settings so that counting sees every token and nothing
    # added (e.g. padding and truncation switched off); shown in count summaries.
    adjustments: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.path.name

    @functools.cached_property
    def fingerprint(self) -> str:
        """What decides its ids, hashed (nbcli.tokenizers.identity): equal for a re-saved copy of the
        same tokenizer, whose file bytes (`sha256`) differ."""
        from nbcli.tokenizers.identity import tokenizer_fingerprint

        return tokenizer_fingerprint(self)

    @property
    def chunk_rule(self) -> str | None:
        """The segmenter's name, None for whole-document counting."""
        return None if self.segmenter is None else self.segmenter.name

    def piece(self, token_id: int) -> str:
        """The vocabulary string of `token_id`."""
        return self.id_to_piece(token_id)

    def pieces(self) -> list[str]:
        return [self.piece(i) for i in range(self.vocab_size)]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text, without BOS/EOS or template special tokens."""
        return self.encode_documents(texts)

    def encode(self, text: str) -> list[int]:
        return self.encode_documents([text])[0]

    def decode(self, ids: list[int]) -> str:
        """Text of token ids (special tokens dropped), for generated continuations."""
        if self.kind == "sentencepiece":
            return self.impl.decode([i for i in ids if i not in self.special_ids])
        return self.impl.decode(ids, skip_special_tokens=True)

    def serialized(self) -> bytes:
        """The tokenizer file's bytes (to rebuild it in another process or on another machine)."""
        return self.data


# What `load_tokenizer` looks for in a directory (a Hugging Face model folder), in order.
DIRECTORY_CANDIDATES = ("tokenizer.json", "tokenizer.model")
_BOM = b"\xef\xbb\xbf"


def tokenizer_files(path: Path | str) -> list[Path]:
    """The files load_tokenizer(path) may read (a directory stands for its candidate files)."""
    from nbcli.resolve import local_path

    path = local_path(path, "tokenizer")
    return [path, *(path / name for name in DIRECTORY_CANDIDATES)] if path.is_dir() else [path]


def load_tokenizer(path: Path | str) -> Tokenizer:
    """Load a SentencePiece `.model` or a Hugging Face `tokenizer.json` (or a model folder holding
    one of `DIRECTORY_CANDIDATES`), or a Hub repo id (nbcli.resolve); TokenizerError if none."""
    from nbcli.resolve import local_path

    path = local_path(path, "tokenizer")
    if path.is_dir():
        for name in DIRECTORY_CANDIDATES:
            if (path / name).is_file():
                return load_tokenizer(path / name)
        raise TokenizerError(f"{path}: directory holds none of {', '.join(DIRECTORY_CANDIDATES)}")
    return tokenizer_from_bytes(read_capped(path, "tokenizer file", error=TokenizerError), path)


def tokenizer_from_bytes(data: bytes, path: Path | str) -> Tokenizer:
    """Build a Tokenizer from a tokenizer file's bytes; `path` names it in errors and metadata.

    The sha256 is always that of the bytes given (a UTF-8 byte-order mark included)."""
    path = Path(path)
    body = data[len(_BOM):] if data.startswith(_BOM) else data
    if body.lstrip()[:1] == b"{":
        from nbcli.tokenizers.hf import load_hf

        fields = load_hf(data, body, path)
    else:
        fields = _load_sentencepiece(data, path)
    return Tokenizer(path=path, sha256=sha256_bytes(data), data=data, **fields)


def _load_sentencepiece(data: bytes, path: Path) -> dict[str, Any]:
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
