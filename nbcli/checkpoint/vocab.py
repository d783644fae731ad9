"""Does this vocabulary fit this model? The one policy for counts, tokenizers and embedding rows.

Every command that puts token-indexed data beside a model asks `check_vocab` (counts files through
`fit_counts`): patch-checkpoint (--set-output-bias, --zipfian-whiten-embeddings), probe-bias (-c),
eval and generate (-t, --counts, --by-frequency), transplant-embeddings (--counts against the target
tokenizer, --source-tokenizer against the source checkpoint) and train (--embedding-init
pretrained:FILE against --tokenizer).

The subject (`Vocabulary`: counts, a tokenizer, embedding rows) has a length and, where known, the
tokenizer it was made with. The model (`ModelVocab`) has rows and its tokenizer: `--tokenizer` (a
folder: each of its tokenizer files), else the checkpoint's nb metadata, else the tokenizer files of
its Hugging Face model folder (`model_vocab`). The rules:

1. Size (always): a subject longer than the model's rows is refused.
2. Identity: the two tokenizers are compared by fingerprint (nbcli.tokenizers.identity: pieces, ids,
   specials, normaliser; a re-saved copy matches), by file sha256 where a side comes from an older
   nb (with a warning saying so). Another tokenizer is refused; `allow_mismatch`
   (--allow-vocab-mismatch) turns this refusal, and only this one, into a warning. Nothing to
   compare with: a warning.
3. Rows past the subject (always): a shorter subject is accepted when the tokenizers matched (the
   rows past it are the model's own: padding, an appended <mask>), when its length is the model
   tokenizer's vocabulary size, or when the rows are its length rounded up to a multiple of 64 or
   128 (or config.json's `pad_vocab_size_multiple` / `make_vocab_size_divisible_by`): vocabulary
   padding. Otherwise it is another tokenizer's vocabulary, refused even with allow_mismatch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from nbcli.errors import CountsError, NbError
from nbcli.tokenizers.identity import TokenizerIdentity, compare, recorded_identity

if TYPE_CHECKING:
    from nbcli.counts import UnigramCounts

#: Tokenizer files a Hugging Face model folder may hold (any of them may have made the counts).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model")
PAD_MULTIPLES = (64, 128)
_CONFIG_MULTIPLE_KEYS = ("pad_vocab_size_multiple", "make_vocab_size_divisible_by")
ALLOW_OPTION = "--allow-vocab-mismatch"


@dataclass
class Vocabulary:
    """What is checked: `what` names it (a file, an option), `size` entries indexed by token id,
    made with the tokenizer `identity` (None: not recorded). `filled` says what the rows past it get
    (counts: "count 0"), None where nothing is filled in."""

    what: str
    size: int
    identity: TokenizerIdentity | None
    unit: str = "entries"
    filled: str | None = None


@dataclass
class ModelVocab:
    """The model side: its vocabulary rows, its tokenizer's identities (any may match) and where they
    came from, the multiples its rows may be padded to, what to give to name its tokenizer, and
    `label`, what the rows belong to (a checkpoint, a tokenizer option) in messages."""

    rows: int
    identities: tuple[TokenizerIdentity, ...] = ()
    where: str | None = None
    multiples: tuple[int, ...] = PAD_MULTIPLES
    hint: str = ""
    label: str = "the model"


@dataclass
class VocabCheck:
    """The outcome: whether the tokenizers matched ("same"), differed (and were allowed) or could not be
    compared ("unknown"), by what, against which reference, and the warnings to show."""

    tokenizer: Literal["same", "different", "unknown"] = "unknown"
    compared_by: str | None = None
    reference: str | None = None
    padding_rows: int = 0
    warnings: list[str] = field(default_factory=list)

    @property
    def tokenizer_checked(self) -> bool:
        return self.tokenizer == "same"

    def as_dict(self) -> dict[str, Any]:
        return {"tokenizer_checked": self.tokenizer_checked, "tokenizer_match": self.tokenizer,
                "compared_by": self.compared_by, "reference": self.reference, "padding_rows": self.padding_rows}


def _file_identity(path: Path) -> TokenizerIdentity:
    from nbcli.provenance import sha256_file
    from nbcli.tokenizers import load_tokenizer

    return TokenizerIdentity(str(path), sha256=sha256_file(path), load=lambda: load_tokenizer(path))


def padding_multiples(config: dict[str, Any] | None) -> tuple[int, ...]:
    """64, 128, and config.json's own multiple (first) when it names one."""
    own = [v for key in _CONFIG_MULTIPLE_KEYS if isinstance(v := (config or {}).get(key), int)
           and not isinstance(v, bool) and v > 0]
    return (*own, *PAD_MULTIPLES)


#: What patch-checkpoint and probe-bias suggest where the model names no tokenizer.
TOKENIZER_HINT = " (give --tokenizer FILE, the model's tokenizer)"


def model_vocab(checkpoint: Any, rows: int, tokenizer: Path | None = None, *, hint: str = "") -> ModelVocab:
    """The model side of `check_vocab` for a checkpoint with `rows` vocabulary rows: its tokenizer
    from `tokenizer` (a file, or a folder: each of its TOKENIZER_FILES), else the checkpoint's nb
    metadata, else the tokenizer files of its model folder; none found: no identities. `hint` ends
    the messages that found none (what to give)."""
    from nbcli.errors import TokenizerError

    multiples = padding_multiples(getattr(checkpoint, "model_config", None))
    label = str(getattr(checkpoint, "path", None) or "the model")
    if tokenizer is not None:
        from nbcli.resolve import local_path

        path = local_path(tokenizer, "tokenizer")
        files = [path / name for name in TOKENIZER_FILES if (path / name).is_file()] if path.is_dir() else [path]
        if not files or not all(f.is_file() for f in files):
            raise TokenizerError(f"--tokenizer {tokenizer}: no tokenizer file there (looked for "
                                 f"{', '.join(TOKENIZER_FILES)})")
        return ModelVocab(rows, tuple(map(_file_identity, files)), f"--tokenizer {tokenizer}", multiples, label=label)
    metadata = getattr(checkpoint, "metadata", None) or {}
    recorded = recorded_identity(metadata, metadata.get("nb.tokenizer") or "the tokenizer it records")
    if recorded is not None:
        recorded.recorded_vocab_size = None  # a checkpoint's nb.vocab_size (if any) is its rows, not its tokenizer's
        return ModelVocab(rows, (recorded,), "its nb metadata", multiples, hint, label)
    folder = getattr(checkpoint, "model_dir", None)
    files = [folder / name for name in TOKENIZER_FILES if (folder / name).is_file()] if folder is not None else []
    if files:
        return ModelVocab(rows, tuple(map(_file_identity, files)), "its model folder", multiples, hint, label)
    return ModelVocab(rows, (), None, multiples, hint, label)


def with_tokenizer(model: ModelVocab, tok: Any, where: str) -> ModelVocab:
    """`model` whose tokenizer is the loaded `tok` (e.g. eval's -t, once checked against the model)."""
    from nbcli.tokenizers.identity import tokenizer_identity

    return dataclasses.replace(model, identities=(tokenizer_identity(tok),), where=where, hint="")


def _padding_multiple(rows: int, size: int, multiples: tuple[int, ...]) -> int | None:
    """The multiple that makes `rows` the rounded-up `size`, if any."""
    for multiple in multiples:
        if -(-size // multiple) * multiple == rows:
            return multiple
    return None


def check_vocab(subject: Vocabulary, model: ModelVocab, *, allow_mismatch: bool = False,
                error: type[NbError] = CountsError) -> VocabCheck:
    """Whether `subject` fits `model` (the module's rules): raise `error` (one line naming both) or
    return the check with its warnings. `allow_mismatch` relaxes the identity rule only."""
    rows, size = model.rows, subject.size
    if size > rows:
        raise error(f"{subject.what}: {size} {subject.unit} do not fit the {rows} vocabulary rows of "
                    f"{model.label}: another tokenizer's vocabulary")
    result = VocabCheck(reference=model.where, padding_rows=rows - size)
    _check_identity(subject, model, result, allow_mismatch, error)
    if size < rows:
        _check_rows_past(subject, model, result, error)
    return result


def _check_identity(subject: Vocabulary, model: ModelVocab, result: VocabCheck, allow_mismatch: bool,
                    error: type[NbError]) -> None:
    """Rule 2: the subject's tokenizer against the model's (any of its identities may match)."""
    what, mine = subject.what, subject.identity
    if mine is None:
        result.warnings.append(f"{what}: records no tokenizer; cannot check that it matches the model's tokenizer")
        return
    if not model.identities:
        result.warnings.append(f"{what}: {model.label} names no tokenizer (no nb metadata, no tokenizer files "
                               f"beside it) to check it against{model.hint}")
        return
    matches = []
    for ref in model.identities:  # stop at the first match: the others' fingerprints are not computed
        matches.append(compare(mine, ref))
        if matches[-1].same:
            break
    legacy = [what] * mine.legacy + [f"{model.label} ({model.where})"] * any(i.legacy for i in model.identities)
    note = (f" (compared by file sha256: {' and '.join(legacy)} {'record' if len(legacy) > 1 else 'records'} "
            "no tokenizer fingerprint, written by an older nb, so a re-saved copy of the same tokenizer "
            "counts as another; remake it with this nb to record one)") if legacy else ""
    decided = [m for m in matches if m.same is not None]
    if decided:
        result.tokenizer = "same" if decided[-1].same else "different"
        result.compared_by = decided[-1].by
    if result.tokenizer == "different":
        theirs = " or ".join(i.describe() for i in model.identities)
        message = (f"{what}: tokenizer {mine.describe()} is not the tokenizer of {model.label} "
                   f"({model.where}: {theirs}): another tokenizer{note}")
        if not allow_mismatch:
            raise error(f"{message}; pass {ALLOW_OPTION} if their ids are the same")
        result.warnings.append(f"{message} ({ALLOW_OPTION}: used anyway)")
    elif legacy:
        result.warnings.append(note.strip(" ()"))


def _check_rows_past(subject: Vocabulary, model: ModelVocab, result: VocabCheck, error: type[NbError]) -> None:
    """Rule 3: a subject shorter than the model's rows: the same tokenizer, as many entries as the
    model's tokenizer has pieces, or vocabulary padding; else another tokenizer's vocabulary."""
    rows, size = model.rows, subject.size
    multiple = _padding_multiple(rows, size, model.multiples)
    if result.tokenizer == "same":
        why = "the tokenizer matched"
    elif multiple is not None:
        why = f"{rows} is {size} rounded up to a multiple of {multiple}"
    elif size in {i.vocab_size for i in model.identities}:
        why = "the model's tokenizer has as many pieces"
    else:
        shown = " or ".join(map(str, model.multiples))
        hint = model.hint if result.tokenizer == "unknown" else ""
        raise error(f"{subject.what}: {size} {subject.unit} for the {rows} vocabulary rows of {model.label}, and "
                    f"{rows} is not {size} rounded up to a multiple of {shown}: not vocabulary padding, "
                    f"another tokenizer's vocabulary{hint}")
    if subject.filled is not None:
        result.warnings.append(f"{subject.what}: {size} {subject.unit} for {rows} vocabulary rows; the last "
                               f"{rows - size} rows taken as vocabulary padding ({why}) with {subject.filled}")


def tokenizer_vocabulary(tok: Any, what: str) -> Vocabulary:
    """A loaded tokenizer (`what` names it: "-t FILE", "--source-tokenizer FILE") as the subject of
    `check_vocab`: its ids must be the model's."""
    from nbcli.tokenizers.identity import tokenizer_identity

    return Vocabulary(what, tok.vocab_size, tokenizer_identity(tok), unit="tokens")


def counts_vocabulary(counts: UnigramCounts, what: str | None = None) -> Vocabulary:
    """A counts file as the subject of `check_vocab`."""
    name = counts.metadata.get("nb.tokenizer") or "the counts' tokenizer"
    return Vocabulary(what or str(counts.path), int(counts.counts.size), recorded_identity(counts.metadata, name),
                      unit="counts", filled="count 0")


@dataclass
class FittedCounts:
    """A counts file checked against a model and padded to its rows: `counts` int64 [rows]; `info`
    describes the file and the check (for reports); `warnings` to show."""

    counts: np.ndarray
    info: dict[str, Any]
    warnings: list[str]
    check: VocabCheck
    source: UnigramCounts


def fit_counts(path: Path, model: ModelVocab, *, allow_mismatch: bool = False,
               allow_foreign: bool = False) -> FittedCounts:
    """Read a counts file (`allow_foreign`: any safetensors file with an integer `counts` vector),
    check it against `model` (`check_vocab`) and pad it with zeros to the model's rows."""
    from nbcli.counts import pad_counts, read_counts
    from nbcli.provenance import sha256_file

    counts = read_counts(path, allow_foreign=allow_foreign)
    check = check_vocab(counts_vocabulary(counts, str(path)), model, allow_mismatch=allow_mismatch)
    info = {"path": str(path), "sha256": sha256_file(path), "tokenizer_sha256": counts.tokenizer_sha256,
            "tokenizer_fingerprint": counts.tokenizer_fingerprint, "nb_file": counts.is_nb_file, **check.as_dict()}
    return FittedCounts(pad_counts(counts.counts, model.rows), info, check.warnings, check, counts)
