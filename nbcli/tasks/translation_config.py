"""The options of `nb train --task translation` as the run reads them (`TranslationOptions`, held in
TrainConfig.task_options and checked when made) and the TrainConfig a translation preset and explicit
options make (`build_translation_config`); the run itself is `nbcli.tasks.translation`."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from nbcli.corpus.records import COLUMN_ORDERS
from nbcli.decoding.search import MAX_LEN_A, MAX_LEN_B
from nbcli.errors import ConfigError
from nbcli.tasks.presets import TRANSLATION_PRESETS
from nbcli.train.best import check_metric
from nbcli.train.config import TrainConfig, preset_overrides, with_warmup

__all__ = ["PRESETS", "SELECT_BY", "TASK", "TranslationOptions", "build_translation_config"]

TASK = "translation"
SELECT_BY = ("val_bleu", "val_chrf", "val_loss")   # what --select-by may name: the validation metrics logged

PRESETS = TRANSLATION_PRESETS   # nbcli.tasks.presets: nb's and the papers' (app. A of papers 000, 002; 001 table 7)


@dataclass(frozen=True)
class TranslationOptions:
    """The task's own options (TrainConfig.task_options; compared on --resume like every option)."""

    src_lang: str = "src"
    tgt_lang: str = "tgt"
    columns: str | None = None              # a headerless .tsv/.csv: src,tgt (None: the same) or tgt,src
    d_ff: int = 512
    norm: str = "post"                      # post (Vaswani, fairseq) | pre
    positions: str = "sinusoidal"           # sinusoidal | learned | none (paper 002 table 3)
    scale_embedding: bool = True            # embeddings times sqrt(d) before the positions
    init_scheme: str = "fairseq"            # fairseq | xavier (paper 002 secs. 5-6) | gpt2 (models.seq2seq)
    share_embeddings: str = "auto"          # all | decoder | none | auto (all with one joint tokenizer, else decoder)
    activation: str = "relu"
    max_positions: int = 1024
    freeze_embeddings: bool = False         # paper 002 table 3's "Train: no"
    beam: int = 5                           # validation BLEU's (and nb translate's default) beam ...
    lenpen: float = 1.0                     # ... and length penalty (paper 000 sec. 4.1: beam 5, length-normalised)
    max_len_a: float = 1.2
    max_len_b: int = 10
    eval_sentences: int = 0                 # validation pairs decoded for BLEU at each evaluation (0: all)
    ag_decoder_fraction: float = 0.0        # decoder self-attention guidance (paper 001 table 7: none)
    ag_decoder_patterns: tuple[str, ...] | None = None
    select_by: str | None = None            # best.safetensors by: val_bleu (None: the same; paper 000), val_loss (002)

    def __post_init__(self) -> None:
        if isinstance(self.ag_decoder_patterns, list):
            object.__setattr__(self, "ag_decoder_patterns", tuple(self.ag_decoder_patterns))
        if self.select_by is not None:
            check_metric(self.select_by, SELECT_BY, TASK)
        checks = [
            (self.norm in ("post", "pre"), "--norm must be post or pre"),
            (self.positions in ("sinusoidal", "learned", "none"), "--positions must be sinusoidal, learned or none"),
            (self.share_embeddings in ("auto", "all", "decoder", "none"),
             "--share-embeddings must be auto, all, decoder or none"),
            (self.activation in ("relu", "gelu"), "--activation must be relu or gelu"),
            (self.init_scheme in ("fairseq", "xavier", "gpt2"), "--init-scheme must be fairseq, xavier or gpt2"),
            (self.d_ff >= 1 and self.max_positions >= 2, "d_ff and max_positions must be positive"),
            (self.beam >= 1, "--beam must be >= 1"),
            (math.isfinite(self.lenpen), "--lenpen must be a finite number"),
            (math.isfinite(self.max_len_a) and 0 <= self.max_len_a <= MAX_LEN_A and 0 <= self.max_len_b <= MAX_LEN_B,
             f"--max-len-a must be a finite number from 0 to {MAX_LEN_A:g} and --max-len-b from 0 to {MAX_LEN_B}"),
            (self.eval_sentences >= 0, "--eval-sentences must be >= 0"),
            (0.0 <= self.ag_decoder_fraction <= 1.0, "--ag-decoder-fraction must be in [0, 1]"),
            (self.columns in (None, *COLUMN_ORDERS), f"--columns must be {' or '.join(COLUMN_ORDERS)}"),
            (bool(self.src_lang) and bool(self.tgt_lang) and self.src_lang != self.tgt_lang,
             "--src-lang and --tgt-lang must be two different language codes"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)
        if self.ag_decoder_patterns and "next" in self.ag_decoder_patterns:
            raise ConfigError("--ag-decoder-patterns: [Next] is impossible in the causal decoder")

    @classmethod
    def of(cls, cfg: TrainConfig) -> "TranslationOptions":
        known = {f.name for f in fields(cls)}
        unknown = set(cfg.task_options) - known
        if unknown:
            raise ConfigError(f"translation options: unknown keys {sorted(unknown)}")
        return cls(**cfg.task_options)


def build_translation_config(preset: str = "tiny", task_options: dict[str, Any] | None = None,
                             **overrides: Any) -> TrainConfig:
    """A TrainConfig for --task translation from a translation preset plus explicit options (None: the
    preset's); task_options over the preset's, checked by TranslationOptions. An option wins over the
    preset's value; the values it replaced are recorded (`preset_overridden`, `preset_overrides`)."""
    if preset not in PRESETS:
        raise ConfigError(f"--preset for --task translation must be one of {', '.join(PRESETS)}, got {preset!r}")
    values = {k: v for k, v in PRESETS[preset].items() if k != "task_options"}
    values.update({k: v for k, v in overrides.items() if v is not None})
    options = {**PRESETS[preset].get("task_options", {}), **{k: v for k, v in (task_options or {}).items()
                                                             if v is not None}}
    opts = TranslationOptions(**options)
    if "tie_embeddings" not in overrides or overrides["tie_embeddings"] is None:
        values["tie_embeddings"] = opts.share_embeddings != "none"
    values = with_warmup(values, overrides)
    overridden = preset_overrides(PRESETS[preset], {**values, "task_options": asdict(opts)})
    cfg = TrainConfig(preset=preset, task=TASK, task_options=asdict(opts), preset_overridden=overridden, **values)
    if cfg.seq_len > opts.max_positions:
        raise ConfigError(f"--max-len {cfg.seq_len} exceeds the position table ({opts.max_positions})")
    return cfg
