"""Embedding initialisation (nbcli.train.init.input_embedding) against dense numpy computations."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.linalg import sqrtm

from nbcli.errors import ConfigError
from nbcli.train.config import build_config
from nbcli.train.init import input_embedding, parse_pretrained


def test_embedding_whiten_is_zipfian_whitening_under_the_training_counts() -> None:
    rng = np.random.default_rng(5)
    current = torch.from_numpy(rng.normal(0.1, 0.02, size=(64, 6))).float()
    counts = rng.zipf(1.5, size=64).clip(max=10**4)
    cfg = build_config("tiny", embedding_init="normal", embedding_whiten=True, smoothing_k=0.5)
    got = input_embedding(cfg, current, counts=counts).double().numpy()
    v = current.double().numpy()
    p = (counts + 0.5) / (counts.sum() + 0.5 * 64)
    mu = p @ v
    expected = np.linalg.solve(np.real(sqrtm((v - mu).T @ np.diag(p) @ (v - mu))), (v - mu).T).T
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
    # standardisation runs after whitening, as in nb patch-checkpoint
    cfg = build_config("tiny", embedding_whiten=True, embedding_standardise="mean=0,std=0.5")
    both = input_embedding(cfg, current, counts=counts).double().numpy()
    assert both.std(ddof=1) == pytest.approx(0.5, rel=1e-4)
    with pytest.raises(ConfigError, match="training counts"):
        input_embedding(build_config("tiny", embedding_whiten=True), current)


@pytest.mark.parametrize("spec", ["pretrained:missing.vec", "pretrained:missing.safetensors:wte",
                                  "pretrained:./gpt2"])
def test_a_missing_pretrained_file_is_named_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        spec: str) -> None:
    """Not a Hub lookup (a file name is no repo id) and not the checkpoint reader's 'not found'."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^--embedding-init pretrained:\S+: no such file"):
        parse_pretrained(spec)
