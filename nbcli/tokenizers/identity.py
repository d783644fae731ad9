"""Tokenizer identity by vocabulary: is this the tokenizer those ids came from?

A tokenizer's *fingerprint* is the sha256 of a canonical form of what decides its ids: the pieces
and their ids, the special and added tokens with their ids, the normaliser and pre-tokeniser, and
the model type with what drives segmentation (BPE merges, unigram or SentencePiece scores)
(`nbcli.tokenizers.sentencepiece.sentencepiece_identity`, `nbcli.tokenizers.hf.hf_identity`). How
the file was written does not enter it, so a tokenizer re-saved by transformers' `save_pretrained`
keeps its fingerprint while its bytes (and sha256) change.

Counts files, nb checkpoints and transplanted embeddings record the tokenizer they were made with
(`identity_metadata`): its fingerprint (`nb.tokenizer_fingerprint`) and its file's sha256
(`nb.tokenizer_sha256`). Files from an older nb record only the sha256; `compare` then falls
back to the sha256 (equal bytes), and says so (`Match.by`). Whether a vocabulary fits a model is
decided in one place, `nbcli.checkpoint.vocab.check_vocab`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

FINGERPRINT_KEY = "nb.tokenizer_fingerprint"
SHA256_KEY = "nb.tokenizer_sha256"
NAME_KEY = "nb.tokenizer"
#: The canonical form's version; fingerprints of different versions are not compared.
VERSION = "nbtok1"


def fingerprint_of(content: dict[str, Any]) -> str:
    """`VERSION:` + sha256 of the canonical JSON of an identity (sorted keys, no spaces)."""
    text = json.dumps(content, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return f"{VERSION}:{hashlib.sha256(text.encode('utf-8')).hexdigest()}"


def tokenizer_fingerprint(tok: Any) -> str:
    """The fingerprint of a loaded `nbcli.tokenizers.Tokenizer` (`Tokenizer.fingerprint` caches it)."""
    if tok.kind == "sentencepiece":
        from nbcli.errors import TokenizerError
        from nbcli.tokenizers.sentencepiece import sentencepiece_identity

        try:
            content = sentencepiece_identity(tok.data)
        except (ValueError, IndexError, TypeError):
            raise TokenizerError(f"{tok.path}: cannot read the SentencePiece model's pieces for its "
                                 "fingerprint") from None
    else:
        from nbcli.tokenizers.hf import hf_identity

        content = hf_identity(tok.impl)
    return fingerprint_of(content)


@dataclass
class TokenizerIdentity:
    """The tokenizer a vocabulary-indexed thing (counts, a model's rows, a tokenizer) was made with,
    as far as it is known: a recorded sha256 and fingerprint, or a tokenizer to compute them from
    (`load`, called at most once, only when the fingerprint or vocabulary size is asked for)."""

    name: str
    """names it in messages: a file, or what recorded it"""
    sha256: str | None = None
    recorded_fingerprint: str | None = None
    recorded_vocab_size: int | None = None
    load: Callable[[], Any] | None = field(default=None, repr=False)
    _loaded: Any = field(default=None, repr=False)

    def _tokenizer(self) -> Any:
        if self._loaded is None and self.load is not None:
            self._loaded = self.load()
        return self._loaded

    @property
    def fingerprint(self) -> str | None:
        if self.recorded_fingerprint is not None:
            return self.recorded_fingerprint
        tok = self._tokenizer()
        return None if tok is None else tok.fingerprint

    @property
    def vocab_size(self) -> int | None:
        if self.recorded_vocab_size is not None:
            return self.recorded_vocab_size
        tok = self._tokenizer()
        return None if tok is None else tok.vocab_size

    @property
    def legacy(self) -> bool:
        """Recorded by an older nb: a file sha256 and no fingerprint (a re-save counts as another)."""
        return self.load is None and self.recorded_fingerprint is None and self.sha256 is not None

    def describe(self) -> str:
        """`name [fingerprint 1a2b3c4d5e6f]` (or the sha256 where no fingerprint is known)."""
        fp = self.fingerprint
        if fp is not None:
            return f"{self.name} [fingerprint {fp.partition(':')[2][:12]}]"
        return f"{self.name} [sha256 {self.sha256[:12]}]" if self.sha256 else self.name


def tokenizer_identity(tok: Any, name: str | None = None) -> TokenizerIdentity:
    """The identity of a loaded `nbcli.tokenizers.Tokenizer` (its fingerprint computed when asked)."""
    return TokenizerIdentity(name or str(tok.path), sha256=tok.sha256, recorded_vocab_size=tok.vocab_size,
                             load=lambda: tok)


def recorded_identity(metadata: Mapping[str, str], name: str) -> TokenizerIdentity | None:
    """The identity a counts file or checkpoint records (`nb.tokenizer_fingerprint`,
    `nb.tokenizer_sha256`, `nb.vocab_size`), None where it records neither."""
    sha, fp = metadata.get(SHA256_KEY) or None, metadata.get(FINGERPRINT_KEY) or None
    if sha is None and fp is None:
        return None
    size = metadata.get("nb.vocab_size", "")
    return TokenizerIdentity(name, sha256=sha, recorded_fingerprint=fp,
                             recorded_vocab_size=int(size) if size.isdigit() else None)


def identity_metadata(tok: Any) -> dict[str, str]:
    """What an output made with `tok` records of it: its file's name and sha256, and its fingerprint."""
    return {NAME_KEY: tok.name, SHA256_KEY: tok.sha256, FINGERPRINT_KEY: tok.fingerprint}


@dataclass(frozen=True)
class Match:
    """The outcome of `compare`: `same` True/False (None: nothing to compare), and `by` what:
    "sha256" where the files' bytes are equal or a side records no fingerprint (an older nb)."""

    same: bool | None
    by: Literal["fingerprint", "sha256"] | None


def _version(fingerprint: str | None) -> str | None:
    return None if fingerprint is None else fingerprint.partition(":")[0]


def compare(a: TokenizerIdentity, b: TokenizerIdentity) -> Match:
    """Same tokenizer? Equal file bytes are; otherwise equal fingerprints decide, and where a side
    has none (a file from an older nb) the sha256 decide (a re-saved copy then counts as another)."""
    if a.sha256 and b.sha256 and a.sha256 == b.sha256:
        return Match(True, "sha256")
    fa, fb = a.fingerprint, b.fingerprint
    if fa is not None and fb is not None and _version(fa) == _version(fb):
        return Match(fa == fb, "fingerprint")
    if a.sha256 and b.sha256:
        return Match(False, "sha256")
    return Match(None, None)
