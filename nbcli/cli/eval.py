"""`nb eval`: perplexity of a causal LM on held-out text, per lambda, with paper 003 table 1's KL."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from nbcli.cli.base import NbCommand
from nbcli.cli.options import (
    ArchOption, BatchSizeOption, DeviceOption, JsonOption, LambdasOption, LmCheckpointArgument,
    LmTokenizerOption, RemoveDirectionOption, RoleMapOption, SmoothingOption, corpus_option, counts_option,
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

[bold]Examples[/]

  nb eval openai-community/gpt2 --corpus test.jsonl --scale-ln-bias 1,0.5,0   # its own tokenizer
  nb eval run/step-2000.safetensors --corpus heldout.txt -t tok.model
  nb eval gpt2/ --corpus test.jsonl -t gpt2/tokenizer.json --scale-ln-bias 1,0.5,0 --json
  nb eval gpt2/ --corpus test.jsonl --counts train.counts.safetensors --bias-effect-plot fig1.png
  nb eval run/step-2000.safetensors --corpus test.txt --by-frequency train.counts.safetensors \
      --by-frequency-plot fig4.png --json > unigram.json
"""


def eval_command(
    checkpoint: LmCheckpointArgument,
    corpus: Annotated[list[str], corpus_option(
        "Held-out text: files, directories, globs, - for stdin (repeatable). One document per "
        "non-empty line; .jsonl: the `text` field.")],
    tokenizer: LmTokenizerOption = None,
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
        "--bias-effect-plot", metavar="FILE.png", help="Draw paper 003 fig. 1 as a PNG (implies --bias-effect; "
        "needs matplotlib).")] = None,
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
        "--by-frequency-plot", metavar="FILE.png", help="Draw paper 000 fig. 4 for this checkpoint as a PNG "
        "(needs --by-frequency and matplotlib).")] = None,
    bins: Annotated[int, typer.Option("--bins", min=1, max=1000, help="Equal-width bins of both figures.")] = 10,
    batch_size: BatchSizeOption = 8,
    arch: ArchOption = "auto",
    mapping: RoleMapOption = None,
    device: DeviceOption = "auto",
    as_json: JsonOption = False,
) -> None:
    """Token-level loss and perplexity, per-word perplexity and the KL of the model's average prediction from the unigram (with and without b_LN), one row per LAMBDA."""  # noqa: E501
    from functools import partial

    from nbcli.checkpoint import parse_role_map
    from nbcli.cli.console import print_report, print_warnings, token_progress
    from nbcli.counts import parse_smoothing
    from nbcli.lm.frequency_report import TokenFigures
    from nbcli.lm.perplexity import eval_report

    figures = TokenFigures(bias_effect=bias_effect or bias_effect_plot is not None, positions=bias_effect_positions,
                           space=bias_effect_space, by_frequency=by_frequency, bins=bins,
                           bias_effect_plot=bias_effect_plot, by_frequency_plot=by_frequency_plot)
    report = eval_report(checkpoint, corpus, tokenizer, scale_ln_bias, remove_direction=remove_direction,
                         counts=counts, smoothing_k=parse_smoothing(smoothing), stride=stride, batch_size=batch_size,
                         arch=arch, mapping=parse_role_map(mapping or []), device=device,
                         progress_bar=partial(token_progress, "scoring"), figures=figures)
    print_warnings(report["warnings"])
    print_report(report, as_json, _render)


def _render(report: dict[str, Any]) -> None:
    from rich.table import Table

    from nbcli.cli.console import esc, stdout_console

    console = stdout_console()
    model = report["model"]
    console.print(f"[bold]{esc(model['path'])}[/] ({model['architecture']}, {model['dtype']}, {model['device']}); "
                  f"{report['documents']} documents, {report['rows'][0]['tokens']} tokens")
    table = Table(title_justify="left")
    for column in ("arm", "loss", "ppl", "word ppl", "KL", "KL w/o b_LN"):
        table.add_column(column, justify="left" if column == "arm" else "right", no_wrap=True)
    for row in report["rows"]:
        wo = row["kl_unigram_without_ln_bias"]
        table.add_row(esc(row["arm"]), f"{row['loss']:.4f}", f"{row['perplexity']:.3f}", f"{row['word_perplexity']:.3f}",
                      f"{row['kl_unigram']:.4f}", "-" if wo is None else f"{wo:.4f}")
    console.print(table)
    if "bias_effect" in report:
        _render_bias_effect(report["bias_effect"])
    if "by_frequency" in report:
        _render_by_frequency(report["by_frequency"])


def _num(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def _render_bias_effect(section: dict[str, Any]) -> None:
    from rich.table import Table

    from nbcli.cli.console import esc, stdout_console

    rho = section["spearman_change_vs_count"]
    table = Table(title=f"paper 003 fig. 1 ({esc(section['arm'])}): p with and without b_LN by corpus frequency; "
                  f"{section['positions']} positions, {section['space']} mean; {section['tokens']} tokens; "
                  f"Spearman ρ(change, count) {_num(rho)}; log10 uniform {section['log10_uniform']:.3f}",
                  title_justify="left")
    for column in ("log10 count", "tokens", "log10 p", "log10 p w/o b_LN", "change", "log10 unigram"):
        table.add_column(column, justify="right", no_wrap=True)
    for b in section["bins"]:
        table.add_row(f"{b['log10_count_lo']:.2f}-{b['log10_count_hi']:.2f}", str(b["tokens"]), _num(b["log10_p_with"]),
                      _num(b["log10_p_without"]), _num(b["log10_change"], "+.3f"), _num(b["log10_unigram"]))
    stdout_console().print(table)
    if section.get("plot"):
        stdout_console().print(f"wrote {esc(section['plot'])}")


def _render_by_frequency(section: dict[str, Any]) -> None:
    from rich.table import Table

    from nbcli.cli.console import esc, stdout_console

    table = Table(title=f"paper 000 fig. 4 ({esc(section['arm'])}): average log-probability of the ground-truth "
                  f"token by log-unigram (training counts); {section['tokens']} tokens", title_justify="left")
    dropped = section["output_bias_dropped"]
    for column in ("log unigram", "tokens", "mean log p", "± s.e.", *(("w/o bias", "± s.e.") if dropped else ())):
        table.add_column(column, justify="right", no_wrap=True)
    for b in section["bins"]:
        extra = (_num(b["mean_log_prob_without_bias"]), _num(b["sem_without_bias"])) if dropped else ()
        table.add_row(f"{b['log_unigram_lo']:.2f}-{b['log_unigram_hi']:.2f}", str(b["tokens"]),
                      _num(b["mean_log_prob"]), _num(b["sem"]), *extra)
    stdout_console().print(table)
    if section.get("plot"):
        stdout_console().print(f"wrote {esc(section['plot'])}")


def register(app: typer.Typer) -> None:
    app.command("eval", epilog=EPILOG, cls=NbCommand)(eval_command)
