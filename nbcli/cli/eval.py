"""`nb eval`: perplexity of a causal LM on held-out text, per lambda, with paper 003 table 1's KL;
`--task translation`: test BLEU and chrF of translations (sacreBLEU)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import typer

from nbcli.cli.base import NbCommand
from nbcli.cli.render import KEY, NUM, Col, key, num, print_rows
from nbcli.cli.options import (
    DOCUMENTS_HELP, AllowVocabMismatchOption, ArchOption, BatchSizeOption, CsvOption, DeviceOption, DpiOption,
    DtypeOption, FigsizeOption, JsonOption, LambdasOption, LmTokenizerOption, RemoveDirectionOption, RoleMapOption,
    SmoothingOption, SrcLangOption, TgtLangOption, ThreadsOption, TitleOption, Tf32Option, TsvOption, corpus_option,
    counts_option, on_threads, table_option,
)

EPILOG = """\
[bold]Columns[/] (one row per LAMBDA: b_LN <- LAMBDA b_LN in memory, paper 003 sec. 3.3)

  loss, ppl    mean NLL (nats) and exp(loss) over scored tokens: every token of every document and
               one EOS per document as count-unigrams counts it; the first token is predicted from EOS.
  word ppl     exp(total NLL / words), words = whitespace-separated words + one per scored EOS.
  KL           KL(p_bar || unigram) in nats: p_bar = the model's prediction averaged over all scored
               positions; unigram = add-k smoothed counts (--counts, else the scored tokens' own).
  KL w/o b_LN  the same with b_LN removed (logits - W b_LN): paper 003 table 1's two columns.

[bold]Per-token figures[/] (for the first row's model; sections `bias_effect` / `by_frequency` in --json)

  --bias-effect       paper 003 fig. 1: each token's predicted probability with b_LN and without it,
                      averaged over positions, against its corpus frequency (--counts, else the
                      held-out tokens' own counts). nb's choice: every scored position, averaging
                      probabilities (p_bar, table 1's distribution); --bias-effect-positions target
                      averages only where the token is the ground truth, --bias-effect-space log
                      averages log p (a geometric mean). Bins: equal-width in log10 count, with the
                      geometric mean and std of p (the paper's footnote 4: p_with_std) and the std of
                      log10 p (log10_p_with_std, the bars drawn); change = log10 p_w/o - log10 p.
  --by-frequency C    paper 000 fig. 4: each ground-truth token's average log-probability (natural log,
                      over its occurrences) against its log-unigram probability in the training
                      counts C (--smoothing), with the output bias and, when the model has one,
                      without it; equal-width bins of log-unigram, mean ± standard error, tokens per
                      bin. Overlay several checkpoints: `nb plot-by-frequency a.json b.json -o fig.png`
                      over their `nb eval --by-frequency C --json` reports.
  --bins N            bins of both figures (default 10).

Documents longer than the context are scored with a sliding window (--stride, default half the
context); every token is scored once.

[bold]--task translation[/] (paper 000 fig. 2: test BLEU)

  --corpus TEST is a parallel corpus (PREFIX of aligned PREFIX.SRC/PREFIX.TGT files, .tsv, .jsonl with
  {"translation": {SRC: .., TGT: ..}}, parquet/Arrow) with --src-lang SRC --tgt-lang TGT; the target
  side holds the references. A .tsv/.csv has no language names: its first column is the source unless
  --columns tgt,src, or a first row naming both languages (de TAB en), says otherwise. RUN_OR_CKPT
  decodes the sources with an nb train --task translation model (a run directory: its best checkpoint
  by validation BLEU, paper 000 app. A), beam 5 and lenpen 1 (paper 000 app. A) unless --beam/--lenpen,
  whatever beam the run validated with; --src-lang/--tgt-lang default to the run's and other languages
  are refused. --hyps FILE scores a hypotheses file (one detokenised line per pair, in order) without
  a model. BLEU and chrF (chrF2) come from sacreBLEU with its defaults (13a tokenisation,
  mixed case); --json records their signatures (bleu_signature, chrf_signature) beside the scores.
  --by-frequency C (with RUN_OR_CKPT): paper 000 fig. 4 (sec. 4.2) for the translation model, from one
  teacher-forced pass over the test pairs: each reference token's average log-probability (target EOS
  included) against its log-unigram probability in C, the training targets' counts (nb count-unigrams
  of the target side with the target tokenizer), with b (final_logits_bias) and without it; a pair
  longer than the position table is skipped and counted (skipped_long_pairs), never truncated.
  --by-frequency-plot FIG draws it; `nb plot-by-frequency` overlays runs (zero vs unigram b).

[bold]--task classification | tagging[/] (papers 001 tables 1, 2, 4; 002 table 1)

  CHECKPOINT is a classifier run (nb train --task classification|tagging) or its step-N.safetensors; --corpus a
  labelled file as it was trained on (GLUE TSV, CSV, JSONL, parquet/Arrow; for tagging CoNLL, or JSONL and
  parquet/Arrow records with tokens and ner_tags: integer tags without a ClassLabel are the run's labels by id). Every
  record counts: classification gives loss, accuracy, F1 (binary for two labels, of the label with id
  1; macro otherwise) and Matthews correlation (scikit-learn); tagging gives entity precision, recall
  and F1 (seqeval, BIO/IOB2) and token accuracy. A label never seen in training is an error.

[bold]Examples[/]

  nb eval openai-community/gpt2 --corpus test.jsonl --scale-ln-bias 1,0.5,0   # its own tokenizer
  nb eval run/step-2000.safetensors --corpus heldout.txt -t tok.model
  nb eval gpt2/ --corpus test.jsonl -t gpt2/tokenizer.json --scale-ln-bias 1,0.5,0 --json
  nb eval gpt2/ --corpus test.jsonl --counts train.counts.safetensors --bias-effect-plot fig1.png
  nb eval run/step-2000.safetensors --corpus test.txt --by-frequency train.counts.safetensors \
      --by-frequency-plot fig4.png --json > unigram.json
  nb eval --task translation --corpus iwslt14/test --src-lang de --tgt-lang en --hyps hyps.en --json
  nb eval runs/iwslt-unigram-s0 --task translation --corpus iwslt14/test --src-lang de --tgt-lang en --beam 5
  nb eval runs/mnli --task classification --corpus dev_matched.tsv --json
"""


@on_threads
def eval_command(
    checkpoint: Annotated[Optional[Path], typer.Argument(
        metavar="[CHECKPOINT]", show_default=False,
        help="An nb train checkpoint (.safetensors), a Hugging Face causal-LM directory (config.json + "
        "safetensors; needs pip install 'nbcli\\[hf]'), or a Hub repo id org/name[@rev] (cache first). "
        "Not with --hyps.")] = None,
    corpus: Annotated[list[str], corpus_option(
        "Held-out text: files, directories, globs, Hub dataset ids, - for stdin (repeatable). " + DOCUMENTS_HELP +
        " --task translation: a parallel corpus (see below).")] = ...,
    task: Annotated[Optional[Literal["lm", "translation", "classification", "tagging"]], typer.Option(
        "--task", show_default=False, help="lm: loss and perplexity of a language model; translation: BLEU and "
        "chrF of translations of a parallel corpus (see below); classification / tagging: the metrics of a "
        "classifier run (nb train classification|tagging) on a labelled file (see below). Default: the task the "
        "run directory of CHECKPOINT records (its config.json), else lm.")] = None,
    hyps: Annotated[Optional[Path], typer.Option(
        "--hyps", metavar="FILE", show_default=False, help="--task translation: score this file of "
        "hypotheses (one a line, in the corpus's pair order; - for stdin) instead of decoding with a model.")] = None,
    src_lang: SrcLangOption = None,
    tgt_lang: TgtLangOption = None,
    columns: Annotated[Optional[Literal["src,tgt", "tgt,src"]], typer.Option(
        "--columns", show_default=False, help="--task translation: which column of a .tsv/.csv is the source "
        "(src,tgt, the default, or tgt,src); a first row naming both languages says it instead.")] = None,
    beam: Annotated[Optional[int], typer.Option(
        "--beam", min=1, max=1024, show_default=False, help="--task translation with a model: beam size (1 = "
        "greedy; default 5, paper 000 app. A, not the run's validation beam).")] = None,
    lenpen: Annotated[Optional[float], typer.Option(
        "--lenpen", show_default=False, help="--task translation with a model: length penalty, score = logprob / "
        "length^lenpen (default 1).")] = None,
    tokenizer: LmTokenizerOption = None,
    allow_vocab_mismatch: AllowVocabMismatchOption = False,
    scale_ln_bias: LambdasOption = None,
    remove_direction: RemoveDirectionOption = False,
    counts: Annotated[Optional[Path], counts_option(
        "Unigram for the KL columns (e.g. the training corpus's, as in paper 003 table 1); "
        "default: the held-out corpus's own tokens.")] = None,
    smoothing: SmoothingOption = "add-k:1",
    stride: Annotated[Optional[int], typer.Option(
        "--stride", min=1, help="Sliding-window stride for long documents (default: half the context).")] = None,
    bias_effect: Annotated[bool, typer.Option(
        "--bias-effect", help="Add paper 003 fig. 1: each token's predicted probability with and without b_LN "
        "against its corpus frequency (table and --json section `bias_effect`; see below).")] = False,
    bias_effect_plot: Annotated[Optional[Path], typer.Option(
        "--bias-effect-plot", metavar="FIG", help="Draw paper 003 fig. 1 into FIG: .pdf, .svg or .png (implies "
        "--bias-effect; needs matplotlib).")] = None,
    bias_effect_positions: Annotated[str, typer.Option(
        "--bias-effect-positions", metavar="all|target", help="Positions a token's probability is averaged "
        "over: every scored position (the paper's average prediction) or those where it is the ground truth.")] = "all",
    bias_effect_space: Annotated[str, typer.Option(
        "--bias-effect-space", metavar="prob|log", help="Average probabilities (the paper's p_bar) or "
        "log-probabilities (a geometric mean).")] = "prob",
    by_frequency: Annotated[Optional[Path], typer.Option(
        "--by-frequency", metavar="COUNTS", help="Add paper 000 fig. 4: the average log-probability of each "
        "ground-truth token against its log-unigram probability in these training counts (--json section "
        "`by_frequency`).")] = None,
    by_frequency_plot: Annotated[Optional[Path], typer.Option(
        "--by-frequency-plot", metavar="FIG", help="Draw paper 000 fig. 4 for this checkpoint into FIG: .pdf, "
        ".svg or .png (needs --by-frequency and matplotlib).")] = None,
    bins: Annotated[int, typer.Option("--bins", min=1, max=1000, help="Equal-width bins of both figures.")] = 10,
    dpi: DpiOption = 200,
    figsize: FigsizeOption = None,
    title: TitleOption = None,
    csv: CsvOption = None,
    tsv: TsvOption = None,
    table: Annotated[Optional[str], table_option("rows (one per arm), bias_effect.bins, by_frequency.bins")] = None,
    batch_size: BatchSizeOption = 8,
    arch: ArchOption = "auto",
    mapping: RoleMapOption = None,
    device: DeviceOption = "auto",
    dtype: DtypeOption = "auto",
    tf32: Tf32Option = True,
    threads: ThreadsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Token-level loss and perplexity, per-word perplexity and the KL of the model's average prediction from the unigram (with and without b_LN), one row per LAMBDA; --task translation: BLEU and chrF of translations (sacreBLEU); --task classification|tagging: a classifier's metrics."""  # noqa: E501
    from functools import partial

    from nbcli.cli.console import check_table_targets, print_report, print_warnings, token_progress
    from nbcli.errors import ConfigError
    from nbcli.outputs import model_inputs
    from nbcli.tasks.registry import get_task, task_names
    from nbcli.tasks.runs import eval_run

    name = _task(checkpoint, task)
    runner = get_task(name)
    values = {key: value for key, value in locals().items() if key in _SIGNATURE.parameters}
    refused = [_flag(key) for key, value in values.items()
               if key not in (*COMMON, *runner.eval_options) and value != _SIGNATURE.parameters[key].default]
    if refused:   # an option of another task would be ignored: refused, naming the task (and the tasks it is for)
        owners = [other for other in task_names() if other != name
                  and any(_flag(k) in refused for k in get_task(other).eval_options)]
        raise ConfigError(f"{', '.join(refused)}: not an option of --task {name}"
                          + (f" (options of --task {' | '.join(owners)})" if owners else ""))
    check_table_targets(as_json, csv, tsv, [*(model_inputs(checkpoint) if checkpoint is not None else []),
                                           *([tokenizer] if tokenizer is not None else []),
                                           *(c for c in corpus if c != "-")])
    options = {key: values[key] for key in runner.eval_options if key in values}
    if "progress_bar" in runner.eval_options:
        options["progress_bar"] = partial(token_progress, "scoring")
    report = eval_run(runner, checkpoint, corpus, **options)   # with the Hub datasets among --corpus
    view = VIEWS.get(runner.eval_view)
    if view is None:   # a task of another package: every scalar of its report
        from nbcli.cli.render import print_scalars

        print_report(report, as_json, lambda r: print_scalars(f"nb eval {checkpoint}", r))
        return
    print_warnings(report.get("warnings", []))
    print_report(report, as_json, view, csv=csv, tsv=tsv, table=table)


# Options every task's nb eval takes (the rest are each task's `eval_options`); flags spelled unlike
# their parameter's name.
COMMON = ("checkpoint", "corpus", "task", "threads", "as_json")
FLAGS = {"remove_direction": "--remove-frequency-direction", "mapping": "--map", "tf32": "--no-tf32"}


def _flag(name: str) -> str:
    return FLAGS.get(name, "--" + name.replace("_", "-"))


ROW_COLUMNS = (Col("arm", KEY, key("arm")), Col("loss", NUM, key("loss")), Col("ppl", NUM, key("perplexity")),
               Col("word ppl", NUM, key("word_perplexity")), Col("KL", NUM, key("kl_unigram")),
               Col("KL w/o b_LN", NUM, key("kl_unigram_without_ln_bias")))
BIAS_EFFECT_COLUMNS = (
    Col("log10 count", KEY, lambda b: (b["log10_count_lo"], b["log10_count_hi"]), lambda v: f"{num(v[0])} to {num(v[1])}"),
    Col("tokens", NUM, key("tokens")), Col("log10 p", NUM, key("log10_p_with")),
    Col("log10 p w/o b_LN", NUM, key("log10_p_without")), Col("change", NUM, key("log10_change")),
    Col("log10 unigram", NUM, key("log10_unigram")))
BY_FREQUENCY_COLUMNS = (
    Col("log unigram", KEY, lambda b: (b["log_unigram_lo"], b["log_unigram_hi"]), lambda v: f"{num(v[0])} to {num(v[1])}"),
    Col("tokens", NUM, key("tokens")), Col("mean log p", NUM, key("mean_log_prob")), Col("± s.e.", NUM, key("sem")))
BY_FREQUENCY_DROPPED = (Col("w/o bias", NUM, key("mean_log_prob_without_bias")),
                        Col("± s.e. w/o bias", NUM, key("sem_without_bias")))


def _render_labelled(report: dict[str, Any]) -> None:
    from nbcli.cli.console import esc, stdout_console

    keys = ("loss", "accuracy", "f1", "matthews", "precision", "recall")
    figures = "   ".join(f"{k} {num(report[k])}" for k in keys if isinstance(report.get(k), float))
    stdout_console().print(f"[bold]{esc(report['checkpoint'])}[/] on {esc(', '.join(report['corpus']))} "
                           f"({esc(report['task'])}): {figures}", highlight=False)


def _render_translation(report: dict[str, Any]) -> None:
    from nbcli.cli.console import esc, stdout_console

    console = stdout_console()
    source = esc(report["hypotheses"]) if report["hypotheses"] else esc(str((report["model"] or {}).get("path")))
    console.print(f"[bold]{source}[/] against {esc(', '.join(report['corpus']))} ({esc(report['src_lang'])}->"
                  f"{esc(report['tgt_lang'])}, {num(report['pairs'])} pairs)", highlight=False)
    model = report["model"]
    if model:   # decoded by nb: how
        console.print(f"decoded with beam {num(model['beam'])}, lenpen {model['lenpen']:g}, length limit "
                      f"{model['max_len_a']:g} x S + {num(model['max_len_b'])}", highlight=False)
    console.print(f"BLEU {num(report['bleu'])}   {esc(report['bleu_signature'])}", highlight=False)
    console.print(f"chrF {num(report['chrf'])}   {esc(report['chrf_signature'])}", highlight=False)
    if "by_frequency" in report:
        _render_by_frequency(report["by_frequency"])


def _render(report: dict[str, Any]) -> None:
    from nbcli.cli.console import esc, stdout_console

    console = stdout_console()
    model = report["model"]
    console.print(f"[bold]{esc(model['path'])}[/] ({esc(model['architecture'])}, {esc(model['dtype'])}, "
                  f"{esc(model['device'])}); {num(report['documents'])} documents, "
                  f"{num(report['rows'][0]['tokens'])} tokens")
    print_rows("perplexity and KL from the unigram, per arm", ROW_COLUMNS, report["rows"], "no arm was evaluated")
    if "bias_effect" in report:
        _render_bias_effect(report["bias_effect"])
    if "by_frequency" in report:
        _render_by_frequency(report["by_frequency"])


def _render_bias_effect(section: dict[str, Any]) -> None:
    from nbcli.cli.console import esc, stdout_console

    console = stdout_console()
    console.print(f"[bold]paper 003 fig. 1[/] ({esc(section['arm'])}): p with and without b_LN by corpus frequency; "
                  f"{esc(section['positions'])} positions, {esc(section['space'])} mean; {num(section['tokens'])} "
                  f"tokens; Spearman ρ(change, count) {num(section['spearman_change_vs_count'])}; log10 uniform "
                  f"{num(section['log10_uniform'])}")
    print_rows("bins of log10 count", BIAS_EFFECT_COLUMNS, section["bins"], "no token has a count")
    if section.get("plot"):
        console.print(f"wrote {esc(section['plot'])}")


def _render_by_frequency(section: dict[str, Any]) -> None:
    from nbcli.cli.console import esc, stdout_console

    console = stdout_console()
    arm = f" ({esc(section['arm'])})" if "arm" in section else ""   # an LM's first arm; a translation model has one
    console.print(f"[bold]paper 000 fig. 4[/]{arm}: average log-probability of the ground-truth "
                  f"token by log-unigram (training counts); {num(section['tokens'])} tokens")
    columns = BY_FREQUENCY_COLUMNS + (BY_FREQUENCY_DROPPED if section["output_bias_dropped"] else ())
    print_rows("bins of log-unigram probability", columns, section["bins"], "no scored token")
    if section.get("plot"):
        console.print(f"wrote {esc(section['plot'])}")


VIEWS = {"lm": _render, "translation": _render_translation, "labelled": _render_labelled}   # Task.eval_view
_SIGNATURE = inspect.signature(eval_command)


def register(app: typer.Typer) -> None:
    app.command("eval", epilog=EPILOG, cls=NbCommand)(eval_command)


def _task(checkpoint: Path | None, given: str | None) -> str:
    """--task, else the task CHECKPOINT's run directory records, else lm; a --task that contradicts
    the run's is refused (a translation run scored as an LM read its encoder as a decoder)."""
    from nbcli.errors import ConfigError
    from nbcli.tasks.runs import task_of_run

    recorded = task_of_run(checkpoint) if checkpoint is not None else None
    if given is not None and recorded is not None and given != recorded:
        raise ConfigError(f"--task {given}: {checkpoint} is a run of nb train {recorded}; drop --task or give "
                          f"--task {recorded}")
    return given or recorded or "lm"
