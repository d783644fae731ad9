"""Token ids to counts (nbcli.counting.tally) against a Counter."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nbcli.counting.tally import token_counts, weighted_token_counts


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 49), max_size=12), st.integers(1, 10**6)), max_size=20))
def test_tally_equals_counter(rows: list[tuple[list[int], int]]) -> None:
    """token_counts / weighted_token_counts equal a Counter over the ids (times each text's frequency)."""
    encoded = [ids for ids, _ in rows]
    freqs = np.array([f for _, f in rows], dtype=np.int64)
    plain: Counter[int] = Counter()
    weighted: Counter[int] = Counter()
    for ids, f in rows:
        for i in ids:
            plain[i] += 1
            weighted[i] += f
    got_plain = token_counts(encoded, 50)
    got_weighted = weighted_token_counts(encoded, freqs, 50)
    assert got_plain.dtype == got_weighted.dtype == np.int64
    assert got_plain.tolist() == [plain[i] for i in range(50)]
    assert got_weighted.tolist() == [weighted[i] for i in range(50)]
