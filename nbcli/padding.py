"""Right padding: rows of token ids of unequal lengths as one [B, L] batch, the one rule every task's
batches (classification, tagging, translation) and decoding's source batches use.

    padded = pad_rows([[5, 6, 7], [8]], fill=0)   # ids [[5, 6, 7], [8, 0, 0]], lengths [3, 1]
    padded.mask                                   # [[T, T, T], [T, F, F]]: True on real tokens
    padded.mask_if_padded                         # the same, None when no row is padded

Labels are padded the same way with fill = -100 (the position cross-entropy ignores).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch


def padding_mask(lengths: torch.Tensor, width: int) -> torch.Tensor:
    """[B, width] True on each row's first lengths[b] positions (its real tokens), on lengths' device."""
    return torch.arange(width, device=lengths.device)[None, :] < lengths[:, None]


@dataclass(frozen=True)
class PaddedRows:
    """ids [B, L] (int64, each row followed by the fill value up to L, the longest row) and lengths [B]."""

    ids: torch.Tensor
    lengths: torch.Tensor

    @property
    def mask(self) -> torch.Tensor:
        """[B, L] True on real tokens."""
        return padding_mask(self.lengths, self.ids.shape[1])

    @property
    def mask_if_padded(self) -> torch.Tensor | None:
        """The mask, or None when every row has length L (attention then needs no mask)."""
        return None if bool((self.lengths == self.ids.shape[1]).all()) else self.mask


def pad_rows(rows: Sequence[Sequence[int] | np.ndarray], fill: int) -> PaddedRows:
    """Right-pad `rows` (lists or integer arrays, at least one) to the longest with `fill`, on the CPU."""
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
    out = np.full((len(rows), int(lengths.max())), fill, np.int64)
    for i, row in enumerate(rows):
        out[i, :len(row)] = row
    return PaddedRows(torch.from_numpy(out), lengths)
