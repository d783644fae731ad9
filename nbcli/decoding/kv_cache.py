"""The KV cache of incremental decoding, for both reference models (`nbcli.models.lm.Transformer` through
`nbcli.lm.runner.NbRunner`, `nbcli.models.seq2seq.Seq2SeqTransformer` through `nbcli.decoding.seq2seq`).

A cache holds per layer the keys and values [B, H, S, dh] of the positions seen so far; the model writes
the new positions' keys/values into its buffers (`nbcli.models.blocks.write_kv`) and attends to all of
them. The cache allocates, grows and reorders the buffers; the model keeps no state between calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


class KVCache:
    """Keys and values of the tokens seen so far, per layer ([B, H, S, dh] each), for incremental
    decoding: the next forward pass feeds only the new tokens, writes their keys/values after the
    cached ones and attends to all. The first `reserve` allocates
    `capacity` positions (the final length when the caller knows it: prompt + new tokens, so a
    step writes in place and nothing is ever copied); a cache that is full anyway doubles (geometric
    growth: O(S) copying in all, not O(S^2 / 64) as with a fixed step)."""

    def __init__(self, n_layer: int, n_head: int, head_dim: int, capacity: int = 0) -> None:
        self.keys: list[torch.Tensor | None] = [None] * n_layer
        self.values: list[torch.Tensor | None] = [None] * n_layer
        self.n_head, self.head_dim, self.capacity = n_head, head_dim, capacity
        self.length = 0                                                # positions cached

    def reserve(self, B: int, new: int, dtype: torch.dtype, device: torch.device,
                ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer (keys, values) buffers with room for `new` more positions after the cached ones
        (grown, with the cached positions copied, when full): what the models' `kv=` argument takes
        (`Transformer.forward`, `Seq2SeqTransformer.decode`)."""
        import torch

        buffers = []
        for layer, (keys, values) in enumerate(zip(self.keys, self.values)):
            if keys is None or values is None or self.length + new > keys.shape[2]:
                held = 0 if keys is None else keys.shape[2]
                room = max(self.length + new, self.capacity, 2 * held)
                grown_k = torch.empty(B, self.n_head, room, self.head_dim, dtype=dtype, device=device)
                grown_v = torch.empty_like(grown_k)
                if keys is not None and values is not None:
                    grown_k[:, :, :self.length] = keys[:, :, :self.length]
                    grown_v[:, :, :self.length] = values[:, :, :self.length]
                keys, values = self.keys[layer], self.values[layer] = grown_k, grown_v
            buffers.append((keys, values))
        return buffers

    def select(self, rows: torch.Tensor) -> None:
        """Keep (and reorder to) the cached rows `rows` [B'] (long): beam search's reordering and the
        dropping of finished sentences (`nbcli.decoding`). Only the `length` cached positions are
        gathered, into the same buffers when B' <= B (a preallocated cache is never copied whole)."""
        for layer, (keys, values) in enumerate(zip(self.keys, self.values)):
            if keys is not None and values is not None:
                self.keys[layer] = gather_rows(keys, rows, self.length)
                self.values[layer] = gather_rows(values, rows, self.length)


def gather_rows(buffer: torch.Tensor, rows: torch.Tensor, length: int) -> torch.Tensor:
    """buffer [B, H, S, dh] -> [B', H, S, dh] whose first `length` positions are buffer's rows `rows`
    (the first B' rows of the same storage when B' <= B; the positions after `length` are unset)."""
    import torch

    picked = buffer[:, :, :length].index_select(0, rows)                         # [B', H, length, dh], a copy
    n = rows.numel()
    out = buffer[:n] if n <= buffer.shape[0] else torch.empty(n, *buffer.shape[1:], dtype=buffer.dtype,
                                                               device=buffer.device)
    out[:, :, :length] = picked
    return out
