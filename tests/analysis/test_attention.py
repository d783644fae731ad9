"""Paper 001 figs. 1, 2, 4 (nbcli.analysis.attention): distances against numpy on random maps, the
patterns for one sentence, head and step specs, checkpoint picking."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nbcli.analysis.attention import (StepRequest, closest_pattern, map_distances, parse_heads, parse_steps,
                                      pick_checkpoints, sentence_patterns)
from nbcli.errors import ConfigError


def numpy_distances(H: np.ndarray, P: np.ndarray) -> dict[str, float]:
    T = H.shape[0]
    kl = 0.0
    for i in range(T):
        for j in range(T):
            if P[i, j] > 0:
                kl += P[i, j] * np.log(P[i, j] / max(H[i, j], 1e-12))
    return {"l1": np.abs(H - P).sum() / T, "kl": kl / T, "mse": ((H - P) ** 2).sum() / T**2}


def random_rows(rng: np.random.Generator, T: int, sharp: float) -> np.ndarray:
    logits = rng.normal(0, sharp, size=(T, T))
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 12), st.sampled_from([0.1, 1.0, 60.0]), st.booleans())
def test_distances_match_numpy(seed: int, T: int, sharp: float, one_hot: bool) -> None:
    rng = np.random.default_rng(seed)
    H = random_rows(rng, T, sharp)
    P = np.eye(T)[rng.integers(0, T, T)] if one_hot else random_rows(rng, T, 1.0)
    ours = map_distances(torch.from_numpy(H).float(), torch.from_numpy(P).float())
    ref = numpy_distances(H.astype(np.float32).astype(np.float64), P.astype(np.float32).astype(np.float64))
    for key in ("l1", "kl", "mse"):
        assert ours[key] == pytest.approx(ref[key], rel=1e-9, abs=1e-12), key


def test_distance_zero_on_the_pattern_itself() -> None:
    patterns = sentence_patterns([1, 5, 6, 7, 2], causal=False, delim_ids=(1, 2), period_ids=(7,))
    for name, P in patterns.items():
        d = map_distances(P, P)
        assert d["l1"] == 0 and d["mse"] == 0 and abs(d["kl"]) < 1e-12
        assert closest_pattern({n: map_distances(P, Q) for n, Q in patterns.items()}, "l1") == name


def test_sentence_patterns_follow_app_a2() -> None:
    ids = [1, 5, 6, 7, 2]              # <s> a b . </s>
    mlm = sentence_patterns(ids, causal=False, delim_ids=(1, 2), period_ids=(7,))
    assert list(mlm) == ["next", "prev", "first", "delim", "period"]
    assert torch.equal(mlm["next"][0], torch.tensor([0, 1.0, 0, 0, 0]))
    assert torch.allclose(mlm["next"][4], torch.full((5,), 0.2))           # last row uniform
    assert torch.equal(mlm["period"][:, 3], torch.ones(5))
    assert torch.equal(mlm["delim"][2], torch.tensor([0.5, 0, 0, 0, 0.5]))
    clm = sentence_patterns(ids, causal=True, delim_ids=(1, 2), period_ids=(7,))
    assert "next" not in clm and torch.equal(clm["prev"], clm["prev"].tril())


def test_parse_heads() -> None:
    assert parse_heads("0.1, 1.*", 2, 3, {}) == [(0, 1), (1, 0), (1, 1), (1, 2)]
    assert parse_heads(None, 2, 2, {}) == [(1, 0), (1, 1)]                     # default: the last layer's heads
    assert parse_heads(None, 2, 4, {0: "prev", 1: "first"}) == [(1, 0), (1, 1)]   # ... its guided ones
    assert parse_heads("all", 2, 2, {}) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert parse_heads("assigned", 1, 4, {2: "first"}) == [(0, 2)]
    for spec, fragment in [("2.0", "layer 2 does not exist"), ("0.4", "head 4 does not exist"),
                           ("x", "is not L.H"), ("0-1", "is not L.H"), ("assigned", "guided no heads")]:
        with pytest.raises(ConfigError, match=fragment):
            parse_heads(spec, 2, 4, {})


def test_parse_steps_and_pick() -> None:
    requests = parse_steps("0%, 1%,100%,4")
    assert [r.fraction for r in requests[:3]] == [0.0, 0.01, 1.0] and requests[3].step == 4
    for bad in ("101%", "-1", "x", "1%%", ""):
        with pytest.raises(ConfigError, match="neither a percentage"):
            parse_steps(bad)
    saved = {2: Path("a"), 4: Path("b"), 6: Path("c")}
    picks = pick_checkpoints(saved, 6, requests)
    assert [p.step for p in picks] == [2, 2, 6, 4]
    assert picks[0].note is not None and "nearest saved: step 2" in picks[0].note and picks[2].note is None
    assert pick_checkpoints(saved, 6, [StepRequest("50%", fraction=0.5)])[0].step == 2  # tie: 3 -> 2
    with pytest.raises(ConfigError, match="no checkpoint step-5.safetensors"):
        pick_checkpoints(saved, 6, [StepRequest("5", step=5)])
    with pytest.raises(ConfigError, match="no step-N"):
        pick_checkpoints({}, 6, requests)


