"""Attention guidance (paper 001) for any transformers model: the AG loss of `nb train`, on the
attention maps transformers returns or on queries and keys captured by hooks.

    out = model(**batch, output_attentions=True)        # eager attention: model.set_attn_implementation("eager")
    ag = attention_guidance_loss(out.attentions, batch["input_ids"], attention_mask=batch["attention_mask"])
    (out.loss + alpha * ag).backward()                  # eq. 4

    with capture_qk(model) as qk:                       # any attention implementation (SDPA, flash):
        out = model(**batch)                            # hooks keep each layer's queries and keys
    ag = attention_guidance_loss(qk, batch["input_ids"], attention_mask=batch["attention_mask"])

The loss is `nbcli.train.guidance.Guidance` itself, the one implementation `nb train` uses: heads
0 .. k-1 of every layer are guided, k = round(fraction * H) (`assign_heads`: one [Next], one [Prev],
the rest [First] by default; a causal model drops [Next]), the same patterns (app. A.2), units
(`reduction`: "mse", the released code's, or "frobenius", eq. 2-3 as printed) and conventions. T is
the padded length of the batch (the maps' last dimension): in "mse" units each map is divided by
T^2, padding rows and keys included, as nb train's fixed-length blocks are. Padding must be on the
right (an attention_mask of ones then zeros per row).

From maps, the row errors read p_ij from the given map; from captured q, k they are recomputed for
the guided heads only, one-hot patterns in O(block x T) memory (`one_hot_row_errors`), so guidance
needs no T x T map per head and no eager attention. Where the architecture table names each layer's
query and key projections (`attention_qk`: GPT-2, BERT, RoBERTa, DistilBERT), `capture_qk` hooks
them; other models give their maps with eager attention only.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nbcli.errors import ConfigError

if TYPE_CHECKING:
    import torch

    from nbcli.train.guidance import Guidance


@dataclass
class CapturedQK:
    """Each layer's queries and keys [B, H, T, dh] from the last forward pass inside `capture_qk`
    (with their graph: the AG loss backpropagates into the projections), and whether the model's
    attention is causal."""

    causal: bool
    layers: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)


def right_padded_lengths(input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Real tokens per row [B] from an attention mask of ones then zeros (right padding; T when
    there is no mask). ConfigError for left padding or holes: the patterns count positions from 0."""
    import torch

    B, T = input_ids.shape
    if attention_mask is None:
        return torch.full((B,), T, dtype=torch.long, device=input_ids.device)
    mask = attention_mask.to(torch.bool)
    if tuple(mask.shape) != (B, T):
        raise ConfigError(f"attention_mask has shape {list(mask.shape)}, input_ids {[B, T]}")
    if bool((mask[:, 1:] & ~mask[:, :-1]).any()):
        raise ConfigError("attention guidance needs right padding (each attention_mask row: ones, then zeros); "
                          "set tokenizer.padding_side = 'right'")
    return mask.sum(1)


def maps_are_causal(maps: Sequence[torch.Tensor]) -> bool:
    """True when no query attends a later position (every entry above the diagonal is 0)."""
    import torch

    H = maps[0]
    T = H.shape[-1]
    if T < 2:
        return False
    upper = torch.ones(T, T, dtype=torch.bool, device=H.device).triu(1)
    return not bool(H.detach()[..., upper].ne(0).any())


def guidance_for(n_head: int, *, fraction: float, patterns: str | Sequence[str] | None, causal: bool,
                 special_ids: Sequence[int], period_ids: Sequence[int], reduction: str) -> Guidance:
    """The `Guidance` nb train builds: heads assigned by `assign_heads`, [Delim] targets `special_ids`
    (the tokenizer's special ids but padding/unknown: `pattern_ids`), [Period] targets `period_ids`."""
    from nbcli.analysis.patterns import assign_heads, parse_patterns
    from nbcli.train.guidance import REDUCTIONS, Guidance

    names = parse_patterns(patterns) if isinstance(patterns, str) or patterns is None else parse_patterns(",".join(patterns))
    if reduction not in REDUCTIONS:
        raise ConfigError(f"reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}")
    heads = assign_heads(n_head, fraction, names, causal)
    used = set(heads.values())
    if "delim" in used and not special_ids:
        raise ConfigError("the [Delim] pattern needs special_ids (its targets): e.g. nbcli.pattern_ids(tokenizer)")
    if "period" in used and not period_ids:
        raise ConfigError("the [Period] pattern needs period_ids (its targets): e.g. nbcli.pattern_ids(tokenizer)")
    return Guidance(heads=heads, delim_ids=tuple(int(i) for i in special_ids),
                    period_ids=tuple(int(i) for i in period_ids), reduction=reduction)


def attention_guidance_loss(attentions: Sequence[torch.Tensor] | CapturedQK, input_ids: torch.Tensor, *,
                            attention_mask: torch.Tensor | None = None, patterns: str | Sequence[str] | None = None,
                            fraction: float = 0.5, special_ids: Sequence[int] = (), period_ids: Sequence[int] = (),
                            causal: bool | None = None, reduction: str = "mse") -> torch.Tensor:
    """L_AG (paper 001 eq. 3, module docstring) of a batch: `attentions` the per-layer maps [B, H, T, T]
    transformers returns with output_attentions=True (eager attention), or the queries and keys
    `capture_qk` kept. `causal` None: read from the maps (nothing above the diagonal) or the capture."""
    lengths = right_padded_lengths(input_ids, attention_mask)
    if isinstance(attentions, CapturedQK):
        if not attentions.layers:
            raise ConfigError("capture_qk holds no queries and keys: run the model's forward inside `with capture_qk(model)`")
        q0 = attentions.layers[0][0]
        guidance = guidance_for(q0.shape[1], fraction=fraction, patterns=patterns,
                                causal=attentions.causal if causal is None else causal, special_ids=special_ids,
                                period_ids=period_ids, reduction=reduction)
        guided = guidance.guided
        qks = [(q[:, guided], k[:, guided]) for q, k in attentions.layers]
        return guidance.loss(qks, input_ids, lengths, attentions.causal if causal is None else causal)
    maps = list(attentions or ())
    if not maps or any(m is None for m in maps):
        raise ConfigError("no attention maps: call the model with output_attentions=True under eager attention "
                          "(from_pretrained(..., attn_implementation='eager') or model.set_attn_implementation('eager')), "
                          "or capture queries and keys with nbcli.capture_qk(model)")
    if maps[0].dim() != 4 or maps[0].shape[-1] != input_ids.shape[1]:
        raise ConfigError(f"attention maps of shape {list(maps[0].shape)} for input_ids {list(input_ids.shape)}: "
                          "expected [B, H, T, T] per layer")
    is_causal = maps_are_causal(maps) if causal is None else causal
    guidance = guidance_for(maps[0].shape[1], fraction=fraction, patterns=patterns, causal=is_causal,
                            special_ids=special_ids, period_ids=period_ids, reduction=reduction)
    return guidance.loss_from_maps(maps, input_ids, lengths, is_causal)


def pattern_ids(tokenizer: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(special_ids, period_ids) of a transformers tokenizer, as nb train takes them from its own:
    [Delim] targets its special ids but padding/unknown (BOS/EOS, CLS/SEP included), [Period]
    targets the pieces that are "." (app. A.2; `period_piece_ids`)."""
    from nbcli.analysis.patterns import delimiter_ids, period_piece_ids

    pad_like = {getattr(tokenizer, "pad_token_id", None), getattr(tokenizer, "unk_token_id", None)}
    specials = sorted(set(getattr(tokenizer, "all_special_ids", ())) - pad_like)
    pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    return (delimiter_ids(specials, getattr(tokenizer, "bos_token_id", None), getattr(tokenizer, "eos_token_id", None)),
            period_piece_ids([p if isinstance(p, str) else "" for p in pieces]))


def is_causal_model(model: Any) -> bool:
    """A masked LM (its class in transformers' masked-LM mapping, not configured as a decoder) attends
    both ways; every other language model here is causal. (For the architectures in nb's table the
    table's `masked_lm` says the same: `qk_projections` reads it.)"""
    try:
        from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES
    except ImportError:  # pragma: no cover - transformers without the auto mapping
        return True
    masked = set(MODEL_FOR_MASKED_LM_MAPPING_NAMES.values())
    config = getattr(model, "config", None)
    return type(model).__name__ not in masked or bool(getattr(config, "is_decoder", False))


@dataclass(frozen=True)
class QKProjections:
    """Each layer's (query, key) projection modules of a model, whether one fused module gives q, k, v
    (GPT-2's c_attn), its head count and whether its attention is causal (`qk_projections`)."""

    pairs: list[tuple[Any, Any]]
    fused: bool
    n_head: int
    causal: bool


def qk_projections(model: Any) -> QKProjections:
    """The query and key projections the architecture table names for this model (`attention_qk`),
    one pair per layer. ConfigError when the table names none, or the model computes its scores
    otherwise than softmax(q k^T / sqrt(dh)) (then use output_attentions with eager attention)."""
    from nbcli.checkpoint import resolve_roles
    from nbcli.checkpoint.architectures import ARCHITECTURES
    from nbcli.checkpoint.memory import MemoryCheckpoint

    arch = resolve_roles(MemoryCheckpoint.from_model(model)).architecture
    spec = ARCHITECTURES.get(arch)
    if spec is None or not spec.attention_qk:
        raise ConfigError(f"{type(model).__name__} ({arch}): nb knows no query/key projections to hook for this "
                          "architecture; use output_attentions=True with eager attention instead")
    config = model.config
    if arch == "gpt2" and (not getattr(config, "scale_attn_weights", True)
                           or getattr(config, "scale_attn_by_inverse_layer_idx", False)):
        raise ConfigError("capture_qk: this GPT-2 does not scale attention by 1/sqrt(dh) alone; use "
                          "output_attentions=True with eager attention instead")
    if getattr(config, "position_embedding_type", "absolute") not in ("absolute", None):
        raise ConfigError(f"capture_qk: {config.position_embedding_type} position embeddings enter the attention "
                          "scores; use output_attentions=True with eager attention instead")
    named = dict(model.named_modules())

    def find(pattern: str) -> list[Any]:
        hits = sorted((n for n in named if re.search(pattern, n)), key=lambda n: [int(d) for d in re.findall(r"\d+", n)])
        return [named[n] for n in hits]

    queries, keys = find(spec.attention_qk[0]), find(spec.attention_qk[1])
    layers = getattr(config, "num_hidden_layers", None)
    if not queries or len(queries) != len(keys) or (isinstance(layers, int) and len(queries) != layers):
        raise ConfigError(f"{type(model).__name__}: found {len(queries)} query and {len(keys)} key projections for "
                          f"{layers} layers; use output_attentions=True with eager attention instead")
    causal = not spec.masked_lm or bool(getattr(config, "is_decoder", False))  # the table's rule, as eval's
    return QKProjections(list(zip(queries, keys)), spec.attention_qk[0] == spec.attention_qk[1],
                         int(config.num_attention_heads), causal)


@contextmanager
def capture_qk(model: Any, projections: QKProjections | None = None) -> Iterator[CapturedQK]:
    """Hooks on each layer's query and key projections (`qk_projections`, or the ones given) that
    keep q, k [B, H, T, dh] of the forward pass run inside the block (the last one, when several
    run), for `attention_guidance_loss` without eager attention. The hooks are removed on exit."""
    found = projections or qk_projections(model)
    captured = CapturedQK(causal=found.causal)
    last = len(found.pairs) - 1
    current: dict[int, dict[str, torch.Tensor]] = {}

    def heads(x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        return x.view(B, T, found.n_head, d // found.n_head).transpose(1, 2)

    def keep(layer: int, which: str) -> Any:
        def hook(module: Any, args: Any, output: torch.Tensor) -> None:
            if found.fused:
                d = output.shape[-1] // 3
                current[layer] = {"q": heads(output[..., :d]), "k": heads(output[..., d:2 * d])}
            else:
                current.setdefault(layer, {})[which] = heads(output)
            if layer == last and len(current.get(layer, {})) == 2:
                captured.layers = [(current[i]["q"], current[i]["k"]) for i in range(last + 1)]
                current.clear()
        return hook

    handles = []
    try:
        for layer, (q_module, k_module) in enumerate(found.pairs):
            handles.append(q_module.register_forward_hook(keep(layer, "q")))
            if not found.fused:
                handles.append(k_module.register_forward_hook(keep(layer, "k")))
        yield captured
    finally:
        for handle in handles:
            handle.remove()
