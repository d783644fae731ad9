"""The output bias b of a loaded transformers model, live in its forward (paper 000 sec. 3).

    logits = W h + b          b = log p(y), the add-k smoothed log-unigram (nbcli.ops.unigram_log_prior)

Where b lives depends on the model family:

* an output layer with a bias (BERT's cls.predictions.decoder, RoBERTa's lm_head.decoder,
  DistilBERT's vocab_projector, GPT-J, Phi): its `bias` Parameter, set in place;
* the BART family (Marian, BART, mBART, Pegasus): `final_logits_bias` [1, V], a buffer that forward
  adds to the logits; made a trainable Parameter of the same name (saved and restored under that name);
* an output layer without one (GPT-2, Llama, Mistral, Qwen2, GPT-NeoX, OPT, ...): a Parameter
  registered as that nn.Linear's `bias`, which nn.Linear's forward then adds. The weight Parameter is
  not touched, so a tied W stays tied. `save_pretrained` writes it as `<layer>.bias` (lm_head.bias);
  `from_pretrained` drops it (an "unexpected key"), `nbcli.load_model` installs it again
  (`install_carried_bias`).

The output layer is the model's own `get_output_embeddings()`; its name in the model is the name its
bias has in a checkpoint, which is the name the architecture table's `output_bias` role gives it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from nbcli.errors import CheckpointError, ConfigError

if TYPE_CHECKING:
    import torch

    from nbcli.checkpoint.roles import Roles

#: The BART family's logit bias: a [1, V] buffer added after the output layer.
FINAL_LOGITS_BIAS = "final_logits_bias"


def output_layer(model: Any) -> tuple[str, Any]:
    """(name in the model, module) of the output layer: `get_output_embeddings()`, an nn.Linear-like
    module with a [V, d] `weight`. ConfigError when the model has none (a base model without head)."""
    getter = getattr(model, "get_output_embeddings", None)
    layer = getter() if callable(getter) else None
    if layer is None or getattr(layer, "weight", None) is None or layer.weight.dim() != 2:
        raise ConfigError(f"{type(model).__name__}: no output layer (get_output_embeddings() gives none); an output "
                          "bias needs a model with its LM head (e.g. AutoModelForCausalLM, AutoModelForMaskedLM)")
    name = next((n for n, m in model.named_modules() if m is layer), None)
    if name is None:
        raise ConfigError(f"{type(model).__name__}: its output layer is not one of its modules")
    return name, layer


def output_bias_name(model: Any) -> str:
    """The state-dict name of the bias forward adds to the logits: final_logits_bias (BART family),
    else the output layer's `<name>.bias` (present or to be created)."""
    if _has_final_logits_bias(model):
        return FINAL_LOGITS_BIAS
    return f"{output_layer(model)[0]}.bias"


def live_output_bias(model: Any) -> torch.Tensor | None:
    """The bias [V] forward adds to the logits, None when the model adds none."""
    if _has_final_logits_bias(model):
        return getattr(model, FINAL_LOGITS_BIAS).reshape(-1)
    return getattr(output_layer(model)[1], "bias", None)


def _has_final_logits_bias(model: Any) -> bool:
    import torch

    return isinstance(getattr(model, FINAL_LOGITS_BIAS, None), torch.Tensor)


def install_output_bias(model: Any, values: torch.Tensor, *, trainable: bool = True) -> tuple[str, bool]:
    """Make forward add `values` [V] to the logits (module docstring: where, per family), as a
    Parameter (requires_grad=`trainable`) in the output layer's dtype and device. Returns (its
    state-dict name, whether it was created). The output weight is left as it is (ties stay)."""
    import torch

    name, layer = output_layer(model)
    rows = int(layer.weight.shape[0])
    flat = values.detach().reshape(-1)
    if flat.numel() != rows:
        raise ConfigError(f"{type(model).__name__}: an output bias of {flat.numel()} values for {rows} output rows")
    like = layer.weight
    if _has_final_logits_bias(model):
        current = getattr(model, FINAL_LOGITS_BIAS)
        created = not isinstance(current, torch.nn.Parameter)
        new = torch.nn.Parameter(flat.to(device=current.device, dtype=current.dtype).reshape(current.shape).clone(),
                                 requires_grad=trainable)
        if created:
            delattr(model, FINAL_LOGITS_BIAS)  # a buffer becomes a Parameter of the same name
            model.register_parameter(FINAL_LOGITS_BIAS, new)
        else:
            with torch.no_grad():
                current.copy_(new)
            current.requires_grad_(trainable)
        return FINAL_LOGITS_BIAS, created
    bias = getattr(layer, "bias", None)
    if isinstance(bias, torch.Tensor):
        with torch.no_grad():
            bias.copy_(flat.to(device=bias.device, dtype=bias.dtype))
        bias.requires_grad_(trainable)
        # the name save_pretrained writes it under (BERT's cls.predictions.bias, shared with decoder.bias)
        return next((n for n, p in model.named_parameters() if p is bias), f"{name}.bias"), False
    if not isinstance(layer, torch.nn.Linear):
        raise ConfigError(f"{type(model).__name__}: its output layer {name} is a {type(layer).__name__} without a "
                          "bias; nb adds one to an nn.Linear only")
    layer.bias = torch.nn.Parameter(flat.to(device=like.device, dtype=like.dtype).clone(), requires_grad=trainable)
    return f"{name}.bias", True


def carried_bias_name(checkpoint: Any, roles: Roles) -> str | None:
    """The output bias a checkpoint carries: the table's `output_bias` role, else the name
    patch-checkpoint recorded creating (`nb.provenance`, --bias-name), when that tensor is there."""
    name = roles.get("output_bias")
    if name is not None:
        return name
    for operation in provenance_operations(checkpoint.metadata):
        recorded = operation.get("bias_name") if operation.get("op") == "set-output-bias" else None
        if isinstance(recorded, str) and recorded in checkpoint:
            return recorded
    return None


def provenance_operations(metadata: dict[str, str]) -> list[dict[str, Any]]:
    """Every operation `nb.provenance` records, this patch's and the earlier ones' (`previous`)."""
    try:
        record = json.loads(metadata.get("nb.provenance", "null"))
    except (json.JSONDecodeError, TypeError):
        return []
    found: list[dict[str, Any]] = []
    while isinstance(record, dict):
        found += [op for op in record.get("operations", []) if isinstance(op, dict)]
        record = record.get("previous")
    return found


def install_carried_bias(model: Any, checkpoint: Any, roles: Roles, *, trainable: bool = True) -> str | None:
    """After `from_pretrained`: the output bias `checkpoint` carries that the loaded model dropped
    (GPT-2 and Llama classes have none) installed into it (`install_output_bias`). Returns the
    checkpoint's name of the bias installed, None when there was nothing to install. CheckpointError
    when the checkpoint carries a bias this model cannot apply: scoring without it would score
    another model (with `--rescale-w` a broken one: W was scaled to b's norm)."""
    import torch

    name = carried_bias_name(checkpoint, roles)
    live = model.state_dict()
    prefix = f"{getattr(model, 'base_model_prefix', '')}."
    if name is None or name in live or prefix + name in live:
        return None
    rescaled = any(op.get("op") == "rescale-w" for op in provenance_operations(checkpoint.metadata))
    why = "; W was rescaled to its norm (nb.provenance: rescale-w), so W alone is a broken model" if rescaled else ""
    try:
        install_output_bias(model, checkpoint.get(name).to(torch.float32), trainable=trainable)
    except ConfigError as err:
        raise CheckpointError(f"{checkpoint.path}: this {type(model).__name__} cannot apply the output bias {name!r} "
                              f"the checkpoint carries ({err}){why}; refusing to use the model without it") from None
    return name
