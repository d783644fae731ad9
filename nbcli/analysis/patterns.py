"""Paper 001's attention patterns (Deshpande & Narasimhan, app. A.2): which heads are guided to which
pattern (sec. 3.2) and the target matrix of each, for the AG loss (`nbcli.train.guidance`) and for
comparing trained heads with them (`nbcli.analysis.attention`, `nb attention-maps`).

Conventions (0-based positions; sequence b has n_b real tokens followed by padding):

* Row i of a head may attend to keys A_i = {j < n} (bidirectional) or {j <= min(i, n-1)} (causal).
* [Next]  P[i, i+1] = 1; the last real row is uniform over A_i (app. A.2: 1/n).
* [Prev]  P[i, i-1] = 1; the first row is uniform over A_0.
* [First] P[i, 0] = 1.
* [Delim] / [Period]: P[i, j] = 1/c_i on the c_i keys in A_i whose id is a delimiter (the tokenizer's
  BOS/EOS/special ids) or a "." piece; a row with c_i = 0 is uniform over A_i (our choice; app. A.2
  is cut off in the available copy, and this mirrors the uniform rows of [Next]/[Prev]).
* Padding rows are all-zero and never enter the loss; padding keys get no attention.
* [Next] is impossible under a causal mask (row i cannot see i+1): refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from nbcli.errors import ConfigError

PATTERNS = ("next", "prev", "first", "delim", "period")
ONE_HOT = ("next", "prev", "first")
UNIFORM_ROW = -1   # target index meaning "uniform over the attendable keys"
PAD_ROW = -2       # target index meaning "padding: not in the loss"


def parse_patterns(spec: str | None) -> tuple[str, ...] | None:
    """`next,prev,first` -> ("next", "prev", "first"); None stays None (paper default)."""
    if spec is None or spec == "":
        return None
    names = tuple(s.strip().lower() for s in spec.split(","))
    for name in names:
        if name not in PATTERNS:
            raise ConfigError(f"--ag-patterns: unknown pattern {name!r} (choose from {', '.join(PATTERNS)})")
    return names


def assign_heads(n_head: int, fraction: float, patterns: Sequence[str] | None, causal: bool) -> dict[int, str]:
    """Head index -> pattern, the same in every layer (paper 001 sec. 3.2).

    round(fraction * n_head) heads are guided. Default (sec. 4.5): one head [Next], one [Prev], the
    rest [First]; causal models drop [Next] (one [Prev], the rest [First]). An explicit list is given
    to heads 0, 1, ... in order and its last pattern fills the remaining guided heads.
    """
    if not 0.0 <= fraction <= 1.0:
        raise ConfigError(f"--ag-fraction must be in [0, 1], got {fraction}")
    n_guided = round(fraction * n_head)
    if fraction > 0 and n_guided == 0:
        raise ConfigError(f"--ag-fraction {fraction} of {n_head} heads rounds to 0 guided heads")
    if n_guided == 0:
        return {}
    if patterns is None:
        patterns = ("prev", "first") if causal else ("next", "prev", "first")
        patterns = patterns[:n_guided]
    if causal and "next" in patterns:
        raise ConfigError("--ag-patterns: [Next] is impossible in a causal model (a position cannot attend "
                          "to the next token); use prev, first, delim or period, or --objective mlm")
    if len(patterns) > n_guided:
        raise ConfigError(f"--ag-patterns lists {len(patterns)} patterns but --ag-fraction {fraction} guides "
                          f"only {n_guided} of {n_head} heads")
    full = list(patterns) + [patterns[-1]] * (n_guided - len(patterns))
    return dict(enumerate(full))


def allowed_keys(lengths: torch.Tensor, T: int, causal: bool) -> torch.Tensor:
    """[B, T, T] bool: row i may attend key j (real key, and j <= i when causal). Padding rows keep
    their real keys (their output is ignored) so softmax never sees an empty row."""
    j = torch.arange(T, device=lengths.device)
    allowed = (j[None, None, :] < lengths[:, None, None]).expand(-1, T, -1)
    if causal:
        allowed = allowed & (j[None, :, None] >= j[None, None, :])
    return allowed


def one_hot_targets(name: str, lengths: torch.Tensor, T: int, causal: bool) -> torch.Tensor:
    """[B, T] long: the attended key t(i) of each row, UNIFORM_ROW, or PAD_ROW (app. A.2)."""
    i = torch.arange(T, device=lengths.device).expand(lengths.numel(), T)
    n = lengths[:, None]
    if name == "next":
        if causal:
            raise ConfigError("[Next] is impossible in a causal model")
        t = torch.where(i == n - 1, UNIFORM_ROW, i + 1)
    elif name == "prev":
        t = torch.where(i == 0, UNIFORM_ROW, i - 1)
    elif name == "first":
        t = torch.zeros_like(i)
    else:
        raise ConfigError(f"{name} is not a one-hot pattern")
    return torch.where(i < n, t, PAD_ROW)


def pattern_matrix(name: str, ids: torch.Tensor, lengths: torch.Tensor, causal: bool,
                   delim_ids: torch.Tensor | Sequence[int] = (),
                   period_ids: torch.Tensor | Sequence[int] = ()) -> torch.Tensor:
    """The explicit pattern P [B, T, T] (float32) of app. A.2 under the conventions above. The
    [Delim] / [Period] targets: a tensor on ids' device (used as is: what a training step passes,
    `Guidance` holding them once per device) or a sequence of ids (copied to the device here)."""
    B, T = ids.shape
    allowed = allowed_keys(lengths, T, causal).float()
    real_row = (torch.arange(T, device=ids.device)[None, :] < lengths[:, None]).float()[:, :, None]
    uniform = allowed / allowed.sum(-1, keepdim=True)
    if name in ONE_HOT:
        t = one_hot_targets(name, lengths, T, causal)
        P = torch.zeros(B, T, T, device=ids.device)
        hot = t >= 0
        P.scatter_(2, t.clamp(min=0)[:, :, None], hot.float()[:, :, None])
        P = torch.where((t == UNIFORM_ROW)[:, :, None], uniform, P)
        return P * real_row
    if name not in ("delim", "period"):
        raise ConfigError(f"unknown pattern {name!r}")
    special = delim_ids if name == "delim" else period_ids
    is_target = torch.isin(ids, torch.as_tensor(special, dtype=ids.dtype, device=ids.device))
    hits = allowed * is_target[:, None, :].float()
    count = hits.sum(-1, keepdim=True)
    P = torch.where(count > 0, hits / count.clamp(min=1), uniform)
    return P * real_row


def delimiter_ids(special_ids: Sequence[int], bos_id: int | None, eos_id: int | None) -> tuple[int, ...]:
    """[Delim] targets: the tokenizer's BOS/EOS and other special ids (not padding/unknown)."""
    ids = set(special_ids)
    ids.update(i for i in (bos_id, eos_id) if i is not None)
    return tuple(sorted(ids))


def pattern_token_ids(tokenizer: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(delim_ids, period_ids) of a loaded `nbcli.tokenizers.Tokenizer`: [Delim] targets are its special
    ids but padding/unknown, plus BOS/EOS; [Period] targets its "." pieces (app. A.2)."""
    pad_like = {i for i in (tokenizer.pad_id, tokenizer.unk_id) if i is not None}
    return (delimiter_ids(sorted(set(tokenizer.special_ids) - pad_like), tokenizer.bos_id, tokenizer.eos_id),
            period_piece_ids(tokenizer.pieces()))


def period_piece_ids(pieces: Sequence[str]) -> tuple[int, ...]:
    """[Period] targets: pieces that are "." (with or without a word-boundary marker)."""
    return tuple(i for i, p in enumerate(pieces) if p.lstrip("\u2581\u0120 ") == ".")
