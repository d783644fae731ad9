"""Paper 002 table 4's modifications of word vectors, pure functions applied in the order named
(sec. 6 "Word Analogy Task", app. A.1, A.2 and footnote 6):

    scale-sqrt-d     x * sqrt(D)                                  (app. A.1: what the Transformer's input does)
    xavier-std       eq. 1: (x - mean(X)) * sigma_x / sigma_p      (`ops.standardise_embeddings`), sigma_x =
                     sqrt(2 / (N + D)) Xavier's, sigma_p the sample std of the matrix it receives, N its rows
    pos-enc          x_i + P[pos(i)]                              (eq. 2, 3: `ops.sinusoidal_positions`)
    pos-enc-scaled   x_i + P[pos(i)] * sigma_p / sigma_x          (table 4's "Pos. Enc. x sigma_p/sigma_x": the
                     encodings scaled up to the matrix's spread, sigma_p, sigma_x as for xavier-std, of the
                     matrix this transform receives)

Positions (`Positions`): "index" puts row i at position i (0-based, a sequence as long as the
vocabulary); "random" draws each row's position uniformly from [0, max_len) with a seeded
torch.Generator, as the paper's footnote 6 does ("a row vector from the positional encoding matrix is
randomly chosen ... to evenly distribute the usage of all the positional encoding vectors"); max_len
5000 is the PyTorch tutorial's PositionalEncoding default, the one table 6's statistics match.
Both pos-enc transforms of one chain use the same positions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from nbcli import ops
from nbcli.errors import ConfigError

TRANSFORMS = ("scale-sqrt-d", "xavier-std", "pos-enc", "pos-enc-scaled")
PositionMode = Literal["index", "random"]


@dataclass(frozen=True)
class Positions:
    """Where each row sits in the positional table (module docstring)."""

    mode: PositionMode = "index"
    max_len: int = 5000
    seed: int = 0

    def of(self, n: int) -> torch.Tensor:
        """The positions of rows 0..n-1, int64 [n]."""
        if self.mode == "index":
            return torch.arange(n, dtype=torch.int64)
        if self.mode == "random":
            if self.max_len < 1:
                raise ConfigError(f"--max-len must be at least 1, got {self.max_len}")
            generator = torch.Generator().manual_seed(int(self.seed))
            return torch.randint(0, self.max_len, (n,), generator=generator, dtype=torch.int64)
        raise ConfigError(f"unknown positions {self.mode!r}: expected index or random")

    def as_dict(self) -> dict[str, object]:
        return {"mode": self.mode, "max_len": self.max_len if self.mode == "random" else None,
                "seed": self.seed if self.mode == "random" else None}


def parse_transforms(spec: str | None) -> tuple[str, ...]:
    """'scale-sqrt-d,pos-enc' -> ("scale-sqrt-d", "pos-enc"); None or '' -> ()."""
    if spec is None or not spec.strip():
        return ()
    names = tuple(part.strip() for part in spec.split(","))
    for name in names:
        if name not in TRANSFORMS:
            raise ConfigError(f"--transform {spec!r}: unknown transform {name!r}; expected {', '.join(TRANSFORMS)}")
    return names


def scale_sqrt_d(x: torch.Tensor) -> torch.Tensor:
    """x * sqrt(D) (paper 002 app. A.1, Vaswani et al. 2017 sec. 3.4), D = x's width."""
    return x * math.sqrt(x.shape[1])


def positional_scale(x: torch.Tensor) -> float:
    """sigma_p / sigma_x of eq. 1 for the [N, D] matrix x: its sample std over Xavier's sqrt(2/(N+D))."""
    _, sigma_p = ops.embedding_stats(x)
    return sigma_p / ops.xavier_std(x.shape[0], x.shape[1])


def add_positional_encoding(x: torch.Tensor, positions: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """x_i + scale * P[positions[i]] (paper 002 eq. 3, footnote 6), P the sinusoidal table (eq. 2)."""
    if positions.shape[0] != x.shape[0]:
        raise ConfigError(f"{positions.shape[0]} positions for {x.shape[0]} rows")
    return x + ops.sinusoidal_positions(positions, x.shape[1]).to(x.dtype) * scale


def apply_transform(name: str, x: torch.Tensor, positions: Positions) -> torch.Tensor:
    """One of TRANSFORMS on x (a new tensor; x is not modified)."""
    if name == "scale-sqrt-d":
        return scale_sqrt_d(x)
    if name == "xavier-std":
        return ops.standardise_embeddings(x)
    if name == "pos-enc":
        return add_positional_encoding(x, positions.of(x.shape[0]))
    if name == "pos-enc-scaled":
        return add_positional_encoding(x, positions.of(x.shape[0]), positional_scale(x))
    raise ConfigError(f"unknown transform {name!r}: expected {', '.join(TRANSFORMS)}")


def transform_chain(x: torch.Tensor, names: tuple[str, ...], positions: Positions) -> list[tuple[str, torch.Tensor]]:
    """The matrix after each prefix of the chain: [("scale-sqrt-d", x1), ("scale-sqrt-d,pos-enc", x2), ...]."""
    out: list[tuple[str, torch.Tensor]] = []
    for i, name in enumerate(names):
        x = apply_transform(name, x, positions)
        out.append((",".join(names[:i + 1]), x))
    return out


def positional_table(n: int, d: int, positions: Positions) -> torch.Tensor:
    """The encodings the pos-enc transform adds to an [n, d] matrix (table 6's "Pos. Encoding" row)."""
    return ops.sinusoidal_positions(positions.of(n), d)
