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
its output is the finished hypothesis with the best score. This is fairseq's SequenceGenerator
(--lenpen) and transformers' `generate(num_beams=K, length_penalty=lenpen, early_stopping=True)`:
the same normalisation (|y| counts the generated tokens with EOS, not the decoder's start token)
and the same stopping rule, so BLEU from nb and from an exported model are comparable. With K = 1
it is greedy search (the one extension is the argmax; it finishes when that is EOS).

Length limit of a sentence of S source tokens (EOS included): `max_len_a * S + max_len_b`
generated tokens (fairseq's --max-len-a/--max-len-b), at most the model's position table allows.
"""

from __future__ import annotations

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

    def select(self, rows: torch.Tensor) -> None:
        """Keep the rows `rows` [N'] (long, indices into the current N rows, repeats allowed), in that order."""
        ...


@dataclass(frozen=True)
class Hypothesis:
    """One output: token ids (no start token; EOS not included), the summed log-probability of the
    generated tokens (EOS included when it ended), its length-normalised score, and whether it ended in EOS."""

    tokens: list[int]
    logprob: float
    score: float
    finished: bool


def check_search(beam: int, lenpen: float) -> None:
    if beam < 1:
        raise ConfigError(f"--beam must be >= 1, got {beam}")
    if not lenpen == lenpen or abs(lenpen) == float("inf"):   # NaN or infinite
        raise ConfigError(f"--lenpen must be a finite number, got {lenpen}")


def normalised(logprob: float, length: int, lenpen: float) -> float:
    """score = logprob / length ** lenpen (fairseq --lenpen, transformers length_penalty)."""
    return logprob / (max(1, length) ** lenpen)


def greedy_search(stepper: Stepper, start_id: int, eos_id: int, limits: Sequence[int],
                  device: torch.device | str = "cpu") -> list[Hypothesis]:
    """Greedy decoding of len(limits) rows (the stepper holds one row per sentence); limits[i] is the
    most tokens sentence i may generate (EOS included)."""
    n = len(limits)
    out: list[Hypothesis | None] = [None] * n
    active = torch.arange(n, device=device)                                     # sentence of each row
    limit = torch.tensor(list(limits), device=device)
    tokens = torch.full((n,), start_id, dtype=torch.long, device=device)
    prefix = torch.zeros(n, 0, dtype=torch.long, device=device)
    total = torch.zeros(n, dtype=torch.float64, device=device)
    t = 0
    while active.numel():
        logp = stepper.step(tokens)                                              # [N, V]
        best, tokens = logp.max(dim=-1)
        total = total + best.double()
        ended = tokens == eos_id
        prefix = torch.cat([prefix, tokens[:, None]], dim=1)
        done = ended | (t + 1 >= limit[active])
        if bool(done.any()):
            for row in done.nonzero().flatten().tolist():
                length = t + 1
                ids = prefix[row, :length - 1 if bool(ended[row]) else length].tolist()
                out[int(active[row])] = Hypothesis(ids, float(total[row]), float(total[row]), bool(ended[row]))
            keep = (~done).nonzero().flatten()
            active, tokens, prefix, total = active[keep], tokens[keep], prefix[keep], total[keep]
            if keep.numel():
                stepper.select(keep)
        t += 1
    return [h for h in out if h is not None]


def beam_search(stepper: Stepper, start_id: int, eos_id: int, limits: Sequence[int], beam: int,
                lenpen: float = 1.0, device: torch.device | str = "cpu") -> list[Hypothesis]:
    """Beam search (module docstring) of len(limits) sentences; the stepper must hold `beam` rows per
    sentence, sentence i's rows at i*beam .. i*beam + beam - 1."""
    check_search(beam, lenpen)
    n, K = len(limits), beam
    finished: list[list[Hypothesis]] = [[] for _ in range(n)]
    active = torch.arange(n, device=device)                                     # sentence of each block of K rows
    limit = torch.tensor(list(limits), device=device)
    scores = torch.full((n, K), float("-inf"), dtype=torch.float32, device=device)
    scores[:, 0] = 0.0                                                           # one live prefix to start from
    prefixes = torch.zeros(n, K, 0, dtype=torch.long, device=device)
    tokens = torch.full((n * K,), start_id, dtype=torch.long, device=device)
    t = 0
    while active.numel():
        m = active.numel()
        logp = stepper.step(tokens).view(m, K, -1)                               # [m, K, V]
        V = logp.size(-1)
        cand = (scores[:, :, None] + logp).view(m, K * V)
        values, index = cand.topk(min(2 * K, K * V), dim=-1)                     # [m, 2K], best first
        parent, token = index // V, index % V
        is_eos = token == eos_id
        length = t + 1
        done = torch.zeros(m, dtype=torch.bool, device=device)
        ended = is_eos[:, :K] & torch.isfinite(values[:, :K])
        if bool(ended.any()):                                                    # finished hypotheses
            for i, r in ended.nonzero().tolist():
                hyps = finished[int(active[i])]
                if len(hyps) < K:
                    value = float(values[i, r])
                    hyps.append(Hypothesis(prefixes[i, int(parent[i, r])].tolist(), value,
                                           normalised(value, length, lenpen), True))
                    done[i] = len(hyps) >= K
        running = values.masked_fill(is_eos, float("-inf"))
        scores, pick = running.topk(K, dim=-1)                                   # [m, K]
        chosen_parent = parent.gather(1, pick)
        tokens2d = token.gather(1, pick)
        prefixes = torch.cat([prefixes.gather(1, chosen_parent[:, :, None].expand(-1, -1, t)),
                              tokens2d[:, :, None]], dim=2)                     # [m, K, t + 1]
        at_limit = length >= limit[active]
        if bool(at_limit.any()):                                                 # running prefixes finish as they are
            for i in at_limit.nonzero().flatten().tolist():
                hyps = finished[int(active[i])]
                for k in range(K):
                    if torch.isfinite(scores[i, k]) and len(hyps) < K:
                        value = float(scores[i, k])
                        hyps.append(Hypothesis(prefixes[i, k].tolist(), value, normalised(value, length, lenpen),
                                               False))
            done = done | at_limit
        t += 1
        if not bool(done.any()):
            tokens = tokens2d.flatten()
            stepper.select((torch.arange(m, device=device)[:, None] * K + chosen_parent).flatten())
            continue
        keep = (~done).nonzero().flatten()
        rows = (keep[:, None] * K + chosen_parent[keep]).flatten()               # parents' rows, kept sentences
        active, scores, prefixes = active[keep], scores[keep], prefixes[keep]
        tokens = tokens2d[keep].flatten()
        if keep.numel():
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
    if max_len_a < 0 or max_len_b < 0:
        raise ConfigError(f"--max-len-a and --max-len-b must be >= 0, got {max_len_a} and {max_len_b}")
    return [max(1, min(ceiling, int(max_len_a * s + max_len_b))) for s in source_lengths]
