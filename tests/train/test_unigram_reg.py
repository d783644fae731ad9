"""Regularising away from the unigram (paper 000 app. B.3): the KL term against numpy float64 with
gradients, the optimizer step's objective against an independent one, the config's refusals."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from nbcli.errors import ConfigError
from nbcli.train.config import build_config
from nbcli.train.data import BlockBatch
from nbcli.train.runtime import Runtime
from nbcli.train.step import count_labels, make_optimizer, optimizer_step
from nbcli.train.unigram_reg import regulariser_on, unigram_kl

from .test_step import _model_and_batch

CPU = Runtime(torch.device("cpu"))


def _reference_kl(z: np.ndarray, omega: np.ndarray) -> np.ndarray:
    """sum_w omega_w (log omega_w - log softmax(z)_w) per row, float64, 0 log 0 = 0."""
    log_p = z - z.max(-1, keepdims=True)
    log_p = log_p - np.log(np.exp(log_p).sum(-1, keepdims=True))
    safe = np.where(omega > 0, omega, 1.0)
    return (np.where(omega > 0, omega * (np.log(safe) - log_p), 0.0)).sum(-1)


def _omega(rng: np.random.Generator, V: int, zeros: int) -> np.ndarray:
    w = rng.gamma(0.3, size=V)
    w[rng.permutation(V)[:zeros]] = 0.0
    if w.sum() == 0:
        w[0] = 1.0
    return w / w.sum()


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 5), st.integers(2, 40), st.integers(0, 3), st.floats(0.1, 20.0))
def test_kl_and_its_gradient_match_numpy(seed: int, rows: int, V: int, zeros: int, scale: float) -> None:
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(rows, V)) * scale
    omega = _omega(rng, V, min(zeros, V - 1))
    with np.errstate(divide="ignore"):
        log_omega = np.log(omega)                          # -inf where omega = 0
    zt = torch.tensor(z, requires_grad=True)
    kl = unigram_kl(zt, torch.tensor(log_omega))
    assert kl.dtype == torch.float64 and kl.shape == (rows,)
    np.testing.assert_allclose(kl.detach().numpy(), _reference_kl(z, omega), rtol=1e-10, atol=1e-10)
    assert (kl.detach().numpy() >= -1e-12).all()
    kl.sum().backward()
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(zt.grad.numpy(), p - omega[None, :], atol=1e-10)   # d/dz = softmax(z) - omega


def test_kl_is_zero_at_the_unigram_and_float32_inputs_stay_float32() -> None:
    omega = torch.tensor([0.5, 0.25, 0.125, 0.125])
    z = omega.log()[None, :].repeat(3, 1) + torch.tensor([[0.0], [5.0], [-2.0]])   # softmax(z) = omega
    kl = unigram_kl(z, omega.log())
    assert kl.dtype == torch.float32
    torch.testing.assert_close(kl, torch.zeros(3), atol=1e-6, rtol=0)


def test_gradcheck_with_a_finite_difference() -> None:
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(3, 6, dtype=torch.float64, generator=gen, requires_grad=True)
    log_omega = torch.log_softmax(torch.randn(6, dtype=torch.float64, generator=gen), -1)
    assert torch.autograd.gradcheck(lambda x: unigram_kl(x, log_omega), (z,))


def _step(model: torch.nn.Module, batches: list[BlockBatch], reg: tuple[float, torch.Tensor] | None,
          grad_accum: int = 1) -> None:
    cfg = build_config("tiny", grad_accum=grad_accum, batch_size=4, grad_clip=0.0, device="cpu")
    optimizer = make_optimizer(model, cfg, CPU.device)
    losses = optimizer_step(model, model, optimizer, batches, count_labels(batches, CPU), None, 0.0, 0, cfg,
                            model.cfg, CPU, unigram_reg=reg)
    assert (losses.unigram_kl is None) == (reg is None)


def test_the_step_minimises_ce_minus_lambda_kl() -> None:
    """The regularised update equals AdamW on an independently written (CE - lambda KL) / N."""
    model, batch = _model_and_batch()
    log_omega = torch.log_softmax(torch.randn(30, generator=torch.Generator().manual_seed(1)) * 2, -1)
    lam = 0.7
    reference = copy.deepcopy(model)
    cfg = build_config("tiny", batch_size=4, grad_clip=0.0, device="cpu")
    optimizer = make_optimizer(reference, cfg, CPU.device)
    logits, _ = reference(batch.inputs)
    sel = batch.labels != -100
    log_p = F.log_softmax(logits[sel].double(), -1)
    omega = log_omega.double().exp()
    ce = -log_p.gather(1, batch.labels[sel][:, None]).sum()
    kl = (omega * (omega.log() - log_p)).sum()
    ((ce - lam * kl) / sel.sum()).backward()
    optimizer.step()

    _step(model, [batch], (lam, log_omega))
    for got, want in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)

    standard, _ = _model_and_batch()
    _step(standard, [batch], None)
    assert any(not torch.allclose(a, b) for a, b in zip(standard.parameters(), model.parameters()))


def test_accumulated_micro_batches_make_the_same_regularised_update() -> None:
    log_omega = torch.log_softmax(torch.randn(30, generator=torch.Generator().manual_seed(2)), -1)
    whole, batch = _model_and_batch()
    _step(whole, [batch], (0.5, log_omega))
    split, _ = _model_and_batch()
    _step(split, [BlockBatch(batch.inputs[:2], batch.labels[:2], None), BlockBatch(batch.inputs[2:], batch.labels[2:], None)],
          (0.5, log_omega), grad_accum=2)
    for a, b in zip(whole.parameters(), split.parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_the_switch() -> None:
    assert [regulariser_on(s, 0.5, 3) for s in range(5)] == [True, True, True, False, False]
    assert not regulariser_on(0, 0.0, 0)


@pytest.mark.parametrize("options,message", [
    (dict(unigram_reg_lambda=-0.1, unigram_reg_steps=5), "--unigram-reg-lambda must be a finite number >= 0"),
    (dict(unigram_reg_lambda=float("nan"), unigram_reg_steps=5), "--unigram-reg-lambda must be a finite"),
    (dict(unigram_reg_lambda=float("inf"), unigram_reg_steps=5), "--unigram-reg-lambda must be a finite"),
    (dict(unigram_reg_steps=5), "--unigram-reg-steps needs --unigram-reg-lambda"),
    (dict(unigram_reg_lambda=0.5), "--unigram-reg-lambda needs --unigram-reg-steps"),
    (dict(unigram_reg_lambda=0.5, unigram_reg_steps=-1), "--unigram-reg-steps must be an integer >= 0"),
    (dict(unigram_reg_lambda=0.5, unigram_reg_steps=300, steps=200), "past --steps 200"),
])
def test_config_refusals(options: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_config("tiny", **options)


def test_config_round_trip() -> None:
    cfg = build_config("tiny", unigram_reg_lambda=0.3, unigram_reg_steps=50)
    again = type(cfg).from_dict(cfg.to_dict())
    assert (again.unigram_reg_lambda, again.unigram_reg_steps) == (0.3, 50)
