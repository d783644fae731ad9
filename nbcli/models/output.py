"""The output layer of nb's reference models (`nbcli.models.lm`, `nbcli.models.seq2seq`) and the loss on it.

    logits = h W^T + b        always in float32 (paper 000 sec. 3: frequency lives in b and W)
    loss   = sum_t CE(logits_t, y_t) over labelled positions (label -100: ignored), optionally chunked
             over rows so that no [N, V] float32 logits are held (`chunked_lm_loss`)

On CUDA the output matmul runs over W padded with zero rows to a multiple of `VOCAB_MULTIPLE`
(`output_multiple`, as nanoGPT pads its vocabulary); the padded columns are dropped, so the logits and
the parameters keep the true vocabulary.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

VOCAB_MULTIPLE = 64   # the output matmul's rows on CUDA are padded to a multiple of this (nanoGPT: 50,304)
PAD_DEVICES = ("cuda",)   # the device types whose output matmul is padded (`output_multiple`)


def output_multiple(h: torch.Tensor, multiple: int) -> int:
    """The multiple `output_logits` pads the output matmul of states h to: `multiple` (a model's
    `vocab_multiple`) on CUDA, where aligned sizes take the fast GEMM kernels, 1 elsewhere (a CPU gains
    nothing). The one rule for the LM and the encoder-decoder."""
    return multiple if h.device.type in PAD_DEVICES else 1


def padded_size(n: int, multiple: int) -> int:
    """The smallest multiple of `multiple` >= n (GPT-2's 50,257 -> 50,304 for 64)."""
    return -(-n // multiple) * multiple


def output_logits(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, multiple: int = 1) -> torch.Tensor:
    """The output layer, logits = h W^T + b [..., V] (paper 000 sec. 3), always in float32: outside any
    autocast and with h, W and b cast up (a no-op for float32 tensors). In bf16 a log-unigram bias near
    -15 would be rounded in steps of 2^-4 = 0.0625, and the KL of the predictions to the unigram
    that the papers measure would move by ~0.5 %. On CUDA the matmul uses TF32 where nb train turns
    TF32 matmuls on (`nbcli.train.runtime`); the bias is added in float32 either way.
    `multiple` > 1: the matmul runs over W (and b) padded with zero rows to `padded_size(V, multiple)`
    (aligned sizes take the fast GEMM kernels; nanoGPT pads its vocabulary the same way) and the padded
    columns are dropped: the V logits are the same numbers and the parameters keep their V rows, so
    checkpoints hold the true vocabulary."""
    V = weight.size(0)
    pad = padded_size(V, multiple) - V
    with torch.autocast(device_type=h.device.type, enabled=False):
        if not pad:
            return F.linear(h.float(), weight.float(), None if bias is None else bias.float())
        w = F.pad(weight.float(), (0, 0, 0, pad))
        b = None if bias is None else F.pad(bias.float(), (0, pad))
        return F.linear(h.float(), w, b)[..., :V]


def lm_loss(logits: torch.Tensor, labels: torch.Tensor, label_smoothing: float = 0.0,
            reduction: Literal["mean", "sum"] = "mean") -> torch.Tensor:
    """Cross-entropy over labelled positions (label -100 = ignored: padding, unmasked MLM tokens)."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), labels.reshape(-1),
                           ignore_index=-100, label_smoothing=label_smoothing, reduction=reduction)


LOSS_CHUNK_ELEMENTS = 1 << 25   # float32 logits alive at once in `chunked_lm_loss` (128 MiB)


def chunked_lm_loss(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, labels: torch.Tensor,
                    label_smoothing: float = 0.0, chunk_elements: int = LOSS_CHUNK_ELEMENTS,
                    multiple: int = 1) -> torch.Tensor:
    """The summed cross-entropy `lm_loss(output_logits(h, W, b), labels, reduction="sum")` of final
    states h [..., d] against labels [...], without the [N, V] float32 logits: the rows go through the
    output layer `chunk_elements // V` at a time, each chunk's logits recomputed in the backward pass
    (activation checkpointing), so memory is O(chunk x V) instead of three [N, V] float32 tensors
    (logits, log-softmax, their gradient). When every row fits in one chunk it is exactly that
    expression (bit for bit); with several, the per-chunk sums add up in another order (float32).
    `multiple`: `output_logits`'s padding of the matmul."""
    h = h.reshape(-1, h.size(-1))
    labels = labels.reshape(-1)
    V = weight.size(0)
    rows = max(1, chunk_elements // V)
    if h.size(0) <= rows:
        return lm_loss(output_logits(h, weight, bias, multiple), labels, label_smoothing, reduction="sum")
    pad = padded_size(V, multiple) - V
    if pad:   # padded once for all chunks (`output_logits`'s padding, its columns dropped per chunk)
        weight = F.pad(weight.float(), (0, 0, 0, pad))
        bias = None if bias is None else F.pad(bias.float(), (0, pad))

    def piece(h_rows: torch.Tensor, label_rows: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        return lm_loss(output_logits(h_rows, w, b)[..., :V], label_rows, label_smoothing, reduction="sum")

    grad = torch.is_grad_enabled()
    total = h.new_zeros((), dtype=torch.float32)
    for start in range(0, h.size(0), rows):
        args = (h[start:start + rows], labels[start:start + rows], weight, bias)
        total = total + (checkpoint(piece, *args, use_reentrant=False) if grad else piece(*args))
    return total
