"""Resolving roles: which tensor of a checkpoint plays each role, from the architecture table.

The table itself (one entry per model family) is `nbcli.checkpoint.architectures`; this module
applies it to a checkpoint and explains what it cannot find.

Public API (stable; used by patch-checkpoint, inspect, probe-bias and train):

    detect_architecture(checkpoint) -> str       raises CheckpointError listing, for each role, the
                               tensor names that look like it
    resolve_roles(checkpoint, arch="auto", overrides=None) -> Roles
        `overrides`: {role: tensor name} from `--map ROLE=TENSOR` (parse with parse_role_map);
        a mapped name must exist in the checkpoint. auto + --map on an unknown layout: custom.
    Roles
        .architecture, .tensors (role -> name or None), .tied (output weight IS the input embedding),
        .head (False: an encoder saved without its prediction head), .notes (role -> why absent)
        .get(role) -> str | None     .require(role, purpose) -> str (CheckpointError saying why)
        .candidates(role) -> list[str]  tensor names whose shape could fit the role
    look_alikes(shapes) -> {role: names}   the hints an error message gives when nothing matches
    parse_role_map(["output_bias=lm_head.bias", ...]) -> dict[str, str]
    vector_length(shape) -> int | None   n for a role vector stored as [n] or as a [1, n] row

Detection: nb metadata; else the `model_type` of a Hugging Face config.json beside the checkpoint
(Gemma has Llama's tensor names, and an encoder without its head is BERT's or RoBERTa's only by
config); else the tensor names (DETECTION_ORDER).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from nbcli.checkpoint.architectures import ARCHITECTURES, DETECTION_ORDER, ROLES, by_model_type
from nbcli.errors import CheckpointError, ConfigError, naming
from nbcli.jsonsafe import metadata_object


class _Tensors(Protocol):
    """What resolving needs from a checkpoint (nbcli.checkpoint.reader.Checkpoint provides it)."""

    path: object
    metadata: dict[str, str]

    def names(self) -> list[str]: ...

    def shape(self, name: str) -> tuple[int, ...]: ...


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
    notes: dict[str, str] = field(default_factory=dict)
    """role -> why the checkpoint has no such tensor (RMSNorm has no bias; no prediction head)."""
    head: bool = True
    """False for an encoder saved without its prediction head (BertModel, sentence-transformers)."""
    model_type: str | None = None
    """config.json's model_type, when the checkpoint sits in a Hugging Face model folder."""
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
                length = vector_length(shape)
                fits = length is not None and (vocab is None or length == vocab)
            else:
                fits = len(shape) == 1 and (width is None or shape[0] == width) and (
                    not strict or ("bias" in name) == role.endswith("bias"))
                fits = fits and bool(re.search(r"norm|ln|layer_?norm", name, re.IGNORECASE))
            if fits:
                found.append(name)
        return _rank_norms(found) if role.startswith("final_ln") else found

    def require(self, role: str, purpose: str = "") -> str:
        """The tensor for `role`, or a CheckpointError saying why it is absent (the architecture has
        no such tensor, the model has no prediction head) or listing the candidate names seen."""
        name = self.get(role)
        if name is not None:
            return name
        why = f" (needed by {purpose})" if purpose else ""
        seen = self.candidates(role)
        if role in self.notes:
            other = (f"; other tensors of a fitting shape: {', '.join(seen[:12])} (use one with --map {role}=TENSOR)"
                     if seen and self.head else "")
            raise CheckpointError(f"{self.checkpoint_path}: {self.architecture} has no {role}{why}: "
                                  f"{self.notes[role]}{other}")
        loose = [] if seen else self.candidates(role, strict=False)
        if seen:
            hint = f"candidates seen: {', '.join(seen[:12])}{' ...' if len(seen) > 12 else ''}"
        elif loose:
            hint = (f"no fitting tensor; the nearest it saw: {', '.join(loose[:12])}"
                    f"{' ...' if len(loose) > 12 else ''}")
        else:
            hint = "no tensor of a fitting shape"
        raise CheckpointError(f"{self.checkpoint_path}: no {role} tensor found for architecture "
                              f"{self.architecture}{why}; {hint}; name one with --map {role}=TENSOR")

    def as_dict(self) -> dict[str, object]:
        return {"architecture": self.architecture, "model_type": self.model_type, "tied": self.tied,
                "head": self.head, "roles": dict(self.tensors),
                "aliases": {k: list(v) for k, v in self.aliases.items()}, "absent": dict(self.notes)}


def vector_length(shape: Sequence[int]) -> int | None:
    """The length of a role vector stored as [n], or as the [1, n] row in which Marian and BART keep
    their output bias (final_logits_bias); None for any other shape."""
    shape = tuple(shape)
    if len(shape) == 1:
        return int(shape[0])
    if len(shape) == 2 and shape[0] == 1:
        return int(shape[1])
    return None


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise ConfigError(f"unknown role {role!r}; roles are: {', '.join(ROLES)}")


def _block_index(name: str) -> int:
    """The largest block/layer index in a tensor name (-1 when it has none)."""
    numbers = [int(n) for n in re.findall(r"\.(\d+)\.", f".{name}.")]
    return max(numbers) if numbers else -1


def _rank_norms(names: Sequence[str]) -> list[str]:
    """Norm-like names, the likeliest final norm first: names outside any numbered block, those
    saying final/_f/out/decoder/vocab/head first; then the deepest block."""
    def key(name: str) -> tuple[int, int, int]:
        block = _block_index(name)
        hinted = bool(re.search(r"final|ln_f|norm\.|^norm|vocab|head|predictions|decoder\.final", name))
        return (0 if block < 0 else 1, 0 if hinted else 1, -block)
    return sorted(names, key=key)


def look_alikes(shapes: Mapping[str, tuple[int, ...]], limit: int = 4) -> dict[str, list[str]]:
    """For each role, up to `limit` tensor names that look like it (by name and shape), likeliest
    first: what a user would pass to --map when no architecture matches."""
    matrices = {n: s for n, s in shapes.items() if len(s) == 2}
    vocab = max((s[0] for s in matrices.values()), default=None)
    width = max((s[1] for n, s in matrices.items() if s[0] == vocab), default=None)
    vectors = {n: s for n, s in shapes.items() if len(s) == 1}
    found: dict[str, list[str]] = {}
    big = [n for n, s in matrices.items() if s[0] == vocab]
    emb = [n for n in big if re.search(r"emb|wte|word|shared|tok", n, re.IGNORECASE)]
    found["input_embedding"] = sorted(emb or big, key=lambda n: (_block_index(n), n))
    out = [n for n in big if re.search(r"head|out|proj|decoder|logit|vocab|unembed|lm", n, re.IGNORECASE)]
    found["output_weight"] = sorted(out, key=lambda n: (_block_index(n), n))
    found["output_bias"] = sorted((n for n, s in shapes.items() if vector_length(s) == vocab),
                                  key=lambda n: (_block_index(n), n))
    norms = [n for n, s in vectors.items() if (width is None or s[0] == width)
             and re.search(r"norm|ln|layer_?norm", n, re.IGNORECASE)]
    found["final_ln_weight"] = _rank_norms([n for n in norms if not n.endswith("bias")])
    found["final_ln_bias"] = _rank_norms([n for n in norms if n.endswith("bias")])
    found["position_embedding"] = sorted(
        (n for n, s in matrices.items() if s[0] != vocab and (width is None or s[1] == width)
         and re.search(r"pos", n, re.IGNORECASE)), key=lambda n: (_block_index(n), n))
    return {role: found[role][:limit] for role in ROLES}


def _model_config(checkpoint: _Tensors) -> dict[str, object] | None:
    config = getattr(checkpoint, "model_config", None)
    return config if isinstance(config, dict) else None


def detect_architecture(checkpoint: _Tensors) -> str:
    """The architecture of a checkpoint: nb metadata, then the model_type of a Hugging Face
    config.json beside it, then the first signature (in DETECTION_ORDER) its tensor names match."""
    if checkpoint.metadata.get("nb.format", "").startswith("nb-model/"):
        return "nb"
    config = _model_config(checkpoint)
    if config is not None and (by_type := by_model_type(config.get("model_type"))) is not None:
        return by_type
    names = checkpoint.names()
    for arch in DETECTION_ORDER:
        patterns = [re.compile(p) for p in ARCHITECTURES[arch].signature]
        if any(p.search(name) for p in patterns for name in names):
            return arch
    shapes = {name: tuple(checkpoint.shape(name)) for name in names}
    guesses = look_alikes(shapes)
    listed = "; ".join(f"{role}: {', '.join(found) if found else 'none'}" for role, found in guesses.items())
    model_type = f" (config.json model_type {config.get('model_type')!r} is not in the table)" if config else ""
    raise CheckpointError(
        f"{checkpoint.path}: cannot tell the architecture from the tensor names{model_type}; tensors that look "
        f"like each role: {listed}; name the roles with --map ROLE=TENSOR (architecture custom) or pass "
        f"--arch {'|'.join(a for a in ARCHITECTURES if a != 'custom')}")


def _nb_objective(checkpoint: _Tensors) -> str | None:
    try:
        config = metadata_object(checkpoint.metadata, "nb.config", checkpoint.path, error=CheckpointError)
    except CheckpointError:
        return None  # open_checkpoint has refused such files already; other sources are guessed
    return (config or {}).get("objective")


def _pick(candidates: Sequence[str], present: set[str]) -> str | None:
    return next((c for c in candidates if c in present), None)


def resolve_roles(checkpoint: _Tensors, arch: str = "auto",
                  overrides: Mapping[str, str] | None = None) -> Roles:
    """Map roles to tensor names for `arch` (or the detected one), then apply --map overrides.

    `--arch auto` with --map on a checkpoint no signature matches gives architecture `custom`:
    the mapped roles only (no guesses). An encoder family whose head tensors are all missing
    (`head_prefixes`) has no output weight, output bias or final LayerNorm: `notes` says so."""
    overrides = dict(overrides or {})
    for role in overrides:
        _check_role(role)
    if arch == "auto":
        try:
            arch = detect_architecture(checkpoint)
        except CheckpointError:
            if not overrides:
                raise
            arch = "custom"
    if arch not in ARCHITECTURES:
        raise ConfigError(f"--arch {arch!r}: expected auto or one of {', '.join(ARCHITECTURES)}")
    if arch == "custom" and not overrides:
        raise ConfigError("--arch custom: name the roles with --map ROLE=TENSOR (e.g. --map output_weight=lm.W)")
    spec = ARCHITECTURES[arch]
    names = checkpoint.names()
    present = set(names)
    config = _model_config(checkpoint)
    head = not spec.head_prefixes or any(n.startswith(spec.head_prefixes) for n in names)
    notes: dict[str, str] = {}
    tensors: dict[str, str | None] = {}
    for role in ROLES:
        candidates = spec.candidates.get(role, ())
        if arch == "nb" and role.startswith("final_ln") and _nb_objective(checkpoint) not in (None, "mlm"):
            candidates = tuple(c for c in candidates if not c.startswith("mlm."))
        tensors[role] = _pick(candidates, present)
        if tensors[role] is None and role in spec.absent:
            notes[role] = spec.absent[role]
    if not head:
        headless = (f"this checkpoint has no prediction head (no {' / '.join(p + '*' for p in spec.head_prefixes)} "
                    "tensors: an encoder saved without its LM head); the operations on the output layer need "
                    "one, and the input embedding is all there is")
        for role in ("output_weight", "output_bias", "final_ln_weight", "final_ln_bias"):
            tensors[role] = None
            notes[role] = headless
    for role, name in overrides.items():
        if name not in present:
            raise CheckpointError(f"{checkpoint.path}: --map {role}={name}: no tensor named {name!r}")
        tensors[role] = name
        notes.pop(role, None)
    if (tensors["output_weight"] is None and spec.tie_to_input and head
            and tensors["input_embedding"] is not None):
        tensors["output_weight"] = tensors["input_embedding"]
        notes.pop("output_weight", None)
    aliases: dict[str, tuple[str, ...]] = {}
    chosen = tensors["output_bias"]
    if chosen is not None and chosen in spec.candidates.get("output_bias", ()):
        others = tuple(c for c in spec.candidates["output_bias"]
                       if c != chosen and c in present and checkpoint.shape(c) == checkpoint.shape(chosen))
        if others:
            aliases["output_bias"] = others
    emb = tensors["input_embedding"]
    if emb is not None:
        others = tuple(c for c in spec.input_aliases if c != emb and c in present
                       and checkpoint.shape(c) == checkpoint.shape(emb))
        if others:
            aliases["input_embedding"] = others
    tied = tensors["output_weight"] is not None and tensors["output_weight"] == tensors["input_embedding"]
    shapes = {name: tuple(checkpoint.shape(name)) for name in names}
    model_type = config.get("model_type") if config else None
    return Roles(architecture=arch, tensors=tensors, tied=tied, checkpoint_path=str(checkpoint.path),
                 aliases=aliases, notes=notes, head=head,
                 model_type=model_type if isinstance(model_type, str) else None, _shapes=shapes)


def parse_role_map(items: Sequence[str]) -> dict[str, str]:
    """Parse `--map ROLE=TENSOR` items."""
    mapping: dict[str, str] = {}
    for item in items:
        role, sep, name = item.partition("=")
        role, name = role.strip(), name.strip()
        if not sep or not role or not name:
            raise ConfigError(f"--map {item!r}: expected ROLE=TENSOR, e.g. output_bias=lm_head.bias")
        with naming(f"--map {item!r}"):
            _check_role(role)
        mapping[role] = name
    return mapping
