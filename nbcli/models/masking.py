"""The masked-LM objective's corruption of its inputs (paper 001 sec. 3.1: RoBERTa's dynamic masking),
drawn afresh for every batch; the model (`nbcli.models.lm`, objective "mlm") predicts the masked tokens."""

from __future__ import annotations

import torch

from nbcli.models.lm import ModelConfig


def mlm_mask(idx: torch.Tensor, cfg: ModelConfig, generator: torch.Generator,
             key_mask: torch.Tensor | None = None, rate: float = 0.15,
             special: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """RoBERTa's dynamic masking (paper 001 sec. 3.1): select `rate` of the real, non-special tokens;
    of those 80% become <mask>, 10% a random token, 10% stay. Returns (inputs, labels) where
    labels are -100 (ignored) except at selected positions. `special`: cfg.special_ids as a tensor on
    idx's device, held by the caller (a training loop: `nbcli.train.runtime.device_ids`, built once);
    None builds it here, a synchronous host-to-device copy per call on CUDA."""
    assert cfg.mask_id is not None
    u = torch.rand(idx.shape, generator=generator, device=idx.device)
    selectable = torch.ones_like(idx, dtype=torch.bool)
    if cfg.special_ids:
        if special is None:
            special = torch.tensor(cfg.special_ids, device=idx.device)
        selectable &= ~torch.isin(idx, special)
    if key_mask is not None:
        selectable &= key_mask
    selected = (u < rate) & selectable
    labels = torch.where(selected, idx, torch.full_like(idx, -100))
    r = torch.rand(idx.shape, generator=generator, device=idx.device)
    random_ids = torch.randint(0, cfg.vocab_size, idx.shape, generator=generator, device=idx.device)
    inputs = torch.where(selected & (r < 0.8), torch.full_like(idx, cfg.mask_id), idx)
    inputs = torch.where(selected & (r >= 0.8) & (r < 0.9), random_ids, inputs)
    return inputs, labels
