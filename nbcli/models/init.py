"""The papers' initialisation schemes of the reference models' weight matrices, one function a kind of
matrix: the LM's (`nbcli.models.lm.Transformer.reset_parameters`) and the encoder-decoder's
(`nbcli.models.seq2seq.Seq2SeqTransformer.reset_parameters`), each under `init`:

    gpt2     N(0, std); projections into the residual stream N(0, std / sqrt(2L))
    xavier   Xavier uniform on every non-embedding matrix (paper 002 secs. 5-6), a fused or split qkv
             at the bound of PyTorch's nn.MultiheadAttention's one [3d, d] in_proj_weight
    fairseq  Xavier uniform, q/k/v with gain 1/sqrt(2) (fairseq's MultiheadAttention); a separate output
             matrix N(0, d^-1/2) (paper 000 sec. 4.1)

Biases, LayerNorms and embeddings are set by the models themselves (zeros, ones, a normal draw).
"""

from __future__ import annotations

import math

import torch
from torch import nn


def init_linear(weight: torch.Tensor, scheme: str, std: float, fused_qkv: bool) -> None:
    """A Linear weight [out, in] under `scheme` (`Transformer.reset_parameters`): gpt2 N(0, std); xavier
    Xavier uniform on the whole matrix; fairseq Xavier uniform, gain 1/sqrt(2) on each third of a fused qkv."""
    if scheme == "gpt2":
        nn.init.normal_(weight, 0.0, std)
    elif scheme == "xavier" or not fused_qkv:
        nn.init.xavier_uniform_(weight)
    else:
        with torch.no_grad():
            for part in weight.chunk(3, dim=0):                                  # q, k, v: [d, d] each
                nn.init.xavier_uniform_(part, gain=2 ** -0.5)


def init_matrix(weight: torch.Tensor, scheme: str, std: float, embedding_std: float) -> None:
    """A separate output matrix W [V, d]: N(0, std) (gpt2), Xavier uniform (xavier: a non-embedding
    weight), N(0, d^-1/2) (fairseq, paper 000 sec. 4.1's draw)."""
    if scheme == "xavier":
        nn.init.xavier_uniform_(weight)
    else:
        nn.init.normal_(weight, 0.0, embedding_std if scheme == "fairseq" else std)


def seq2seq_linear_init(weight: torch.Tensor, scheme: str, qkv: bool, residual: float) -> None:
    """One Linear weight [out, in] of the encoder-decoder under `scheme` (`Seq2SeqTransformer.reset_parameters`);
    `residual`: sqrt(2L) for a projection into the residual stream (gpt2's scaling), else 1."""
    if scheme == "gpt2":
        nn.init.normal_(weight, 0.0, 0.02 / residual)
    elif scheme == "xavier" and qkv:                    # one third of nn.MultiheadAttention's [3d, d] in_proj
        bound = math.sqrt(6.0 / (weight.size(1) + 3 * weight.size(0)))
        nn.init.uniform_(weight, -bound, bound)
    else:
        nn.init.xavier_uniform_(weight, gain=2 ** -0.5 if qkv and scheme == "fairseq" else 1.0)
