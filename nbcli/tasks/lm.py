"""nb train lm: nb's decoder-only / MLM Transformer (`nbcli.models.lm`) on documents, with the papers'
output bias (paper 000), attention guidance (paper 001) and embedding initialisations (paper 002);
the run itself is `nbcli.tasks.language_model.train` on the shared orchestration."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional

from nbcli.tasks.base import Formatter, SummaryView, Task, TrainHooks
from nbcli.tasks.options import option
from nbcli.train.config import PRESETS

LMPreset = Literal[tuple(PRESETS)]  # type: ignore[valid-type]
from nbcli.tasks.common_options import (ArchitectureOptions, GuidanceOptions, OptimizerOptions, OutputLayerOptions, RunOptions,
                                        common_config)


@dataclass
class LanguageModelOptions:
    """The LM's own options: its presets and objective."""

    preset: LMPreset = option("tiny", "--preset", metavar="NAME", help=(
        "tiny (2x4x128, T=128; seconds on CPU), small (4x8x256), gpt2-124m (12x12x768, T=1024), roberta-8 (paper "
        "001 table 10: 8x12x768, T=512, mlm, batch 120, lr 1e-4, linear decay), or paper 001's RoBERTa settings "
        "exactly, paper001-roberta-{8,12,16}-{mlm,ag}[-fil|-om]: app. A.7 table 10's size and A.8 table 11's lr, "
        "warm-up, alpha_0/lambda and batch for English (no suffix), Filipino or Oromo, Liu et al. 2019's Adam "
        "(0.9, 0.98, 1e-6), weight decay 0.01, dropout 0.1 (docs/training.md 'Paper presets'). An option given "
        "with a preset wins; summary.json's preset_overridden names the preset values it replaced. Vocabulary "
        "size always comes from the tokenizer."))
    objective: Optional[Literal["clm", "mlm"]] = option(None, "--objective", help=(
        "clm: causal LM (decoder-only). mlm: RoBERTa-style masked LM, 15% of tokens selected, 80% <mask> / 10% "
        "random / 10% kept. Default: the preset's (clm except roberta-8)."))
    valid: Optional[list[str]] = option(None, "--valid", metavar="FILE", help=(
        "Validation documents (repeatable; files, directories, globs, Hub dataset ids in --corpus's formats), e.g. WikiText's "
        "validation split: the whole --corpus then trains and --val-fraction is not used."))


class LanguageModelTask(Task):
    name = "lm"
    help = "nb's decoder-only / MLM Transformer (--objective) on documents (the default task)."
    description = (
        "Train nb's reference Transformer (pre-LN, learned positions) and record what the papers measure.\n\n"
        "Writes DIR/log.jsonl (per step: loss before the update, lr, tokens_per_s, mfu on CUDA, ag_loss/ag_alpha; "
        "unigram_reg_on/unigram_kl with --unigram-reg-lambda; eval steps add val_loss, kl_unigram, kl_uniform, "
        "bias_kl_unigram, bias_norm), step-N.safetensors checkpoints in nb's layout (step 0: the initial model; "
        "readable by probe-bias and patch-checkpoint) and summary.json with the final validation loss and the area "
        "under the validation-loss curve (ALC, paper 000 sec. 4.2). Under torchrun it trains with DDP. A new run "
        "that fails or is interrupted before its first saved state (train-state.json: at --save-every or the end) "
        "removes what it wrote, so the same command can simply run again; once a state is saved, DIR stays and "
        "--resume continues from it.")
    examples = """\
  nb train lm --corpus corpus.txt -t openai-community/gpt2 --out runs/g --embedding-init pretrained:openai-community/gpt2
  nb train --corpus corpus.txt -t spm.model --out runs/unigram --bias-init unigram
  nb train --corpus corpus.txt -t spm.model --out runs/zero --bias-init zero --steps 500 --eval-every 25
  nb train --corpus corpus.txt -t spm.model --out runs/ag --objective mlm --ag-fraction 0.5 --ag-alpha 100
  nb train --corpus corpus.txt -t spm.model --out runs/ag --preset roberta-8 --ag-fraction 0.5 --ag-alpha auto
  nb train --corpus corpus.txt -t spm.model --out runs/away --unigram-reg-lambda 0.5 --unigram-reg-steps 100
  nb train --corpus corpus.txt -t spm.model --out runs/u --bias-init unigram --stop-at 100
  nb train --corpus corpus.txt -t spm.model --out runs/u --bias-init unigram --resume
  torchrun --standalone --nproc-per-node 8 -m nbcli train --corpus data/ -t spm.model --out runs/gpt2 \\
      --preset gpt2-124m --batch-size 480 --grad-accum 2 --compile
"""
    option_groups = (RunOptions, LanguageModelOptions, ArchitectureOptions, OutputLayerOptions, OptimizerOptions,
                     GuidanceOptions)

    def train(self, values: dict[str, Any], hooks: TrainHooks) -> dict[str, Any]:
        from nbcli.errors import ConfigError
        from nbcli.train.config import build_config
        from nbcli.tasks.language_model import train as run_training

        if values["tokenizer"] is None:
            raise ConfigError("Missing option '--tokenizer' / '-t'")
        cfg = build_config(values["preset"], objective=values["objective"], tie_embeddings=not values["untie"],
                           d_ff=values["d_ff"], norm=values["norm"], positions=values["positions"],
                           scale_embedding=values["scale_embedding"], init_scheme=values["init_scheme"],
                           **common_config(values))
        stop_at = values["stop_at"]
        hooks.on_start(min(cfg.steps, stop_at) if stop_at else cfg.steps)
        return run_training(cfg, values["corpus"], Path(values["tokenizer"]), values["out"], resume=values["resume"],
                            stop_at=stop_at, on_step=hooks.on_step, on_warning=hooks.on_warning,
                            callbacks=hooks.callbacks, valid=values["valid"] or (),
                            allow_vocab_mismatch=values["allow_vocab_mismatch"]).as_dict()

    eval_options = frozenset({
        "tokenizer", "allow_vocab_mismatch", "scale_ln_bias", "remove_direction", "counts", "smoothing", "stride",
        "bias_effect", "bias_effect_plot", "bias_effect_positions", "bias_effect_space", "by_frequency",
        "by_frequency_plot", "bins", "dpi", "figsize", "title", "csv", "tsv", "table", "arch", "mapping", "dtype",
        "tf32", "batch_size", "device", "progress_bar"})
    eval_view = "lm"

    def evaluate(self, run: Path | None, corpus: list[str], **o: Any) -> dict[str, Any]:
        """Loss, perplexity and paper 003 table 1's KL per arm, with paper 003 fig. 1 and paper 000 fig. 4
        when asked (`nbcli.lm.evaluation.eval_report`); `run` is any causal LM nb reads."""
        from nbcli.checkpoint import parse_role_map
        from nbcli.counts import parse_smoothing
        from nbcli.errors import ConfigError
        from nbcli.figure_style import figure_options
        from nbcli.lm.evaluation import eval_report
        from nbcli.lm.frequency_report import TokenFigures

        if run is None:
            raise ConfigError("CHECKPOINT is required (only --task translation --hyps FILE scores without a model)")
        figures = TokenFigures(bias_effect=o["bias_effect"] or o["bias_effect_plot"] is not None,
                               positions=o["bias_effect_positions"], space=o["bias_effect_space"],
                               by_frequency=o["by_frequency"], bins=o["bins"], bias_effect_plot=o["bias_effect_plot"],
                               by_frequency_plot=o["by_frequency_plot"],
                               looks=figure_options(o["dpi"], o["figsize"], o["title"]))
        return eval_report(run, corpus, o["tokenizer"], o["scale_ln_bias"], remove_direction=o["remove_direction"],
                           counts=o["counts"], smoothing_k=parse_smoothing(o["smoothing"]), stride=o["stride"],
                           batch_size=o["batch_size"], arch=o["arch"], mapping=parse_role_map(o["mapping"] or []),
                           device=o["device"], dtype=o["dtype"], tf32=o["tf32"], progress_bar=o["progress_bar"],
                           figures=figures, allow_vocab_mismatch=o["allow_vocab_mismatch"])

    generate_options = frozenset({
        "tokenizer", "allow_vocab_mismatch", "scale_ln_bias", "decoding", "prompt_words", "max_new_tokens", "samples",
        "max_prompts", "seed", "eval_corpus", "logit_adjust", "counts", "smoothing", "remove_direction",
        "mauve_featurizer", "out", "figure_format", "dpi", "figsize", "title", "batch_size", "kv_cache", "arch",
        "mapping", "device", "dtype", "tf32", "progress_bar"})
    generate_view = "lm"

    def generate(self, run: Any, prompts: list[str], **o: Any) -> dict[str, Any]:
        """Paper 003 sec. 3.3, table 2 (`nbcli.lm.generation.generation_report`): continuations per arm
        (b_LN scaled by each lambda, logit adjustment by `logit_adjust`) with Distinct-n, length, EOS rate
        and perplexity; `run` is any causal LM nb reads, a model in memory too."""
        from nbcli.checkpoint import parse_role_map
        from nbcli.counts import parse_smoothing
        from nbcli.decoding.sampling import parse_decoding
        from nbcli.figure_style import figure_options
        from nbcli.lm.generation import GenerationOptions, generation_report

        opts = GenerationOptions(parse_decoding(o["decoding"]), o["max_new_tokens"], o["samples"], o["seed"],
                                 o["batch_size"], use_cache=o["kv_cache"])
        report, _ = generation_report(
            run, prompts, o["tokenizer"], opts, o["scale_ln_bias"], prompt_words=o["prompt_words"],
            max_prompts=o["max_prompts"], eval_corpus=o["eval_corpus"], tau=o["logit_adjust"], counts=o["counts"],
            smoothing_k=parse_smoothing(o["smoothing"]), remove_direction=o["remove_direction"],
            featurizer=o["mauve_featurizer"], arch=o["arch"], mapping=parse_role_map(o["mapping"] or []),
            device=o["device"], dtype=o["dtype"], tf32=o["tf32"], out=o["out"], progress_bar=o["progress_bar"],
            allow_vocab_mismatch=o["allow_vocab_mismatch"], figure_format=o["figure_format"],
            looks=figure_options(o["dpi"], o["figsize"], o["title"]))
        return report

    def summary_view(self, summary: dict[str, Any], num: Formatter = str) -> SummaryView:
        rows = [("steps", num(summary["steps"])), ("device", summary["device"]),
                ("parameters", num(summary["parameters"])), ("final val loss", num(summary["final_val_loss"])),
                ("ALC (val loss)", num(summary["alc"])),
                ("unigram entropy / log V", f"{num(summary['unigram_entropy'])} / {num(summary['log_v'])} nats"),
                ("tokens/s", num(summary["tokens_per_s"])), ("checkpoint", summary["checkpoint"])]
        if summary.get("ag_alpha0") is not None:
            rows.insert(5, ("AG alpha_0", num(summary["ag_alpha0"])))
        return SummaryView(f"nb train: {summary['out']}", rows + closing_rows(summary, num))


def closing_rows(summary: dict[str, Any], num: Formatter) -> list[tuple[str, str]]:
    """The last rows of every task's summary: the preset values the run's options replaced, and for
    --embedding-init pretrained:VECTORS the words with a vector, per embedding."""
    rows = [(f"preset's {name} replaced", f"{b['preset']} -> {b['run']}")
            for name, b in (summary.get("preset_overridden") or {}).items()]
    for side, c in (summary.get("embedding_coverage") or {}).items():
        share = "-" if c["matched_fraction"] is None else f"{num(100 * c['matched_fraction'], 4)} %"
        rows.append((f"{side} embedding: words with a vector",
                     f"{num(c['matched'])} of {num(c['words'])} ({share}; {num(c['matched_lowercased'])} "
                     f"lower-cased); {num(c['initialised'])} rows {c['missing']}"))
    return rows
