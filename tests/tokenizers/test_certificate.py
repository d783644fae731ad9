"""The unigram certificate (nbcli.tokenizers.certificate) against an independent float32 emulation of
SentencePiece's `Model::EncodeOptimized`, on random small lattices after a prefix of large magnitude."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
from hypothesis import given, settings, strategies as st

from nbcli.tokenizers.certificate import certified_lines, lattice_margins, ulp32

# Scores from a small set (sums tie or nearly tie often), float32 as in a model proto.
SCORES = [-1.0, -2.0, -3.0, -0.5, -1.5, -2.5, -4.0, -3.0000002, -1.0000001, -7.25, -5.5]


def emulate_encode(n: int, edges: list[tuple[int, int, float]], prefix: np.float32) -> list[tuple[int, int]]:
    """EncodeOptimized's DP over one word of n characters whose lattice is `edges` (start, end,
    float32 score), starting from the float32 value `prefix` the line reached before it: stored
    values are float32, each candidate (double) is compared with `>` against the stored one,
    edges from a start in the order of their length (the trie's). Returns the backtracked path."""
    value: list[np.float32 | None] = [None] * (n + 1)
    back: list[int] = [-1] * (n + 1)
    value[0] = prefix
    for start in range(n):
        for s, e, score in sorted((edge for edge in edges if edge[0] == start), key=lambda edge: edge[1]):
            candidate = np.float64(score) + np.float64(value[start])
            if value[e] is None or candidate > np.float64(value[e]):
                value[e] = np.float32(candidate)
                back[e] = s
    path, end = [], n
    while end > 0:
        path.append((back[end], end))
        end = back[end]
    return path[::-1]


def all_paths(n: int, edges: list[tuple[int, int, float]]) -> list[tuple[Fraction, list[tuple[int, int]]]]:
    """Every path from 0 to n with its exact (rational) score."""
    out: list[tuple[Fraction, list[tuple[int, int]]]] = []

    def walk(at: int, score: Fraction, path: list[tuple[int, int]]) -> None:
        if at == n:
            out.append((score, path))
            return
        for s, e, sc in edges:
            if s == at:
                walk(e, score + Fraction(float(sc)), path + [(s, e)])

    walk(0, Fraction(0), [])
    return out


@st.composite
def lattices(draw: st.DrawFn) -> tuple[int, list[tuple[int, int, float]]]:
    n = draw(st.integers(1, 7))
    edges = []
    for start, length in itertools.product(range(n), range(1, 4)):
        if start + length <= n and (length == 1 or draw(st.booleans())):
            edges.append((start, start + length, float(np.float32(draw(st.sampled_from(SCORES))))))
    return n, edges


def _certified(n: int, edges: list[tuple[int, int, float]], prefix: float,
               score_bound: float) -> tuple[bool, list[tuple[int, int]] | None, float]:
    """(certified after a prefix of value `prefix`, the exact best path when unique, its margin)."""
    paths = sorted(all_paths(n, edges), key=lambda p: p[0], reverse=True)
    best_path = paths[0][1] if len(paths) == 1 or paths[0][0] > paths[1][0] else None
    on_path = np.array([(s, e) in (best_path or []) for s, e, _ in edges])
    word = np.zeros(len(edges), dtype=np.int64)
    start = np.array([s for s, _, _ in edges])
    end = np.array([e for _, e, _ in edges])
    score = np.array([sc for _, _, sc in edges], dtype=np.float32)
    best, margin = lattice_margins(np.array([n]), word, start, end, score, on_path)
    if best_path is not None:
        exact = paths[0][0] - paths[1][0] if len(paths) > 1 else None
        assert margin[0] == np.inf if exact is None else abs(margin[0] - float(exact)) < 1e-9
        assert abs(best[0] - float(paths[0][0])) < 1e-9
    # The prefix is a certified word of best score |prefix| (zero characters) before this one.
    ok = certified_lines(np.array([np.inf, margin[0] if best_path else -np.inf]),
                         np.array([abs(prefix), abs(best[0])]), np.array([0, n]), np.array([0]), score_bound)
    return bool(ok[0]), best_path, float(margin[0])


@settings(max_examples=400, deadline=None)
@given(lattice=lattices(), prefix=st.one_of(st.just(0.0), st.floats(-3e7, -1.0), st.floats(-2e4, -1e3)))
def test_a_certified_word_segments_in_the_line_as_alone(lattice: tuple[int, list[tuple[int, int, float]]],
                                                        prefix: float) -> None:
    """Whenever the certificate passes, the float32 DP after the prefix follows the exact best path."""
    n, edges = lattice
    score_bound = max(abs(sc) for _, _, sc in edges)
    ok, best_path, _ = _certified(n, edges, float(np.float32(prefix)), score_bound)
    if ok:
        assert best_path is not None
        assert emulate_encode(n, edges, np.float32(prefix)) == best_path


def test_the_emulation_diverges_where_the_certificate_refuses() -> None:
    """Teeth: after a large prefix, a near-tie segments differently from the word alone, and the
    certificate refuses exactly such a word."""
    b, c = np.float32(-1.0), np.float32(-2.0)
    edges = [(0, 1, float(b)), (1, 2, float(c)), (0, 2, float(np.float32(-3.0000002)))]  # (0,2) loses by 2e-7
    alone = emulate_encode(2, edges, np.float32(0.0))
    assert alone == [(0, 1), (1, 2)]
    diverged = [p for p in np.float32(-np.arange(1e5, 1e5 + 200, 0.37)).tolist()
                if emulate_encode(2, edges, np.float32(p)) != alone]
    assert diverged, "no prefix changed the segmentation: the emulation has no teeth"
    for prefix in diverged[:20]:
        ok, best_path, margin = _certified(2, edges, prefix, 3.0000002)
        assert best_path == alone and 0 < margin < 1e-6 and not ok
    clear = [(0, 1, -1.0), (1, 2, -2.0), (0, 2, -3.5)]  # a margin of 0.5 passes after the same prefixes
    assert all(_certified(2, clear, prefix, 3.5)[0] for prefix in diverged[:20])


@settings(max_examples=200, deadline=None)
@given(st.floats(1e-30, 1e30))
def test_ulp32_bounds_the_float32_spacing(x: float) -> None:
    unit = ulp32(np.array([x]))[0]
    for value in (np.float32(x), np.nextafter(np.float32(x), np.float32(0))):
        if abs(float(value)) <= x:
            assert float(np.spacing(value)) <= unit
    assert unit <= x * 2.0 ** -22
