"""Regularising away from the unigram distribution (paper 000 app. B.3, fig. 9).

For the first S updates `nb train --unigram-reg-lambda L --unigram-reg-steps S` minimises

    KL(p || p_theta) - lambda KL(omega(p) || p_theta)

per predicted position, then the standard objective KL(p || p_theta). p is the empirical (one-hot)
next-token distribution, so KL(p || p_theta) is the cross-entropy -log p_theta(y | ctx) (the usual
loss: H(p) = 0 for a one-hot p; with --label-smoothing, the smoothed cross-entropy). omega(p) is "the
unigram distribution of this empirical distribution": the unigram distribution of the training
tokens, the add-k smoothed one of the run's counts (`nbcli.ops.unigram_log_prior`, --smoothing; the
same u as --bias-init unigram and the logged kl_unigram), so that it is positive everywhere. Both
terms are in nats per predicted token, averaged over the update's labelled positions.

Note the direction: this is KL(omega || p_theta), the divergence of the model *from* the unigram
as a reference; the logged `kl_unigram` (paper 000 fig. 1) is KL(p_theta || u).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from nbcli.array_ops import kl_divergence


def unigram_kl(logits: torch.Tensor, log_unigram: torch.Tensor) -> torch.Tensor:
    """KL(omega || p_theta) at every position (paper 000 app. B.3), in nats, float32 (float64 in, float64 out):

        KL(omega || softmax(z)) = sum_w omega_w (log omega_w - log softmax(z)_w),   omega = exp(log_unigram)

    with 0 log 0 = 0 where omega_w = 0. `logits` [..., V], `log_unigram` [V] -> [...]. Its gradient
    with respect to z is softmax(z) - omega (sum_w omega_w = 1)."""
    dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    log_p_theta = F.log_softmax(logits.to(dtype), dim=-1)
    return kl_divergence(log_p=log_unigram.to(dtype), log_q=log_p_theta)


def regulariser_on(step: int, reg_lambda: float, reg_steps: int) -> bool:
    """Whether update `step` (0-based) uses the regularised objective: lambda > 0 and step < S."""
    return reg_lambda > 0 and step < reg_steps
