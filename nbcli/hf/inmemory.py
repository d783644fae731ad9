"""The papers' weight operations on a transformers model in memory, changing the model itself.

    init_output_bias(model, counts, smoothing_k=1.0)       b = log p(y), a trainable bias forward adds (paper 000 sec. 3)
                                          rescale_w="fro"  then ||W|| = ||b||_2 (sec. 4.1)
    write_into_model(model, tensors, touched, changes)     what `nbcli.patch(model, ..., in_place=True)` does
                                                           with the surgery plan's tensors: untie makes a
                                                           new Parameter, a created output bias is installed

The values come from the same pure functions as `nb patch-checkpoint` (nbcli.ops: unigram_log_prior,
rescale_w); counts are checked against the model by the one vocabulary policy (nbcli.checkpoint.vocab).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nbcli.errors import CheckpointError, CountsError

if TYPE_CHECKING:
    import torch

    from nbcli.ops import Norm


def counts_for_model(counts: Any, model: Any, rows: int, *, tokenizer: Path | None = None,
                     allow_vocab_mismatch: bool = False) -> tuple[np.ndarray, str, list[str]]:
    """(the counts padded to the model's `rows`, where they came from, warnings): a counts file
    (`nb count-unigrams`; `fit_counts`) or an array of counts (`check_vocab`), checked by nb's one
    vocabulary policy as patch-checkpoint checks them (tokenizer identity where both sides name one,
    `tokenizer` naming the model's; vocabulary padding)."""
    from nbcli.checkpoint.memory import MemoryCheckpoint
    from nbcli.checkpoint.vocab import Vocabulary, check_vocab, fit_counts, model_vocab
    from nbcli.counts import pad_counts

    held = MemoryCheckpoint({}, label=type(model).__name__, model_config=_config_dict(model))
    vocab = model_vocab(held, rows, tokenizer, hint=" (give tokenizer=, the model's tokenizer)")
    if isinstance(counts, (str, os.PathLike)):
        fitted = fit_counts(Path(os.fspath(counts)), vocab, allow_mismatch=allow_vocab_mismatch)
        return fitted.counts, os.fspath(counts), fitted.warnings
    vector = np.asarray(counts.detach().cpu() if hasattr(counts, "detach") else counts)
    if vector.ndim != 1 or vector.size == 0 or vector.dtype.kind not in "iuf":
        raise CountsError(f"counts array: expected a non-empty vector of numbers, got {vector.dtype} {list(vector.shape)}")
    if not np.all(np.isfinite(vector)) or bool((vector < 0).any()) or bool((vector != np.round(vector)).any()):
        raise CountsError("counts array: counts must be whole numbers >= 0")
    check = check_vocab(Vocabulary("counts array", int(vector.size), None, "counts", "count 0"), vocab,
                        allow_mismatch=allow_vocab_mismatch)
    warnings = [w for w in check.warnings if "records no tokenizer" not in w]  # an array never records one
    return pad_counts(vector.astype(np.int64), rows), "counts array", warnings


def _config_dict(model: Any) -> dict[str, Any] | None:
    config = getattr(model, "config", None)
    return config.to_dict() if config is not None and hasattr(config, "to_dict") else None


def init_output_bias(model: Any, counts: Any, *, smoothing_k: float = 1.0, rescale_w: Norm | None = None,
                     tokenizer: Path | None = None, allow_vocab_mismatch: bool = False,
                     trainable: bool = True) -> dict[str, Any]:
    """Paper 000 sec. 3 on a loaded model: its output bias set to b = log p(y) (add-k smoothed,
    `unigram_log_prior`), created where the output layer has none (`install_output_bias`), a
    Parameter forward adds and training updates (`trainable`); with `rescale_w` ("fro" or
    "spectral") W is then scaled so ||W|| = ||b||_2 (sec. 4.1). Returns the report: the bias's name,
    whether it was created, each changed tensor's statistics before and after, warnings."""
    import torch

    from nbcli.hf.output_bias import install_output_bias, live_output_bias, output_layer
    from nbcli.ops import rescale_w as rescale, tensor_summary, unigram_log_prior

    name, layer = output_layer(model)
    rows = int(layer.weight.shape[0])
    vector, source, warnings = counts_for_model(counts, model, rows, tokenizer=tokenizer,
                                                allow_vocab_mismatch=allow_vocab_mismatch)
    bias = unigram_log_prior(vector, rows, smoothing_k)
    before = live_output_bias(model)
    before_stats = None if before is None else tensor_summary(before.detach().cpu())
    bias_name, created = install_output_bias(model, bias, trainable=trainable)
    tensors = [{"name": bias_name, "role": "output_bias", "created": created, "before": before_stats,
                "after": tensor_summary(live_output_bias(model).detach().cpu())}]
    if rescale_w is not None:
        w = layer.weight
        before_w = tensor_summary(w.detach().cpu())
        with torch.no_grad():
            w.copy_(rescale(w.detach().cpu(), bias, rescale_w).to(w.device))
        tensors.append({"name": f"{name}.weight", "role": "output_weight", "created": False, "before": before_w,
                        "after": tensor_summary(w.detach().cpu())})
        embedding = getattr(model, "get_input_embeddings", lambda: None)()
        if embedding is not None and embedding.weight is w:
            warnings.append(f"rescale_w: {name}.weight is tied to the input embedding, so the input embeddings were "
                            "scaled too (untie first: nbcli.patch(model, untie=True, in_place=True))")
    return {"model": type(model).__name__, "bias": bias_name, "created": created, "trainable": trainable,
            "counts": source, "smoothing": f"add-k:{smoothing_k:g}", "rescale_w": rescale_w,
            "tensors": tensors, "warnings": warnings}


def write_into_model(model: Any, tensors: Mapping[str, torch.Tensor], touched: Mapping[str, Any],
                     config_updates: Mapping[str, Any]) -> None:
    """Put the surgery plan's new tensors into `model` itself (`nbcli.patch(..., in_place=True)`):
    an untied output weight becomes a new Parameter of the output layer (its config's
    tie_word_embeddings set false, so transformers does not tie it again), a created output bias
    is installed live (`install_output_bias`), every other tensor is copied into the parameter it
    names (tied names share that storage)."""
    import torch

    from nbcli.hf.output_bias import install_output_bias, output_layer

    original = model.state_dict()
    with torch.no_grad():
        for name, value in tensors.items():
            entry = touched.get(name)
            if entry is None or not entry.created or entry.role.split("+")[0] != "output_weight":
                continue
            _, layer = output_layer(model)
            old = layer.weight
            layer.weight = torch.nn.Parameter(value.to(device=old.device, dtype=old.dtype).clone(),
                                              requires_grad=old.requires_grad)
        config = getattr(model, "config", None)
        for key, value in config_updates.items():
            if config is not None:
                setattr(config, key, value)
        for name, value in tensors.items():
            entry = touched.get(name)
            if entry is not None and entry.created and entry.role.split("+")[0] == "output_weight":
                continue
            if name in original:
                original[name].copy_(value.to(original[name].dtype))
            elif entry is not None and entry.role.split("+")[0] == "output_bias":
                install_output_bias(model, value)
            else:
                raise CheckpointError(f"{type(model).__name__}: the surgery creates {name!r}, which the loaded model "
                                      "has no parameter for; patch its state dict (in_place=False) or its saved folder")
