"""THE architecture table: which tensor of a checkpoint plays which role.

Public API (stable; used by patch-checkpoint, inspect, probe-bias and train):

    ROLES                      the role names, in display order
    ARCHITECTURES              dict name -> Architecture (gpt2, bert, roberta, llama, nb)
    detect_architecture(checkpoint) -> str       raises CheckpointError if nothing matches
    resolve_roles(checkpoint, arch="auto", overrides=None) -> Roles
        `overrides`: {role: tensor name} from `--map ROLE=TENSOR` (parse with parse_role_map);
        a mapped name must exist in the checkpoint.
    Roles
        .architecture, .tensors (role -> name or None), .tied (output weight IS the input embedding)
        .get(role) -> str | None     .require(role, purpose) -> str (CheckpointError listing candidates)
        .candidates(role) -> list[str]  tensor names whose shape could fit the role
    parse_role_map(["output_bias=lm_head.bias", ...]) -> dict[str, str]

Roles: input_embedding [V, d]; output_weight [V, d] (may be tied to input_embedding, then both
names are the same tensor and `tied` is True); output_bias [V]; final_ln_weight / final_ln_bias [d]
(the LayerNorm right before the output projection: GPT-2's ln_f, BERT's MLM-head transform
LayerNorm, RoBERTa's lm_head.layer_norm, Llama's RMSNorm model.norm (no bias), nb's ln_f or mlm.ln);
position_embedding [T, d] (absent for rotary models).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from nbcli.errors import CheckpointError, ConfigError

ROLES = ("input_embedding", "output_weight", "output_bias", "final_ln_weight", "final_ln_bias",
         "position_embedding")


class _Tensors(Protocol):
    """What the table needs from a checkpoint (nbcli.checkpoint.io.Checkpoint provides it)."""

    path: object
    metadata: dict[str, str]

    def names(self) -> list[str]: ...

    def shape(self, name: str) -> tuple[int, ...]: ...


@dataclass(frozen=True)
class Architecture:
    """Candidate tensor names per role (first present wins) and the names that identify it.

    `tie_to_input`: when no output weight is found, the output projection is the input embedding.
    A candidate containing `{last}` is filled with the highest block index found by `last_pattern`.
    """

    name: str
    description: str
    signature: tuple[str, ...]
    candidates: dict[str, tuple[str, ...]]
    tie_to_input: bool = True
    last_pattern: str | None = None
    untied_output: str = ""
    """Name for a separate output weight written by `--untie`."""


def _prefixed(prefixes: Sequence[str], suffix: str) -> tuple[str, ...]:
    return tuple(f"{p}{suffix}" for p in prefixes)


_GPT2 = ("", "transformer.")
_BERT = ("bert.", "")
_ROBERTA = ("roberta.", "")

ARCHITECTURES: dict[str, Architecture] = {
    "gpt2": Architecture(
        "gpt2", "GPT-2 (hub layout wte.weight/ln_f.bias, or transformer.-prefixed saves)",
        signature=("wte.weight", "transformer.wte.weight"),
        candidates={
            "input_embedding": _prefixed(_GPT2, "wte.weight"),
            "output_weight": ("lm_head.weight",),
            "output_bias": ("lm_head.bias",),
            "final_ln_weight": _prefixed(_GPT2, "ln_f.weight"),
            "final_ln_bias": _prefixed(_GPT2, "ln_f.bias"),
            "position_embedding": _prefixed(_GPT2, "wpe.weight"),
        }, untied_output="lm_head.weight"),
    "bert": Architecture(
        "bert", "BERT with MLM head (cls.predictions.*) or encoder only (final LN = last layer's output LN)",
        signature=("bert.embeddings.word_embeddings.weight", "cls.predictions.bias",
                   "cls.predictions.transform.LayerNorm.bias", "embeddings.word_embeddings.weight"),
        candidates={
            "input_embedding": _prefixed(_BERT, "embeddings.word_embeddings.weight"),
            "output_weight": ("cls.predictions.decoder.weight",),
            "output_bias": ("cls.predictions.bias", "cls.predictions.decoder.bias"),
            "final_ln_weight": ("cls.predictions.transform.LayerNorm.weight",
                                *_prefixed(_BERT, "encoder.layer.{last}.output.LayerNorm.weight")),
            "final_ln_bias": ("cls.predictions.transform.LayerNorm.bias",
                              *_prefixed(_BERT, "encoder.layer.{last}.output.LayerNorm.bias")),
            "position_embedding": _prefixed(_BERT, "embeddings.position_embeddings.weight"),
        },
        last_pattern=r"^(?:bert\.)?encoder\.layer\.(\d+)\.", untied_output="cls.predictions.decoder.weight"),
    "roberta": Architecture(
        "roberta", "RoBERTa with LM head (lm_head.*) or encoder only",
        signature=("roberta.embeddings.word_embeddings.weight", "lm_head.layer_norm.bias", "lm_head.dense.weight"),
        candidates={
            "input_embedding": _prefixed(_ROBERTA, "embeddings.word_embeddings.weight"),
            "output_weight": ("lm_head.decoder.weight",),
            "output_bias": ("lm_head.bias", "lm_head.decoder.bias"),
            "final_ln_weight": ("lm_head.layer_norm.weight",
                                *_prefixed(_ROBERTA, "encoder.layer.{last}.output.LayerNorm.weight")),
            "final_ln_bias": ("lm_head.layer_norm.bias",
                              *_prefixed(_ROBERTA, "encoder.layer.{last}.output.LayerNorm.bias")),
            "position_embedding": _prefixed(_ROBERTA, "embeddings.position_embeddings.weight"),
        },
        last_pattern=r"^(?:roberta\.)?encoder\.layer\.(\d+)\.", untied_output="lm_head.decoder.weight"),
    "llama": Architecture(
        "llama", "Llama family (model.embed_tokens, lm_head.weight, RMSNorm model.norm; no biases)",
        signature=("model.embed_tokens.weight",),
        candidates={
            "input_embedding": ("model.embed_tokens.weight", "embed_tokens.weight"),
            "output_weight": ("lm_head.weight",),
            "output_bias": ("lm_head.bias",),
            "final_ln_weight": ("model.norm.weight", "norm.weight"),
            "final_ln_bias": ("model.norm.bias", "norm.bias"),
            "position_embedding": (),
        }, untied_output="lm_head.weight"),
    "nb": Architecture(
        "nb", "nb's own `nb train` checkpoints (tok_emb, head, ln_f; MLM: mlm.ln)",
        signature=("tok_emb.weight",),
        candidates={
            "input_embedding": ("tok_emb.weight",),
            "output_weight": ("head.weight",),
            "output_bias": ("head.bias",),
            "final_ln_weight": ("mlm.ln.weight", "ln_f.weight"),
            "final_ln_bias": ("mlm.ln.bias", "ln_f.bias"),
            "position_embedding": ("pos_emb.weight",),
        }, untied_output="head.weight"),
}


@dataclass(frozen=True)
class Roles:
    """Role -> tensor name (None where the checkpoint has no such tensor)."""

    architecture: str
    tensors: dict[str, str | None]
    tied: bool
    checkpoint_path: str = ""
    aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """role -> other tensors present that hold the same parameter (e.g. BERT's
    cls.predictions.decoder.bias beside cls.predictions.bias); writers keep them equal."""
    _shapes: dict[str, tuple[int, ...]] = field(default_factory=dict, repr=False, compare=False)

    def get(self, role: str) -> str | None:
        _check_role(role)
        return self.tensors.get(role)

    def __getitem__(self, role: str) -> str | None:
        return self.get(role)

    def candidates(self, role: str, strict: bool = True) -> list[str]:
        """Tensor names whose shape could fit `role` (for error messages and --map hints); for the LN
        roles, `strict=False` also lists norm-like vectors of the other kind (weight vs bias)."""
        _check_role(role)
        emb = self.tensors.get("input_embedding")
        vocab, width = (self._shapes[emb] if emb and len(self._shapes.get(emb, ())) == 2 else (None, None))
        found = []
        for name, shape in self._shapes.items():
            if role in ("input_embedding", "output_weight", "position_embedding"):
                fits = len(shape) == 2 and (width is None or shape[1] == width) and (
                    role == "position_embedding" or vocab is None or shape[0] == vocab)
            elif role == "output_bias":
                fits = len(shape) == 1 and (vocab is None or shape[0] == vocab)
            else:
                fits = len(shape) == 1 and (width is None or shape[0] == width) and (
                    not strict or ("bias" in name) == role.endswith("bias"))
                fits = fits and bool(re.search(r"norm|ln|layer_?norm", name, re.IGNORECASE))
            if fits:
                found.append(name)
        return found

    def require(self, role: str, purpose: str = "") -> str:
        """The tensor for `role`, or a CheckpointError listing the candidate names seen."""
        name = self.get(role)
        if name is not None:
            return name
        seen = self.candidates(role)
        loose = [] if seen else self.candidates(role, strict=False)
        if seen:
            hint = f"candidates seen: {', '.join(seen[:12])}{' ...' if len(seen) > 12 else ''}"
        elif loose:
            hint = (f"no fitting tensor; the nearest it saw: {', '.join(loose[:12])}"
                    f"{' ...' if len(loose) > 12 else ''}")
        else:
            hint = "no tensor of a fitting shape"
        why = f" (needed by {purpose})" if purpose else ""
        raise CheckpointError(f"{self.checkpoint_path}: no {role} tensor found for architecture "
                              f"{self.architecture}{why}; {hint}; name one with --map {role}=TENSOR")

    def as_dict(self) -> dict[str, object]:
        return {"architecture": self.architecture, "tied": self.tied, "roles": dict(self.tensors),
                "aliases": {k: list(v) for k, v in self.aliases.items()}}


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise ConfigError(f"unknown role {role!r}; roles are: {', '.join(ROLES)}")


def detect_architecture(checkpoint: _Tensors) -> str:
    """The architecture whose signature tensors the checkpoint has (nb metadata wins)."""
    if checkpoint.metadata.get("nb.format", "").startswith("nb-model/"):
        return "nb"
    names = set(checkpoint.names())
    # Most specific first: RoBERTa's unprefixed encoder looks like BERT's, so its head/prefix decides.
    for arch in ("nb", "llama", "gpt2", "roberta", "bert"):
        if any(sig in names for sig in ARCHITECTURES[arch].signature):
            return arch
    sample = ", ".join(sorted(names)[:8])
    raise CheckpointError(f"{checkpoint.path}: cannot tell the architecture from the tensor names ({sample}"
                          f"{' ...' if len(names) > 8 else ''}); pass --arch "
                          f"{'|'.join(ARCHITECTURES)} and/or --map ROLE=TENSOR")


def _last_block(names: Sequence[str], pattern: str | None) -> str | None:
    if pattern is None:
        return None
    indexes = [int(m.group(1)) for n in names if (m := re.match(pattern, n))]
    return str(max(indexes)) if indexes else None


def _nb_objective(checkpoint: _Tensors) -> str | None:
    try:
        return json.loads(checkpoint.metadata.get("nb.config", "{}")).get("objective")
    except (json.JSONDecodeError, AttributeError):
        return None


def resolve_roles(checkpoint: _Tensors, arch: str = "auto",
                  overrides: Mapping[str, str] | None = None) -> Roles:
    """Map roles to tensor names for `arch` (or the detected one), then apply --map overrides."""
    if arch == "auto":
        arch = detect_architecture(checkpoint)
    if arch not in ARCHITECTURES:
        raise ConfigError(f"--arch {arch!r}: expected auto or one of {', '.join(ARCHITECTURES)}")
    spec = ARCHITECTURES[arch]
    names = checkpoint.names()
    present = set(names)
    last = _last_block(names, spec.last_pattern)
    tensors: dict[str, str | None] = {}
    for role in ROLES:
        candidates = spec.candidates.get(role, ())
        if arch == "nb" and role.startswith("final_ln") and _nb_objective(checkpoint) not in (None, "mlm"):
            candidates = tuple(c for c in candidates if not c.startswith("mlm."))
        chosen = None
        for candidate in candidates:
            if "{last}" in candidate:
                if last is None:
                    continue
                candidate = candidate.replace("{last}", last)
            if candidate in present:
                chosen = candidate
                break
        tensors[role] = chosen
    for role, name in (overrides or {}).items():
        _check_role(role)
        if name not in present:
            raise CheckpointError(f"{checkpoint.path}: --map {role}={name}: no tensor named {name!r}")
        tensors[role] = name
    if tensors["output_weight"] is None and spec.tie_to_input and tensors["input_embedding"] is not None:
        tensors["output_weight"] = tensors["input_embedding"]
    aliases: dict[str, tuple[str, ...]] = {}
    for role in ("output_bias",):
        chosen = tensors[role]
        if chosen is not None and chosen in spec.candidates.get(role, ()):
            others = tuple(c for c in spec.candidates[role]
                           if c != chosen and c in present and checkpoint.shape(c) == checkpoint.shape(chosen))
            if others:
                aliases[role] = others
    tied = tensors["output_weight"] is not None and tensors["output_weight"] == tensors["input_embedding"]
    shapes = {name: tuple(checkpoint.shape(name)) for name in names}
    return Roles(architecture=arch, tensors=tensors, tied=tied, checkpoint_path=str(checkpoint.path),
                 aliases=aliases, _shapes=shapes)


def parse_role_map(items: Sequence[str]) -> dict[str, str]:
    """Parse `--map ROLE=TENSOR` items."""
    mapping: dict[str, str] = {}
    for item in items:
        role, sep, name = item.partition("=")
        role, name = role.strip(), name.strip()
        if not sep or not role or not name:
            raise ConfigError(f"--map {item!r}: expected ROLE=TENSOR, e.g. output_bias=lm_head.bias")
        _check_role(role)
        mapping[role] = name
    return mapping
