"""Unigram counts: the counts file format, merging, smoothing, and summary statistics.

The counts file (`nb.format = unigram-counts/1`) is a safetensors file with one int64 tensor
`counts` of shape [vocab_size] and string metadata recording how it was made.

`log_unigram` is the single place where counts become log-probabilities (paper 000, sec. 3: the
output bias is initialised to log p(y), the log-unigram distribution of the training data);
`pad_counts` fits counts to a model's (padded) vocabulary. `nbcli.ops.unigram_log_prior` is the two
together, as the tensor a model uses.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nbcli.atomic import write_bytes_atomic
from nbcli.errors import ConfigError, CountsError, NbError
from nbcli.jsonsafe import metadata_count
from nbcli.limits import input_stat
from nbcli.provenance import sha256_file, tool_version, utc_now

COUNTS_FORMAT = "unigram-counts/1"
DEFAULT_SMOOTHING_K = 1.0


# ---------------------------------------------------------------------------------------------
# The formula


def log_unigram(counts: np.ndarray, k: float = DEFAULT_SMOOTHING_K) -> np.ndarray:
    """Add-k smoothed natural-log unigram probabilities, float64.

    log p(i) = log(c_i + k) - log(sum_j c_j + k V)        (V = len(counts))

    With k > 0 every token, seen or not, gets a finite value; k = 1 is Laplace smoothing (nb's
    default). Paper 000 (sec. 3) sets the output bias to log p(y) but does not say how unseen
    tokens are handled; k is therefore an option (`--smoothing add-k:K`). k = 0 gives the
    maximum-likelihood estimate and is refused when any count is zero (it would give -inf).
    """
    c = np.asarray(counts, dtype=np.float64)
    if c.ndim != 1 or c.size == 0:
        raise ConfigError("counts must be a non-empty vector")
    if k < 0 or not math.isfinite(k):
        raise ConfigError(f"smoothing k must be a finite number >= 0, got {k}")
    if k == 0 and np.any(c == 0):
        raise ConfigError("add-k:0 (no smoothing) would give -inf to tokens with zero count; use k > 0")
    total = c.sum() + k * c.size
    if total <= 0:
        raise ConfigError("counts sum to zero; nothing to estimate")
    return np.log(c + k) - math.log(total)


def pad_counts(counts: np.ndarray, vocab_size: int) -> np.ndarray:
    """Counts as int64 [vocab_size]: a model vocabulary padded past the tokenizer's (e.g. 50257 ->
    50304 rows) gets count 0 for the padding rows, which never occur in a corpus. Longer counts
    were made with another tokenizer: an error."""
    c = np.asarray(counts)
    if c.ndim != 1:
        raise CountsError(f"counts must be a vector, got shape {list(c.shape)}")
    if c.size > vocab_size:
        raise CountsError(f"counts have {c.size} entries but the model's vocabulary has {vocab_size} "
                          "rows; these counts were made with another tokenizer")
    padded = np.zeros(vocab_size, dtype=np.int64)
    padded[:c.size] = c
    return padded


def parse_smoothing(spec: str) -> float:
    """Parse `add-k:K` (e.g. `add-k:0.5`) into K."""
    prefix = "add-k:"
    if not spec.startswith(prefix):
        raise ConfigError(f"--smoothing {spec!r}: expected add-k:K, e.g. add-k:1")
    try:
        k = float(spec[len(prefix):])
    except ValueError:
        raise ConfigError(f"--smoothing {spec!r}: K must be a number") from None
    if k < 0 or not math.isfinite(k):
        raise ConfigError(f"--smoothing {spec!r}: K must be a finite number >= 0")
    return k


def unigram_entropy(counts: np.ndarray) -> float:
    """Entropy in nats of the maximum-likelihood unigram distribution (zero counts contribute 0)."""
    c = np.asarray(counts, dtype=np.float64)
    total = c.sum()
    if total <= 0:
        return 0.0
    p = c[c > 0] / total
    return float(-(p * np.log(p)).sum())


# ---------------------------------------------------------------------------------------------
# The file format


@dataclass
class UnigramCounts:
    """A counts vector with its metadata (all values strings, as safetensors stores them)."""

    counts: np.ndarray
    metadata: dict[str, str] = field(default_factory=dict)
    path: Path | None = None

    @property
    def vocab_size(self) -> int:
        return int(self.counts.shape[0])

    @property
    def total(self) -> int:
        return exact_total(self.counts)

    @property
    def tokenizer_sha256(self) -> str | None:
        return self.metadata.get("nb.tokenizer_sha256")

    @property
    def tokenizer_fingerprint(self) -> str | None:
        """What decides the counting tokenizer's ids, hashed (nbcli.tokenizers.identity); None in
        files from an older nb, which record only the tokenizer file's sha256."""
        return self.metadata.get("nb.tokenizer_fingerprint")

    @property
    def is_nb_file(self) -> bool:
        return self.metadata.get("nb.format") == COUNTS_FORMAT


INT64_MAX = np.iinfo(np.int64).max


def read_counts(path: Path | str, *, allow_foreign: bool = False) -> UnigramCounts:
    """Read a counts file. `allow_foreign` accepts any safetensors file with an integer `counts`
    vector (counts made by other tools); callers should warn that no tokenizer is recorded.

    The header is read and validated by nb's one safetensors reader. Counts stored as any integer
    dtype are read exactly; a uint64 count above 2^63-1 (which int64 cannot hold) and floating-point
    or bool counts are refused, never rounded or wrapped."""
    from nbcli.checkpoint.format import read_header

    path = Path(path)
    input_stat(path, "counts file", error=CountsError)
    try:
        header = read_header(path)
    except NbError as err:
        reason = str(err).removeprefix(f"{path}: ")
        raise CountsError(f"{path}: not a safetensors counts file ({reason})") from None
    metadata = header.metadata
    info = header.tensors.get("counts")
    if info is None:
        raise CountsError(f"{path}: no 'counts' tensor (found: {', '.join(sorted(header.tensors)) or 'none'})")
    fmt = metadata.get("nb.format")
    if fmt != COUNTS_FORMAT and not allow_foreign:
        raise CountsError(f"{path}: nb.format is {fmt!r}, expected {COUNTS_FORMAT!r} (a file from nb count-unigrams)")
    dtype = _COUNT_DTYPES.get(info.dtype)
    if len(info.shape) != 1 or dtype is None:
        raise CountsError(f"{path}: 'counts' must be an integer vector, got {info.dtype} {list(info.shape)}")
    with open(path, "rb") as handle:
        handle.seek(info.start)
        data = handle.read(info.nbytes)
    if len(data) != info.nbytes:
        raise CountsError(f"{path}: 'counts' ends early (truncated file?)")
    raw = np.frombuffer(data, dtype=np.dtype(dtype).newbyteorder("<"))
    if raw.dtype.kind == "i" and raw.size and int(raw.min()) < 0:
        raise CountsError(f"{path}: 'counts' has negative entries (token {int(np.argmax(raw < 0))})")
    if raw.dtype == np.uint64 and raw.size and int(raw.max()) > INT64_MAX:
        raise CountsError(f"{path}: 'counts' entry {int(raw.max())} (token {int(np.argmax(raw > INT64_MAX))}) "
                          "exceeds 2^63-1, the largest count nb can hold")
    counts = raw.astype(np.int64)
    for key in ("nb.documents", "nb.bytes_read", "nb.total_tokens", "nb.vocab_size"):
        metadata_count(metadata, key, path, error=CountsError)
    return UnigramCounts(counts=counts, metadata=dict(metadata), path=path)


#: safetensors integer dtype codes -> numpy dtype names (floating-point and bool counts are refused)
_COUNT_DTYPES = {"I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8",
                 "U64": "uint64", "U32": "uint32", "U16": "uint16", "U8": "uint8"}


def exact_total(counts: np.ndarray) -> int:
    """sum(counts) as an exact Python int (an int64 sum wraps past 2^63-1)."""
    if counts.size == 0:
        return 0
    if int(counts.max()) <= INT64_MAX // counts.size:
        return int(counts.sum())
    return sum(counts.tolist())


def counts_file_bytes(counts: UnigramCounts) -> bytes:
    """The bytes of a counts file: safetensors with an int64 `counts` vector and the metadata."""
    from safetensors.numpy import save

    metadata = {"nb.format": COUNTS_FORMAT, **counts.metadata}
    return save({"counts": np.ascontiguousarray(counts.counts, dtype=np.int64)}, metadata=metadata)


def write_counts(path: Path | str, counts: UnigramCounts) -> None:
    """Write a counts file atomically (temporary file in the target directory, then rename)."""
    write_bytes_atomic(path, counts_file_bytes(counts))


def merge_counts(parts: list[UnigramCounts]) -> UnigramCounts:
    """Sum counts files made with the same tokenizer (same fingerprint, or same file sha256 for files
    from an older nb; nbcli.tokenizers.identity) and vocabulary size."""
    from nbcli.tokenizers.identity import compare, recorded_identity

    if not parts:
        raise CountsError("nothing to merge")
    first = parts[0]
    mine = recorded_identity(first.metadata, first.metadata.get("nb.tokenizer", "tokenizer"))
    for part in parts[1:]:
        if part.vocab_size != first.vocab_size:
            raise CountsError(
                f"{part.path}: vocab size {part.vocab_size} differs from {first.path} ({first.vocab_size})"
            )
        theirs = recorded_identity(part.metadata, part.metadata.get("nb.tokenizer", "tokenizer"))
        if (mine is None) != (theirs is None) or (mine and theirs and not compare(mine, theirs).same):
            raise CountsError(
                f"{part.path}: tokenizer {theirs.describe() if theirs else '(none recorded)'} differs from "
                f"{first.path}'s ({mine.describe() if mine else 'none recorded'})"
            )
    total = np.zeros(first.vocab_size, dtype=np.int64)
    for part in parts:
        room = INT64_MAX - total
        if np.any(part.counts > room):
            token = int(np.argmax(part.counts > room))
            raise CountsError(f"{part.path}: the count of token {token} would exceed 2^63-1 after adding this file "
                              f"({int(total[token])} + {int(part.counts[token])}); nothing was written")
        total += part.counts
    keys = ("nb.tokenizer", "nb.tokenizer_sha256", "nb.tokenizer_fingerprint", "nb.vocab_size")
    metadata = {k: first.metadata[k] for k in keys if k in first.metadata}
    metadata.update({
        "nb.version": tool_version(),
        "nb.created": utc_now(),
        "nb.total_tokens": str(exact_total(total)),
        "nb.documents": str(sum(metadata_count(p.metadata, "nb.documents", p.path, error=CountsError) or 0
                                for p in parts)),
        "nb.bytes_read": str(sum(metadata_count(p.metadata, "nb.bytes_read", p.path, error=CountsError) or 0
                                 for p in parts)),
        "nb.merged_from": json.dumps(
            [{"file": str(p.path), "sha256": sha256_file(p.path) if p.path else None,
              "total_tokens": p.total} for p in parts]
        ),
    })
    return UnigramCounts(counts=total, metadata=metadata)


def merge_counts_files(inputs: list[Path | str], output: Path | str) -> dict[str, Any]:
    """`nb merge-counts`: check `output` against the inputs (`guard_outputs`), sum the files
    (`merge_counts`: same tokenizer and vocabulary, or CountsError) and write the result
    atomically. Returns the report (what `--json` prints)."""
    from nbcli.outputs import guard_outputs

    guard_outputs([output], inputs)
    merged = merge_counts([read_counts(p) for p in inputs])
    write_counts(output, merged)
    return {"output": str(output), "inputs": [str(p) for p in inputs], "tokens": merged.total,
            "vocab_size": merged.vocab_size, "tokenizer_sha256": merged.tokenizer_sha256,
            "tokenizer_fingerprint": merged.tokenizer_fingerprint}


# ---------------------------------------------------------------------------------------------
# Summaries


@dataclass
class CountsSummary:
    total_tokens: int
    distinct_types: int
    vocab_size: int
    entropy_nats: float
    top: list[tuple[int, int]]

    @property
    def coverage(self) -> float:
        return self.distinct_types / self.vocab_size if self.vocab_size else 0.0

    @property
    def entropy_bits(self) -> float:
        return self.entropy_nats / math.log(2)


def summarize_counts(counts: np.ndarray, top_k: int = 10) -> CountsSummary:
    """Tokens, distinct types, coverage, entropy and the `top_k` most frequent ids."""
    order = np.argsort(-counts, kind="stable")[:top_k]
    top = [(int(i), int(counts[i])) for i in order if counts[i] > 0]
    return CountsSummary(
        total_tokens=exact_total(counts), distinct_types=int(np.count_nonzero(counts)),
        vocab_size=int(counts.shape[0]), entropy_nats=unigram_entropy(counts), top=top,
    )


def counts_tsv(counts: np.ndarray, pieces: list[str], k: float) -> str:
    """`id<TAB>piece<TAB>count<TAB>logprob` rows sorted by id; logprob from `log_unigram(counts, k)`."""
    logp = log_unigram(counts, k)
    escape = str.maketrans({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\\": "\\\\"})
    lines = [f"# logprob = log((count + {k:g}) / (total + {k:g} * V)), add-k smoothing, natural log",
             "id\tpiece\tcount\tlogprob"]
    lines += [f"{i}\t{pieces[i].translate(escape)}\t{int(counts[i])}\t{logp[i]:.9g}" for i in range(len(pieces))]
    return "\n".join(lines) + "\n"
