"""What a surgery does: `SurgeryOptions`, built from what a user gives (`surgery_options`: the one
builder behind `nb patch-checkpoint` and `nbcli.patch`), the --standardise-embeddings target
(`StandardiseSpec`, `parse_standardise`), the --scale-ln-bias check, and the order operations are
applied in (`OPERATION_ORDER`, see `nbcli.surgery.plan`). No torch here: parsing options stays cheap.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union

from nbcli.errors import CheckpointError, ConfigError

if TYPE_CHECKING:
    from nbcli.ops import Norm, RescaleChoice, ShuffleMode


OPERATION_ORDER = ("set-output-bias", "untie", "rescale-w", "zipfian-whiten-embeddings", "standardise-embeddings", "shuffle-embeddings",
                   "scale-ln-bias", "remove-frequency-direction")

#: How a user asks for each operation: `nb patch-checkpoint`'s option, `nbcli.patch`'s argument.
OPERATION_SPELLINGS: dict[str, tuple[str, str]] = {
    "set-output-bias": ("--set-output-bias", "set_output_bias"), "untie": ("--untie", "untie"),
    "rescale-w": ("--rescale-w", "rescale_w"),
    "zipfian-whiten-embeddings": ("--zipfian-whiten-embeddings", "zipfian_whiten_embeddings"),
    "standardise-embeddings": ("--standardise-embeddings", "standardise"),
    "shuffle-embeddings": ("--shuffle-embeddings", "shuffle"), "scale-ln-bias": ("--scale-ln-bias", "scale_ln_bias"),
    "remove-frequency-direction": ("--remove-frequency-direction", "remove_frequency_direction"),
}
Spelling = Literal["option", "argument"]
PathLike = Union[str, os.PathLike]

CREATED_BIAS_NOTE = (
    "A created output bias is applied by nb's own model, nb eval, nb generate and probe-bias; "
    "transformers' from_pretrained drops it where the class has no output bias (GPT-2, Llama: an "
    "'unexpected key'), so load such a folder with nbcli.load_model(OUT), which installs it into the "
    "output layer (docs/python.md).")


@dataclass(frozen=True)
class StandardiseSpec:
    """Target of --standardise-embeddings: xavier (paper 002 eq. 1), match (eq. 4) or explicit."""

    kind: Literal["xavier", "match", "explicit"]
    mean: float | None = None
    std: float | None = None
    """target mean and std; for xavier and match filled in by `resolved` (the values recorded in
    nb.provenance are the ones used)"""
    match_file: str | None = None
    match_tensor: str | None = None

    def describe(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    def resolved(self, shape: tuple[int, ...]) -> StandardiseSpec:
        """This target with its mean and std computed: xavier from the embedding's `shape` (mean 0,
        sqrt(2/(N+D))), match from the other tensor (mean and sample std, eq. 4)."""
        if self.std is not None and self.mean is not None:
            return self
        if self.kind == "xavier":
            from nbcli.ops import xavier_std

            if len(shape) != 2:
                raise ConfigError(f"xavier standardisation needs a matrix, got shape {list(shape)}")
            return dataclasses.replace(self, mean=0.0, std=xavier_std(shape[0], shape[1]))
        if self.kind == "match":
            mean, std = _match_stats(self)
            return dataclasses.replace(self, mean=mean, std=std)
        raise ConfigError("explicit standardisation needs mean=M,std=S")


def parse_standardise(spec: str) -> StandardiseSpec:
    """`xavier` | `match:FILE[:TENSOR]` (no TENSOR: FILE's only matrix, else its input embedding) |
    `mean=M,std=S`."""
    if spec == "xavier":
        return StandardiseSpec("xavier")
    if spec.startswith("match:"):
        rest = spec[len("match:"):]
        file, sep, tensor = rest.rpartition(":")
        if not sep:   # match:FILE: its only matrix or input embedding
            file, tensor = rest, ""
        if not file or (sep and not tensor):
            raise ConfigError(f"--standardise-embeddings {spec!r}: expected match:FILE[:TENSOR]")
        from nbcli.checkpoint.reader import checkpoint_file  # a repo id names its snapshot's file
        from nbcli.errors import NbError

        try:
            matched = checkpoint_file(file)
        except NbError as error:   # no such file, nor a cached repo id: say which option named it
            raise ConfigError(f"--standardise-embeddings {spec!r}: {error}") from None
        return StandardiseSpec("match", match_file=str(matched), match_tensor=tensor or None)
    values: dict[str, float] = {}
    for part in spec.split(","):
        key, sep, value = part.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not sep or key.strip() not in ("mean", "std") or not math.isfinite(number):
            raise ConfigError(f"--standardise-embeddings {spec!r}: expected xavier, match:FILE:TENSOR or "
                              "mean=M,std=S with finite numbers")
        values[key.strip()] = number
    if set(values) != {"mean", "std"} or values["std"] < 0:
        raise ConfigError(f"--standardise-embeddings {spec!r}: give both mean=M and std=S (S >= 0)")
    return StandardiseSpec("explicit", mean=values["mean"], std=values["std"])


def check_lambda(lam: float) -> float:
    """LAMBDA of --scale-ln-bias as a float (a finite number), for the plan and its record."""
    if not isinstance(lam, (int, float)) or not math.isfinite(lam):
        raise ConfigError(f"--scale-ln-bias {lam!r}: LAMBDA must be a finite number")
    return float(lam)


def parse_lambda(value: float | str) -> float:
    """LAMBDA of --scale-ln-bias given as a number or as text ("0.5"): `check_lambda` of it."""
    try:
        lam = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"--scale-ln-bias {value!r}: LAMBDA must be a finite number") from None
    return check_lambda(lam)


@dataclass
class SurgeryOptions:
    """What to do; None/False = skip that operation."""

    output_bias_counts: Path | None = None
    smoothing_k: float = 1.0
    bias_name: str | None = None
    rescale_w: Norm | None = None
    untie: bool = False
    zipfian_whiten_counts: Path | None = None
    """counts whose add-k unigram (smoothing_k) weights Zipfian whitening of the input embedding"""
    standardise: StandardiseSpec | None = None
    shuffle: bool = False
    shuffle_mode: ShuffleMode = "rows"
    seed: int = 0
    scale_ln_bias: float | None = None
    remove_frequency_direction: bool = False
    allow_nonfinite: bool = False
    new_tensor_dtype: str = "F32"
    """safetensors dtype of a created output bias (F32 default: no loader needs the checkpoint's)."""
    tokenizer: Path | None = None
    """the model's tokenizer file, to check the counts' tokenizer against (nbcli.checkpoint.vocab)"""
    allow_vocab_mismatch: bool = False

    def operations(self) -> list[dict[str, Any]]:
        """The operations requested, in the order they are applied, with their arguments."""
        ops: list[dict[str, Any]] = []
        if self.output_bias_counts is not None:
            ops.append({"op": "set-output-bias", "counts": str(self.output_bias_counts),
                        "smoothing": f"add-k:{self.smoothing_k:g}", "bias_name": self.bias_name,
                        "new_tensor_dtype": self.new_tensor_dtype,
                        **({"allow_vocab_mismatch": True} if self.allow_vocab_mismatch else {})})
        if self.untie:
            ops.append({"op": "untie"})
        if self.rescale_w is not None:
            ops.append({"op": "rescale-w", "norm": self.rescale_w})
        if self.zipfian_whiten_counts is not None:
            ops.append({"op": "zipfian-whiten-embeddings", "counts": str(self.zipfian_whiten_counts),
                        "smoothing": f"add-k:{self.smoothing_k:g}"})
        if self.standardise is not None:
            ops.append({"op": "standardise-embeddings", **self.standardise.describe()})
        if self.shuffle:
            ops.append({"op": "shuffle-embeddings", "seed": self.seed, "mode": self.shuffle_mode})
        if self.scale_ln_bias is not None:
            ops.append({"op": "scale-ln-bias", "lambda": check_lambda(self.scale_ln_bias)})
        if self.remove_frequency_direction:
            ops.append({"op": "remove-frequency-direction"})
        return ops


def require_operation(options: SurgeryOptions, spelling: Spelling = "option") -> SurgeryOptions:
    """`options`, or ConfigError when they ask for no operation, naming the options (`spelling`
    "option") or `nbcli.patch` arguments ("argument") that would, in OPERATION_ORDER."""
    if not options.operations():
        names = [OPERATION_SPELLINGS[op][spelling == "argument"] for op in OPERATION_ORDER]
        raise ConfigError(f"no operation given: use {', '.join(names[:-1])} or {names[-1]}")
    return options


def surgery_options(
    *, set_output_bias: PathLike | None = None, smoothing: str = "add-k:1", tokenizer: PathLike | None = None,
    allow_vocab_mismatch: bool = False, new_tensor_dtype: str = "float32", bias_name: str | None = None,
    rescale_w: RescaleChoice | None = None, untie: bool = False, zipfian_whiten_embeddings: PathLike | None = None,
    standardise: str | None = None, shuffle: bool = False, shuffle_mode: ShuffleMode = "rows", seed: int = 0,
    scale_ln_bias: float | str | None = None, remove_frequency_direction: bool = False,
    allow_nonfinite: bool = False, spelling: Spelling = "option",
) -> SurgeryOptions:
    """The SurgeryOptions of what a user gives `nb patch-checkpoint` (its options) or `nbcli.patch`
    (its arguments, the same names): `smoothing` "add-k:K", `standardise` "xavier" |
    "match:FILE:TENSOR" | "mean=M,std=S", LAMBDA a number or its text, `new_tensor_dtype` a torch
    dtype name, `tokenizer` a path or Hub repo id (nbcli.resolve). ConfigError for a bad value, or
    when no operation is asked for (`require_operation`, naming the options or the arguments as
    `spelling` says)."""
    from nbcli.checkpoint.format import dtype_code_of_name
    from nbcli.counts import parse_smoothing
    from nbcli.ops import rescale_norm
    from nbcli.resolve import local_path

    def path(value: PathLike | None) -> Path | None:
        return None if value is None else Path(value)

    options = SurgeryOptions(
        output_bias_counts=path(set_output_bias), smoothing_k=parse_smoothing(smoothing), bias_name=bias_name,
        rescale_w=rescale_norm(rescale_w), untie=untie, zipfian_whiten_counts=path(zipfian_whiten_embeddings),
        standardise=parse_standardise(standardise) if standardise else None,
        shuffle=shuffle, shuffle_mode=shuffle_mode, seed=seed,
        scale_ln_bias=None if scale_ln_bias is None else parse_lambda(scale_ln_bias),
        remove_frequency_direction=remove_frequency_direction, allow_nonfinite=allow_nonfinite,
        new_tensor_dtype=dtype_code_of_name(new_tensor_dtype),
        tokenizer=None if tokenizer is None else local_path(tokenizer, "tokenizer"),
        allow_vocab_mismatch=allow_vocab_mismatch)
    return require_operation(options, spelling)


def _match_stats(spec: StandardiseSpec) -> tuple[float, float]:
    from nbcli.checkpoint.reader import open_checkpoint
    from nbcli.ops import embedding_stats

    assert spec.match_file is not None
    with open_checkpoint(spec.match_file) as other:
        name = spec.match_tensor
        if name is None:   # FILE's only matrix, else its input embedding (as --embedding-init pretrained:FILE)
            from nbcli.checkpoint.roles import resolve_roles

            matrices = [n for n in other.names() if len(other.shape(n)) == 2]
            name = matrices[0] if len(matrices) == 1 else resolve_roles(other).require(
                "input_embedding", "--standardise-embeddings match:FILE")
        if name not in other:
            raise CheckpointError(f"{spec.match_file}: no tensor named {name!r} to match")
        return embedding_stats(other.get_float(name))
