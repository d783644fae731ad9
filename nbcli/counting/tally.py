"""Token ids to exact unigram counts: small pure functions shared by the counting paths."""

from __future__ import annotations

import numpy as np

from nbcli.tokenizers.segment import flat_ids


def exact_bincount(tokens: np.ndarray, weights: np.ndarray, size: int) -> np.ndarray:
    """Integer weighted bincount. Float64 sums are exact here: every partial sum is an integer
    below the block's token count, far below 2**53."""
    return np.bincount(tokens, weights=weights, minlength=size).astype(np.int64)


def weighted_bincount(tokens: np.ndarray, lengths: np.ndarray, freqs: np.ndarray, size: int) -> np.ndarray:
    """Counts of `tokens`, texts back to back (text i has lengths[i] ids), each id weighted by its
    text's frequency freqs[i]; int64 [size]."""
    return exact_bincount(tokens, np.repeat(freqs.astype(np.float64), lengths), size)


def weighted_token_counts(encoded: list[list[int]], freqs: np.ndarray, size: int) -> np.ndarray:
    """Sum over i of freqs[i] x (one count per token id in encoded[i]), as int64 [size]."""
    return weighted_bincount(*flat_ids(encoded), freqs, size)


def token_counts(encoded: list[list[int]], size: int) -> np.ndarray:
    """One count per token id in `encoded`, as int64 [size]."""
    return np.bincount(flat_ids(encoded)[0], minlength=size)
