"""Attention maps against paper 001's target patterns (Deshpande & Narasimhan, figs. 1, 2, 4).

Pure pieces of `nb attention-maps`: which heads (`parse_heads`), which checkpoints of a run
(`parse_steps`, `pick_checkpoints`), the target patterns for one sentence (`sentence_patterns`, the
matrices of `nbcli.analysis.patterns.pattern_matrix`, app. A.2) and how far a head's map H is from a
pattern P (`map_distances`), averaged over the T query rows:

    l1  = 1/T sum_i sum_j |H_ij - P_ij|                      (in [0, 2]; 0 when H = P)
    kl  = 1/T sum_i sum_{j: P_ij > 0} P_ij log(P_ij / max(H_ij, 1e-12))   (KL(P_i || H_i), nats)
    mse = 1/T^2 sum_i sum_j (H_ij - P_ij)^2                  (the AG loss of one head, `--ag-reduction mse`)

The floor on H keeps KL finite where a trained head gives a target key a probability that
underflows float32.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from nbcli.errors import ConfigError
from nbcli.array_ops import kl_divergence
from nbcli.analysis.patterns import PATTERNS, pattern_matrix

METRICS = ("l1", "kl", "mse")
KL_FLOOR = 1e-12
DEFAULT_STEPS = "0%,1%,100%"


def map_distances(H: torch.Tensor, P: torch.Tensor) -> dict[str, float]:
    """l1, kl and mse (module docstring) between one head's map H [T, T] and a pattern P [T, T]."""
    H, P = H.double(), P.double()
    T = H.size(0)
    l1 = (H - P).abs().sum(-1).mean()
    kl = kl_divergence(log_p=P.log(), log_q=H.clamp(min=KL_FLOOR).log()).mean()
    mse = ((H - P) ** 2).sum() / (T * T)
    return {"l1": float(l1), "kl": float(kl), "mse": float(mse)}


def sentence_patterns(ids: Sequence[int], causal: bool, delim_ids: Sequence[int], period_ids: Sequence[int],
                      ) -> dict[str, torch.Tensor]:
    """{pattern: P [T, T]} for one sentence's token ids, every pattern the model can attend ([Next] is
    impossible under a causal mask and is left out): app. A.2 under guidance.py's conventions."""
    x = torch.tensor([list(ids)], dtype=torch.long)
    lengths = torch.tensor([x.size(1)])
    return {name: pattern_matrix(name, x, lengths, causal, delim_ids, period_ids)[0]
            for name in PATTERNS if not (causal and name == "next")}


def parse_heads(spec: str | None, n_layer: int, n_head: int, assigned: Mapping[int, str]) -> list[tuple[int, int]]:
    """`--heads`: `L.H,...` (0-based layer and head), `L.*` (every head of layer L), `all`, or
    `assigned` (the heads the run's AG guided, in every layer). None: a figure one can read, the
    last layer's guided heads when the run guided heads, else every head of the last layer."""
    if spec is None or not spec.strip():
        last = n_layer - 1
        return [(last, head) for head in (sorted(assigned) if assigned else range(n_head))]
    spec = spec.strip().lower()
    if spec == "all":
        return [(layer, head) for layer in range(n_layer) for head in range(n_head)]
    if spec == "assigned":
        if not assigned:
            raise ConfigError("--heads assigned: the run guided no heads (no attention guidance); "
                              "give L.H,... or all")
        return [(layer, head) for layer in range(n_layer) for head in sorted(assigned)]
    chosen: list[tuple[int, int]] = []
    for item in spec.split(","):
        match = re.fullmatch(r"\s*(\d+)\.(\d+|\*)\s*", item)
        if match is None:
            raise ConfigError(f"--heads {spec!r}: {item.strip()!r} is not L.H (0-based layer.head), L.*, "
                              "all or assigned")
        layer = int(match.group(1))
        if layer >= n_layer:
            raise ConfigError(f"--heads {item.strip()}: layer {layer} does not exist (the model has "
                              f"{n_layer} layers, 0..{n_layer - 1})")
        heads = range(n_head) if match.group(2) == "*" else [int(match.group(2))]
        for head in heads:
            if head >= n_head:
                raise ConfigError(f"--heads {item.strip()}: head {head} does not exist (the model has "
                                  f"{n_head} heads per layer, 0..{n_head - 1})")
            if (layer, head) not in chosen:
                chosen.append((layer, head))
    return chosen


@dataclass(frozen=True)
class StepRequest:
    """One column asked for: a fraction of the run's planned steps (`50%`) or an exact step (`200`)."""

    text: str
    fraction: float | None = None
    step: int | None = None


def parse_steps(spec: str) -> list[StepRequest]:
    """`--at 0%,1%,100%` (fractions of the run's planned nb train --steps, the nearest saved checkpoint)
    or exact saved steps (`200`), mixed freely."""
    requests = []
    for item in spec.split(","):
        text = item.strip()
        try:
            if text.endswith("%"):
                value = float(text[:-1])
                if not 0 <= value <= 100:
                    raise ValueError
                requests.append(StepRequest(text, fraction=value / 100))
            else:
                step = int(text)
                if step < 0:
                    raise ValueError
                requests.append(StepRequest(text, step=step))
        except ValueError:
            raise ConfigError(f"--at {spec!r}: {text!r} is neither a percentage in [0, 100] (e.g. 1%) nor a "
                              "step number >= 0") from None
    return requests


@dataclass(frozen=True)
class Pick:
    """The checkpoint chosen for one request, and a note when it is not the step asked for."""

    request: str
    step: int
    path: Path
    note: str | None


def pick_checkpoints(saved: Mapping[int, Path], total_steps: int, requests: Sequence[StepRequest]) -> list[Pick]:
    """A fraction f picks the saved step nearest round(f * total_steps) (the earlier on a tie); an exact
    step must be saved. nb train saves step 0 (the initial model), every --save-every steps and the
    last; a fraction between saved steps gets a note saying which step stands in."""
    if not saved:
        raise ConfigError("no step-N.safetensors checkpoints")
    picks = []
    for request in requests:
        if request.step is not None:
            if request.step not in saved:
                raise ConfigError(f"--at {request.text}: no checkpoint step-{request.step}.safetensors (saved: "
                                  f"{_listing(saved)})")
            picks.append(Pick(request.text, request.step, saved[request.step], None))
            continue
        target = round((request.fraction or 0.0) * total_steps)
        step = min(saved, key=lambda s: (abs(s - target), s))
        note = None if step == target else f"{request.text} of {total_steps} steps is step {target}; nearest saved: step {step}"
        picks.append(Pick(request.text, step, saved[step], note))
    return picks


def _listing(saved: Mapping[int, Path]) -> str:
    steps = list(saved)
    shown = ", ".join(map(str, steps[:8]))
    return shown + (f", ... {steps[-1]}" if len(steps) > 8 else "")


def closest_pattern(distances: Mapping[str, Mapping[str, float]], metric: str) -> str:
    """The pattern whose distance under `metric` is smallest (the first in PATTERNS order on a tie)."""
    if metric not in METRICS:
        raise ConfigError(f"--metric must be one of {', '.join(METRICS)}, got {metric!r}")
    return min(distances, key=lambda name: (distances[name][metric], PATTERNS.index(name)))
