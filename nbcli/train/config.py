"""`nb train` configuration: presets and the validated training config (one dataclass, JSON-able)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from nbcli.errors import ConfigError

# Architecture presets. Vocabulary size always comes from the tokenizer.
PRESETS: dict[str, dict[str, Any]] = {
    # trains in seconds on a CPU
    "tiny": dict(n_layer=2, n_head=4, d_model=128, seq_len=128, batch_size=16, lr=1e-3, warmup=20),
    "small": dict(n_layer=4, n_head=8, d_model=256, seq_len=256, batch_size=32, lr=6e-4, warmup=100),
    # GPT-2 small (Radford et al. 2019; HF gpt2 config): 12 layers x 12 heads x 768, n_ctx 1024, tied
    # embeddings, d_ff 3072; with GPT-2's 50257-piece tokenizer and --bias-init none it has GPT-2's
    # 124,439,808 parameters (a test checks). Cosine decay as nanoGPT/llm.c.
    "gpt2-124m": dict(n_layer=12, n_head=12, d_model=768, seq_len=1024, batch_size=16, lr=6e-4, warmup=700),
    # paper 001 table 10 RoBERTa-8: 8 layers x 12 heads x 768, d_ff 4 x 768 (app. A.7), MLM; table 11
    # (English, AG): lr 1e-4, 0 warm-up steps, batch 120; Liu et al. 2019 for the rest: T = 512, linear
    # LR decay to 0 (the release's get_linear_schedule_with_warmup), tied embeddings.
    "roberta-8": dict(n_layer=8, n_head=12, d_model=768, seq_len=512, batch_size=120, lr=1e-4, warmup=0,
                      objective="mlm", lr_schedule="linear", min_lr_ratio=0.0),
}

# Paper 001's RoBERTa settings, exactly: app. A.7 table 10 (layers, heads, d_model 768; the FFN 4 x d_model, nb's
# default) and app. A.8 table 11 (lr, warm-up steps, alpha_0 / lambda, batch size) per language and arm;
# "we follow Liu et al. (2019) for all design choices not mentioned": RoBERTa's pre-training table 9 (Adam
# beta2 0.98, eps 1e-6, weight decay 0.01, dropout 0.1 (attention's too), no gradient clipping, T = 512) and its
# linear decay to 0. Names: paper001-roberta-{8,12,16}-{mlm,ag}[-fil|-om] (English, Filipino, Oromo).
_LIU_2019 = dict(d_model=768, seq_len=512, objective="mlm", lr_schedule="linear", min_lr_ratio=0.0, adam_beta1=0.9,
                 adam_beta2=0.98, adam_eps=1e-6, weight_decay=0.01, dropout=0.1, grad_clip=0.0)
PAPER001_SIZES = {8: (8, 12), 12: (12, 12), 16: (16, 16)}            # table 10: layers, heads
PAPER001_MLM_LR = {8: 1e-4, 12: 5e-5, 16: 1e-5}                       # table 11, the MLM rows (AG: 1e-4)
PAPER001_ALPHA0 = {8: 100.0, 12: 10.0, 16: 10.0}                      # table 11, the AG rows (lambda 0.5)
PAPER001_WARMUP = {"": 10_000, "-fil": 10_000, "-om": 1_000}          # table 11, the MLM rows (AG: 0)
PAPER001_BATCH = {"": (120, 84, 48), "-fil": (40, 28, 16), "-om": (40, 40, 32)}   # table 11, by size 8 / 12 / 16


def _paper001(size: int, arm: str, language: str) -> dict[str, Any]:
    layers, heads = PAPER001_SIZES[size]
    batch = PAPER001_BATCH[language][list(PAPER001_SIZES).index(size)]
    if arm == "mlm":
        return dict(_LIU_2019, n_layer=layers, n_head=heads, lr=PAPER001_MLM_LR[size],
                    warmup=PAPER001_WARMUP[language], batch_size=batch)
    return dict(_LIU_2019, n_layer=layers, n_head=heads, lr=1e-4, warmup=0, batch_size=batch, ag_fraction=0.5,
                ag_alpha=PAPER001_ALPHA0[size])


PRESETS.update({f"paper001-roberta-{size}-{arm}{language}": _paper001(size, arm, language)
                for language in PAPER001_WARMUP for size in PAPER001_SIZES for arm in ("mlm", "ag")})


def preset_overrides(preset: dict[str, Any], final: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The values of `preset` a run's own options replaced: {name: {"preset": p, "run": v}} for each key
    the preset fixes whose value in `final` (the run's, after the options) differs; a nested dict (a
    translation preset's task_options) key by key. The option wins; this says it did."""
    out: dict[str, dict[str, Any]] = {}
    for key, fixed in preset.items():
        if isinstance(fixed, dict):
            out.update(preset_overrides(fixed, final.get(key) or {}))
            continue
        if key not in final:
            continue
        run = final[key]
        same = list(fixed) == list(run) if isinstance(fixed, (list, tuple)) and isinstance(run, (list, tuple)) \
            else fixed == run
        if not same:
            out[key] = {"preset": list(fixed) if isinstance(fixed, tuple) else fixed,
                        "run": list(run) if isinstance(run, tuple) else run}
    return out

BiasInit = Literal["unigram", "zero", "none"]


@dataclass
class TrainConfig:
    """Everything `nb train` needs besides the corpus and tokenizer paths. Saved as config.json."""

    preset: str = "tiny"
    objective: Literal["clm", "mlm"] = "clm"
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 128
    d_ff: int = 0                 # feed-forward width; 0: 4 x d_model (the LM's; translation: task_options)
    # nb's LM / encoder architecture (nbcli.models.lm.ModelConfig; translation keeps its own in task_options)
    norm: str = "pre"             # pre | post layer norm
    positions: str = "learned"    # learned | sinusoidal | none
    scale_embedding: bool = False  # token embeddings times sqrt(d) before the positions
    init_scheme: str = "gpt2"     # gpt2 | xavier | fairseq (nbcli.models.lm.Transformer.reset_parameters)
    seq_len: int = 128
    steps: int = 200
    batch_size: int = 16          # sequences per optimizer step, over all ranks and micro-steps
    grad_accum: int = 1
    lr: float = 1e-3
    min_lr_ratio: float = 0.1     # decay (cosine or linear) to lr * min_lr_ratio
    warmup: int = 20
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    label_smoothing: float = 0.0
    dropout: float = 0.0
    tie_embeddings: bool = True
    bias_init: BiasInit = "zero"
    smoothing_k: float = 1.0
    rescale_w: Literal["fro", "spectral"] | None = None
    ag_patterns: tuple[str, ...] | None = None
    ag_fraction: float = 0.0
    ag_alpha: float | Literal["auto"] = 100.0   # in ag_reduction's units; auto: L_LM / L_AG at step 0
    ag_decay_steps: int = 0       # 0 means --steps
    ag_hold_steps: int = 0        # alpha held at alpha_0 this long, then linear decay (the release: 20000)
    ag_reduction: Literal["mse", "frobenius"] = "mse"
    lr_schedule: Literal["cosine", "linear", "inverse-sqrt", "constant"] = "cosine"
    adam_beta1: float = 0.9       # AdamW betas (adam_beta1, adam_beta2): 0.9 in every paper
    adam_beta2: float = 0.95      # GPT-2/nanoGPT 0.95, fairseq/Vaswani 0.98, paper 000 app. A 0.997
    adam_eps: float = 1e-8
    unigram_reg_lambda: float = 0.0   # paper 000 app. B.3: minimise CE - lambda KL(omega || p_theta) ...
    unigram_reg_steps: int = 0        # ... for updates 0 .. S-1, then the standard objective
    embedding_init: str = "normal"    # normal | xavier | pretrained:FILE[:TENSOR] | pretrained:VECTORS
    embedding_missing: str = "xavier"  # pretrained:VECTORS: rows without a vector (nbcli.transplant.MISSING)
    embedding_unicode_errors: str | None = None  # pretrained:VECTORS: words not UTF-8 (None: the reader's default)
    embedding_standardise: str | None = None   # xavier | match:FILE:TENSOR | mean=M,std=S (surgery spec)
    embedding_whiten: bool = False    # Zipfian whitening under the training counts' unigram (Yokoi et al. 2024)
    embedding_shuffle: bool = False
    embedding_shuffle_mode: Literal["rows", "rows-columns", "elements"] = "rows"
    mask_rate: float = 0.15
    val_fraction: float = 0.05    # every 1/val_fraction-th document goes to validation
    eval_every: int = 50
    eval_batches: int = 8
    save_every: int = 0           # 0: only the final checkpoint
    device: Literal["auto", "cpu", "cuda"] = "auto"
    compile: bool = False
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    seed: int = 0
    task: str = "lm"              # lm (decoder-only / MLM: objective), or a task of nbcli.tasks (translation)
    task_options: dict[str, Any] = field(default_factory=dict)   # the task's own options, checked by the task
    preset_overridden: dict[str, Any] = field(default_factory=dict)   # preset values the options replaced
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.ag_patterns, list):
            self.ag_patterns = tuple(self.ag_patterns)
        checks = [
            (self.objective in ("clm", "mlm"), "--objective must be clm or mlm"),
            (self.steps >= 1, "--steps must be >= 1"),
            (self.batch_size >= 1, "--batch-size must be >= 1"),
            (self.grad_accum >= 1, "--grad-accum must be >= 1"),
            (self.seq_len >= 2, "--seq-len must be >= 2"),
            (self.lr > 0, "--lr must be > 0"),
            (self.warmup >= 0, "--warmup must be >= 0"),
            (0.0 <= self.label_smoothing < 1.0, "--label-smoothing must be in [0, 1)"),
            (0.0 <= self.dropout < 1.0, "--dropout must be in [0, 1)"),
            (self.bias_init in ("unigram", "zero", "none"), "--bias-init must be unigram, zero or none"),
            (self.smoothing_k > 0, "smoothing k must be > 0 for --bias-init unigram"),
            (self.rescale_w in (None, "fro", "spectral"), "--rescale-w must be fro or spectral"),
            (0.0 <= self.ag_fraction <= 1.0, "--ag-fraction must be in [0, 1]"),
            (self.ag_alpha == "auto" or (isinstance(self.ag_alpha, (int, float)) and self.ag_alpha >= 0),
             "--ag-alpha must be a number >= 0 or auto"),
            (self.ag_decay_steps >= 0, "--ag-decay-steps must be >= 0"),
            (self.ag_hold_steps >= 0, "--ag-hold-steps must be >= 0"),
            (self.ag_reduction in ("mse", "frobenius"), "--ag-reduction must be mse or frobenius"),
            (self.lr_schedule in ("cosine", "linear", "inverse-sqrt", "constant"),
             "--lr-schedule must be cosine, linear, inverse-sqrt or constant"),
            (0.0 <= self.adam_beta1 < 1.0 and 0.0 <= self.adam_beta2 < 1.0 and self.adam_eps > 0,
             "Adam's beta1 and beta2 must be in [0, 1) and its eps > 0"),
            (0.0 <= self.weight_decay < float("inf"), "--weight-decay must be a finite number >= 0"),
            (0.0 <= self.grad_clip < float("inf"), "--grad-clip must be a finite number >= 0"),
            (self.n_layer >= 1, "--n-layer must be >= 1"),
            (self.d_ff >= 0, "--d-ff must be >= 1 (0: 4 x --d-model)"),
            (self.norm in ("pre", "post"), "--norm must be pre or post"),
            (self.positions in ("learned", "sinusoidal", "none"), "--positions must be learned, sinusoidal or none"),
            (self.init_scheme in ("gpt2", "xavier", "fairseq"), "--init-scheme must be gpt2, xavier or fairseq"),
            (self.embedding_init in ("normal", "xavier") or self.embedding_init.startswith("pretrained:"),
             "--embedding-init must be normal, xavier, pretrained:FILE[:TENSOR] or pretrained:VECTORS"),
            (self.embedding_missing in ("xavier", "mean"), "--missing must be xavier or mean (word vectors)"),
            (self.embedding_unicode_errors in (None, "strict", "replace", "ignore", "backslashreplace"),
             "--unicode-errors must be strict, replace, ignore or backslashreplace"),
            (self.embedding_unicode_errors is None or self.embedding_init.startswith("pretrained:"),
             "--unicode-errors applies to word vectors: add --embedding-init pretrained:VECTORS"),
            (self.embedding_shuffle_mode in ("rows", "rows-columns", "elements"),
             "--shuffle-mode must be rows, rows-columns or elements"),
            (0.0 < self.mask_rate < 1.0, "mask rate must be in (0, 1)"),
            (0.0 < self.val_fraction < 0.5, "--val-fraction must be in (0, 0.5)"),
            (self.eval_every >= 1, "--eval-every must be >= 1"),
            (self.eval_batches >= 1, "--eval-batches must be >= 1"),
            (self.save_every >= 0, "--save-every must be >= 0"),
            (self.device in ("auto", "cpu", "cuda"), "--device must be auto, cpu or cuda"),
            (self.dtype in ("auto", "float32", "bfloat16"), "--dtype must be auto, float32 or bfloat16"),
            (0 <= self.seed < 2**63, "--seed must be in [0, 2^63-1]"),
            (self.steps * self.batch_size * self.seq_len < 2**62,
             "--steps x --batch-size x --seq-len (tokens to train on) must stay below 2^62"),
            (all(map(math.isfinite, (self.lr, 0.0 if self.ag_alpha == "auto" else self.ag_alpha,
                                     self.label_smoothing, self.dropout, self.smoothing_k))),
             "--lr, --ag-alpha, --label-smoothing, --dropout and the smoothing k must be finite numbers"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)
        self._check_unigram_reg()
        if self.rescale_w is not None and self.bias_init != "unigram":
            raise ConfigError("--rescale-w matches ||W|| to the output bias norm: it needs --bias-init unigram")
        if self.embedding_standardise is not None:
            from nbcli.surgery import parse_standardise

            parse_standardise(self.embedding_standardise)   # raises ConfigError on a bad spec
        if self.batch_size % self.grad_accum:
            raise ConfigError(f"--batch-size {self.batch_size} is not divisible by --grad-accum {self.grad_accum}")

    def _check_unigram_reg(self) -> None:
        """--unigram-reg-lambda L and --unigram-reg-steps S (paper 000 app. B.3) come together."""
        lam, s = self.unigram_reg_lambda, self.unigram_reg_steps
        if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not math.isfinite(lam) or lam < 0:
            raise ConfigError(f"--unigram-reg-lambda must be a finite number >= 0, got {lam!r}")
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise ConfigError(f"--unigram-reg-steps must be an integer >= 0, got {s!r}")
        if s and not lam:
            raise ConfigError("--unigram-reg-steps needs --unigram-reg-lambda L > 0 (the regulariser's weight)")
        if lam and not s:
            raise ConfigError("--unigram-reg-lambda needs --unigram-reg-steps S >= 1 (the update at which the "
                              "standard objective resumes, paper 000 app. B.3)")
        if s > self.steps:
            raise ConfigError(f"--unigram-reg-steps {s} is past --steps {self.steps}")

    @property
    def decay_steps(self) -> int:
        return self.ag_decay_steps or self.steps

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"config.json: unknown keys {sorted(unknown)}")
        return cls(**data)


def build_config(preset: str = "tiny", **overrides: Any) -> TrainConfig:
    """The LM's TrainConfig from a preset plus explicit options (None means: keep the preset's value; an
    option wins, and the preset values it replaced are recorded: `preset_overrides`); `warmup_ratio` R
    sets the warm-up to ceil(R x steps) (`with_warmup`)."""
    if preset not in PRESETS:
        raise ConfigError(f"--preset must be one of {', '.join(PRESETS)}, got {preset!r}")
    values: dict[str, Any] = dict(PRESETS[preset])
    values.update({k: v for k, v in overrides.items() if v is not None})
    values = with_warmup(values, overrides)
    cfg = TrainConfig(preset=preset, preset_overridden=preset_overrides(PRESETS[preset], values), **values)
    if cfg.objective == "clm" and cfg.ag_patterns and "next" in cfg.ag_patterns:
        raise ConfigError("--ag-patterns: [Next] is impossible in a causal model (a position cannot attend "
                          "to the next token); use prev, first, delim or period, or --objective mlm")
    return cfg


def check_warmup(warmup: int | None, ratio: float | None) -> None:
    """The warm-up is given as steps or as a ratio in [0, 1), not both (ConfigError)."""
    if ratio is not None and (isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio < 1):
        raise ConfigError(f"--warmup-ratio must be in [0, 1), got {ratio!r}")
    if warmup is not None and ratio is not None:
        raise ConfigError("--warmup and --warmup-ratio both set the warm-up: give one")


def with_warmup(values: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`values` (TrainConfig keywords over a preset's) with the `warmup_ratio` R of `overrides` turned
    into warmup = ceil(R x steps) (transformers' warmup_ratio): the warm-up is given as steps
    (--warmup) or as a share of the run (--warmup-ratio), in every task; not both."""
    values = {k: v for k, v in values.items() if k != "warmup_ratio"}
    ratio = overrides.get("warmup_ratio")
    if ratio is None:
        return values
    check_warmup(overrides.get("warmup"), ratio)
    return {**values, "warmup": math.ceil(ratio * values.get("steps", TrainConfig.steps))}
