"""Greedy and beam search over any `Stepper` (a model that scores the next token of N rows at a time).

Both are batched: n sentences decode together, each until it is done, and a done sentence's rows
leave the batch (`Stepper.select`), so a sentence's output does not depend on the batch it is in.

Greedy: y_t = argmax_y log p(y | y_<t, x), until EOS or the sentence's length limit.

Beam search (K = --beam) keeps the K best prefixes by their summed log-probability. Each step takes
the 2K best one-token extensions of a sentence's K prefixes; an extension by EOS ranked among the
first K is a finished hypothesis, scored with length normalisation

    score(y) = sum_t log p(y_t | y_<t, x) / |y| ** lenpen        |y| = generated tokens, EOS included

and the K best extensions not by EOS go on. A sentence is done once it holds K finished hypotheses,
or when it reaches its length limit (its running prefixes then finish as they are, without EOS);
its output is the finished hypothesis with the best score. This is exactly transformers'
`generate(num_beams=K, length_penalty=lenpen, early_stopping=True)` (the same normalisation: |y|
counts the generated tokens with EOS, not the decoder's start token; the same stopping rule and
length limit), so BLEU from nb and from an exported model agree. fairseq's SequenceGenerator
(--lenpen) is the same up to the length limit, where it differs: its limit does not count EOS (one
extra step for it), S is the padded batch's longest source, and at the limit it forces EOS instead of
finishing the running prefixes as they are (docs/training.md 'Decoding'). With K = 1 it is greedy
search (the one extension is the argmax; it finishes when that is EOS).

Length limit of a sentence of S source tokens (EOS included): `max_len_a * S + max_len_b`
generated tokens (fairseq's --max-len-a/--max-len-b), at most the model's position table allows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from nbcli.errors import ConfigError


class Stepper(Protocol):
    """What the searches need of a model: log-probabilities of the next token, rows kept or reordered."""

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed one token per row (tokens [N]) after the row's earlier ones; log p(. | prefix) [N, V] float32."""
        ...

    def select(self, rows: torch.Tensor, within: bool = False) -> None:
        """Keep the rows `rows` [N'] (long, indices into the current N rows, repeats allowed), in that order.
        within: the searches' promise that every row stays in its sentence's block (a beam reordering),
        so the sentences' shared state (the source side) is kept as it is without checking."""
        ...


@dataclass(frozen=True)
class Hypothesis:
    """One output: token ids (no start token; EOS not included), the summed log-probability of the
    generated tokens (EOS included when it ended), its length-normalised score, and whether it ended in EOS."""

    tokens: list[int]
    logprob: float
    score: float
    finished: bool


MAX_LEN_A = 1000.0
"""Largest --max-len-a: a limit past the model's positions is cut to them anyway."""
MAX_LEN_B = 1 << 20
"""Largest --max-len-b (the same reason)."""


def check_search(beam: int, lenpen: float) -> None:
    if beam < 1:
        raise ConfigError(f"--beam must be >= 1, got {beam}")
    if not math.isfinite(lenpen):   # NaN or infinite
        raise ConfigError(f"--lenpen must be a finite number, got {lenpen}")


def check_length_limit(max_len_a: float, max_len_b: int) -> None:
    """Refuse a length limit a x S + b that is not a finite count: NaN, infinite, negative or too large."""
    if not (math.isfinite(max_len_a) and 0 <= max_len_a <= MAX_LEN_A):
        raise ConfigError(f"--max-len-a must be a finite number from 0 to {MAX_LEN_A:g}, got {max_len_a}")
    if not 0 <= max_len_b <= MAX_LEN_B:
        raise ConfigError(f"--max-len-b must be from 0 to {MAX_LEN_B}, got {max_len_b}")


def normalised(logprob: float, length: int, lenpen: float) -> float:
    """score = logprob / length ** lenpen (fairseq --lenpen, transformers length_penalty)."""
    return logprob / (max(1, length) ** lenpen)


def greedy_search(stepper: Stepper, start_id: int, eos_id: int, limits: Sequence[int],
                  device: torch.device | str = "cpu") -> list[Hypothesis]:
    """Greedy decoding of len(limits) rows (the stepper holds one row per sentence); limits[i] is the
    most tokens sentence i may generate (EOS included). One host sync per step (which rows said EOS);
    the bookkeeping (each row's sentence and limit) lives on the host, the tokens in a buffer
    allocated once."""
    n = len(limits)
    out: list[Hypothesis | None] = [None] * n
    active = list(range(n))                                                     # sentence of each row
    tokens = torch.full((n,), start_id, dtype=torch.long, device=device)
    prefix = torch.zeros(n, max([1, *limits]), dtype=torch.long, device=device)  # column t: step t's token
    total = torch.zeros(n, dtype=torch.float64, device=device)
    t = 0
    while active:
        logp = stepper.step(tokens)                                              # [N, V]
        best, tokens = logp.max(dim=-1)
        total = total + best.double()
        prefix[:, t] = tokens
        ended = (tokens == eos_id).tolist()                                      # the step's one sync
        done = [e or t + 1 >= limits[s] for e, s in zip(ended, active)]
        if any(done):
            rows = [r for r, d in enumerate(done) if d]
            at = torch.tensor(rows, dtype=torch.long, device=device)
            for row, ids, value in zip(rows, prefix[at, :t + 1].tolist(), total[at].tolist()):
                out[active[row]] = Hypothesis(ids[:t] if ended[row] else ids, value, value, ended[row])
            kept = [r for r, d in enumerate(done) if not d]
            keep = torch.tensor(kept, dtype=torch.long, device=device)
            active, tokens, prefix, total = [active[r] for r in kept], tokens[keep], prefix[keep], total[keep]
            if kept:
                stepper.select(keep)
        t += 1
    return [h for h in out if h is not None]


def beam_search(stepper: Stepper, start_id: int, eos_id: int, limits: Sequence[int], beam: int,
                lenpen: float = 1.0, device: torch.device | str = "cpu") -> list[Hypothesis]:
    """Beam search (module docstring) of len(limits) sentences; the stepper must hold `beam` rows per
    sentence, sentence i's rows at i*beam .. i*beam + beam - 1. One host sync per step (which
    extensions end in EOS), more only on a step where a hypothesis finishes; each sentence's limit
    and the finished lists live on the host."""
    check_search(beam, lenpen)
    n, K = len(limits), beam
    finished: list[list[Hypothesis]] = [[] for _ in range(n)]
    active = list(range(n))                                                     # sentence of each block of K rows
    scores = torch.full((n, K), float("-inf"), dtype=torch.float32, device=device)
    scores[:, 0] = 0.0                                                           # one live prefix to start from
    prefixes = torch.zeros(n, K, 0, dtype=torch.long, device=device)
    tokens = torch.full((n * K,), start_id, dtype=torch.long, device=device)
    t = 0
    while active:
        m = len(active)
        logp = stepper.step(tokens).view(m, K, -1)                               # [m, K, V]
        V = logp.size(-1)
        cand = (scores[:, :, None] + logp).view(m, K * V)
        values, index = cand.topk(min(2 * K, K * V), dim=-1)                     # [m, 2K], best first
        parent, token = index // V, index % V
        is_eos = token == eos_id
        length = t + 1
        done = [False] * m
        ended = (is_eos[:, :K] & torch.isfinite(values[:, :K])).nonzero().tolist()  # the step's one sync
        if ended:                                                                # finished hypotheses
            ends, parents, held = values[:, :K].tolist(), parent[:, :K].tolist(), prefixes.cpu()
            for i, r in ended:
                hyps = finished[active[i]]
                if len(hyps) < K:
                    value = ends[i][r]
                    hyps.append(Hypothesis(held[i, parents[i][r]].tolist(), value,
                                           normalised(value, length, lenpen), True))
                    done[i] = len(hyps) >= K
        running = values.masked_fill(is_eos, float("-inf"))
        scores, pick = running.topk(K, dim=-1)                                   # [m, K]
        chosen_parent = parent.gather(1, pick)
        tokens2d = token.gather(1, pick)
        prefixes = torch.cat([prefixes.gather(1, chosen_parent[:, :, None].expand(-1, -1, t)),
                              tokens2d[:, :, None]], dim=2)                     # [m, K, t + 1]
        at_limit = [length >= limits[s] for s in active]
        if any(at_limit):                                                        # running prefixes finish as they are
            last, held = scores.tolist(), prefixes.cpu()
            for i in (i for i, a in enumerate(at_limit) if a):
                hyps = finished[active[i]]
                for k in range(K):
                    if math.isfinite(last[i][k]) and len(hyps) < K:
                        value = last[i][k]
                        hyps.append(Hypothesis(held[i, k].tolist(), value, normalised(value, length, lenpen), False))
            done = [d or a for d, a in zip(done, at_limit)]
        t += 1
        if not any(done):
            tokens = tokens2d.flatten()
            stepper.select((torch.arange(m, device=device)[:, None] * K + chosen_parent).flatten(), within=True)
            continue
        kept = [i for i, d in enumerate(done) if not d]
        keep = torch.tensor(kept, dtype=torch.long, device=device)
        rows = (keep[:, None] * K + chosen_parent[keep]).flatten()               # parents' rows, kept sentences
        active, scores, prefixes = [active[i] for i in kept], scores[keep], prefixes[keep]
        tokens = tokens2d[keep].flatten()
        if kept:
            stepper.select(rows)
    return [max(hyps, key=lambda h: h.score) for hyps in finished]


def search(stepper: Stepper, start_id: int, eos_id: int, limits: Sequence[int], beam: int = 1,
           lenpen: float = 1.0, device: torch.device | str = "cpu") -> list[Hypothesis]:
    """Beam search for beam > 1, greedy search for beam 1 (the stepper holds `beam` rows per sentence)."""
    check_search(beam, lenpen)
    if beam == 1:
        return greedy_search(stepper, start_id, eos_id, limits, device)
    return beam_search(stepper, start_id, eos_id, limits, beam, lenpen, device)


def length_limits(source_lengths: Sequence[int], max_len_a: float, max_len_b: int, ceiling: int) -> list[int]:
    """Most generated tokens per sentence: max_len_a * S + max_len_b (fairseq), at least 1, at most `ceiling`."""
    check_length_limit(max_len_a, max_len_b)
    return [max(1, int(min(ceiling, max_len_a * s + max_len_b))) for s in source_lengths]
