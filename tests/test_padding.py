"""Right padding (nbcli.padding): every task's batches and decoding's source batches."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nbcli.padding import pad_rows, padding_mask

rows_of_ids = st.lists(st.lists(st.integers(0, 2**40), max_size=9), min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(rows_of_ids, st.sampled_from([0, 3, -100]), st.booleans())
def test_rows_are_kept_and_followed_by_the_fill(rows: list[list[int]], fill: int, as_arrays: bool) -> None:
    padded = pad_rows([np.array(r, np.int64) for r in rows] if as_arrays else rows, fill)
    width = max(map(len, rows))
    assert padded.ids.dtype == torch.long and tuple(padded.ids.shape) == (len(rows), width)
    assert padded.lengths.tolist() == [len(r) for r in rows]
    for i, row in enumerate(rows):
        assert padded.ids[i].tolist() == row + [fill] * (width - len(row))
        assert padded.mask[i].tolist() == [True] * len(row) + [False] * (width - len(row))
    full = all(len(r) == width for r in rows)
    assert (padded.mask_if_padded is None) == full
    if not full:
        assert torch.equal(padded.mask_if_padded, padded.mask)


def test_padding_mask_of_lengths_on_their_device() -> None:
    lengths = torch.tensor([3, 0, 1])
    assert padding_mask(lengths, 4).tolist() == [[True, True, True, False], [False] * 4, [True, False, False, False]]
