"""The one tokenizer loader: a SentencePiece `.model`, a Hugging Face `tokenizer.json`, or a model folder.

Every command that needs a tokenizer calls `load_tokenizer`, which returns a `Tokenizer` with a small
common interface: ids, pieces, special ids, its fingerprint (`identity.py`: what decides the ids,
what outputs record of the tokenizer), batched encoding of whole documents, and (where it is
provably exact) a `Segmenter` (`nbcli.tokenizers.segment`): the family's chunk rule, which lets
counting encode each distinct chunk of a corpus only once. Each family's rule lives in its module
(`sentencepiece.py`, `hf_rules.py`) with its proof; a tokenizer without one gets `segmenter = None` and a
`method_reason` saying why, and counting encodes whole documents.

    __init__.py       Tokenizer, load_tokenizer (file, model folder or repo id), model_tokenizer
    segment.py        the Segmenter protocol and the byte-level helpers every rule shares; flat_ids
    sp_model.py       a SentencePiece .model: loading and the choice of its chunk rule
    sentencepiece.py  the proto reader and the BPE rules (default words, Llama-2 space runs)
    unigram.py        unigram models' chunks and exact lattice margins (--unigram-certificate)
    certificate.py    pure: the per-line certificate of unigram models (when chunks' ids are the line's), its proof
    hf.py             a tokenizer.json: loading and its EOS default
    hf_rules.py       tokenizer.json families' rules (ByteLevel, Split regex, WordPiece, Metaspace)
    words.py          `words:min-freq=K[,lower]`: a word-level tokenizer.json built from training data
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Iterable
from typing import Any, Callable, Literal

from nbcli.errors import TokenizerError
from nbcli.limits import read_capped
from nbcli.provenance import sha256_bytes
from nbcli.tokenizers.segment import Segmenter

__all__ = ["DIRECTORY_CANDIDATES", "Segmenter", "Tokenizer", "load_tokenizer", "model_tokenizer",
           "tokenizer_files", "tokenizer_from_bytes"]


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
    from nbcli.tokenizers.words import is_words_spec

    if is_words_spec(path):
        return []  # built from the training data: no file to read
    path = local_path(path, "tokenizer")
    return [path, *(path / name for name in DIRECTORY_CANDIDATES)] if path.is_dir() else [path]


def model_tokenizer(model: Path | str) -> Path:
    """The tokenizer file a model (path or repo id) carries, for commands given no -t: its folder's
    tokenizer.json, else tokenizer.model. Says which file it took (through the reporter)."""
    from nbcli.resolve import local_path, report

    found = local_path(model, "model")
    directory = found if found.is_dir() else found.parent
    for name in DIRECTORY_CANDIDATES:
        if (directory / name).is_file():
            report(f"tokenizer: {directory / name} (the model's own; -t/--tokenizer to use another)")
            return directory / name
    raise TokenizerError(f"{model}: no -t/--tokenizer given and the model carries no tokenizer "
                         f"({' or '.join(DIRECTORY_CANDIDATES)} in {directory}); pass -t TOK")


def load_tokenizer(path: Path | str, texts: Callable[[], Iterable[str]] | None = None) -> Tokenizer:
    """Load a SentencePiece `.model` or a Hugging Face `tokenizer.json` (or a model folder holding
    one of `DIRECTORY_CANDIDATES`), or a Hub repo id (nbcli.resolve); TokenizerError if none.

    `words:min-freq=K[,lower]` builds a word-level tokenizer.json from `texts()`, the training texts
    (nbcli.tokenizers.words); it is named `tokenizer.json` (where nb train saves it in the run)."""
    from nbcli.resolve import local_path
    from nbcli.tokenizers.words import build_word_tokenizer_json, is_words_spec, parse_words_spec

    if is_words_spec(path):
        spec = parse_words_spec(path)
        if texts is None:
            raise TokenizerError(f"-t {spec}: a word vocabulary is built from training data, so only nb train "
                                 "takes it; afterwards pass the run (its tokenizer.json)")
        return tokenizer_from_bytes(build_word_tokenizer_json(spec, texts()), Path("tokenizer.json"))
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
        from nbcli.tokenizers.sp_model import load_sentencepiece

        fields = load_sentencepiece(data, path)
    return Tokenizer(path=path, sha256=sha256_bytes(data), data=data, **fields)
