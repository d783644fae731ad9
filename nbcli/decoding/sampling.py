"""Decoding rules, one small function each (in the manner of transformers' logits_process.py).

Every filter takes logits [B, V] and returns new logits [B, V] (removed tokens get -inf); `choose`
turns filtered logits into token ids [B]. Rules (paper 003 app. B: vanilla sampling, top-k with
k = 50, top-p with p = 0.9; plus greedy):

    greedy                      argmax
    sample / sample:T           softmax(logits / T)
    top-k:K                     keep the K largest logits (Fan et al. 2018)
    top-p:P                     keep the smallest set of most probable tokens whose mass >= P
                                (nucleus sampling, Holtzman et al. 2020); the top token always stays
    logit_adjust(logits, log_prior, tau)   logits - tau * log p(y)  (Menon et al. 2021; paper 003
                                sec. 4.1 relates it to b_LN), log p(y) from a counts file through
                                nb's one log-prior function (nbcli.ops.unigram_log_prior)

Sampling is inverse-CDF with one uniform draw per row from that row's own generator, so a row's
sample depends only on its seed (not on the batch it is in), and the KV-cache and full-forward
paths draw the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from nbcli.errors import ConfigError

if TYPE_CHECKING:
    import torch

Kind = Literal["greedy", "sample", "top-k", "top-p"]


def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """logits / T (T > 0)."""
    if not temperature > 0:
        raise ConfigError(f"temperature must be > 0, got {temperature}")
    return logits / temperature


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the k largest logits of each row (ties at the k-th value are kept), -inf elsewhere."""
    import torch

    if k < 1:
        raise ConfigError(f"top-k needs k >= 1, got {k}")
    k = min(k, logits.shape[-1])
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]                      # [B, 1]
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Nucleus: keep the most probable tokens until their probability mass reaches p; the most
    probable token is always kept. A token is removed when the mass of the tokens ranked before it
    is already >= p."""
    import torch

    if not 0 < p <= 1:
        raise ConfigError(f"top-p needs 0 < p <= 1, got {p}")
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    probs = torch.softmax(sorted_logits.float(), dim=-1)
    before = torch.cumsum(probs, dim=-1) - probs                               # mass ranked ahead
    remove_sorted = before >= p
    remove_sorted[..., 0] = False
    remove = torch.zeros_like(remove_sorted).scatter(-1, order, remove_sorted)
    return logits.masked_fill(remove, float("-inf"))


def logit_adjust(logits: torch.Tensor, log_prior: torch.Tensor, tau: float) -> torch.Tensor:
    """Logit adjustment (Menon et al. 2021, post-hoc form): logits - tau * log p(y)."""
    if not math.isfinite(tau):
        raise ConfigError(f"--logit-adjust {tau!r}: TAU must be a finite number")
    return logits - tau * log_prior.to(logits.dtype)


def sample_rows(logits: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling: row i takes the first token whose cumulative probability exceeds u_i.
    Tokens with -inf logits have zero probability and are never taken."""
    import torch

    probs = torch.softmax(logits.float(), dim=-1)                              # [B, V]
    cdf = torch.cumsum(probs, dim=-1)
    u = uniforms.to(cdf.dtype).clamp(max=1.0)[:, None] * cdf[:, -1:]          # inside the total mass
    idx = torch.searchsorted(cdf, u, right=True).squeeze(-1)
    idx = idx.clamp(max=logits.shape[-1] - 1)
    # Rounding in the cumulative sum can land on a removed token right after the last kept one; the
    # fix-up is applied to every row, without asking the host whether one needs it (a device sync).
    kept = probs.gather(-1, idx[:, None]).squeeze(-1) > 0
    last_kept = (probs > 0).float().cumsum(-1).argmax(-1)
    return torch.where(kept, idx, last_kept)


@dataclass(frozen=True)
class Decoding:
    """One decoding rule: greedy, sample (temperature), top-k, top-p."""

    kind: Kind
    value: float | None = None
    temperature: float = 1.0

    @property
    def spec(self) -> str:
        if self.kind == "greedy":
            return "greedy"
        if self.kind == "sample":
            return "sample" if self.temperature == 1.0 else f"sample:{self.temperature:g}"
        return f"{self.kind}:{self.value:g}"

    @property
    def stochastic(self) -> bool:
        return self.kind != "greedy"

    def filter(self, logits: torch.Tensor) -> torch.Tensor:
        """The logits this rule samples from (-inf outside the kept set)."""
        logits = apply_temperature(logits, self.temperature)
        if self.kind == "top-k":
            assert self.value is not None
            return top_k_filter(logits, int(self.value))
        if self.kind == "top-p":
            assert self.value is not None
            return top_p_filter(logits, self.value)
        return logits

    def choose(self, logits: torch.Tensor, uniforms: torch.Tensor | None) -> torch.Tensor:
        """Token ids [B] from logits [B, V]; `uniforms` [B] in [0, 1) drive the sampling rules."""
        if self.kind == "greedy":
            return logits.argmax(-1)
        assert uniforms is not None
        return sample_rows(self.filter(logits), uniforms)


def parse_decoding(spec: str) -> Decoding:
    """`greedy` | `sample` | `sample:T` | `top-k:K` | `top-p:P` (paper 003 app. B: top-k:50, top-p:0.9)."""
    kind, sep, arg = spec.strip().partition(":")
    try:
        if kind == "greedy" and not sep:
            return Decoding("greedy")
        if kind == "sample":
            t = float(arg) if sep else 1.0
            if t > 0 and math.isfinite(t):
                return Decoding("sample", temperature=t)
        elif kind == "top-k" and sep:
            k = int(arg)
            if k >= 1:
                return Decoding("top-k", float(k))
        elif kind == "top-p" and sep:
            p = float(arg)
            if 0 < p <= 1:
                return Decoding("top-p", p)
    except ValueError:
        pass
    raise ConfigError(f"--decoding {spec!r}: expected greedy, sample, sample:T (T > 0), top-k:K (K >= 1) "
                      "or top-p:P (0 < P <= 1)")
