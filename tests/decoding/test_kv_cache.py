from __future__ import annotations

import torch

from nbcli.decoding.kv_cache import KVCache


def test_cache_select_gathers_rows_into_the_same_buffers() -> None:
    """select keeps/reorders rows: the cached positions equal an independent index_select, the
    buffer is reused when the batch does not grow and reallocated when rows repeat past it."""
    cache = KVCache(1, 2, 4, capacity=10)
    k, v = cache.reserve(3, 5, torch.float32, torch.device("cpu"))[0]
    k[:, :, :5] = torch.randn(3, 2, 5, 4)
    v[:, :, :5] = torch.randn(3, 2, 5, 4)
    cache.length = 5
    before_k, before_v = k[:, :, :5].clone(), v[:, :, :5].clone()
    for rows in (torch.tensor([2, 0]), torch.tensor([1, 1, 0, 0])):
        expect_k, expect_v = before_k.index_select(0, rows), before_v.index_select(0, rows)
        ptr = cache.keys[0].data_ptr()
        cache.select(rows)
        keys, values = cache.keys[0], cache.values[0]
        assert keys.shape == (len(rows), 2, 10, 4)
        assert torch.equal(keys[:, :, :5], expect_k) and torch.equal(values[:, :, :5], expect_v)
        assert (keys.data_ptr() == ptr) == (len(rows) <= 2 or len(rows) <= 3 and rows.numel() == 2)
        before_k, before_v = expect_k, expect_v
