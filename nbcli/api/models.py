"""nb's public Python API, part two: the papers' methods on transformers models in memory and in
training (docs/python.md). Part one, one function per `nb` command, is the rest of `nbcli.api`; `import nbcli`
exports both.

    model = nbcli.load_model("gpt2-unigram/")                 # from_pretrained + the output bias it carries
    nbcli.init_output_bias(model, "counts.safetensors")       # b = log p(y), trainable, live (paper 000 sec. 3)
    nbcli.scale_ln_bias(model, 0.5)                           # b_LN <- 0.5 b_LN (paper 003 sec. 3.3)
    ag = nbcli.attention_guidance_loss(out.attentions, ids)   # L_AG of nb train (paper 001 eq. 3)
    trainer = nbcli.AttentionGuidanceTrainer(..., ag_fraction=0.5, ag_alpha=100)

The surgery functions run the plan `nbcli.patch` runs (`nbcli.surgery.run_surgery`, the pure
functions of `nbcli.ops`) and write the result into the model itself; they return the PatchReport
of what changed. Internal modules are imported inside the functions: torch and transformers load
on first use (`AttentionGuidanceTrainer`, a transformers.Trainer subclass, on first access).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from nbcli.api.checkpoints import patch
from nbcli.api.reports import PatchReport, PathLike, Report, RoleMap

if TYPE_CHECKING:
    import torch

    from nbcli.hf.guidance import CapturedQK


def load_model(path: PathLike, *, model_class: str | None = None, arch: str = "auto",
               mapping: Mapping[str, str] | None = None, trainable: bool = True, **from_pretrained: Any) -> Any:
    """A transformers model folder (or Hub repo id) loaded by transformers' `from_pretrained`, as the
    class it was saved as (`model_class`: another class name), with the output bias its checkpoint
    carries installed and applied by forward: the one documented way to load what `nb
    patch-checkpoint --set-output-bias --bias-name lm_head.bias` writes for GPT-2, Llama and the other
    classes without an output bias (from_pretrained alone drops it), and what `save_pretrained` writes
    after `init_output_bias`. `mapping`: {"output_bias": NAME} where the bias has another name;
    `from_pretrained`: further keyword arguments (attn_implementation=...)."""
    from nbcli.hf.loading import load_model as load

    return load(os.fspath(path), model_class=model_class, arch=arch, mapping=dict(mapping or {}), trainable=trainable,
                **from_pretrained)


def init_output_bias(model: Any, counts: PathLike | Any, *, smoothing: str = "add-k:1",
                     rescale_w: Literal["fro", "spectral"] | None = None, tokenizer: PathLike | None = None,
                     allow_vocab_mismatch: bool = False, trainable: bool = True) -> Report:
    """Paper 000 sec. 3 on a loaded transformers model: its output bias b = log p(y) (add-k smoothed;
    `counts` a counts file or an array of counts, checked against the model as patch-checkpoint
    checks them), a Parameter forward adds to the logits and training updates: the output layer's
    own bias (BERT, RoBERTa), Marian/BART's final_logits_bias (made a Parameter), or one created on
    an output layer without one (GPT-2, Llama, Mistral, Qwen2; the weight, tied or not, is kept).
    `rescale_w`: then ||W|| = ||b||_2 (sec. 4.1). `save_pretrained` writes the bias;
    `nbcli.load_model` restores it. The report names the bias and each changed tensor's statistics."""
    from nbcli.counts import parse_smoothing
    from nbcli.hf.inmemory import init_output_bias as init
    from nbcli.resolve import local_path

    source = os.fspath(counts) if isinstance(counts, (str, os.PathLike)) else counts
    return Report(init(_in_memory(model, "init_output_bias"), source, smoothing_k=parse_smoothing(smoothing), rescale_w=rescale_w,
                       tokenizer=None if tokenizer is None else local_path(tokenizer, "tokenizer"),
                       allow_vocab_mismatch=allow_vocab_mismatch, trainable=trainable))


def _in_memory(model: Any, function: str) -> Any:
    from nbcli.errors import ConfigError

    if isinstance(model, (str, os.PathLike)):
        raise ConfigError(f"{function}() changes a model in memory; for a checkpoint on disk use nbcli.patch(path, "
                          "output, ...) or nb patch-checkpoint")
    return model


def standardise_embeddings(model: Any, target: str = "xavier", *, arch: str = "auto",
                           mapping: RoleMap = None) -> PatchReport:
    """The input embedding standardised in place (paper 002 eq. 1: `target` "xavier"; eq. 4:
    "match:FILE:TENSOR"; or "mean=M,std=S"), as `nb patch-checkpoint --standardise-embeddings`."""
    return patch(_in_memory(model, "standardise_embeddings"), standardise=target, arch=arch, mapping=mapping,
                 in_place=True)


def shuffle_embeddings(model: Any, *, seed: int = 0, mode: Literal["rows", "rows-columns", "elements"] = "rows",
                       arch: str = "auto", mapping: RoleMap = None) -> PatchReport:
    """The input embedding shuffled in place (paper 002 sec. 3.4, Pre-trained_Shuffled), as
    `nb patch-checkpoint --shuffle-embeddings --seed --shuffle-mode`."""
    return patch(_in_memory(model, "shuffle_embeddings"), shuffle=True, seed=seed, shuffle_mode=mode, arch=arch,
                 mapping=mapping, in_place=True)


def scale_ln_bias(model: Any, lam: float, *, arch: str = "auto", mapping: RoleMap = None) -> PatchReport:
    """b_LN <- lam b_LN in place: the bias of the final LayerNorm before the output layer (paper
    003 sec. 3.3), as `nb patch-checkpoint --scale-ln-bias`."""
    return patch(_in_memory(model, "scale_ln_bias"), scale_ln_bias=lam, arch=arch, mapping=mapping, in_place=True)


def zipfian_whiten_embeddings(model: Any, counts: PathLike, *, smoothing: str = "add-k:1",
                              tokenizer: PathLike | None = None, allow_vocab_mismatch: bool = False,
                              arch: str = "auto", mapping: RoleMap = None) -> PatchReport:
    """The input embedding whitened in place under the counts' unigram, v' = Sigma^(-1/2)(v - mu)
    (Yokoi et al. 2024), as `nb patch-checkpoint --zipfian-whiten-embeddings`."""
    return patch(_in_memory(model, "zipfian_whiten_embeddings"), zipfian_whiten_embeddings=counts,
                 smoothing=smoothing, tokenizer=tokenizer, allow_vocab_mismatch=allow_vocab_mismatch, arch=arch,
                 mapping=mapping, in_place=True)


def remove_frequency_direction(model: Any, *, arch: str = "auto", mapping: RoleMap = None) -> PatchReport:
    """w_i <- w_i - <w_i, u> u for every row of the output weight, u = b_LN / ||b_LN|| (paper 003
    sec. 3.2), in place, as `nb patch-checkpoint --remove-frequency-direction` (a tied W is the
    input embedding: untie first, `nbcli.patch(model, untie=True, in_place=True)`)."""
    return patch(_in_memory(model, "remove_frequency_direction"), remove_frequency_direction=True, arch=arch,
                 mapping=mapping, in_place=True)


def attention_guidance_loss(attentions: Sequence[torch.Tensor] | CapturedQK, input_ids: torch.Tensor, *,
                            attention_mask: torch.Tensor | None = None, patterns: str | Sequence[str] | None = None,
                            fraction: float = 0.5, special_ids: Sequence[int] = (), period_ids: Sequence[int] = (),
                            causal: bool | None = None, reduction: Literal["mse", "frobenius"] = "mse",
                            ) -> torch.Tensor:
    """L_AG of paper 001 (eq. 3), nb train's loss (`nbcli.train.guidance`): heads 0 .. k-1 of every
    layer guided, k = round(fraction * H), to `patterns` ("next,prev,first" by default; a causal
    model drops [Next]); `attentions` the maps transformers returns with output_attentions=True
    (eager attention), [B, H, T, T] per layer, or what `capture_qk` kept. `attention_mask`: right
    padding; T is the padded length ("mse" divides each map by T^2). `special_ids` / `period_ids`:
    the [Delim] / [Period] targets (`pattern_ids(tokenizer)`). A scalar with its graph."""
    from nbcli.hf.guidance import attention_guidance_loss as loss

    return loss(attentions, input_ids, attention_mask=attention_mask, patterns=patterns, fraction=fraction,
                special_ids=special_ids, period_ids=period_ids, causal=causal, reduction=reduction)


def capture_qk(model: Any) -> Any:
    """A context manager: inside it, each forward pass of `model` keeps every layer's queries and
    keys (hooks on the projections the architecture table names: GPT-2, BERT, RoBERTa, DistilBERT),
    for `attention_guidance_loss` under any attention implementation (SDPA, flash): only the guided
    heads' maps are recomputed, one-hot patterns in O(T) memory per row."""
    from nbcli.hf.guidance import capture_qk as capture

    return capture(model)


def pattern_ids(tokenizer: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(special_ids, period_ids) of a transformers tokenizer: the [Delim] targets (its special ids
    but padding/unknown) and the [Period] targets (its "." pieces), as nb train takes them."""
    from nbcli.hf.guidance import pattern_ids as ids

    return ids(tokenizer)


#: Provided on first access (PEP 562): importing it imports transformers.
LAZY = ("AttentionGuidanceTrainer",)


def __getattr__(name: str) -> Any:
    """`AttentionGuidanceTrainer` (nbcli.hf.trainer): a transformers.Trainer subclass, so built on
    first use (transformers is an optional dependency: pip install 'nbcli[hf]')."""
    if name == "AttentionGuidanceTrainer":
        from nbcli.errors import ConfigError

        try:
            from nbcli.hf.trainer import AttentionGuidanceTrainer
        except ImportError as err:
            raise ConfigError(f"AttentionGuidanceTrainer needs transformers and accelerate: pip install 'nbcli[hf]' "
                              f"({err})") from None
        return AttentionGuidanceTrainer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "attention_guidance_loss", "capture_qk", "init_output_bias", "load_model", "pattern_ids",
    "remove_frequency_direction", "scale_ln_bias", "shuffle_embeddings", "standardise_embeddings",
    "zipfian_whiten_embeddings", *LAZY,
]
