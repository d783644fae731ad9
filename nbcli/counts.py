"""Unigram counts: the counts file format, merging, smoothing, and summary statistics.

The counts file (`nb.format = unigram-counts/1`) is a safetensors file with one int64 tensor
`counts` of shape [vocab_size] and string metadata recording how it was made.

`log_unigram` is the single place where counts become log-probabilities (paper 000, sec. 3: the
output bias is initialised to log p(y), the log-unigram distribution of the training data).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nbcli.atomic import write_bytes_atomic
from nbcli.errors import ConfigError, CountsError
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
        return int(self.counts.sum())

    @property
    def tokenizer_sha256(self) -> str | None:
        return self.metadata.get("nb.tokenizer_sha256")

    @property
    def is_nb_file(self) -> bool:
        return self.metadata.get("nb.format") == COUNTS_FORMAT


def read_counts(path: Path | str, *, allow_foreign: bool = False) -> UnigramCounts:
    """Read a counts file. `allow_foreign` accepts any safetensors file with an integer `counts`
    vector (counts made by other tools); callers should warn that no tokenizer hash is known."""
    from safetensors import SafetensorError
    from safetensors.numpy import safe_open

    path = Path(path)
    input_stat(path, "counts file", error=CountsError)
    try:
        with safe_open(str(path), framework="numpy") as handle:
            metadata = dict(handle.metadata() or {})
            keys = set(handle.keys())
            if "counts" not in keys:
                raise CountsError(f"{path}: no 'counts' tensor (found: {', '.join(sorted(keys)) or 'none'})")
            counts = handle.get_tensor("counts")
    except SafetensorError as err:
        raise CountsError(f"{path}: not a safetensors counts file ({err})") from None
    except (OSError, ValueError) as err:
        raise CountsError(f"{path}: not a safetensors counts file ({err})") from None
    fmt = metadata.get("nb.format")
    if fmt != COUNTS_FORMAT and not allow_foreign:
        raise CountsError(f"{path}: nb.format is {fmt!r}, expected {COUNTS_FORMAT!r} (a file from nb count-unigrams)")
    if counts.ndim != 1 or not np.issubdtype(counts.dtype, np.integer):
        raise CountsError(f"{path}: 'counts' must be an integer vector, got {counts.dtype} {list(counts.shape)}")
    if np.any(counts < 0):
        raise CountsError(f"{path}: 'counts' has negative entries")
    return UnigramCounts(counts=counts.astype(np.int64), metadata=metadata, path=path)


def counts_file_bytes(counts: UnigramCounts) -> bytes:
    """The bytes of a counts file: safetensors with an int64 `counts` vector and the metadata."""
    from safetensors.numpy import save

    metadata = {"nb.format": COUNTS_FORMAT, **counts.metadata}
    return save({"counts": np.ascontiguousarray(counts.counts, dtype=np.int64)}, metadata=metadata)


def write_counts(path: Path | str, counts: UnigramCounts) -> None:
    """Write a counts file atomically (temporary file in the target directory, then rename)."""
    write_bytes_atomic(path, counts_file_bytes(counts))


def merge_counts(parts: list[UnigramCounts]) -> UnigramCounts:
    """Sum counts files made with the same tokenizer (same sha256 and vocabulary size)."""
    if not parts:
        raise CountsError("nothing to merge")
    first = parts[0]
    for part in parts[1:]:
        if part.vocab_size != first.vocab_size:
            raise CountsError(
                f"{part.path}: vocab size {part.vocab_size} differs from {first.path} ({first.vocab_size})"
            )
        if part.tokenizer_sha256 != first.tokenizer_sha256:
            raise CountsError(
                f"{part.path}: tokenizer sha256 {part.tokenizer_sha256} differs from {first.path} "
                f"({first.tokenizer_sha256})"
            )
    total = np.zeros(first.vocab_size, dtype=np.int64)
    for part in parts:
        total += part.counts
    keys = ("nb.tokenizer", "nb.tokenizer_sha256", "nb.vocab_size")
    metadata = {k: first.metadata[k] for k in keys if k in first.metadata}
    metadata.update({
        "nb.version": tool_version(),
        "nb.created": utc_now(),
        "nb.total_tokens": str(int(total.sum())),
        "nb.documents": str(sum(int(p.metadata.get("nb.documents", "0")) for p in parts)),
        "nb.bytes_read": str(sum(int(p.metadata.get("nb.bytes_read", "0")) for p in parts)),
        "nb.merged_from": json.dumps(
            [{"file": str(p.path), "sha256": sha256_file(p.path) if p.path else None,
              "total_tokens": p.total} for p in parts]
        ),
    })
    return UnigramCounts(counts=total, metadata=metadata)


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
        total_tokens=int(counts.sum()), distinct_types=int(np.count_nonzero(counts)),
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
