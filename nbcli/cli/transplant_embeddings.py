"""`nb transplant-embeddings`: a target tokenizer's embedding from a checkpoint with another vocabulary."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from nbcli.cli.base import NbCommand
from nbcli.cli.options import (
    AllowVocabMismatchOption, JsonOption, ThreadsOption, counts_option, on_threads, output_option, seed_option,
    standardise_option,
)

EPILOG = """\
[bold]Examples[/bold]

  nb transplant-embeddings openai-community/gpt2 --source-tokenizer openai-community/gpt2 \\
      --target-tokenizer b.json -o b-emb.safetensors
  nb transplant-embeddings runs/a/step-2000.safetensors --source-tokenizer a.model --target-tokenizer b.json \\
      -o b-emb.safetensors --missing neighbours --counts b-counts.safetensors
  nb train --corpus corpus.txt -t b.json --out runs/b --embedding-init pretrained:b-emb.safetensors

Matching: ▁the (SentencePiece), Ġthe (byte-level BPE) and the (WordPiece word start) are one piece;
##the, the (SentencePiece continuation) and the (byte-level continuation) another. Special tokens match
by role (BOS, EOS, padding, unknown, mask).
"""


@on_threads
def transplant_embeddings(
    source: Annotated[Path, typer.Argument(metavar="SOURCE_CKPT", help="safetensors checkpoint (or Hub repo id "
                                           "org/name[@rev]) whose input embedding is copied (its only matrix, else "
                                           "its input-embedding role).",
                                           show_default=False)],
    source_tokenizer: Annotated[Path, typer.Option(
        "--source-tokenizer", metavar="T1", help="The tokenizer SOURCE_CKPT was trained with (.model, "
        "tokenizer.json or a folder).", show_default=False)],
    target_tokenizer: Annotated[Path, typer.Option(
        "--target-tokenizer", metavar="T2", help="The tokenizer of the model to initialise.", show_default=False)],
    output: Annotated[Path, output_option(
        "Output safetensors file (tok_emb.weight [V_t, d] and transplant.source_row [V_t]).")],
    missing: Annotated[Literal["xavier", "mean", "neighbours"], typer.Option(
        "--missing", help="Rows of target pieces the source lacks: xavier U(+-sqrt(6/(V+d))) (paper 002 sec. "
        "3.1), the mean source row, or neighbours: the weighted mean (by length in characters) of the source "
        "rows of the piece's sub-pieces as the source tokenizer cuts it (after Dobler & de Melo 2023).")] = "xavier",
    counts: Annotated[Optional[Path], counts_option(
        "Target-corpus counts (nb count-unigrams with T2): coverage by token mass, and --min-count.")] = None,
    min_count: Annotated[int, typer.Option(
        "--min-count", metavar="K", min=0, help="Copy only pieces counted at least K times (paper 002's "
        "minimum frequency); the rest are initialised by --missing. Needs --counts.")] = 0,
    standardise: Annotated[Optional[str], standardise_option("--standardise")] = None,
    seed: Annotated[int, seed_option("Seed for --missing xavier")] = 0,
    allow_vocab_mismatch: AllowVocabMismatchOption = False,
    threads: ThreadsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Build a target tokenizer's input embedding from SOURCE_CKPT's by vocabulary overlap (paper 002 sec. 3.3).

    Rows of pieces both vocabularies share are copied (matched across the space markers ▁, Ġ and ##); the others are initialised by --missing; then --standardise optionally rescales the whole matrix (eq. 1 / eq. 4). Prints the coverage (pieces matched; with --counts the share of the target corpus's tokens). OUT is written atomically with provenance; `nb train --embedding-init pretrained:OUT` reads it.
    """  # noqa: E501 (one line per paragraph: help text reflows)
    from nbcli.cli.console import esc, print_json, print_warnings
    from nbcli.transplant import transplant

    result = transplant(source, source_tokenizer, target_tokenizer, output, missing=missing, counts_path=counts,
                        min_count=min_count, standardise=standardise, seed=seed,
                        allow_vocab_mismatch=allow_vocab_mismatch)
    print_warnings(result.warnings)
    if as_json:
        print_json(result.as_dict())
        return
    from nbcli.cli.render import TEXT, num, percent, print_pairs

    cov = result.coverage
    rows = [("source tensor", f"{result.source_tensor} -> tok_emb.weight {result.shape}"),
            ("pieces matched", f"{num(cov.matched)} of {num(cov.target_pieces)} ({percent(cov.matched_fraction)})"),
            ("initialised", f"{num(cov.initialised)} ({missing}"
             + (f", {num(cov.neighbour_fallbacks)} fell back to the mean row" if missing == "neighbours" else "") + ")")]
    if cov.mass_matched is not None:
        rows.append(("token mass matched", f"{percent(cov.mass_matched)} of {num(cov.counts_total)} counted tokens"))
    if min_count:
        rows.append((f"below --min-count {min_count}", f"{num(cov.dropped_below_min_count)} matched pieces not copied"))
    if result.standardised is not None:
        rows.append(("standardised", str(result.standardised)))
    print_pairs(f"nb transplant-embeddings: {output}", [(esc(k), esc(v)) for k, v in rows], "nothing to report", kind=TEXT)


def register(app: typer.Typer) -> None:
    app.command("transplant-embeddings", epilog=EPILOG, cls=NbCommand)(transplant_embeddings)
