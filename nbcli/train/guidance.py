"""Attention guidance (paper 001, Deshpande & Narasimhan): the AG loss (eqs. 2-4) of heads guided to the
patterns of app. A.2 (`nbcli.analysis.patterns`: which heads, the target matrices and their conventions).

Units of L_AG (`reduction`, `--ag-reduction`):

* "mse" (default): the released code's units (ameet-1997/AttentionGuidance, trainer_ag.py
  `compute_ag_loss`: one `nn.MSELoss()` per layer and pattern group, the terms summed):

      L_AG = sum_layers sum_groups g  1/(B k_g T^2) sum_b sum_{h in g} ||H_bh - P_bh||_F^2

  where group g holds the k_g heads guided to one pattern and T is the padded block length. A group
  of k heads is therefore *averaged*, and each map is divided by T^2. Padding rows (and keys) give
  zero error and still count in the denominator, as the release's fixed-length blocks do. In these
  units the paper's alpha_0 = 100 (small models) / 10 (12-16 layers) and sec. 4.5's rule ("the scales
  of the MLM loss and auxiliary loss are comparable at the beginning of training") agree.
* "frobenius": eq. 2-3 as printed, sum over guided (layer, head) of ||H - P||_F^2, averaged over the
  batch (so B does not change it). Each group's term is k_g T^2 times its "mse" term (at T = 128 and one
  head, 16384x): alpha_0 must shrink by the same factor.

The total loss is L_LM + alpha_t L_AG (eq. 4). alpha_t (`ag_alpha`): held at alpha_0 for
`hold_steps` (the release's `linear_schedule_for_scale`, 20000 steps there), then decayed linearly to
0 at `decay_steps`; hold 0 is the paper's text ("linearly decay alpha_t from alpha_0 to 0"), nb's
default. alpha_0 = "auto" (`auto_alpha`) sets alpha_0 = L_LM / L_AG at step 0.

For one-hot rows the row error needs no T x T map:
    ||H_i - e_t||^2 = sum_j p_ij^2 - 2 p_it + 1,
    sum_j p_ij^2 = exp(LSE_j(2 s_ij) - 2 LSE_j(s_ij)),   p_it = exp(s_it - LSE_j(s_ij)),
and a uniform row over m keys gives sum_j p_ij^2 - 1/m. Scores s = q k^T / sqrt(dh) are formed
a block of query rows at a time under activation checkpointing, so memory is O(block x T).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from nbcli.analysis.patterns import ONE_HOT, PAD_ROW, allowed_keys, one_hot_targets, pattern_matrix
from nbcli.errors import ConfigError
from nbcli.train.runtime import device_ids

REDUCTIONS = ("mse", "frobenius")


def ag_alpha(step: int, alpha0: float, decay_steps: int, hold_steps: int = 0) -> float:
    """alpha_t: alpha_0 for the first `hold_steps` steps, then linear decay to 0 at `decay_steps`.

    hold_steps = 0 is paper 001 eq. 4 / sec. 3.2 ("linearly decay alpha_t from alpha_0 to 0"); the
    released code holds alpha_0 for 20000 steps first (`linear_schedule_for_scale`:
    max(0, (total - step) / (total - hold)) after the hold)."""
    if decay_steps <= 0 or step < hold_steps:
        return alpha0
    return alpha0 * max(0.0, (decay_steps - step) / max(1, decay_steps - hold_steps))


def auto_alpha(lm_loss: float, ag_loss: float) -> float:
    """alpha_0 with alpha_0 * L_AG = L_LM at step 0 (paper 001 sec. 4.5: alpha_0 is chosen "such that
    the scales of the MLM loss and auxiliary loss are comparable at the beginning of training")."""
    if not (math.isfinite(lm_loss) and math.isfinite(ag_loss)) or ag_loss <= 0:
        raise ConfigError(f"--ag-alpha auto: the step-0 AG loss is {ag_loss!r}; cannot scale it to the LM "
                          f"loss {lm_loss!r} (give --ag-alpha a number)")
    return lm_loss / ag_loss


def parse_alpha(spec: str | float) -> float | None:
    """`--ag-alpha`: a number >= 0, or `auto` (None: resolved at step 0 by `auto_alpha`)."""
    if isinstance(spec, (int, float)):
        value = float(spec)
    elif str(spec).strip().lower() == "auto":
        return None
    else:
        try:
            value = float(spec)
        except ValueError:
            raise ConfigError(f"--ag-alpha {spec!r}: expected a number >= 0 or auto") from None
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"--ag-alpha {spec!r}: expected a number >= 0 or auto")
    return value


# ---------------------------------------------------------------------------------------------
# Losses


def reduce_rows(row_err: torch.Tensor, reduction: str = "mse") -> torch.Tensor:
    """row_err [B, G, T] = ||H_i - P_i||^2 per row (zero on padding rows) -> one group's L_AG term.

    mse: sum / (B G T^2), i.e. nn.MSELoss() over the group's [B, G, T, T] maps (the released code).
    frobenius: sum / B, i.e. eq. 2 summed over the G heads (eq. 3), averaged over the batch."""
    B, G, T = row_err.shape
    if reduction == "mse":
        return row_err.sum() / (B * G * T * T)
    if reduction == "frobenius":
        return row_err.sum() / B
    raise ConfigError(f"--ag-reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}")


def explicit_row_errors(H: torch.Tensor, P: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Row errors ||H_i - P_i||^2 [B, G, T] of maps H [B, G, T, T] against P [B, T, T] or [B, G, T, T]
    (eq. 2 row by row); padding rows give 0."""
    T = H.size(2)
    if P.dim() == 3:
        P = P[:, None]
    real_row = (torch.arange(T, device=H.device)[None, :] < lengths[:, None])[:, None, :]
    return ((H - P) ** 2).sum(-1) * real_row


def explicit_ag_loss(q: torch.Tensor, k: torch.Tensor, P: torch.Tensor, lengths: torch.Tensor,
                     causal: bool, reduction: str = "mse") -> torch.Tensor:
    """Eq. 2 with the explicit map: q, k [B, G, T, dh], P [B, T, T] or [B, G, T, T]."""
    return reduce_rows(explicit_row_errors(guided_maps(q, k, lengths, causal), P, lengths), reduction)


def guided_maps(q: torch.Tensor, k: torch.Tensor, lengths: torch.Tensor, causal: bool) -> torch.Tensor:
    """H = softmax(q k^T / sqrt(dh)) [B, G, T, T] (float32) over the keys each row may attend."""
    T = q.size(2)
    s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.size(-1))          # [B, G, T, T]
    allowed = allowed_keys(lengths, T, causal)[:, None]
    return torch.softmax(s.masked_fill(~allowed, float("-inf")), dim=-1)


def _block_scores(q: torch.Tensor, k: torch.Tensor, lengths: torch.Tensor, rows: torch.Tensor,
                  causal: bool, divide: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(scores s = q k^T / sqrt(dh) [B, G, c, T] float32 with -inf on the keys a row may not attend,
    allowed [B, 1 or c, T]) for the query rows `rows` [c] (q is that block [B, G, c, dh]; k all keys).
    `divide`: divide by sqrt(dh) as `guided_maps` does (else multiply by its inverse, as the one-hot
    path always has), so each path keeps its float32 results bit for bit."""
    T = k.size(2)
    j = torch.arange(T, device=q.device)
    allowed = j[None, None, :] < lengths[:, None, None]                             # [B, 1, T]
    if causal:
        allowed = allowed & (j[None, None, :] <= rows[None, :, None])               # [B, c, T]
    s = q.float() @ k.float().transpose(-1, -2)                                    # [B, G, c, T]
    s = s / math.sqrt(q.size(-1)) if divide else s * (1.0 / math.sqrt(q.size(-1)))
    return s.masked_fill(~allowed[:, None], float("-inf")), allowed


def _one_hot_rows(q: torch.Tensor, k: torch.Tensor, target: torch.Tensor, lengths: torch.Tensor,
                  rows: torch.Tensor, causal: bool) -> torch.Tensor:
    """Row errors [B, G, c] for the query rows `rows` [c] (q is that block; k is all keys)."""
    B, G, c, dh = q.shape
    T = k.size(2)
    s, allowed = _block_scores(q, k, lengths, rows, causal)
    lse = torch.logsumexp(s, -1)                                                     # [B, G, c]
    sum_sq = torch.exp(torch.logsumexp(2 * s, -1) - 2 * lse)                         # sum_j p_ij^2
    t = target[:, None, :].expand(B, G, c)
    s_t = s.gather(-1, t.clamp(min=0)[..., None]).squeeze(-1)                        # s_i,t(i)
    p_t = torch.exp(s_t - lse)
    m = allowed.expand(B, c, T).sum(-1)[:, None, :].to(s.dtype)                      # |A_i|
    return _one_hot_errors(sum_sq, p_t, t, m)


def _one_hot_errors(sum_sq: torch.Tensor, p_t: torch.Tensor, t: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """||H_i - e_t||^2 = sum_j p_ij^2 - 2 p_it + 1; a uniform row over m keys: sum_j p_ij^2 - 1/m;
    a padding row: 0 (module docstring)."""
    err = torch.where(t >= 0, sum_sq - 2 * p_t + 1, sum_sq - 1 / m)
    return torch.where(t == PAD_ROW, torch.zeros_like(err), err)


def one_hot_row_errors(q: torch.Tensor, k: torch.Tensor, target: torch.Tensor, lengths: torch.Tensor,
                       causal: bool, block: int = 256) -> torch.Tensor:
    """Row errors [B, G, T] of a one-hot pattern from q, k [B, G, T, dh] in O(block x T) memory
    (query rows a block at a time, under activation checkpointing); target [B, T]."""
    return _blockwise(_one_hot_rows, q, k, target, lengths, causal, block)


def _blockwise(rows_fn: Callable[..., torch.Tensor], q: torch.Tensor, k: torch.Tensor, target: torch.Tensor,
               lengths: torch.Tensor, causal: bool, block: int) -> torch.Tensor:
    """Row errors [B, G, T] of `rows_fn(q_block, k, target_block, lengths, rows, causal)` over blocks of
    `block` query rows, each under activation checkpointing when gradients flow (memory O(block x T)).
    The row positions are one arange on q's device, sliced per block: no host-to-device copy per block."""
    T = q.size(2)
    positions = torch.arange(T, device=q.device)
    pieces = []
    for start in range(0, T, block):
        stop = min(start + block, T)
        args = (q[:, :, start:stop], k, target[:, start:stop], lengths, positions[start:stop], causal)
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad) and T > block:
            pieces.append(checkpoint(rows_fn, *args, use_reentrant=False))
        else:
            pieces.append(rows_fn(*args))
    return torch.cat(pieces, -1)


def _dense_rows(q: torch.Tensor, k: torch.Tensor, P: torch.Tensor, lengths: torch.Tensor, rows: torch.Tensor,
                causal: bool) -> torch.Tensor:
    """Row errors ||H_i - P_i||^2 [B, G, c] for the query rows `rows` [c]: P [B, c, T] is that block of
    the pattern; padding rows give 0."""
    s, _ = _block_scores(q, k, lengths, rows, causal, divide=True)
    H = torch.softmax(s, dim=-1)                                                     # [B, G, c, T]
    real_row = (rows[None, :] < lengths[:, None])[:, None, :]                        # [B, 1, c]
    return ((H - P[:, None]) ** 2).sum(-1) * real_row


def dense_row_errors(q: torch.Tensor, k: torch.Tensor, P: torch.Tensor, lengths: torch.Tensor, causal: bool,
                     block: int = 256) -> torch.Tensor:
    """Row errors [B, G, T] of a dense pattern P [B, T, T] ([Delim], [Period]) from q, k [B, G, T, dh]:
    `explicit_row_errors(guided_maps(q, k, ...), P, ...)` a block of query rows at a time under
    activation checkpointing, so no [B, G, T, T] map is held for the backward pass."""
    return _blockwise(_dense_rows, q, k, P, lengths, causal, block)


def one_hot_ag_loss(q: torch.Tensor, k: torch.Tensor, target: torch.Tensor, lengths: torch.Tensor,
                    causal: bool, block: int = 256, reduction: str = "mse") -> torch.Tensor:
    """Eq. 2 for a one-hot pattern in O(block x T) memory: q, k [B, G, T, dh], target [B, T]."""
    return reduce_rows(one_hot_row_errors(q, k, target, lengths, causal, block), reduction)


def one_hot_map_row_errors(H: torch.Tensor, target: torch.Tensor, lengths: torch.Tensor,
                           causal: bool) -> torch.Tensor:
    """Row errors [B, G, T] of a one-hot pattern from given maps H [B, G, T, T] (rows summing to 1
    over the keys they may attend, as a model's softmax gives them): the same identity as from q, k
    (module docstring), with p_ij read from H instead of recomputed; target [B, T]."""
    B, G, T, _ = H.shape
    p = H.float()
    t = target[:, None, :].expand(B, G, T)
    p_t = p.gather(-1, t.clamp(min=0)[..., None]).squeeze(-1)
    m = allowed_keys(lengths, T, causal).sum(-1)[:, None, :].to(p.dtype)             # |A_i|
    return _one_hot_errors((p * p).sum(-1), p_t, t, m)


@dataclass(frozen=True)
class Guidance:
    """Which heads are guided to which pattern, and the ids the input-dependent patterns use."""

    heads: dict[int, str]
    delim_ids: tuple[int, ...] = ()
    period_ids: tuple[int, ...] = ()
    reduction: str = "mse"

    @property
    def guided(self) -> list[int]:
        return sorted(self.heads)

    def loss(self, qks: list[tuple[torch.Tensor, torch.Tensor]], ids: torch.Tensor,
             lengths: torch.Tensor, causal: bool) -> torch.Tensor:
        """L_AG (eq. 3) over all layers' guided heads in `self.reduction`'s units (module docstring);
        qks[l] = (q, k) [B, G, T, dh] of layer l, G the guided heads in `guided` order."""

        def rows(qk: tuple[torch.Tensor, torch.Tensor], name: str, slots: list[int], target: torch.Tensor,
                 ) -> torch.Tensor:
            qs, ks = qk[0][:, slots], qk[1][:, slots]
            if name in ONE_HOT:
                return one_hot_row_errors(qs, ks, target, lengths, causal)
            return dense_row_errors(qs, ks, target, lengths, causal)

        return self._total(qks, ids, lengths, causal, rows)

    def loss_from_maps(self, maps: Sequence[torch.Tensor], ids: torch.Tensor, lengths: torch.Tensor,
                       causal: bool) -> torch.Tensor:
        """L_AG as `loss`, from every head's attention maps: maps[l] [B, H, T, T] of layer l (what
        transformers returns with output_attentions=True); the guided heads are picked by index."""
        order = self.guided

        def rows(H: torch.Tensor, name: str, slots: list[int], target: torch.Tensor) -> torch.Tensor:
            Hs = H[:, [order[s] for s in slots]]
            if name in ONE_HOT:
                return one_hot_map_row_errors(Hs, target, lengths, causal)
            return explicit_row_errors(Hs.float(), target, lengths)

        return self._total(maps, ids, lengths, causal, rows)

    def _total(self, layers: Sequence[Any], ids: torch.Tensor, lengths: torch.Tensor, causal: bool,
               rows: Callable[[Any, str, list[int], torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """Sum over layers and pattern groups of each group's reduced row errors (eq. 3); `rows(layer,
        pattern, slots, target)` gives a group's row errors [B, G, T] (slots: positions in `guided`)."""
        T = ids.size(1)
        groups: dict[str, list[int]] = {}
        for slot, head in enumerate(self.guided):
            groups.setdefault(self.heads[head], []).append(slot)
        targets = {name: (one_hot_targets(name, lengths, T, causal) if name in ONE_HOT
                          else pattern_matrix(name, ids, lengths, causal, device_ids(self.delim_ids, ids.device),
                                              device_ids(self.period_ids, ids.device)))
                   for name in groups}
        total = ids.new_zeros((), dtype=torch.float32)
        for layer in layers:
            for name, slots in groups.items():
                total = total + reduce_rows(rows(layer, name, slots, targets[name]), self.reduction)
        return total


