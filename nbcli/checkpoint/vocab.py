"""Do these counts belong to this checkpoint? Tokenizer hashes and vocabulary sizes, compared once.

Used by patch-checkpoint (`--set-output-bias`) and probe-bias. A counts file from `nb count-unigrams`
records the sha256 of its tokenizer file's bytes (`nb.tokenizer_sha256`). The model's tokenizer is
known from `--tokenizer FILE`, else from nb's own checkpoint metadata (`nb.tokenizer_sha256`), else
from the tokenizer files of the checkpoint's Hugging Face model folder (tokenizer.json,
tokenizer.model, spiece.model, sentencepiece.bpe.model: counts made with any of them match).
Different hashes are an error. A counts vector shorter than the embedding is vocabulary padding
only when the hashes matched, or the rows are the counts' length rounded up to a multiple of 64
or 128, or config.json names the multiple (`pad_vocab_size_multiple`,
`make_vocab_size_divisible_by`); anything else is an error. `allow_mismatch` turns the errors into
warnings (the counts are then padded or refused as before: longer counts never fit).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbcli.errors import CountsError

#: Tokenizer files a Hugging Face model folder may hold (any of them may have made the counts).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model")
PAD_MULTIPLES = (64, 128)
_CONFIG_MULTIPLE_KEYS = ("pad_vocab_size_multiple", "make_vocab_size_divisible_by")


@dataclass
class VocabCheck:
    """The outcome: whether the tokenizer hash was compared and matched, and warnings to show."""

    tokenizer_checked: bool = False
    reference: str | None = None
    """what the counts were compared with (a file, or the checkpoint's metadata)"""
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"tokenizer_checked": self.tokenizer_checked, "reference": self.reference}


def tokenizer_hashes(checkpoint: Any, tokenizer: Path | None) -> tuple[dict[str, str], str | None]:
    """sha256 -> description of the model's tokenizer file(s), and where they came from."""
    from nbcli.provenance import sha256_file

    if tokenizer is not None:
        from nbcli.resolve import local_path

        path = local_path(tokenizer, "tokenizer")
        files = [path / name for name in TOKENIZER_FILES if (path / name).is_file()] if path.is_dir() else [path]
        if not files or not all(f.is_file() for f in files):
            raise CountsError(f"--tokenizer {tokenizer}: no tokenizer file there (looked for {', '.join(TOKENIZER_FILES)})")
        return {sha256_file(f): str(f) for f in files}, f"--tokenizer {tokenizer}"
    recorded = getattr(checkpoint, "metadata", {}).get("nb.tokenizer_sha256")
    if recorded:
        return {recorded: "the checkpoint's nb.tokenizer_sha256"}, "the checkpoint's metadata"
    folder = getattr(checkpoint, "model_dir", None)
    if folder is not None:
        files = [folder / name for name in TOKENIZER_FILES if (folder / name).is_file()]
        if files:
            return {sha256_file(f): str(f) for f in files}, f"the model folder's {', '.join(f.name for f in files)}"
    return {}, None


def _padding_multiple(rows: int, size: int, config: dict[str, Any] | None) -> int | None:
    """The multiple that makes `rows` the rounded-up `size`, if any (or config.json's own)."""
    multiples = list(PAD_MULTIPLES)
    for key in _CONFIG_MULTIPLE_KEYS:
        value = (config or {}).get(key)
        if isinstance(value, int) and value > 0:
            multiples.insert(0, value)
    for multiple in multiples:
        if -(-size // multiple) * multiple == rows:
            return multiple
    return None


def check_counts(counts_path: Path, counts_sha: str | None, size: int, rows: int, checkpoint: Any, *,
                 tokenizer: Path | None = None, allow_mismatch: bool = False) -> VocabCheck:
    """Raise CountsError (or warn, with `allow_mismatch`) unless counts of `size` entries made with
    the tokenizer hashed `counts_sha` fit a checkpoint whose vocabulary has `rows` rows."""
    result = VocabCheck()
    expected, where = tokenizer_hashes(checkpoint, tokenizer)
    result.reference = where

    def refuse(message: str) -> None:
        if not allow_mismatch:
            raise CountsError(f"{message}; pass --allow-vocab-mismatch to use them anyway")
        result.warnings.append(f"{message} (--allow-vocab-mismatch: used anyway)")

    if expected and counts_sha:
        if counts_sha in expected:
            result.tokenizer_checked = True
        else:
            refuse(f"{counts_path}: counted with tokenizer sha256 {counts_sha[:12]}..., but {where} "
                   f"{'is' if len(expected) == 1 else 'are'} {', '.join(h[:12] + '...' for h in expected)}: "
                   "these counts come from another tokenizer")
    elif not counts_sha:
        result.warnings.append(f"{counts_path}: no nb tokenizer hash; cannot check that these counts match the "
                               "checkpoint's tokenizer")
    elif not expected:
        result.warnings.append(f"{counts_path}: the checkpoint names no tokenizer to check the counts' against "
                               "(give --tokenizer FILE)")
    if size > rows:
        raise CountsError(f"{counts_path}: {size} counts but the checkpoint's vocabulary has {rows} rows; these "
                          "counts were made with another tokenizer")
    if size < rows:
        multiple = _padding_multiple(rows, size, getattr(checkpoint, "model_config", None))
        if result.tokenizer_checked or multiple is not None:
            why = (f"{rows} is {size} rounded up to a multiple of {multiple}" if multiple is not None
                   else "the tokenizer hash matched")
            result.warnings.append(f"{counts_path}: {size} counts for {rows} embedding rows; the last "
                                   f"{rows - size} rows taken as vocabulary padding ({why}) with count 0")
        else:
            refuse(f"{counts_path}: {size} counts for {rows} embedding rows, and {rows} is not {size} rounded up "
                   f"to a multiple of {' or '.join(map(str, PAD_MULTIPLES))}: not vocabulary padding, these counts "
                   "look like another tokenizer's")
    return result
