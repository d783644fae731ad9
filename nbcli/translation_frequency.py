"""Paper 000 fig. 4 for a translation model (sec. 4.2 'Analysis'): the average log-probability the
model assigns to each ground-truth target token of a test corpus, teacher-forced, against that token's
log-unigram probability in the training targets; with all parameters (the figure's upper row) and
with the output bias b (`final_logits_bias`) dropped from the final projection (its lower row: only
p_{w_phi}(. | y_<t) of eq. 4). `nb eval --task translation RUN --by-frequency COUNTS`.

Choices the paper leaves open (documented in `nb eval --help` and docs/eval-generate.md): every
reference token is scored, the target EOS included (it is a ground truth the model predicts), in the
teacher-forced pass training validates with; a pair whose source or target (EOS included) exceeds the
model's position table is skipped and counted (`skipped_long_pairs`), never truncated. The per-token
sums, the binning and the standard errors are LM nb eval's (`nbcli.analysis.frequency_effects`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

    from nbcli.checkpoint.vocab import FittedCounts
    from nbcli.models.seq2seq import Seq2SeqTransformer


def reference_log_probs(logits: torch.Tensor, labels: torch.Tensor, bias: torch.Tensor | None,
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The labelled positions of a teacher-forced batch: (their labels [N], log p(label) [N] with every
    parameter, and log p(label) with the output bias subtracted from the logits before the softmax [N],
    None without a bias). logits [B, T, V] float, labels [B, T] with -100 where nothing is labelled."""
    import torch

    keep = labels != -100
    rows, targets = logits[keep].double(), labels[keep]
    with_b = torch.log_softmax(rows, -1).gather(1, targets[:, None])[:, 0]
    if bias is None:
        return targets, with_b, None
    without = torch.log_softmax(rows - bias.double(), -1).gather(1, targets[:, None])[:, 0]
    return targets, with_b, without


def sum_by_token(targets: np.ndarray, values: np.ndarray, vocab_size: int) -> np.ndarray:
    """sum of `values` per token id over the positions whose ground truth is that id [vocab_size]."""
    return np.bincount(targets, weights=values, minlength=vocab_size).astype(np.float64)


def reference_sums(model: Seq2SeqTransformer, sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
                   batch_size: int = 64) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, int]:
    """One teacher-forced pass over the pairs (`sources`: each source's ids as the model reads them, EOS
    included; `targets`: each reference's ids): per target token, the positions where it is the ground
    truth [V], the sum of its log-probability there [V] and the same without the output bias [V] (None
    when the model has none), and the pairs skipped as longer than the position table."""
    import torch

    from nbcli.padding import pad_rows

    cfg = model.cfg
    device = next(model.parameters()).device
    kept = [(s, t) for s, t in zip(sources, targets) if len(s) <= cfg.max_positions and len(t) + 1 <= cfg.max_positions]
    vocab = cfg.tgt_vocab_size
    count, total = np.zeros(vocab), np.zeros(vocab)
    total_without = None if model.final_logits_bias is None else np.zeros(vocab)
    with torch.inference_mode():
        for start in range(0, len(kept), batch_size):
            chunk = kept[start:start + batch_size]
            src = pad_rows([s for s, _ in chunk], cfg.pad_id)
            tgt = pad_rows([[cfg.decoder_start_id, *t] for _, t in chunk], cfg.pad_id)
            labels = pad_rows([[*t, cfg.eos_id] for _, t in chunk], -100).ids
            src_mask, tgt_mask = src.mask_if_padded, tgt.mask_if_padded
            logits, _ = model(src.ids.to(device), tgt.ids.to(device),
                              None if src_mask is None else src_mask.to(device),
                              None if tgt_mask is None else tgt_mask.to(device))
            ids, with_b, without = reference_log_probs(logits, labels.to(device), model.final_logits_bias)
            ids_np = ids.cpu().numpy()
            count += np.bincount(ids_np, minlength=vocab)
            total += sum_by_token(ids_np, with_b.cpu().numpy(), vocab)
            if total_without is not None and without is not None:
                total_without += sum_by_token(ids_np, without.cpu().numpy(), vocab)
    return count, total, total_without, len(sources) - len(kept)


def fit_target_counts(model: Seq2SeqTransformer, target_tokenizer: Any, counts: Path, *,
                      allow_vocab_mismatch: bool = False, label: str = "the model") -> FittedCounts:
    """`counts` (the training targets' unigram counts: `nb count-unigrams` of the target side with the
    target tokenizer) checked against the model's target tokenizer and vocabulary (`fit_counts`), before
    anything is decoded: a counts file of another tokenizer fails in one line at once."""
    from nbcli.checkpoint.vocab import ModelVocab, fit_counts
    from nbcli.tokenizers.identity import tokenizer_identity

    vocab = ModelVocab(model.cfg.tgt_vocab_size, (tokenizer_identity(target_tokenizer),),
                       f"its target tokenizer {target_tokenizer.path}", label=f"{label} (target side)")
    return fit_counts(counts, vocab, allow_mismatch=allow_vocab_mismatch, allow_foreign=True)


def translation_by_frequency(model: Seq2SeqTransformer, target_tokenizer: Any, sources: Sequence[Sequence[int]],
                             references: Sequence[str], fitted: FittedCounts, *, bins: int = 10, smoothing_k: float = 1.0,
                             batch_size: int = 64) -> dict[str, Any]:
    """The report's `by_frequency` section (paper 000 fig. 4): `fitted`, the training targets' counts as
    `fit_target_counts` checked them, smoothed by nb's one formula; each reference token's mean
    log-probability, binned in `bins` equal-width intervals of its log-unigram probability, with and
    without b."""
    from nbcli.analysis import frequency_effects as fx
    from nbcli.ops import unigram_log_prior

    log_unigram = unigram_log_prior(fitted.counts, model.cfg.tgt_vocab_size, smoothing_k).double().numpy()
    targets = target_tokenizer.encode_batch(list(references))
    count, total, total_without, skipped = reference_sums(model, sources, targets, batch_size)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(count > 0, total / count, np.nan)
        mean_without = None if total_without is None else np.where(count > 0, total_without / count, np.nan)
    return {"counts": fitted.info, "smoothing": f"add-k:{smoothing_k:g}", "output_bias_dropped": mean_without is not None,
            "reference_tokens": int(count.sum()), "skipped_long_pairs": skipped,
            "warnings": list(fitted.warnings), **fx.by_frequency(mean, log_unigram, bins, mean_without)}
