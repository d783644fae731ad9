"""What a surgery does: `SurgeryOptions`, the --standardise-embeddings target (`StandardiseSpec`,
`parse_standardise`), the --scale-ln-bias check, and the order operations are applied in
(`OPERATION_ORDER`, see `nbcli.surgery.plan`). No torch here: parsing options stays cheap.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from nbcli.errors import CheckpointError, ConfigError

if TYPE_CHECKING:
    from nbcli.ops import Norm, ShuffleMode


OPERATION_ORDER = ("set-output-bias", "untie", "rescale-w", "zipfian-whiten-embeddings", "standardise-embeddings", "shuffle-embeddings",
                   "scale-ln-bias", "remove-frequency-direction")

CREATED_BIAS_NOTE = (
    "A created output bias is read by nb's own model and probe-bias, and by any loader whose output "
    "layer has a bias (nn.Linear(..., bias=True)); transformers' GPT-2 and Llama classes have no "
    "output bias and ignore it (an 'unexpected key').")


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
    """`xavier` | `match:FILE:TENSOR` | `mean=M,std=S`."""
    if spec == "xavier":
        return StandardiseSpec("xavier")
    if spec.startswith("match:"):
        file, sep, tensor = spec[len("match:"):].rpartition(":")
        if not sep or not file or not tensor:
            raise ConfigError(f"--standardise-embeddings {spec!r}: expected match:FILE:TENSOR")
        from nbcli.resolve import checkpoint_file  # a repo id names its snapshot's file

        return StandardiseSpec("match", match_file=str(checkpoint_file(file)), match_tensor=tensor)
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


def _match_stats(spec: StandardiseSpec) -> tuple[float, float]:
    from nbcli.checkpoint.reader import open_checkpoint
    from nbcli.ops import embedding_stats

    assert spec.match_file is not None and spec.match_tensor is not None
    with open_checkpoint(spec.match_file) as other:
        if spec.match_tensor not in other:
            raise CheckpointError(f"{spec.match_file}: no tensor named {spec.match_tensor!r} to match")
        return embedding_stats(other.get_float(spec.match_tensor))
