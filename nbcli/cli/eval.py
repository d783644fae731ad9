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

Documents longer than the context are scored with a sliding window (--stride, default half the
context); every token is scored once.

[bold]Examples[/]

  nb eval openai-community/gpt2 --corpus test.jsonl --scale-ln-bias 1,0.5,0   # its own tokenizer
  nb eval run/step-2000.safetensors --corpus heldout.txt -t tok.model
  nb eval gpt2/ --corpus test.jsonl -t gpt2/tokenizer.json --scale-ln-bias 1,0.5,0 --json
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
    batch_size: BatchSizeOption = 8,
    arch: ArchOption = "auto",
    mapping: RoleMapOption = None,
    device: DeviceOption = "auto",
    as_json: JsonOption = False,
) -> None:
    """Token-level loss and perplexity, per-word perplexity and the KL of the model's average prediction from the unigram (with and without b_LN), one row per LAMBDA."""  # noqa: E501
    from functools import partial

    from nbcli.checkpoint import parse_role_map
    from nbcli.cli.console import print_json, print_warnings, token_progress
    from nbcli.counts import parse_smoothing
    from nbcli.lm.perplexity import eval_report

    report = eval_report(checkpoint, corpus, tokenizer, scale_ln_bias, remove_direction=remove_direction,
                         counts=counts, smoothing_k=parse_smoothing(smoothing), stride=stride, batch_size=batch_size,
                         arch=arch, mapping=parse_role_map(mapping or []), device=device,
                         progress_bar=partial(token_progress, "scoring"))
    print_warnings(report["warnings"])
    if as_json:
        print_json(report)
    else:
        _render(report)


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


def register(app: typer.Typer) -> None:
    app.command("eval", epilog=EPILOG, cls=NbCommand)(eval_command)
