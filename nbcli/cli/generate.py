"""`nb generate`: paper 003 sec. 3.3 in one command: continuations per lambda, diversity vs perplexity."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from nbcli.cli.base import NbCommand
from nbcli.cli.options import (
    ArchOption, BatchSizeOption, DeviceOption, JsonOption, LambdasOption, LmCheckpointArgument,
    LmTokenizerOption, RemoveDirectionOption, RoleMapOption, SmoothingOption, counts_option, out_dir_option,
    seed_option,
)

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

[bold]Outputs[/] with --out DIR: DIR/samples.jsonl (every sample with its arm, lambda, prompt and
seed), DIR/table.json, DIR/diversity_vs_perplexity.png (with --eval-corpus and matplotlib).
Same --seed, same samples: each sample has its own generator, seeded from (seed, prompt, sample).

[bold]Examples[/]

  nb generate openai-community/gpt2 --prompts webtext.test.jsonl --scale-ln-bias 1,0.6,0
  nb generate run/step-2000.safetensors --prompts heldout.txt -t tok.model --scale-ln-bias 0,0.1,...,1 --eval-corpus heldout.txt --out study/
  nb generate gpt2/ --prompts webtext.test.jsonl -t gpt2/tokenizer.json --scale-ln-bias 1,0.6,0 --decoding top-k:50
  nb generate llama/ --prompts p.txt -t llama/ --logit-adjust 0.5 --counts counts.safetensors --json
"""


def generate_command(
    checkpoint: LmCheckpointArgument,
    prompts: Annotated[list[str], typer.Option(
        "--prompts", metavar="FILE", show_default=False,
        help="Held-out documents whose first words are the prompts (repeatable; .jsonl: the `text` field).")],
    tokenizer: LmTokenizerOption = None,
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
        "--eval-corpus", metavar="FILE", help="Human text whose perplexity each arm reports (repeatable).")] = None,
    logit_adjust: Annotated[Optional[float], typer.Option(
        "--logit-adjust", metavar="TAU", help="Add an arm decoding with logits - TAU log p(y) (Menon et al. "
        "2021; needs --counts). Works on models without b_LN.")] = None,
    counts: Annotated[Optional[Path], counts_option("Unigram counts for --logit-adjust.")] = None,
    smoothing: SmoothingOption = "add-k:1",
    remove_direction: RemoveDirectionOption = False,
    mauve_featurizer: Annotated[Optional[str], typer.Option(
        "--mauve-featurizer", metavar="MODEL", help="Featurizer model for MAUVE (needs mauve-text).")] = None,
    out: Annotated[Optional[Path], out_dir_option("Write samples.jsonl, table.json and the plot into DIR.")] = None,
    batch_size: BatchSizeOption = 16,
    no_cache: Annotated[bool, typer.Option(
        "--no-kv-cache", help="Recompute the whole sequence every step (a reference for the cache).")] = False,
    arch: ArchOption = "auto",
    mapping: RoleMapOption = None,
    device: DeviceOption = "auto",
    as_json: JsonOption = False,
) -> None:
    """Generate continuations of held-out prompts with b_LN scaled by each LAMBDA (and/or logit adjustment); report diversity (Distinct-n, D), length, EOS rate and perplexity per arm: paper 003 table 2."""  # noqa: E501
    from nbcli.checkpoint import parse_role_map
    from nbcli.cli.console import esc, print_json, stderr_console, step_progress
    from nbcli.counts import parse_smoothing
    from nbcli.lm.arms import open_study
    from nbcli.lm.decoding import parse_decoding
    from nbcli.lm.diversity import word_tokenize
    from nbcli.lm.generation import GenerationOptions, generation_study, make_prompts
    from nbcli.lm.perplexity import read_documents, tokenize_documents
    from nbcli.outputs import guard_outputs

    rule = parse_decoding(decoding)
    if out is not None:
        guard_outputs([out / name for name in OUT_NAMES], [checkpoint, tokenizer, counts, *prompts, *(eval_corpus or [])],
                      folder=out, option="--out")
    word_tokenize("check.")  # NLTK present? (a one-line error before any model work)
    study = open_study(checkpoint, tokenizer, scale_ln_bias, remove_direction=remove_direction, tau=logit_adjust,
                       counts=counts, smoothing_k=parse_smoothing(smoothing), arch=arch,
                       mapping=parse_role_map(mapping or []), device=device)
    runner = study.runner
    chosen = make_prompts(read_documents(prompts), prompt_words, max_prompts)
    scored = tokenize_documents(read_documents(eval_corpus), study.tokenizer, runner.vocab_size) if eval_corpus else None
    opts = GenerationOptions(rule, max_new_tokens, samples, seed, batch_size, use_cache=not no_cache)
    with step_progress("generating", len(chosen) * samples * len(study.arms)) as progress:
        rows, records, warnings = generation_study(
            runner, study.tokenizer, study.arms, study.base, chosen, opts, log_prior=study.log_prior,
            eval_scored=scored, featurizer=mauve_featurizer, progress=lambda n: progress(advance=n))
    report = {**study.provenance(), "prompts": list(prompts), "prompt_count": len(chosen),
              "eval_corpus": eval_corpus, "decoding": rule.spec, "prompt_words": prompt_words,
              "max_new_tokens": max_new_tokens, "samples": samples, "seed": seed, "kv_cache": not no_cache,
              "rows": rows, "warnings": warnings, "outputs": []}
    if out is not None:
        report["outputs"] = _write_outputs(out, report, records)
    for warning in warnings:
        stderr_console().print(f"[yellow]warning:[/] {esc(warning)}", markup=True)
    if as_json:
        print_json(report)
    else:
        _render(report)


OUT_NAMES = ("samples.jsonl", "table.json", "diversity_vs_perplexity.png")


def _write_outputs(out: Path, report: dict[str, Any], records: list[dict[str, Any]]) -> list[str]:
    """samples.jsonl, table.json and the plot, committed together (OutputSet) or not at all."""
    import importlib.util
    import json

    from nbcli import plots
    from nbcli.atomic import OutputSet
    from nbcli.cli.console import _jsonable

    out.mkdir(parents=True, exist_ok=True)
    written = [str(out / "samples.jsonl"), str(out / "table.json")]
    plot = out / "diversity_vs_perplexity.png"
    with OutputSet() as outputs:
        outputs.open(out / "samples.jsonl").write(
            "".join(json.dumps(_jsonable(r), ensure_ascii=False) + "\n" for r in records).encode())
        if report["eval_corpus"] and importlib.util.find_spec("matplotlib") is not None:
            plots.plot_diversity_vs_perplexity(
                plot, report["rows"], title=f"{Path(report['model']['path']).name}: diversity vs perplexity "
                f"({report['decoding']})", metadata={"nb.version": report["nb_version"], "nb.model": report["model"]["path"]},
                outputs=outputs)
            written.append(str(plot))
            report["plot"] = str(plot)
        else:
            report["plot"] = None
            report["plot_note"] = ("absent: needs --eval-corpus (perplexity axis)" if not report["eval_corpus"]
                                   else "absent: matplotlib is not installed (pip install 'nbcli[plot]')")
        report["outputs"] = written
        outputs.open(out / "table.json").write(
            (json.dumps(_jsonable(report), indent=2, ensure_ascii=False) + "\n").encode())
    return written


def _fmt(value: Any, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def _render(report: dict[str, Any]) -> None:
    from rich.table import Table

    from nbcli.cli.console import esc, stdout_console

    console = stdout_console()
    model = report["model"]
    console.print(f"[bold]{esc(model['path'])}[/] ({model['architecture']}, {model['dtype']}, {model['device']}); "
                  f"{report['prompt_count']} prompts x {report['samples']} samples, {report['decoding']}, "
                  f"seed {report['seed']}")
    table = Table(title_justify="left")
    for column in ("arm", "D-1", "D-2", "D-3", "D-4", "D", "len", "EOS", "ppl", "MAUVE"):
        table.add_column(column, justify="left" if column == "arm" else "right", no_wrap=True)
    for row in report["rows"]:
        table.add_row(esc(row["arm"]), *(_fmt(row[f"distinct_{n}"]) for n in (1, 2, 3, 4)), _fmt(row["diversity"]),
                      _fmt(row["mean_tokens"], ".1f"), _fmt(row["eos_rate"], ".2f"), _fmt(row["perplexity"], ".2f"),
                      _fmt(row["mauve"]))
    console.print(table)
    notes = {row["mauve_note"] for row in report["rows"] if row["mauve"] is None}
    for note in sorted(notes):
        console.print(f"MAUVE {esc(note)}")
    if report.get("plot_note"):
        console.print(f"plot {esc(report['plot_note'])}")
    for path in report["outputs"]:
        console.print(f"wrote {esc(path)}")


def register(app: typer.Typer) -> None:
    app.command("generate", epilog=EPILOG, cls=NbCommand)(generate_command)
