"""Checkpoint surgery: the papers' operations as pure tensor functions, and a plan that composes them.

Pure functions (a tensor in, a tensor out, same dtype as the input; computed in float32, or float64
for float64 input; they never modify their argument):

    unigram_log_prior(counts, vocab_size, k)          paper 000 sec. 3   b = log p(y)
    rescale_to_norm(w, target_norm, norm)             paper 000 sec. 4.1 ||W|| = target
    rescale_w(w, bias, norm="fro")                    paper 000 sec. 4.1 ||W|| = ||b||_2
    matrix_norm(w, norm)                              Frobenius or spectral (largest singular value)
    embedding_stats(x) -> (mean, std)                 paper 002 eq. 1 (sample std, all entries)
    xavier_std(n, d)                                  paper 002 sec. 3.1: sqrt(2/(N+D))
    standardise_embeddings(x, target_mean, target_std) paper 002 eq. 1 / eq. 4
    standardise_to(x, spec)                           the same, target named by a --standardise spec
    shuffle_embeddings(x, seed, mode="rows")          paper 002 sec. 3.4 Pre-trained_Shuffled
    scale_ln_bias(b, lam)                             paper 003 sec. 3.3 b_LN <- lam * b_LN
    remove_direction(w, direction)                    paper 003 sec. 3.2 w_i <- w_i - <w_i,u> u

The plan layer (`SurgeryOptions`, `plan_surgery`, `apply_surgery`) applies them to a checkpoint in
the documented order: 1 output bias, 2 rescale W, 3 standardise embeddings, 4 shuffle embeddings,
5 scale final-LN bias, 6 remove the frequency direction.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import mmap
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from nbcli.counts import log_unigram
from nbcli.errors import CheckpointError, ConfigError, CountsError, Interrupted, naming
from nbcli.jsonsafe import JsonProblem, metadata_object
from nbcli.jsonsafe import parse as parse_json
from nbcli.limits import input_stat

if TYPE_CHECKING:
    import torch

    from nbcli.checkpoint.io import Checkpoint
    from nbcli.checkpoint.roles import Roles

Norm = Literal["fro", "spectral"]
ShuffleMode = Literal["rows", "rows-columns", "elements"]
_ROW_BLOCK = 1 << 14


def _work_dtype(x: torch.Tensor) -> torch.dtype:
    import torch

    if not x.is_floating_point():
        raise ConfigError(f"expected a floating-point tensor, got {x.dtype}")
    return torch.float64 if x.dtype == torch.float64 else torch.float32


# ---------------------------------------------------------------------------------------------
# Pure functions


def unigram_log_prior(counts: np.ndarray, vocab_size: int, k: float = 1.0) -> torch.Tensor:
    """Output bias b = log p(y), the add-k smoothed log-unigram distribution (paper 000, sec. 3).

    Counts shorter than the model's vocabulary (padded vocabularies, e.g. 50257 vs 50304) are
    padded with zero counts, so padding rows get the smoothed floor log(k / (N + k V_model)) and the
    distribution is normalised over the model's vocabulary. Longer counts are an error. The
    smoothing formula is `nbcli.counts.log_unigram`, the one place it lives. Returns float32 [V].
    """
    import torch

    counts = np.asarray(counts)
    if counts.ndim != 1:
        raise CountsError(f"counts must be a vector, got shape {list(counts.shape)}")
    if counts.size > vocab_size:
        raise CountsError(f"counts have {counts.size} entries but the model's vocabulary has {vocab_size} "
                          "rows; these counts were made with another tokenizer")
    padded = np.zeros(vocab_size, dtype=np.int64)
    padded[: counts.size] = counts
    return torch.from_numpy(log_unigram(padded, k).astype(np.float32))


def matrix_norm(w: torch.Tensor, norm: Norm = "fro") -> float:
    """||W||_F (sqrt of the sum of squares) or ||W||_2 (largest singular value), in float64.

    The spectral norm is sqrt(largest eigenvalue of W^T W), with W^T W accumulated in float64 in row
    blocks: O(V d^2) time and O(d^2) extra memory, never a copy of W.
    """
    import torch

    if w.ndim != 2:
        raise ConfigError(f"expected a matrix, got shape {list(w.shape)}")
    if norm == "fro":
        total = 0.0
        for start in range(0, w.shape[0], _ROW_BLOCK):
            block = w[start:start + _ROW_BLOCK].to(torch.float64)
            total += float((block * block).sum())
        return math.sqrt(total)
    if norm == "spectral":
        gram = torch.zeros(w.shape[1], w.shape[1], dtype=torch.float64)
        for start in range(0, w.shape[0], _ROW_BLOCK):
            block = w[start:start + _ROW_BLOCK].to(torch.float64)
            gram += block.T @ block
        return math.sqrt(max(float(torch.linalg.eigvalsh(gram)[-1]), 0.0))
    raise ConfigError(f"unknown matrix norm {norm!r}: expected fro or spectral")


def rescale_to_norm(w: torch.Tensor, target_norm: float, norm: Norm = "fro") -> torch.Tensor:
    """W * target / ||W|| so that the chosen matrix norm of the result equals `target_norm`."""
    current = matrix_norm(w, norm)
    if current == 0 or not math.isfinite(current):
        raise ConfigError(f"cannot rescale a matrix whose {norm} norm is {current}")
    if not math.isfinite(target_norm) or target_norm < 0:
        raise ConfigError(f"target norm must be a finite number >= 0, got {target_norm}")
    return (w.to(_work_dtype(w)) * (target_norm / current)).to(w.dtype)


def rescale_w(w: torch.Tensor, bias: torch.Tensor, norm: Norm = "fro") -> torch.Tensor:
    """Paper 000 sec. 4.1: scale the output projection W so that its matrix norm equals the bias's
    l2 norm. The paper says "matrix l2 norm"; nb's default is Frobenius (the l2 norm of the entries,
    what `W.norm()` gives, like for like with the bias vector's l2 norm); `spectral` is the induced
    2-norm."""
    import torch

    target = math.sqrt(float((bias.to(torch.float64) ** 2).sum()))
    return rescale_to_norm(w, target, norm)


def embedding_stats(x: torch.Tensor) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof = 1) over all entries, float64 in row blocks
    (paper 002 eq. 1: "the mean of the values in X_p", "(sample) standard deviations")."""
    import torch

    n = x.numel()
    if n < 2:
        raise ConfigError(f"standardising needs at least two values, the tensor has {n} ({list(x.shape)})")
    flat = x.reshape(x.shape[0], -1) if x.ndim > 1 else x.reshape(-1, 1)
    total = 0.0
    for start in range(0, flat.shape[0], _ROW_BLOCK):
        total += float(flat[start:start + _ROW_BLOCK].to(torch.float64).sum())
    mean = total / n
    squares = 0.0
    for start in range(0, flat.shape[0], _ROW_BLOCK):
        centred = flat[start:start + _ROW_BLOCK].to(torch.float64) - mean
        squares += float((centred * centred).sum())
    return mean, math.sqrt(squares / (n - 1))


def xavier_std(n: int, d: int) -> float:
    """Standard deviation of uniform Xavier init U(-sqrt(6/(N+D)), sqrt(6/(N+D))) for an N x D
    matrix: sqrt(2/(N+D)) (paper 002 sec. 3.1; Glorot and Bengio, 2010)."""
    if n + d <= 0:
        raise ConfigError("xavier_std needs a non-empty matrix")
    return math.sqrt(2.0 / (n + d))


def standardise_embeddings(x: torch.Tensor, target_mean: float = 0.0, target_std: float | None = None,
                           ) -> torch.Tensor:
    """x* = (x - mean(X)) * sigma_target / sigma(X) + mean_target.

    Paper 002 eq. 1 (Pre-trained_Xavier: target mean 0, sigma = Xavier's sqrt(2/(N+D)), the default
    here when `target_std` is None) and eq. 4 (match another matrix's mean and std)."""
    if target_std is None:
        if x.ndim != 2:
            raise ConfigError(f"xavier standardisation needs a matrix, got shape {list(x.shape)}")
        target_std = xavier_std(x.shape[0], x.shape[1])
    if not (math.isfinite(target_mean) and math.isfinite(target_std)) or target_std < 0:
        raise ConfigError(f"target mean/std must be finite (std >= 0), got {target_mean}, {target_std}")
    mean, std = embedding_stats(x)
    if std == 0:
        raise ConfigError("cannot standardise a tensor whose values are all equal (std 0)")
    work = x.to(_work_dtype(x))
    return ((work - mean) * (target_std / std) + target_mean).to(x.dtype)


def shuffle_embeddings(x: torch.Tensor, seed: int, mode: ShuffleMode = "rows") -> torch.Tensor:
    """Paper 002 sec. 3.4 Pre-trained_Shuffled, with a seeded torch.Generator (same seed, same result).

    rows: permute the rows (each token gets another token's vector: word-to-vector relation gone,
    every statistic of the matrix kept). rows-columns: also permute the columns, as the paper's text
    says ("the rows and columns of X_p are randomly shuffled"). elements: permute all entries
    (the paper's finding 3 wording, "shuffling the elements"); destroys the vectors' geometry too.
    """
    import torch

    if x.ndim != 2:
        raise ConfigError(f"shuffling needs a matrix, got shape {list(x.shape)}")
    generator = torch.Generator().manual_seed(int(seed))
    if mode == "rows":
        return x[torch.randperm(x.shape[0], generator=generator)].clone()
    if mode == "rows-columns":
        rows = torch.randperm(x.shape[0], generator=generator)
        cols = torch.randperm(x.shape[1], generator=generator)
        return x[rows][:, cols].clone()
    if mode == "elements":
        flat = x.reshape(-1)
        return flat[torch.randperm(flat.numel(), generator=generator)].reshape(x.shape).clone()
    raise ConfigError(f"unknown shuffle mode {mode!r}: expected rows, rows-columns or elements")


def scale_ln_bias(b: torch.Tensor, lam: float) -> torch.Tensor:
    """Paper 003 sec. 3.3: b_LN <- lam * b_LN (lam in [0, 1] in the paper; any finite value here)."""
    check_lambda(lam)
    return (b.to(_work_dtype(b)) * lam).to(b.dtype)


def check_lambda(lam: float) -> float:
    if not isinstance(lam, (int, float)) or not math.isfinite(lam):
        raise ConfigError(f"--scale-ln-bias {lam!r}: LAMBDA must be a finite number")
    return float(lam)


def remove_direction(w: torch.Tensor, direction: torch.Tensor) -> torch.Tensor:
    """Paper 003 sec. 3.2: w_i <- w_i - <w_i, u> u with u = direction / ||direction|| for every row
    w_i of W (the frequency direction when `direction` is b_LN)."""
    import torch

    if w.ndim != 2 or direction.ndim != 1 or direction.shape[0] != w.shape[1]:
        raise ConfigError(f"cannot project a {list(direction.shape)} direction out of a {list(w.shape)} matrix")
    dtype = _work_dtype(w)
    u = direction.to(torch.float64)
    length = float(u.norm())
    if length == 0 or not math.isfinite(length):
        raise ConfigError(f"the direction vector has norm {length}; nothing to remove")
    u = (u / length).to(dtype)
    work = w.to(dtype)
    return (work - (work @ u)[:, None] * u[None, :]).to(w.dtype)


def tensor_summary(x: torch.Tensor) -> dict[str, float]:
    """l2 norm (Frobenius for matrices), mean, std, min, max; float64, row blocks."""
    import torch

    if x.numel() == 0:
        return {"norm": 0.0, "mean": math.nan, "std": math.nan, "min": math.nan, "max": math.nan}
    flat = x.reshape(x.shape[0], -1) if x.ndim > 1 else x.reshape(-1, 1)
    lo, hi, total, squares = math.inf, -math.inf, 0.0, 0.0
    for start in range(0, flat.shape[0], _ROW_BLOCK):
        block = flat[start:start + _ROW_BLOCK].to(torch.float64)
        lo, hi = min(lo, float(block.min())), max(hi, float(block.max()))
        total += float(block.sum())
        squares += float((block * block).sum())
    n = flat.numel()
    mean = total / n
    var = max(squares / n - mean * mean, 0.0) * n / (n - 1) if n > 1 else 0.0
    return {"norm": math.sqrt(squares), "mean": mean, "std": math.sqrt(var), "min": lo, "max": hi}


# ---------------------------------------------------------------------------------------------
# Plan and apply: the operations on a checkpoint, in the documented order

OPERATION_ORDER = ("set-output-bias", "untie", "rescale-w", "standardise-embeddings", "shuffle-embeddings",
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


@dataclass
class SurgeryOptions:
    """What to do; None/False = skip that operation."""

    output_bias_counts: Path | None = None
    smoothing_k: float = 1.0
    bias_name: str | None = None
    rescale_w: Norm | None = None
    untie: bool = False
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
    """the model's tokenizer file, to check the counts' tokenizer hash against"""
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
        if self.standardise is not None:
            ops.append({"op": "standardise-embeddings", **self.standardise.describe()})
        if self.shuffle:
            ops.append({"op": "shuffle-embeddings", "seed": self.seed, "mode": self.shuffle_mode})
        if self.scale_ln_bias is not None:
            ops.append({"op": "scale-ln-bias", "lambda": check_lambda(self.scale_ln_bias)})
        if self.remove_frequency_direction:
            ops.append({"op": "remove-frequency-direction"})
        return ops


@dataclass
class TouchedTensor:
    name: str
    role: str
    shape: list[int]
    dtype: str
    created: bool
    before: dict[str, float] | None
    after: dict[str, float] = field(default_factory=dict)


@dataclass
class SurgeryResult:
    architecture: str
    roles: dict[str, Any]
    operations: list[dict[str, Any]]
    tensors: list[TouchedTensor]
    warnings: list[str]
    outputs: list[str] = field(default_factory=list)
    dry_run: bool = False
    config_updates: dict[str, Any] = field(default_factory=dict)
    """config.json changes the surgery needs (written into a model-folder output)."""
    model_folder: bool = False
    """OUT is a model folder: tensors plus the input folder's other files (config.json updated)."""

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class _Workspace:
    """Touched tensors as float32 (float64 stays float64) working copies, read once each."""

    def __init__(self, checkpoint: Checkpoint, allow_nonfinite: bool) -> None:
        self.checkpoint = checkpoint
        self.allow_nonfinite = allow_nonfinite
        self.values: dict[str, torch.Tensor] = {}
        self.touched: dict[str, TouchedTensor] = {}
        self.anchor: dict[str, str | None] = {}
        self.config_updates: dict[str, Any] = {}
        """config.json changes the surgery needs (a model folder's; e.g. tie_word_embeddings)."""

    def read(self, name: str) -> torch.Tensor:
        """The current value (fp32) of `name`, from the workspace or the checkpoint."""
        import torch

        if name in self.values:
            return self.values[name]
        info = self.checkpoint.info(name)
        if info.dtype not in ("F64", "F32", "F16", "BF16"):
            raise CheckpointError(f"{info.file}: tensor {name!r} is {info.dtype}; surgery needs F32, F16, BF16 or F64")
        stored = self.checkpoint.get(name)
        if not self.allow_nonfinite and not bool(torch.isfinite(stored).all()):
            raise CheckpointError(f"{info.file}: tensor {name!r} contains NaN or Inf (pass --allow-nonfinite to "
                                  "operate on it anyway)")
        return stored.to(torch.float64 if info.dtype == "F64" else torch.float32, copy=True)

    def write(self, name: str, role: str, value: torch.Tensor, *, dtype: str | None = None,
              anchor: str | None = None) -> None:
        """Record the new value of `name` (a new tensor when it is not in the checkpoint)."""
        if name not in self.touched:
            created = name not in self.checkpoint
            if created:
                before, stored_dtype, self.anchor[name] = None, dtype or "F32", anchor
            else:
                before, stored_dtype = tensor_summary(self.checkpoint.get(name)), self.checkpoint.dtype(name)
            self.touched[name] = TouchedTensor(name, role, list(value.shape), stored_dtype, created, before)
        elif role not in self.touched[name].role.split("+"):
            self.touched[name].role += f"+{role}"
        self.values[name] = value

    def finish(self) -> dict[str, torch.Tensor]:
        """Cast every touched tensor back to its stored dtype; check it is finite; summarise it."""
        import torch

        from nbcli.checkpoint.io import torch_dtype

        final: dict[str, torch.Tensor] = {}
        for name, entry in self.touched.items():
            value = self.values[name].to(torch_dtype(entry.dtype))
            if not self.allow_nonfinite and not bool(torch.isfinite(value).all()):
                raise CheckpointError(f"{self.checkpoint.path}: tensor {name!r} would contain NaN or Inf after "
                                      f"the surgery (in {entry.dtype}); nothing was written")
            entry.after = tensor_summary(value)
            entry.shape = list(value.shape)
            final[name] = value
        return final


def _counts_for(path: Path, checkpoint: Checkpoint, rows: int, options: SurgeryOptions) -> tuple[np.ndarray, list[str]]:
    """The counts vector, checked against the checkpoint's tokenizer and vocabulary (see
    nbcli.checkpoint.vocab), and the warnings that check gave."""
    from nbcli.checkpoint.vocab import check_counts
    from nbcli.counts import read_counts

    counts = read_counts(path)
    check = check_counts(path, counts.tokenizer_sha256, int(counts.counts.size), rows, checkpoint,
                         tokenizer=options.tokenizer, allow_mismatch=options.allow_vocab_mismatch)
    return counts.counts, check.warnings


def _match_stats(spec: StandardiseSpec) -> tuple[float, float]:
    from nbcli.checkpoint.io import open_checkpoint

    assert spec.match_file is not None and spec.match_tensor is not None
    with open_checkpoint(spec.match_file) as other:
        if spec.match_tensor not in other:
            raise CheckpointError(f"{spec.match_file}: no tensor named {spec.match_tensor!r} to match")
        return embedding_stats(other.get_float(spec.match_tensor))


def standardise_to(x: torch.Tensor, spec: StandardiseSpec) -> torch.Tensor:
    """`standardise_embeddings` to the target a --standardise spec names: xavier (paper 002 eq. 1),
    match:FILE:TENSOR (eq. 4: that tensor's mean and sample std) or explicit mean/std. Shared by
    patch-checkpoint, train and transplant-embeddings."""
    spec = spec.resolved(tuple(x.shape))  # the target recorded in provenance is the one used
    assert spec.mean is not None and spec.std is not None
    return standardise_embeddings(x, spec.mean, spec.std)


def run_surgery(checkpoint: Checkpoint, roles: Roles, options: SurgeryOptions,
                ) -> tuple[dict[str, torch.Tensor], _Workspace, list[str]]:
    """Apply the requested operations in OPERATION_ORDER; return the new tensors (stored dtypes)."""
    ws = _Workspace(checkpoint, options.allow_nonfinite)
    warnings: list[str] = []
    arch = roles.architecture
    output_name = roles.get("output_weight")
    tied = roles.tied

    def output_weight(purpose: str) -> str:
        return roles.require("output_weight", purpose)

    # 1. b = log p(y) (paper 000 sec. 3)
    if options.output_bias_counts is not None:
        w_name = output_weight("--set-output-bias (its rows give the vocabulary size)")
        vocab = checkpoint.shape(w_name)[0]
        bias_name = options.bias_name or roles.get("output_bias")
        if bias_name is None:
            raise CheckpointError(
                f"{checkpoint.path}: architecture {arch} has no output bias tensor; pass --bias-name NAME to "
                f"create one (e.g. --bias-name {_suggest_bias_name(arch)}). {CREATED_BIAS_NOTE}")
        if bias_name in checkpoint and checkpoint.shape(bias_name) != (vocab,):
            raise CheckpointError(f"{checkpoint.path}: output bias {bias_name!r} has shape "
                                  f"{list(checkpoint.shape(bias_name))}, expected [{vocab}]")
        if bias_name in checkpoint:
            ws.read(bias_name)  # validates dtype and finiteness
        counts, counts_warnings = _counts_for(options.output_bias_counts, checkpoint, vocab, options)
        warnings.extend(counts_warnings)
        with naming(f"{options.output_bias_counts} for {checkpoint.path} (tensor {w_name!r})"):
            bias = unigram_log_prior(counts, vocab, options.smoothing_k)
        ws.write(bias_name, "output_bias", bias, dtype=options.new_tensor_dtype, anchor=w_name)
        if bias_name not in checkpoint:
            warnings.append(f"created output bias {bias_name!r}: {CREATED_BIAS_NOTE}")
        for alias in roles.aliases.get("output_bias", ()):
            if alias != bias_name:
                ws.write(alias, "output_bias", bias.clone())

    # untie: a separate output weight, so output-side operations leave the input embedding alone
    if options.untie:
        from nbcli.checkpoint.roles import ARCHITECTURES, untie_rule

        emb = roles.require("input_embedding", "--untie")
        if not roles.head:
            roles.require("output_weight", "--untie")  # says there is no prediction head
        if tied:
            output_name = _untied_name(arch)
            if output_name in checkpoint:
                raise CheckpointError(f"{checkpoint.path}: cannot untie: {output_name!r} already exists")
            config = checkpoint.model_config
            factor, changes = untie_rule(arch, config)
            if not math.isfinite(factor):
                raise CheckpointError(f"{checkpoint.path}: cannot untie {arch}: config.json has no usable d_model "
                                      "(the tied head scales by d_model^-0.5)")
            copy = ws.read(emb).clone() if factor == 1.0 else ws.read(emb) * factor
            ws.write(output_name, "output_weight", copy, dtype=checkpoint.dtype(emb), anchor=emb)
            tied = False
            # the loader reads the output bias under these names too once the head is untied
            bias_now = options.bias_name if options.bias_name in ws.values else roles.get("output_bias")
            spec = ARCHITECTURES.get(arch)
            for extra in (spec.untie_bias_names if spec else ()):
                if bias_now is not None and extra not in checkpoint and extra != bias_now:
                    source_dtype = ws.touched[bias_now].dtype if bias_now in ws.touched else checkpoint.dtype(bias_now)
                    anchor = bias_now if bias_now in checkpoint else ws.anchor.get(bias_now)
                    ws.write(extra, "output_bias", ws.read(bias_now).clone(), dtype=source_dtype, anchor=anchor)
            ws.config_updates.update(changes)
            scaled = f" (scaled by {factor:.6g}: the tied head scaled the decoder output)" if factor != 1.0 else ""
            warnings.append(f"wrote a separate output weight {output_name!r}{scaled}; loaders must not re-tie it")
        else:
            warnings.append("--untie: the output weight is already a separate tensor; nothing to untie")

    def output_side(purpose: str) -> str:
        name = output_name or output_weight(purpose)
        if tied:
            warnings.append(f"{purpose}: the output weight is tied to the input embedding {name!r}, so this "
                            "also changes the input embeddings (--untie writes a separate output weight)")
        return name

    # 2. ||W|| = ||b||_2 (paper 000 sec. 4.1)
    if options.rescale_w is not None:
        w_name = output_side("--rescale-w")
        bias_name = options.bias_name if options.bias_name in ws.values else roles.get("output_bias")
        if bias_name is None or (bias_name not in ws.values and bias_name not in checkpoint):
            roles.require("output_bias", "--rescale-w (W is scaled to the bias's l2 norm)")
        assert bias_name is not None
        with naming(f"{checkpoint.path}: --rescale-w of {w_name!r} to the norm of {bias_name!r}"):
            ws.write(w_name, "output_weight", rescale_w(ws.read(w_name), ws.read(bias_name), options.rescale_w))

    # 3. standardise the input embedding (paper 002 eq. 1 / eq. 4)
    if options.standardise is not None:
        emb = roles.require("input_embedding", "--standardise-embeddings")
        if tied:
            warnings.append(f"--standardise-embeddings: {emb!r} is also the (tied) output weight")
        x = ws.read(emb)
        with naming(f"{checkpoint.path}: --standardise-embeddings of {emb!r} {list(x.shape)}"):
            if x.ndim != 2:
                raise CheckpointError("expected a [V, d] matrix")
            ws.write(emb, "input_embedding", standardise_to(x, options.standardise))

    # 4. Pre-trained_Shuffled (paper 002 sec. 3.4)
    if options.shuffle:
        emb = roles.require("input_embedding", "--shuffle-embeddings")
        if tied:
            warnings.append(f"--shuffle-embeddings: {emb!r} is also the (tied) output weight")
        with naming(f"{checkpoint.path}: --shuffle-embeddings of {emb!r}"):
            ws.write(emb, "input_embedding", shuffle_embeddings(ws.read(emb), options.seed, options.shuffle_mode))

    # 5. b_LN <- lambda b_LN (paper 003 sec. 3.3)
    ln_original = None
    if options.remove_frequency_direction:
        ln_name = roles.require("final_ln_bias", "--remove-frequency-direction")
        ln_original = ws.read(ln_name)
    if options.scale_ln_bias is not None:
        ln = roles.require("final_ln_bias", "--scale-ln-bias")
        with naming(f"{checkpoint.path}: --scale-ln-bias of {ln!r}"):
            ws.write(ln, "final_ln_bias", scale_ln_bias(ws.read(ln), options.scale_ln_bias))

    # 6. w_i <- w_i - <w_i, u> u, u = b_LN / ||b_LN|| of the input checkpoint (paper 003 sec. 3.2)
    if options.remove_frequency_direction:
        assert ln_original is not None
        w_name = output_side("--remove-frequency-direction")
        w = ws.read(w_name)
        with naming(f"{checkpoint.path}: --remove-frequency-direction of {ln_name!r} from {w_name!r}"):
            ws.write(w_name, "output_weight", remove_direction(w, ln_original.to(w.dtype)))

    # other names of a rewritten tensor (T5's encoder/decoder.embed_tokens beside shared)
    for role, others in roles.aliases.items():
        main = roles.get(role)
        if main is not None and main in ws.values:
            for alias in others:
                if alias not in ws.touched:
                    ws.write(alias, role, ws.values[main].clone())

    if not ws.touched and not options.untie:
        raise ConfigError("no operation given: use --set-output-bias, --rescale-w, --standardise-embeddings, "
                          "--shuffle-embeddings, --scale-ln-bias, --remove-frequency-direction or --untie")
    return ws.finish(), ws, list(dict.fromkeys(warnings))


def _suggest_bias_name(arch: str) -> str:
    from nbcli.checkpoint.roles import ARCHITECTURES

    spec = ARCHITECTURES.get(arch)
    candidates = spec.candidates.get("output_bias", ()) if spec else ()
    return candidates[0] if candidates else "lm_head.bias"


def _untied_name(arch: str) -> str:
    from nbcli.checkpoint.roles import ARCHITECTURES

    spec = ARCHITECTURES.get(arch)
    return spec.untied_output if spec and spec.untied_output else "lm_head.weight"


def provenance_entry(options: SurgeryOptions, input_hashes: dict[str, str], previous: str | None,
                     unhashed: dict[str, Any] | None = None, from_cache: list[str] | None = None) -> str:
    """The `nb.provenance` metadata value: tool, time, operations in order, input sha256s (those
    taken from the hash cache listed), and size/mtime of inputs not hashed on request."""
    from nbcli.provenance import tool_version, utc_now

    doc: dict[str, Any] = {"tool": tool_version(), "command": "patch-checkpoint", "time": utc_now(),
                           "operations": options.operations(), "inputs_sha256": input_hashes}
    if from_cache:
        doc["inputs_sha256_from_cache"] = from_cache
    if unhashed:
        doc["inputs_not_hashed"] = unhashed
    if previous:
        try:
            doc["previous"] = parse_json(previous)
        except JsonProblem:
            doc["previous"] = previous
    return json.dumps(doc, sort_keys=False, separators=(",", ":"))


def _sha256_until(path: Path, stop: threading.Event, block: int = 1 << 26) -> str:
    """sha256 of a file (same digest as `nbcli.provenance.sha256_file`), abandoned when `stop` is set.

    Hashes the file through read-only mmaps of `block` bytes (64 MiB; rounded to the mmap
    granularity), each unmapped after use: no copy into user space (~20% less CPU than reads),
    hashlib releases the GIL for each block, so this thread runs beside the copy and the surgery
    on another core, and at most one block is mapped (resident size stays bounded). Like every
    mmap reader it dies of SIGBUS if another process truncates the file meanwhile; OUT is then
    never renamed into place."""
    digest = hashlib.sha256()
    block = max(block - block % mmap.ALLOCATIONGRANULARITY, mmap.ALLOCATIONGRANULARITY)
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        for start in range(0, size, block):
            if stop.is_set():
                raise Interrupted("hashing abandoned")
            with mmap.mmap(handle.fileno(), min(block, size - start), access=mmap.ACCESS_READ,
                           offset=start) as mapped:
                if hasattr(mapped, "madvise"):
                    mapped.madvise(mmap.MADV_SEQUENTIAL)
                with memoryview(mapped) as view:
                    digest.update(view)
    return digest.hexdigest()


def _hash_input(path: Path, stop: threading.Event) -> tuple[str, bool]:
    """(sha256, whether it came from the hash cache) of an input file.

    A checkpoint patched again (a sweep over --scale-ln-bias values, say) is not read again: the
    digest is remembered in the hash cache (`nbcli.provenance.hash_cache_dir`) under the file's
    device, inode, size, mtime and ctime, and stored only if the identity did not change while
    hashing."""
    from nbcli.provenance import cached_sha256, file_identity, remember_sha256

    identity = file_identity(path)
    digest = cached_sha256(path, identity)
    if digest is not None:
        return digest, True
    digest = _sha256_until(path, stop)
    if file_identity(path) == identity:
        remember_sha256(path, identity, digest)
    return digest, False


#: The role each operation rewrites (run_surgery is the authority; this only says which tensors to
#: hold back from the bulk copy, and a wrong guess costs time, never correctness: see apply_surgery).
_OPERATION_ROLES = {"set-output-bias": "output_bias", "rescale-w": "output_weight",
                    "standardise-embeddings": "input_embedding", "shuffle-embeddings": "input_embedding",
                    "scale-ln-bias": "final_ln_bias", "remove-frequency-direction": "output_weight"}


def held_tensors(checkpoint: Checkpoint, roles: Roles, options: SurgeryOptions) -> frozenset[str] | None:
    """The existing tensors the requested operations rewrite, or None when they may create one
    (--untie, or an output bias named with --bias-name that is not in the checkpoint): the output
    layout is then known only after the surgery."""
    names: set[str] = set()
    for operation in options.operations():
        role = _OPERATION_ROLES.get(operation["op"])
        if role is None:  # untie: creates the output weight
            return None
        name = options.bias_name if role == "output_bias" and options.bias_name else roles.get(role)
        if name is None:
            continue  # run_surgery reports the missing role
        if name not in checkpoint:
            return None
        names.add(name)
        names.update(alias for alias in roles.aliases.get(role, ()) if alias in checkpoint)
    return frozenset(names)


class _LayoutChanged(Exception):
    """The surgery's tensors do not fit the byte ranges held back for them (see apply_surgery)."""


def apply_surgery(checkpoint: Checkpoint, roles: Roles, options: SurgeryOptions, output: Path | None, *,
                  in_place: bool = False, dry_run: bool = False, hash_checkpoint: bool = True,
                  progress: Callable[[int], None] | None = None, overlap: bool = True) -> SurgeryResult:
    """Run the operations and (unless dry_run) write OUT: touched tensors recomputed in fp32 and cast
    back to their dtype, every other tensor copied byte for byte, metadata kept plus `nb.provenance`.

    Input hashes are computed in a background thread while the output is written; with
    hash_checkpoint=False the checkpoint files are recorded by size and mtime instead (counts and
    match files are still hashed). With `overlap` (default), when the operations create no tensor
    the output layout is the input's, so the copy of every untouched tensor starts at once while
    the surgery (torch import included) runs in a thread; the touched tensors are then written into
    the byte ranges kept for them. Should the surgery touch anything else, that copy is discarded
    and the output written again (slower, same bytes). The output is the same either way."""
    from concurrent.futures import ThreadPoolExecutor

    from nbcli.checkpoint.io import check_output_paths, folder_output, resolve_output

    emb = roles.get("input_embedding")
    if options.standardise is not None and emb is not None:  # provenance records the target used
        options = dataclasses.replace(options, standardise=options.standardise.resolved(checkpoint.shape(emb)))
    operations = options.operations()
    folder = output is not None and folder_output(checkpoint, output)
    checkpoint_files = {f"checkpoint:{p.name}": p for p in checkpoint.files}
    if checkpoint.index_path is not None:
        checkpoint_files[f"checkpoint:{checkpoint.index_path.name}"] = checkpoint.index_path
    inputs = dict(checkpoint_files) if hash_checkpoint else {}
    unhashed = {} if hash_checkpoint else {
        key: {"bytes": path.stat().st_size, "mtime_ns": path.stat().st_mtime_ns} for key, path in checkpoint_files.items()}
    if options.output_bias_counts is not None:
        inputs["counts"] = Path(options.output_bias_counts)
    if options.standardise is not None and options.standardise.match_file:
        inputs["match"] = Path(options.standardise.match_file)
    if options.tokenizer is not None:
        input_stat(options.tokenizer, "tokenizer", allow_dir=True, error=CountsError)
        if Path(options.tokenizer).is_file():
            inputs["tokenizer"] = Path(options.tokenizer)
    others = [path for key, path in inputs.items() if key in ("counts", "match", "tokenizer")]
    for key, path in inputs.items():  # before a hashing thread opens them (a FIFO would block it)
        if key in ("counts", "match"):
            input_stat(path, "counts file" if key == "counts" else "checkpoint",
                       error=CountsError if key == "counts" else CheckpointError)
    if output is not None and not dry_run:
        check_output_paths(checkpoint, output, in_place=in_place, other_inputs=others, folder=folder)
    held = held_tensors(checkpoint, roles, options) if overlap and not dry_run and output is not None else None
    # Hash the inputs from the start, overlapping torch's import, the surgery and the copy; on
    # failure the hashing stops at its next block instead of finishing a huge file.
    stop = threading.Event()
    hash_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nb-hash")
    surgery_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nb-surgery")
    futures = {} if dry_run else {key: hash_pool.submit(_hash_input, path, stop) for key, path in inputs.items()}
    try:
        written: list[Path] | None = None
        if held is not None:
            assert output is not None
            resolve_output(checkpoint, output, folder)
            surgery = surgery_pool.submit(run_surgery, checkpoint, roles, options)
            written = _write_overlapped(checkpoint, roles, options, output, held, surgery, futures, unhashed,
                                        in_place=in_place, progress=progress, others=others, folder=folder)
            new_tensors, ws, warnings = surgery.result()
        else:
            new_tensors, ws, warnings = run_surgery(checkpoint, roles, options)
        result = SurgeryResult(architecture=roles.architecture, roles=roles.as_dict(), operations=operations,
                               tensors=list(ws.touched.values()), warnings=warnings, dry_run=dry_run,
                               config_updates=dict(ws.config_updates), model_folder=folder)
        if ws.config_updates and not folder and roles.architecture != "nb":
            changes = ", ".join(f"{k}={json.dumps(v)}" for k, v in ws.config_updates.items())
            where = ("OUT is a bare .safetensors file, so no config.json is written (give a directory as OUT "
                     "for a model folder)" if checkpoint.model_dir is not None else "the input has no config.json")
            warnings.append(f"{where}: load it with {changes} in its config")
        if dry_run:
            return result
        if output is None:
            raise ConfigError("an output path is required (-o OUT), or --dry-run")
        if written is None:
            written = _write_after(checkpoint, roles, options, output, new_tensors, ws, futures, unhashed,
                                   in_place=in_place, progress=progress, others=others, folder=folder)
    finally:
        stop.set()
        hash_pool.shutdown(wait=False, cancel_futures=True)
        surgery_pool.shutdown(wait=False, cancel_futures=True)
    result.outputs = [str(p) for p in written]
    return result


def _late_provenance(options: SurgeryOptions, futures: dict[str, Future[tuple[str, bool]]], previous: str | None,
                     unhashed: dict[str, Any]) -> Callable[[], dict[str, str]]:
    """The late metadata: `nb.provenance` with the input hashes, once the hashing threads finish."""

    def late() -> dict[str, str]:
        results = {key: future.result() for key, future in futures.items()}
        hashes = {key: digest for key, (digest, _) in results.items()}
        from_cache = [key for key, (_, cached) in results.items() if cached]
        return {"nb.provenance": provenance_entry(options, hashes, previous, unhashed, from_cache)}

    return late


def _write_overlapped(checkpoint: Checkpoint, roles: Roles, options: SurgeryOptions, output: Path,
                      held: frozenset[str], surgery: Future[tuple[dict[str, torch.Tensor], _Workspace, list[str]]],
                      futures: dict[str, Future[tuple[str, bool]]], unhashed: dict[str, Any], *, in_place: bool,
                      progress: Callable[[int], None] | None, others: list[Path],
                      folder: bool = False) -> list[Path] | None:
    """Copy every tensor but `held` while `surgery` runs, then write its tensors into the ranges kept
    for them. Returns None (nothing written) when the surgery's tensors do not fit those ranges."""
    from nbcli.checkpoint.io import Deferred, dtype_code, write_like

    previous = checkpoint.metadata.get("nb.provenance")
    placeholder = provenance_entry(options, {k: "0" * 64 for k in futures}, previous, unhashed)

    def poll() -> None:
        if surgery.done() and surgery.exception() is not None:
            surgery.result()  # raises the surgery's error in this thread

    def compute() -> dict[str, torch.Tensor]:
        new_tensors, _ws, _warnings = surgery.result()
        for name, tensor in new_tensors.items():
            if (name not in held or tuple(tensor.shape) != checkpoint.shape(name)
                    or dtype_code(tensor.dtype) != checkpoint.dtype(name)):
                raise _LayoutChanged(name)
        return new_tensors

    try:
        return write_like(checkpoint, output, update_metadata={"nb.provenance": placeholder}, in_place=in_place,
                          progress=progress, other_inputs=others, late_metadata=_late_provenance(options, futures, previous, unhashed),
                          late_reserve=1024 + sum(128 + len(key) for key in futures), deferred=Deferred(held, compute, poll),
                          folder=folder, extra_files=_folder_files(checkpoint, {}) if folder else None)
    except _LayoutChanged:  # the temporaries are gone; apply_surgery writes again from the result
        return None


def _write_after(checkpoint: Checkpoint, roles: Roles, options: SurgeryOptions, output: Path,
                 new_tensors: dict[str, torch.Tensor], ws: _Workspace, futures: dict[str, Future[tuple[str, bool]]],
                 unhashed: dict[str, Any], *, in_place: bool, progress: Callable[[int], None] | None,
                 others: list[Path], folder: bool = False) -> list[Path]:
    """Write OUT from the finished surgery (new tensors placed after their anchors)."""
    from nbcli.checkpoint.io import resolve_output, write_like

    resolve_output(checkpoint, output, folder)
    update: dict[str, str] = {}
    if roles.architecture == "nb" and any(t.role == "output_weight" and t.created for t in ws.touched.values()):
        config = metadata_object(checkpoint.metadata, "nb.config", checkpoint.path, error=CheckpointError) or {}
        config["tie_embeddings"] = False
        update["nb.config"] = json.dumps(config, sort_keys=True)
    previous = checkpoint.metadata.get("nb.provenance")
    update["nb.provenance"] = provenance_entry(options, {k: "0" * 64 for k in futures}, previous, unhashed)
    replace = {n: t for n, t in new_tensors.items() if n in checkpoint}
    add = {n: (t, ws.anchor.get(n)) for n, t in new_tensors.items() if n not in checkpoint}
    return write_like(checkpoint, output, replace=replace, add=add, update_metadata=update, in_place=in_place,
                      progress=progress, other_inputs=others, late_metadata=_late_provenance(options, futures, previous, unhashed),
                      late_reserve=1024 + sum(128 + len(key) for key in futures), folder=folder,
                      extra_files=_folder_files(checkpoint, ws.config_updates) if folder else None)


def _folder_files(checkpoint: Checkpoint, config_updates: dict[str, Any]) -> dict[str, Path | bytes]:
    """The model folder's other files for OUT: copied as they are, config.json with the surgery's
    changes (indented and key-sorted as transformers writes it)."""
    from nbcli.checkpoint.io import model_folder_files

    files: dict[str, Path | bytes] = {p.name: p for p in model_folder_files(checkpoint)}
    if config_updates and checkpoint.model_config is not None:
        config = {**checkpoint.model_config, **config_updates}
        files["config.json"] = (json.dumps(config, indent=2, sort_keys=True) + "\n").encode("utf-8")
    return files
