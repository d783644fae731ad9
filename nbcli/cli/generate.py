"""`nb generate`: paper 003 sec. 3.3 in one command: continuations per lambda, diversity vs perplexity."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from nbcli.cli.base import NbCommand
from nbcli.cli.options import (
    DOCUMENTS_HELP, AllowVocabMismatchOption, ArchOption, BatchSizeOption, CsvOption, DeviceOption, DpiOption,
    DtypeOption, FigsizeOption, FigureFormatOption, JsonOption, LambdasOption, LmCheckpointArgument, LmTokenizerOption,
    RemoveDirectionOption, RoleMapOption, SmoothingOption, Tf32Option, ThreadsOption, TitleOption, TsvOption,
    counts_option, on_threads, out_dir_option, seed_option, table_option,
)
from nbcli.cli.render import KEY, NUM, Col, key, num, print_rows

EPILOG = """\
[bold]What it does[/] (paper 003 sec. 3.3, table 2, app. B)

  Prompts: the first --prompt-words words of each document of --prompts (documents with no word
  after them are skipped). For each arm (LAMBDA: b_LN <- LAMBDA b_LN in memory; --logit-adjust TAU:
  logits - TAU log p(y) from --counts, for models with or without b_LN), --samples continuations
  per prompt until EOS or --max-new-tokens (or the model's context).

[bold]Columns[/]

  D-1..D-4, D  Distinct-n = unique n-grams / n-grams over all continuations; D = their mean (eqs. 5-6);
               words as NLTK's word tokenizer splits them (no NLTK data needed; pip install 'nbcli\\[lm]').
  len          mean continuation length in tokens.
  EOS          share of continuations that ended with EOS.
  ppl          perplexity of --eval-corpus (human text) under the same arm (as nb eval computes it).
  MAUVE        with mauve-text installed and --mauve-featurizer named; otherwise the reason it is absent.

[bold]Outputs[/] --json: the report, its `samples` every continuation with its arm, lambda, prompt
and seed. With --out DIR: DIR/samples.jsonl (the same samples), DIR/table.json (the report less the
samples), DIR/diversity_vs_perplexity.png (with --eval-corpus and matplotlib; --figure-format pdf|svg).
Same --seed, same samples: each sample has its own generator, seeded from (seed, prompt, sample).

[bold]Examples[/]

  nb generate openai-community/gpt2 --prompts webtext.test.jsonl --scale-ln-bias 1,0.6,0
  nb generate run/step-2000.safetensors --prompts heldout.txt -t tok.model --scale-ln-bias 0,0.1,...,1 --eval-corpus heldout.txt --out study/
  nb generate gpt2/ --prompts webtext.test.jsonl -t gpt2/tokenizer.json --scale-ln-bias 1,0.6,0 --decoding top-k:50
  nb generate llama/ --prompts p.txt -t llama/ --logit-adjust 0.5 --counts counts.safetensors --json
"""


@on_threads
def generate_command(
    checkpoint: LmCheckpointArgument,
    prompts: Annotated[list[str], typer.Option(
        "--prompts", metavar="FILE", show_default=False,
        help="Held-out documents whose first words are the prompts (repeatable). " + DOCUMENTS_HELP)],
    tokenizer: LmTokenizerOption = None,
    allow_vocab_mismatch: AllowVocabMismatchOption = False,
    scale_ln_bias: LambdasOption = None,
    decoding: Annotated[str, typer.Option(
        "--decoding", metavar="top-p:P|top-k:K|sample[:T]|greedy",
        help="Decoding rule (paper 003: top-p:0.9, top-k:50, vanilla sampling).")] = "top-p:0.9",
    prompt_words: Annotated[int, typer.Option("--prompt-words", min=1, help="Words of each document in its prompt.")] = 10,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", min=1, help="Length cap per continuation.")] = 256,
    samples: Annotated[int, typer.Option("--samples", min=1, help="Continuations per prompt.")] = 1,
    max_prompts: Annotated[Optional[int], typer.Option(
        "--max-prompts", min=1, help="Use at most this many prompts (the first documents).")] = None,
    seed: Annotated[int, seed_option("Seed of every sample's generator")] = 0,
    eval_corpus: Annotated[Optional[list[str]], typer.Option(
        "--eval-corpus", metavar="FILE", help="Human text whose perplexity each arm reports (repeatable; read as --prompts).")] = None,
    logit_adjust: Annotated[Optional[float], typer.Option(
        "--logit-adjust", metavar="TAU", help="Add an arm decoding with logits - TAU log p(y) (Menon et al. "
        "2021; needs --counts). Works on models without b_LN.")] = None,
    counts: Annotated[Optional[Path], counts_option("Unigram counts for --logit-adjust.")] = None,
    smoothing: SmoothingOption = "add-k:1",
    remove_direction: RemoveDirectionOption = False,
    mauve_featurizer: Annotated[Optional[str], typer.Option(
        "--mauve-featurizer", metavar="MODEL", help="Featurizer model for MAUVE (needs mauve-text).")] = None,
    out: Annotated[Optional[Path], out_dir_option("Write samples.jsonl, table.json and the plot into DIR.")] = None,
    figure_format: FigureFormatOption = "png",
    dpi: DpiOption = 200,
    figsize: FigsizeOption = None,
    title: TitleOption = None,
    csv: CsvOption = None,
    tsv: TsvOption = None,
    table: Annotated[Optional[str], table_option("rows (one per arm), samples (every continuation)")] = None,
    batch_size: BatchSizeOption = 16,
    no_cache: Annotated[bool, typer.Option(
        "--no-kv-cache", help="Recompute the whole sequence every step (a reference for the cache).")] = False,
    arch: ArchOption = "auto",
    mapping: RoleMapOption = None,
    device: DeviceOption = "auto",
    dtype: DtypeOption = "auto",
    tf32: Tf32Option = True,
    threads: ThreadsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Generate continuations of held-out prompts with b_LN scaled by each LAMBDA (and/or logit adjustment); report diversity (Distinct-n, D), length, EOS rate and perplexity per arm: paper 003 table 2."""  # noqa: E501
    from functools import partial

    from nbcli.cli.console import check_table_targets, print_report, print_warnings, token_progress
    from nbcli.outputs import model_inputs
    from nbcli.tasks.runs import generate_run, generating_task

    check_table_targets(as_json, csv, tsv, [*model_inputs(checkpoint), tokenizer, *(p for p in prompts if p != "-")])
    task = generating_task(checkpoint)   # the run's task; a model folder, a Hub id or a checkpoint: the LM's
    report = generate_run(
        task, checkpoint, prompts, progress_bar=partial(token_progress, "generating"), tokenizer=tokenizer,
        allow_vocab_mismatch=allow_vocab_mismatch, scale_ln_bias=scale_ln_bias, decoding=decoding,
        prompt_words=prompt_words, max_new_tokens=max_new_tokens, samples=samples, max_prompts=max_prompts, seed=seed,
        eval_corpus=eval_corpus, logit_adjust=logit_adjust, counts=counts, smoothing=smoothing,
        remove_direction=remove_direction, mauve_featurizer=mauve_featurizer, out=out, figure_format=figure_format,
        dpi=dpi, figsize=figsize, title=title, batch_size=batch_size, kv_cache=not no_cache, arch=arch,
        mapping=mapping, device=device, dtype=dtype, tf32=tf32)
    print_warnings(report.get("warnings", []))
    print_report(report, as_json, VIEWS.get(task.generate_view, partial(_render_scalars, checkpoint)), csv=csv,
                 tsv=tsv, table=table)


ROW_COLUMNS = (Col("arm", KEY, key("arm")), *(Col(f"D-{n}", NUM, key(f"distinct_{n}")) for n in (1, 2, 3, 4)),
               Col("D", NUM, key("diversity")), Col("len", NUM, key("mean_tokens")), Col("EOS", NUM, key("eos_rate")),
               Col("ppl", NUM, key("perplexity")), Col("MAUVE", NUM, key("mauve")))


def _render(report: dict[str, Any]) -> None:
    from nbcli.cli.console import esc, stdout_console

    console = stdout_console()
    model = report["model"]
    console.print(f"[bold]{esc(model['path'])}[/] ({esc(model['architecture'])}, {esc(model['dtype'])}, "
                  f"{esc(model['device'])}); {num(report['prompt_count'])} prompts x "
                  f"{num(report['samples_per_prompt'])} samples, {esc(report['decoding'])}, seed {num(report['seed'])}")
    print_rows("diversity, length and perplexity per arm (paper 003 table 2)", ROW_COLUMNS, report["rows"],
               "no arm was run")
    notes = {row["mauve_note"] for row in report["rows"] if row["mauve"] is None}
    for note in sorted(notes):
        console.print(f"MAUVE {esc(note)}")
    if report.get("plot_note"):
        console.print(f"plot {esc(report['plot_note'])}")
    console.print(f"{num(len(report['samples']))} samples: --json (its `samples`), --out DIR (samples.jsonl) or "
                  "--csv FILE --table samples")
    for path in report["outputs"]:
        console.print(f"wrote {esc(path)}")


def _render_scalars(checkpoint: Path, report: dict[str, Any]) -> None:
    """A task of another package: every scalar of its report."""
    from nbcli.cli.render import print_scalars

    print_scalars(f"nb generate {checkpoint}", report)


VIEWS = {"lm": _render}   # Task.generate_view


def register(app: typer.Typer) -> None:
    app.command("generate", epilog=EPILOG, cls=NbCommand)(generate_command)
