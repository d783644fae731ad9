"""Token-level loss and perplexity of a causal LM on a held-out corpus, and paper 003 table 1's KL.

Documents are those `nb count-unigrams` counts and `nb train` trains on (`nbcli.corpus.records`:
each file in the format its name says; text: the non-empty lines; JSONL: the `text` field),
tokenised once (int32 in memory). Each document is scored as count-unigrams counts it: its
tokens, then one EOS when the tokenizer has one and a causal template (`document_markers`); the
first token is predicted from an EOS (as in nb's packed training stream and GPT-2's
<|endoftext|> convention), or, without EOS, from BOS when there is one, else it is not scored.

Documents longer than the model's context are scored with a sliding window (stride S, default half
the context): every target is scored exactly once, each after at least C - S tokens of context
(the first window's targets after fewer). Windows are batched with right padding.

Per-word perplexity: exp(total NLL / words), words = whitespace-separated words of the scored
documents plus one per scored EOS.

Table 1 (paper 003 sec. 3.1): the model's average prediction p_bar = mean over scored positions of
p_theta(. | context), and KL(p_bar || unigram) with the unigram of the corpus (the scored targets
themselves, or a counts file), add-k smoothed by nb's one formula (`log_unigram`). "Without b_LN"
uses logits - W b_LN at the same positions (b_LN enters the logits linearly when the final LayerNorm
feeds the output projection), so both come from one pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from nbcli.analysis.frequency_effects import TokenStats
from nbcli.errors import ConfigError, CorpusError

if TYPE_CHECKING:
    import torch

    from nbcli.lm.runner import Runner
    from nbcli.tokenizers import Tokenizer

Progress = Callable[[int], None]


@dataclass
class Scored:
    """A tokenised held-out corpus: per document the model input ids (context marker first when the
    first token is scored) and how many leading positions are context only."""

    sequences: list[np.ndarray]
    words: int
    documents: int
    eos_id: int | None
    first_from: str

    @property
    def targets(self) -> int:
        return sum(len(s) - 1 for s in self.sequences)

    def target_counts(self, vocab_size: int) -> np.ndarray:
        """Unigram counts of the scored targets (count-unigrams' counts of these documents)."""
        counts = np.zeros(vocab_size, dtype=np.int64)
        for s in self.sequences:
            counts += np.bincount(s[1:], minlength=vocab_size)[:vocab_size]
        return counts


def tokenize_documents(documents: Sequence[str], tokenizer: Tokenizer, vocab_size: int,
                       batch: int = 512) -> Scored:
    """Encode documents with EOS as count-unigrams adds it; the first token conditioned on EOS/BOS."""
    from nbcli.counting import CountOptions, document_markers

    eos, _bos = document_markers(tokenizer, CountOptions())
    start = eos if eos is not None else tokenizer.bos_id
    sequences, words = [], 0
    for i in range(0, len(documents), batch):
        part = documents[i:i + batch]
        for text, ids in zip(part, tokenizer.encode_batch(list(part))):
            seq = ([start] if start is not None else []) + ids + ([eos] if eos is not None else [])
            if len(seq) < 2:
                continue
            array = np.asarray(seq, dtype=np.int64)
            if array.max() >= vocab_size:
                raise ConfigError(f"tokenizer {tokenizer.name} produced id {int(array.max())}, outside the "
                                  f"model's vocabulary of {vocab_size}")
            sequences.append(array)
            words += len(text.split()) + (eos is not None)
    if not sequences:
        raise CorpusError("no document has a token to score")
    first = "eos" if eos is not None else ("bos" if start is not None else "not scored")
    return Scored(sequences, words, len(sequences), eos, first)


def windows(length: int, context: int, stride: int) -> list[tuple[int, int, int]]:
    """Sliding windows over a sequence of `length` tokens: (start, end, first scored position).
    Targets 1..length-1 are each scored once; position t is predicted from [start, t)."""
    if length <= context:
        return [(0, length, 1)]
    out, scored_to, start = [], 1, 0
    while scored_to < length:
        end = min(start + context, length)
        out.append((start, end, scored_to))
        scored_to = end
        start = min(start + stride, end - 1, length - context) if end < length else end
    return out


@dataclass
class EvalResult:
    tokens: int
    nll: float
    words: int
    kl_unigram: float
    kl_unigram_without_ln_bias: float | None
    token_stats: TokenStats | None = None

    @property
    def loss(self) -> float:
        return self.nll / self.tokens

    @property
    def perplexity(self) -> float:
        return math.exp(self.loss)

    @property
    def word_perplexity(self) -> float:
        return math.exp(self.nll / self.words)

    def as_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "loss": self.loss, "perplexity": self.perplexity, "words": self.words,
                "word_perplexity": self.word_perplexity, "kl_unigram": self.kl_unigram,
                "kl_unigram_without_ln_bias": self.kl_unigram_without_ln_bias}


class _TokenAccumulator:
    """Sums for `TokenStats` on the runner's device."""

    def __init__(self, V: int, device: torch.device) -> None:
        import torch

        def zeros() -> torch.Tensor:
            return torch.zeros(V, dtype=torch.float64, device=device)

        self.positions = 0
        self.prob, self.log_prob, self.count = zeros(), zeros(), zeros()
        self.target_prob, self.target_log_prob = zeros(), zeros()

    def add(self, logp: torch.Tensor, targets: torch.Tensor) -> None:
        """logp [N, V] log-probabilities at N positions; targets [N] their ground-truth tokens."""
        import torch

        logp = logp.double()
        self.positions += logp.shape[0]
        self.prob += logp.exp().sum(0)
        self.log_prob += logp.sum(0)
        picked = logp.gather(1, targets[:, None])[:, 0]
        self.count.index_add_(0, targets, torch.ones_like(picked))
        self.target_log_prob.index_add_(0, targets, picked)
        self.target_prob.index_add_(0, targets, picked.exp())

    def result(self, without: dict[str, TokenStats] | None = None) -> TokenStats:
        def host(t: torch.Tensor) -> np.ndarray:
            return t.cpu().numpy()

        return TokenStats(self.positions, host(self.prob), host(self.log_prob), host(self.count).astype(np.int64),
                          host(self.target_prob), host(self.target_log_prob), without or {})


def evaluate(runner: Runner, scored: Scored, *, batch_size: int = 8, stride: int | None = None,
             unigram_log: torch.Tensor | None = None, adjust: torch.Tensor | None = None,
             progress: Progress | None = None, token_stats: bool = False,
             token_shifts: dict[str, torch.Tensor] | None = None) -> EvalResult:
    """Sum the NLL of every scored target; average the predicted distributions (with and without
    the current b_LN). `unigram_log` [V]: log q for the KL (default: the targets' own add-1 unigram).
    `adjust` [V]: subtracted from every position's logits first (logit adjustment tau * log p(y)).
    `token_stats`: also the per-token sums of `TokenStats`, and for each of `token_shifts` ([V]) the
    same sums with logits - shift (W b_LN for paper 003 fig. 1, the output bias for paper 000 fig. 4)."""
    import torch

    from nbcli.array_ops import kl_divergence
    from nbcli.ops import unigram_log_prior

    V = runner.vocab_size
    context = runner.context or max(len(s) for s in scored.sequences)
    stride = stride or max(1, context // 2)
    if not 0 < stride <= context:
        raise ConfigError(f"--stride {stride}: must be in [1, {context}] (the model's context)")
    shift = runner.ln_bias_logit_shift()
    jobs = [(s, w) for s in scored.sequences for w in windows(len(s), context, stride)]
    nll = torch.zeros((), dtype=torch.float64, device=runner.device)
    p_sum = torch.zeros(V, dtype=torch.float64, device=runner.device)
    p_sum_wo = torch.zeros(V, dtype=torch.float64, device=runner.device) if shift is not None else None
    tokens = 0
    acc = _TokenAccumulator(V, runner.device) if token_stats else None
    shifts = dict(token_shifts or {}) if token_stats else {}
    acc_wo = {name: _TokenAccumulator(V, runner.device) for name in shifts}
    for b in range(0, len(jobs), batch_size):
        chunk = jobs[b:b + batch_size]
        width = max(end - start for _s, (start, end, _f) in chunk)
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        mask = torch.zeros(len(chunk), width, dtype=torch.bool)
        score = torch.zeros(len(chunk), width, dtype=torch.bool)  # position j predicts token j + 1
        for row, (seq, (start, end, first)) in enumerate(chunk):
            ids[row, :end - start] = torch.from_numpy(seq[start:end])
            mask[row, :end - start] = True
            score[row, first - start - 1:end - start - 1] = True
        logits = runner.logits(ids, mask if not bool(mask.all()) else None)      # [B, W, V]
        if adjust is not None:
            logits = logits - adjust.to(logits.device)
        # The scored positions are picked with indices made on the host: a boolean mask on the
        # device would make the host wait for the device every batch (it must learn N).
        rows, cols = score[:, :-1].nonzero(as_tuple=True)
        picked = logits[rows.to(logits.device), cols.to(logits.device)]          # [N, V], row-major as a mask picks
        target = ids[:, 1:][rows, cols].to(logits.device)                         # [N]
        logp = torch.log_softmax(picked, dim=-1)
        nll += torch.nn.functional.nll_loss(logp, target, reduction="sum").double()
        p_sum += logp.exp().sum(0).double()
        if p_sum_wo is not None:
            p_sum_wo += torch.softmax(picked - shift, dim=-1).sum(0).double()
        if acc is not None:
            acc.add(logp, target)
        for name, shifted in acc_wo.items():
            shifted.add(torch.log_softmax(picked - shifts[name].to(picked.device), dim=-1), target)
        n = int(rows.numel())
        tokens += n
        if progress is not None:
            progress(n)
    if unigram_log is None:
        unigram_log = unigram_log_prior(scored.target_counts(V), V)
    log_q = unigram_log.to(runner.device).double()
    kl = float(kl_divergence(log_p=(p_sum / tokens).log(), log_q=log_q))            # KL(p_bar || q), float64
    kl_wo = float(kl_divergence(log_p=(p_sum_wo / tokens).log(), log_q=log_q)) if p_sum_wo is not None else None
    stats = acc.result({name: a.result() for name, a in acc_wo.items()}) if acc is not None else None
    return EvalResult(tokens=tokens, nll=float(nll), words=scored.words, kl_unigram=kl,
                      kl_unigram_without_ln_bias=kl_wo, token_stats=stats)


def kl_reference(scored: Scored, vocab_size: int, smoothing_k: float,
                 log_prior: torch.Tensor | None = None) -> torch.Tensor:
    """The unigram the KL columns compare with (paper 003 table 1): `log_prior` (from a counts
    file) when given, else the add-k smoothed counts of the scored tokens themselves."""
    from nbcli.ops import unigram_log_prior

    if log_prior is not None:
        return log_prior
    return unigram_log_prior(scored.target_counts(vocab_size), vocab_size, smoothing_k)
