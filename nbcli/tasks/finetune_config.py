"""The options of `nb train --task classification|tagging` (`FinetuneConfig`: everything a fine-tuning run
needs besides its files, checked when made) and how they become the update loop's configuration and
schedule (`train_config`, `learning_rate`); the run itself is `nbcli.tasks.finetune`."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from nbcli.errors import ConfigError
from nbcli.tasks.data import DataSpec
from nbcli.tasks.options import MAX_STEPS
from nbcli.tasks.presets import CLASSIFICATION_PRESETS
from nbcli.tokenizers.words import is_words_spec

__all__ = ["ENCODER_OPTIONS", "RESUMABLE", "SET_METRICS", "FinetuneConfig", "learning_rate", "train_config",
           "warmup_steps"]

# Options that may change between a run and its --resume (they do not change the trajectory).
RESUMABLE = {"device", "eval_every", "save_every", "select_by"}
# What an evaluation logs per validation set (val_NAME_METRIC; the first set also as val_METRIC): --select-by's choices
SET_METRICS = ("loss", "accuracy", "f1")
# TrainConfig fields an encoder from scratch takes over its preset's (`encoder_from_scratch`'s options)
ENCODER_OPTIONS = ("n_layer", "d_ff", "norm", "scale_embedding", "init_scheme", "embedding_standardise",
                   "embedding_shuffle", "embedding_shuffle_mode", "embedding_unicode_errors")


@dataclass
class FinetuneConfig:
    """Everything `nb train --task classification|tagging` needs besides the files."""

    data: DataSpec = field(default_factory=DataSpec)
    init: str | None = None               # --init BASE; None: from scratch
    tokenizer: str | None = None          # needed without a transformers --init
    label_names: str | None = None
    epochs: float = 3.0
    steps: int = 0                        # 0: epochs
    batch_size: int = 32
    lr: float = 2e-5
    warmup_ratio: float = 0.06
    warmup: int | None = None             # warm-up updates; None: ceil(warmup_ratio x updates)
    lr_schedule: str = "linear"           # after the warm-up: linear (to 0) | cosine (to 0) | inverse-sqrt | constant
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    dropout: float = 0.1
    pooling: str = "first"
    eval_every: int = 0                   # 0: once per epoch
    save_every: int = 0
    seed: int = 0
    preset: str = "tiny"                  # from scratch
    embedding_init: str = "normal"
    embedding_missing: str = "xavier"     # pretrained:VECTORS: rows without a vector (xavier | mean)
    d_model: int | None = None            # from scratch: the preset's width unless given (word vectors' dim)
    n_head: int | None = None
    positions: str = "learned"
    freeze_embeddings: bool = False
    device: str = "cpu"
    grad_accum: int = 1
    dtype: str = "float32"                # autocast precision: float32 | bfloat16 | auto (bf16 on CUDA)
    encoder_options: dict[str, Any] = field(default_factory=dict)   # TrainConfig fields over the preset's (scratch)
    select_by: str | None = None          # --select-by: best_step's metric (None: val_accuracy, the first set's)
    recipe: str | None = None             # the paper preset --preset named (nbcli.tasks.presets), None: none
    preset_overridden: dict[str, Any] = field(default_factory=dict)   # its values an option replaced

    def __post_init__(self) -> None:
        checks = [(self.batch_size >= 1, "--batch-size must be >= 1"), (self.lr > 0, "--lr must be > 0"),
                  (0 <= self.warmup_ratio < 1, "--warmup-ratio must be in [0, 1)"),
                  (self.warmup is None or self.warmup >= 0, "--warmup must be >= 0"),
                  (math.isfinite(self.epochs) and self.epochs <= MAX_STEPS,
                   f"--epochs {self.epochs}: must be a finite number of at most {MAX_STEPS:,} epochs"),
                  (self.epochs > 0 or self.steps > 0, "--epochs or --steps must be > 0"),
                  (self.pooling in ("first", "mean"), "--pooling must be first or mean"),
                  (self.positions in ("learned", "sinusoidal", "none"), "--positions must be learned, sinusoidal or none"),
                  (0 <= self.dropout < 1, "--dropout must be in [0, 1)"),
                  (self.lr_schedule in ("cosine", "linear", "inverse-sqrt", "constant"),
                   "--lr-schedule must be cosine, linear, inverse-sqrt or constant"),
                  (0 <= self.adam_beta1 < 1 and 0 <= self.adam_beta2 < 1 and self.adam_eps > 0,
                   "--adam-beta1 and --adam-beta2 must be in [0, 1) and --adam-eps > 0"),
                  (0 <= self.weight_decay < math.inf and 0 <= self.grad_clip < math.inf,
                   "--weight-decay and --grad-clip must be finite numbers >= 0"),
                  (self.embedding_missing in ("xavier", "mean"), "--missing must be xavier or mean (word vectors)"),
                  (self.grad_accum >= 1 and self.batch_size % self.grad_accum == 0,
                   "--batch-size must be a multiple of --grad-accum")]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)
        if self.preset in CLASSIFICATION_PRESETS:
            raise ConfigError(f"preset {self.preset!r} is a paper preset: nb train classification --preset expands it; "
                              "in Python pass its values (nbcli.tasks.presets.with_classification_preset)")
        if self.init is not None and self.recipe is not None:
            raise ConfigError(f"--preset {self.recipe} builds paper 002's encoder from scratch; --init BASE brings its "
                              "own")
        if self.init is not None and (self.preset != "tiny" or self.embedding_init != "normal"):
            raise ConfigError("--preset and --embedding-init build an encoder from scratch; --init BASE brings its own")
        if self.init is not None and self.positions != "learned":
            raise ConfigError("--positions applies to an encoder trained from scratch (no --init)")
        if self.init is not None and (self.d_model is not None or self.n_head is not None):
            raise ConfigError("--d-model and --n-head build an encoder from scratch; --init BASE brings its own")
        if self.init is not None and is_words_spec(self.tokenizer):
            raise ConfigError(f"-t {self.tokenizer}: a word vocabulary built from the training data needs an "
                              "encoder trained from scratch (no --init); --init BASE has its own vocabulary")
        unknown = sorted(set(self.encoder_options) - set(ENCODER_OPTIONS))
        if unknown:
            raise ConfigError(f"unknown encoder option(s) {', '.join(unknown)}; the options are {', '.join(ENCODER_OPTIONS)}")
        if self.init is not None and self.encoder_options:
            raise ConfigError("encoder options (n_layer, embedding_standardise, ...) apply to an encoder trained "
                              "from scratch (no --init)")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["data"] = self.data.to_dict()
        return out


def warmup_steps(total: int, warmup_ratio: float) -> int:
    """The warm-up of a fine-tuning run: ceil(warmup_ratio x updates) (transformers' `warmup_ratio`)."""
    return math.ceil(warmup_ratio * total)


def train_config(cfg: FinetuneConfig, total: int, eval_every: int) -> Any:
    """The update loop's TrainConfig of a fine-tuning run of `total` updates: warm-up, then the run's
    schedule (linear to 0 or constant), AdamW (adam_beta1, adam_beta2, adam_eps), the run's own options
    in task_options."""
    from nbcli.train.config import TrainConfig

    return TrainConfig(
        preset=cfg.preset, task=cfg.data.task, objective="mlm", seq_len=max(2, cfg.data.max_len), steps=total,
        batch_size=cfg.batch_size, grad_accum=cfg.grad_accum, lr=cfg.lr, min_lr_ratio=0.0,
        warmup=cfg.warmup if cfg.warmup is not None else warmup_steps(total, cfg.warmup_ratio),
        weight_decay=cfg.weight_decay, grad_clip=cfg.grad_clip, dropout=cfg.dropout, lr_schedule=cfg.lr_schedule,
        adam_beta1=cfg.adam_beta1, adam_beta2=cfg.adam_beta2, adam_eps=cfg.adam_eps,
        embedding_init=cfg.embedding_init, eval_every=eval_every, save_every=cfg.save_every,
        device=cfg.device, dtype=cfg.dtype, seed=cfg.seed, task_options=cfg.to_dict(),
        **cfg.encoder_options)  # type: ignore[arg-type]


def learning_rate(step: int, total: int, peak: float, warmup_ratio: float) -> float:
    """The fine-tuning schedule at `step` (from 0): linear warm-up over ceil(warmup_ratio x total)
    updates, then linear decay to 0 at `total` (transformers' get_linear_schedule_with_warmup), as
    the update loop computes it (`nbcli.train.step.learning_rate`, --lr-schedule linear)."""
    from nbcli.train.config import TrainConfig
    from nbcli.train.step import learning_rate as loop_learning_rate

    return loop_learning_rate(step, TrainConfig(task="classification", steps=total, lr=peak, min_lr_ratio=0.0,
                                                warmup=warmup_steps(total, warmup_ratio), lr_schedule="linear"))
