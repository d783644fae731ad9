"""The chunk table's bounds (nbcli.counting.table, nbcli.counting.blocks): rows, ids, long parts."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbcli.counting import BlockCounter, CountOptions
from nbcli.counting.blocks import CACHED_PART_CHARS
from nbcli.counting.table import ChunkTable
from nbcli.tokenizers import load_tokenizer


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 1000)), min_size=1, max_size=60),
       st.integers(2, 40), st.integers(1, 200))
def test_purge_keeps_the_most_used_rows_within_both_bounds(rows: list[tuple[int, int]], limit: int,
                                                           ids_limit: int) -> None:
    """After a purge: at most half the rows and (beyond one kept row) half the ids budget; the kept
    rows are the most used ones, each with its own ids, found by its key."""
    table = ChunkTable(max(limit, len(rows) + 1), ids_limit)
    keys = [f"k{i}" for i in range(len(rows))]
    ids = [[i] * n for i, (n, _) in enumerate(rows)]
    table.add(keys, ids)
    table.hits[1:len(rows) + 1] = [h for _, h in rows]
    table.purge()
    kept = [k for k in keys if table.rows([k])[0] >= 0]
    assert table.size - 1 == len(kept) and table.size <= max(1, table.limit // 2)
    assert table.used <= max(ids_limit // 2, 0) or len(kept) == 0
    hits = dict(zip(keys, [h for _, h in rows]))
    dropped = [k for k in keys if k not in kept]
    if kept and dropped:  # every kept row is used at least as much as any dropped one, or it fit the ids budget
        assert min(hits[k] for k in kept) >= max(hits[k] for k in dropped) or table.used <= ids_limit // 2
    for k in kept:
        row = table.rows([k])[0]
        i = keys.index(k)
        got = table.ids[table.starts[row]:table.starts[row] + table.lengths[row]].tolist()
        assert got == ids[i]


def test_long_parts_are_counted_but_never_kept(tmp_path: Path, sp_model: Path) -> None:
    """Letters without a break (DNA, a run of letters) make one part per line: such parts are
    counted exactly and not kept, so the table's ids do not grow with them; one repeated within a
    block is kept (its ids are then reused)."""
    rng = np.random.default_rng(0)
    lines = ["".join(rng.choice(list("acgt"), size=int(n))) for n in rng.integers(CACHED_PART_CHARS + 1, 3000, size=60)]
    lines += ["short words here"] * 5
    data = ("\n".join(lines) + "\n").encode()
    tok = load_tokenizer(sp_model)
    counter = BlockCounter(tok, CountOptions(eos=False))
    counts = counter.count_block("dna.txt", data, 1, 0).counts
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(sp_model))
    expected = Counter(i for line in lines for i in sp.encode(line))
    assert counts.tolist() == [expected[i] for i in range(tok.vocab_size)]

    def expected_one(line: str, token: int) -> int:
        return sp.encode(line).count(token)

    kept = counter.table.lengths[:counter.table.size]
    assert counter.table.used == int(kept.sum()) < 200  # only the short parts' ids
    again = counter.count_block("dna.txt", data, 1, 0).counts  # long parts encoded again: same counts
    assert again.tolist() == counts.tolist()
    repeated = ("\n".join([lines[0]] * 3 + [lines[1]]) + "\n").encode()  # a long part seen 3 times in a block
    thrice = counter.count_block("dna.txt", repeated, 1, 0).counts
    assert thrice.tolist() == [3 * expected_one(lines[0], i) + expected_one(lines[1], i) for i in range(tok.vocab_size)]
    assert counter.table.rows([lines[0]])[0] < 0  # the byte path keys long parts by their bytes
    assert counter.table.rows([lines[0].encode()])[0] > 0 and counter.table.rows([lines[1].encode()])[0] < 0


@pytest.mark.parametrize("ids_limit", [8, 64])
def test_counts_exact_when_the_ids_budget_forces_purges(tmp_path: Path, sp_model: Path, ids_limit: int,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A tiny ids budget purges the table again and again; counts stay those of the library."""
    import nbcli.counting.blocks as blocks
    import nbcli.counting.table as table

    real = table.ChunkTable
    monkeypatch.setattr(blocks, "ChunkTable", lambda limit: real(limit, ids_limit))
    from conftest import english_like_lines

    lines = english_like_lines(400, seed=5)
    data = ("\n".join(lines) + "\n").encode()
    tok = load_tokenizer(sp_model)
    counter = BlockCounter(tok, CountOptions(eos=False))
    total = np.zeros(tok.vocab_size, dtype=np.int64)
    start = 0
    while start < len(data):
        end = data.find(b"\n", start + 1500) + 1 or len(data)
        total += counter.count_block("e.txt", data[start:end], None, start).counts
        start = end
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(sp_model))
    expected = Counter(i for line in lines for i in sp.encode(line))
    assert total.tolist() == [expected[i] for i in range(tok.vocab_size)]
    assert counter.table.ids_limit == ids_limit


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 100)), min_size=1, max_size=40), st.integers(2, 30))
def test_purge_keeps_certificate_numbers_with_their_rows(rows: list[tuple[int, int]], limit: int) -> None:
    """Per-row certificate numbers (unigram chunks) move with their rows through a purge and a replace."""
    table = ChunkTable(max(limit, len(rows) + 1))
    keys = [f"k{i}" for i in range(len(rows))]
    n = len(rows)
    table.add(keys, [[i] * length for i, (length, _) in enumerate(rows)],
              (np.arange(n, dtype=np.float64), 2.0 * np.arange(n), np.arange(n, dtype=np.int32)))
    table.hits[1:n + 1] = [h for _, h in rows]
    table.replace(np.array([1]), [[7, 7, 7]], (np.array([0.5]), np.array([9.0]), np.array([3], dtype=np.int32)))
    table.purge()
    for i, key in enumerate(keys):
        row = table.rows([key])[0]
        if row >= 0:
            ids = table.ids[table.starts[row]:table.starts[row] + table.lengths[row]].tolist()
            if i == 0:
                assert (table.margin[row], table.best[row], table.chars[row], ids) == (0.5, 9.0, 3, [7, 7, 7])
            else:
                assert (table.margin[row], table.best[row], table.chars[row], ids) == (i, 2.0 * i, i, [i] * rows[i][0])
    assert table.margin[0] == np.inf and table.lengths[0] == 0
