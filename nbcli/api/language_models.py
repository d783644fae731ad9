"""Language models as functions: train nb's reference Transformer, evaluate and generate (paper 003
tables 1-2), paper 000 fig. 4 overlays and paper 001's attention maps."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from nbcli.api.inputs import (
    check_train_config, input_paths, lambda_spec, local_path, optional_path, role_items, runnable_model,
    trained)
from nbcli.api.reports import EvalReport, GenerateReport, PathLike, Report, RoleMap, TrainReport
from nbcli.arguments import public


@public
def evaluate(checkpoint: PathLike | Any, corpus: PathLike | Sequence[PathLike], tokenizer: PathLike, *,
             scale_ln_bias: str | Sequence[float] | None = None, remove_frequency_direction: bool = False,
             counts: PathLike | None = None, smoothing: str = "add-k:1", stride: int | None = None,
             batch_size: int = 8, arch: str = "auto", mapping: RoleMap = None, device: str = "auto",
             bias_effect: bool = False, bias_effect_positions: Literal["all", "target"] = "all",
             bias_effect_space: Literal["prob", "log"] = "prob", bias_effect_plot: PathLike | None = None,
             by_frequency: PathLike | None = None, by_frequency_plot: PathLike | None = None,
             bins: int = 10, allow_vocab_mismatch: bool = False, dtype: str = "auto", tf32: bool = True) -> EvalReport:
    """Loss, perplexity, word perplexity and KL of the average prediction from the unigram, with and
    without b_LN, one row per lambda (`nb eval`; paper 003 table 1). `checkpoint`: an nb train
    checkpoint or a transformers causal-LM folder (its output bias applied, `nbcli.load_model`), or a
    loaded causal LM (run on its device, lambda arms restored after); `scale_ln_bias`: "1,0.5,0",
    "0,0.1,...,1" or a list of numbers (b_LN scaled in memory, nothing written). `bias_effect` (or a
    `bias_effect_plot` figure: .pdf, .svg or .png) adds paper 003 fig. 1 (section `bias_effect`);
    `by_frequency` (training counts) adds paper 000 fig. 4 (section `by_frequency`, figure
    `by_frequency_plot`), in `bins` bins.
    `allow_vocab_mismatch`: accept a tokenizer (or counts) whose fingerprint differs from the model's.
    `dtype` (auto|float32|bfloat16 autocast) and `tf32`: the forward passes' precision (`nb eval --dtype`).
    The report's `datasets`: the Hub datasets among `corpus` (`nbcli.tasks.runs.eval_run`, as nb eval)."""
    from nbcli.tasks.registry import get_task
    from nbcli.tasks.runs import eval_run

    return EvalReport(eval_run(
        get_task("lm"), runnable_model(checkpoint, "evaluate"), input_paths(corpus), tokenizer=local_path(tokenizer),
        scale_ln_bias=lambda_spec(scale_ln_bias), remove_direction=remove_frequency_direction,
        counts=optional_path(counts), smoothing=smoothing, stride=stride, batch_size=batch_size, arch=arch,
        mapping=role_items(mapping) or None, device=device, bias_effect=bias_effect,
        bias_effect_positions=bias_effect_positions, bias_effect_space=bias_effect_space,
        bias_effect_plot=optional_path(bias_effect_plot), by_frequency=optional_path(by_frequency),
        by_frequency_plot=optional_path(by_frequency_plot), bins=bins, dpi=None, figsize=None, title=None,
        allow_vocab_mismatch=allow_vocab_mismatch, dtype=dtype, tf32=tf32, progress_bar=None))


@public
def plot_by_frequency(reports: Sequence[PathLike], output: PathLike | None = None, *,
                      labels: Sequence[str] | None = None) -> Report:
    """Paper 000 fig. 4 for several checkpoints on one figure (`nb plot-by-frequency`): the
    `by_frequency` sections of `evaluate(..., by_frequency=COUNTS)` reports saved as JSON."""
    from nbcli.lm.frequency_report import by_frequency_overlay

    return Report(by_frequency_overlay([local_path(r) for r in reports], labels, optional_path(output)))


@public
def generate(checkpoint: PathLike | Any, prompts: PathLike | Sequence[PathLike], tokenizer: PathLike, *,
             scale_ln_bias: str | Sequence[float] | None = None, decoding: str = "top-p:0.9", prompt_words: int = 10,
             max_new_tokens: int = 256, samples: int = 1, max_prompts: int | None = None, seed: int = 0,
             eval_corpus: PathLike | Sequence[PathLike] | None = None, logit_adjust: float | None = None,
             counts: PathLike | None = None, smoothing: str = "add-k:1", remove_frequency_direction: bool = False,
             mauve_featurizer: str | None = None, out: PathLike | None = None, batch_size: int = 16,
             kv_cache: bool = True, arch: str = "auto", mapping: RoleMap = None, device: str = "auto",
             allow_vocab_mismatch: bool = False, dtype: str = "auto", tf32: bool = True) -> GenerateReport:
    """Continuations of held-out prompts per arm (b_LN scaled by each lambda, and/or logit adjustment
    by `logit_adjust` with `counts`), with Distinct-n, length, EOS rate and perplexity per arm
    (`nb generate`; paper 003 sec. 3.3, table 2). `checkpoint`: a path or a loaded causal LM, as for
    `evaluate`. The samples are in the result's `samples`; with `out` (a directory) also in
    out/samples.jsonl, beside table.json and the plot (`nb generate --out`). `samples` is the number
    of continuations per prompt; the result's `samples` is the list of them. `dtype`, `tf32`: as `evaluate`'s.
    A run directory of another task goes to that task's `generate` (`nbcli.tasks.runs.generate_run`), the
    options it does not read refused."""
    from nbcli.tasks.runs import generate_run, generating_task

    model = runnable_model(checkpoint, "generate")
    report = generate_run(
        generating_task(model), model, input_paths(prompts), tokenizer=local_path(tokenizer),
        scale_ln_bias=lambda_spec(scale_ln_bias), decoding=decoding, prompt_words=prompt_words,
        max_new_tokens=max_new_tokens, samples=samples, max_prompts=max_prompts, seed=seed,
        eval_corpus=input_paths(eval_corpus) if eval_corpus is not None else None, logit_adjust=logit_adjust,
        counts=optional_path(counts), smoothing=smoothing, remove_direction=remove_frequency_direction,
        mauve_featurizer=mauve_featurizer, out=optional_path(out), batch_size=batch_size, kv_cache=kv_cache, arch=arch,
        mapping=role_items(mapping) or None, device=device, allow_vocab_mismatch=allow_vocab_mismatch, dtype=dtype,
        tf32=tf32)
    return GenerateReport(report)


@public
def train_model(corpus: PathLike | Sequence[PathLike], tokenizer: PathLike, out: PathLike, *, preset: str = "tiny",
          resume: bool = False, stop_at: int | None = None,
          on_step: Callable[[int, dict[str, Any]], None] | None = None, allow_vocab_mismatch: bool = False,
          valid: PathLike | Sequence[PathLike] | None = None, warmup_ratio: float | None = None,
          threads: int | None = None, **config: Any) -> TrainReport:
    """Train nb's reference Transformer (`nb train`; named train_model because `nbcli.train` is the
    training package) into the run directory `out` (config, log.jsonl,
    step-N.safetensors, summary.json). `config`: `nbcli.train.config.TrainConfig` fields over the
    preset's (steps=200, bias_init="unigram", objective="mlm", ag_fraction=0.5, ...); `on_step(step,
    record)` sees every log record. `valid`: validation documents (else `val_fraction` of the corpus is
    held out); `warmup_ratio`: the warm-up as a share of the run (instead of `warmup` steps); `threads`:
    CPU threads (`--threads`; None: every core; recorded as `threads`). Warnings are in the result's `warnings`."""
    from nbcli.train.config import build_config
    from nbcli.tasks.language_model import train as run_training

    check_train_config("train_model", config)
    cfg = build_config(preset, warmup_ratio=warmup_ratio, **config)
    return trained(lambda: run_training(
        cfg, input_paths(corpus), local_path(tokenizer), local_path(out), resume=resume, stop_at=stop_at,
        on_step=on_step, allow_vocab_mismatch=allow_vocab_mismatch,
        valid=input_paths(valid) if valid is not None else ()).as_dict(), threads)


@public
def attention_maps(run_dir: PathLike, sentence: str, tokenizer: PathLike, *, steps: str | None = None,
                   checkpoints: Sequence[PathLike] = (), heads: str | None = None, delimiters: bool = True,
                   metric: Literal["l1", "kl", "mse"] = "l1", output: PathLike | None = None) -> Report:
    """Paper 001 figs. 1, 2, 4 (`nb attention-maps`): attention maps of `heads` ("L.H,...", "all",
    "assigned"; default the run's guided heads, else all) for one sentence at `steps` (`--at`: "0%,1%,100%":
    nearest saved checkpoints; or exact steps) or `checkpoints` of a run, each map's l1/kl/mse distance
    to each [Next]/[Prev]/[First]/[Delim]/[Period] pattern, and the figure (.pdf, .svg, .png) when
    `output` is given."""
    from nbcli.reports.attention_maps import attention_maps_report

    return Report(attention_maps_report(local_path(run_dir), sentence, local_path(tokenizer), steps=steps,
                                        checkpoints=[local_path(c) for c in checkpoints], heads=heads,
                                        delimiters=delimiters, metric=metric, plot=optional_path(output)))

