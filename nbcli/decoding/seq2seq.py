"""Decoding nb's encoder-decoder (`nbcli.models.seq2seq`) with its KV cache: the source batch is encoded
once, each decoder layer's cross-attention keys/values are projected once (`cross_kv`), and each
step feeds one token per row, its self-attention keys/values appended to the cache
(`nbcli.decoding.kv_cache.KVCache`, the LM's). Beam search repeats every sentence's rows `beam` times and
reorders the rows (cache, cross keys/values, source mask) after each step (`Seq2SeqStepper.select`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from nbcli.decoding.search import Hypothesis, length_limits, search
from nbcli.decoding.kv_cache import KVCache
from nbcli.models.seq2seq import Seq2SeqTransformer
from nbcli.padding import pad_rows


class Seq2SeqStepper:
    """A `Stepper` over a batch of source sentences, `copies` rows per sentence (the beam); `capacity`
    decoder positions are allocated for the self-attention cache up front (0: as needed, doubling)."""

    def __init__(self, model: Seq2SeqTransformer, src: torch.Tensor, src_mask: torch.Tensor | None,
                 copies: int = 1, capacity: int = 0) -> None:
        self.model = model
        cfg = model.cfg
        with torch.no_grad():
            memory, _ = model.encode(src, src_mask)                                  # [B, S, d]
            if copies > 1:
                memory = memory.repeat_interleave(copies, dim=0)
                src_mask = None if src_mask is None else src_mask.repeat_interleave(copies, dim=0)
            self.cross = model.cross_kv(memory)
        self.src_mask = src_mask
        # `capacity`: the longest output (the searches' largest limit), allocated once; a reordering
        # gathers only the cached positions (KVCache.select), so a preallocated beam costs no more.
        self.cache = KVCache(cfg.decoder_layers, cfg.n_head, cfg.head_dim, capacity=capacity)
        self.dtype = memory.dtype
        self.copies = copies
        self.sentence_of_row = torch.arange(memory.size(0), device=memory.device) // copies

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            kv = self.cache.reserve(tokens.size(0), 1, self.dtype, tokens.device)
            logits, _ = self.model.decode(tokens[:, None], self.cross, self.src_mask, kv=kv, past=self.cache.length)
            self.cache.length += 1
            return F.log_softmax(logits[:, -1].float(), dim=-1)

    def select(self, rows: torch.Tensor, within: bool = False) -> None:
        """Reorder the self-attention cache; the source side (cross-attention keys/values, source mask) only
        when the rows' sentences change: a sentence's beams share it, so a reordering within them keeps it
        (`within`: the search says so, and nothing is compared on the host)."""
        self.cache.select(rows)
        if within:
            return
        sentences = self.sentence_of_row.index_select(0, rows)
        if rows.numel() == self.sentence_of_row.numel() and torch.equal(sentences, self.sentence_of_row):
            return
        self.cross = [(k.index_select(0, rows), v.index_select(0, rows)) for k, v in self.cross]
        if self.src_mask is not None:
            self.src_mask = self.src_mask.index_select(0, rows)
        self.sentence_of_row = sentences


def translate_ids(model: Seq2SeqTransformer, sources: Sequence[Sequence[int]], *, beam: int = 5, lenpen: float = 1.0,
                  max_len_a: float = 1.2, max_len_b: int = 10) -> list[Hypothesis]:
    """Decode one batch of source id lists (each already ending in the source EOS, if the model uses one)
    with greedy (beam 1) or beam search; the model is in eval mode on its device."""
    cfg = model.cfg
    device = next(model.parameters()).device
    padded = pad_rows(sources, cfg.pad_id)
    mask = padded.mask_if_padded
    src, src_mask = padded.ids.to(device), None if mask is None else mask.to(device)
    limits = length_limits([len(s) for s in sources], max_len_a, max_len_b, cfg.max_positions)
    stepper = Seq2SeqStepper(model, src, src_mask, copies=beam, capacity=max(limits))
    return search(stepper, cfg.decoder_start_id, cfg.eos_id, limits, beam, lenpen, device)
