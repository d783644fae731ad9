"""`nb embedding-stats`: paper 002's embedding statistics (tables 2, 6, 8) for a checkpoint or word vectors."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import typer

from nbcli.cli.base import NbCommand
from nbcli.cli.options import (
    ArchOption, CsvOption, DpiOption, FigsizeOption, JsonOption, RoleMapOption, ThreadsOption, TitleOption, TsvOption,
    UnicodeErrorsOption, on_threads, seed_option, shuffle_mode_option,
)
from nbcli.cli.render import NUM, TEXT, Col, key, num, print_rows

EPILOG = """\
[bold]Columns[/] (paper 002 tables 2, 6, 8; all entries of the matrix)

  min, max   the range;  mean, σ   the mean and sample standard deviation (ddof 1), float64
  ...√D      the same four times sqrt(D), D the embedding width: table 6's "(Scaled)" rows, the
             embedding as it is added to the positional encoding

[bold]Rows[/]: the checkpoint's input embedding and, when it is a separate tensor, its output weight
(or --tensor NAME alone); then, with --inits, one row per initialisation of that source (the input
embedding, or --tensor), the functions nb patch-checkpoint and nb train apply:
  xavier               U(±sqrt(6/(N+D))) of the source's shape (seeded by --seed)
  pretrained           the source itself
  pretrained-xavier    eq. 1: standardised to mean 0, σ = sqrt(2/(N+D)) (table 2's "BERT_Xavier")
  xavier-pretrained    eq. 4: the Xavier draw standardised to the source's mean and σ (table 8)
  pretrained-shuffled  sec. 3.4, --shuffle-mode (same statistics as the source, table 2's note)

With --vectors, IN is a word-vector file (GloVe, word2vec, fastText .vec, compressed or not; the
reader of nb analogy) and table 6's rows come from it: the vectors, the matrix after each prefix of
--transform (scale-sqrt-d, xavier-std, pos-enc, pos-enc-scaled, as nb analogy applies them), the
positional encodings added ("Pos. Encoding", when a pos-enc transform is named), then --inits.

A separate command rather than an `nb inspect` option: inspect reads headers only (instant, no
torch), while these statistics read every entry and draw initialisations.

[bold]Examples[/]

  nb embedding-stats bert/model.safetensors
  nb embedding-stats glove.safetensors --inits all --plot glove-stats.pdf
  nb embedding-stats t5/ --inits pretrained,pretrained-xavier --json
  nb embedding-stats glove.6B.300d.txt --vectors --limit 5893 --transform xavier-std,pos-enc --inits xavier
  nb embedding-stats ckpt.safetensors --tensor encoder.embed_tokens.weight --inits xavier,xavier-pretrained
"""


@on_threads
def embedding_stats(
    checkpoint: Annotated[Path, typer.Argument(
        metavar="IN", show_default=False,
        help="A .safetensors file, a sharded checkpoint directory, or its *.safetensors.index.json; with "
        "--vectors a word-vector file.")],
    vectors: Annotated[bool, typer.Option(
        "--vectors", help="IN is a word-vector file (GloVe, word2vec text/binary, fastText .vec; gz/bz2/xz/zst).")
    ] = False,
    transform: Annotated[Optional[str], typer.Option(
        "--transform", metavar="T,...", help="With --vectors: a row after each of these transforms, applied in "
        "order: scale-sqrt-d, xavier-std, pos-enc, pos-enc-scaled (as nb analogy).")] = None,
    positions: Annotated[Literal["index", "random"], typer.Option(
        "--row-positions", help="Positions of the rows for pos-enc: index (row i at i) or random (seeded by --seed, "
        "in [0, --max-position)).")] = "index",
    max_len: Annotated[int, typer.Option(
        "--max-position", min=1, help="Length of the positional table that random positions are drawn from.")] = 5000,
    limit: Annotated[Optional[int], typer.Option(
        "--limit", min=1, metavar="N", help="With --vectors: read only the first N rows.")] = None,
    vocabulary: Annotated[Optional[Path], typer.Option(
        "--vocabulary", metavar="FILE", help="With --vectors: keep only these words (the first field of each "
        "line; table 6's rows are the 5893 Multi30k words).")] = None,
    unicode_errors: UnicodeErrorsOption = None,
    tensor: Annotated[Optional[str], typer.Option(
        "--tensor", metavar="NAME", help="Report this [V, D] tensor (and initialise from it) instead of the "
        "roles (a bare pretrained embedding file, e.g. GloVe saved as safetensors).")] = None,
    inits: Annotated[Optional[str], typer.Option(
        "--inits", metavar="LIST|all",
        help="Comma-separated initialisations of the source to add as rows: xavier, pretrained, "
        "pretrained-xavier, xavier-pretrained, pretrained-shuffled, or all.")] = None,
    seed: Annotated[int, seed_option("Seed of the Xavier draw, the shuffle and random positions")] = 0,
    shuffle_mode: Annotated[Literal["rows", "rows-columns", "elements"], shuffle_mode_option()] = "rows",
    arch: ArchOption = "auto",
    mapping: RoleMapOption = None,
    plot: Annotated[Optional[Path], typer.Option(
        "--plot", metavar="FIG", help="Also draw the table into FIG: .pdf, .svg or .png (ranges and mean ± σ, "
        "raw and × √D; needs matplotlib: pip install 'nbcli[plot]').")] = None,
    dpi: DpiOption = 200,
    figsize: FigsizeOption = None,
    title: TitleOption = None,
    csv: CsvOption = None,
    tsv: TsvOption = None,
    threads: ThreadsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print embedding statistics as paper 002 tabulates them (tables 2, 6, 8): range, mean and σ, raw and scaled by sqrt(D), for a checkpoint's embeddings and, with --inits, for each of nb's initialisations of them."""  # noqa: E501
    from nbcli.analysis.embedding_stats import INITIALISATIONS, embedding_stats_report
    from nbcli.cli.console import check_table_targets, print_report
    from nbcli.outputs import model_inputs
    from nbcli.errors import ConfigError
    from nbcli.figure_style import figure_options

    chosen: tuple[str, ...] = ()
    if inits is not None:
        chosen = INITIALISATIONS if inits.strip() == "all" else tuple(p.strip() for p in inits.split(","))
        bad = [p for p in chosen if p not in INITIALISATIONS]
        if bad:
            raise ConfigError(f"--inits {inits!r}: unknown initialisation {bad[0]!r}; expected "
                              f"{', '.join(INITIALISATIONS)} or all")
    if not vectors and (transform is not None or limit is not None or vocabulary is not None
                        or unicode_errors is not None):
        raise ConfigError("--transform, --limit, --vocabulary and --unicode-errors apply to word vectors: add --vectors")
    looks = figure_options(dpi, figsize, title)
    check_table_targets(as_json, csv, tsv, [*model_inputs(checkpoint)])
    if plot is not None:
        _check_plot(plot, checkpoint, vectors)
    if vectors:
        from nbcli.analysis.embedding_stats import vectors_stats_report
        from nbcli.vectors.transforms import Positions, parse_transforms

        report = vectors_stats_report(checkpoint, transforms=parse_transforms(transform),
                                      positions=Positions(positions, max_len, seed), inits=chosen, seed=seed,
                                      shuffle_mode=shuffle_mode, limit=limit, vocabulary=vocabulary,
                                      unicode_errors=unicode_errors)
    else:
        report = embedding_stats_report(checkpoint, arch=arch, mapping=mapping or [], tensor=tensor, inits=chosen,
                                        seed=seed, shuffle_mode=shuffle_mode)
    if plot is not None:
        from nbcli import plots
        from nbcli.figure_style import model_label, provenance

        plots.plot_embedding_stats(plot, report["rows"], title=f"{model_label(report['checkpoint'])}: embedding "
                                   "statistics", metadata=provenance("embedding-stats", checkpoint=report["checkpoint"]),
                                   options=looks)
        report["plot"] = str(plot)
    print_report(report, as_json, _render, csv=csv, tsv=tsv, table="rows")


def _check_plot(plot: Path, checkpoint: Path, vectors: bool) -> None:
    from nbcli.checkpoint.reader import checkpoint_inputs
    from nbcli.plots import check_figure_outputs

    check_figure_outputs("--plot", [plot], [checkpoint] if vectors else checkpoint_inputs(checkpoint))


def _columns(prefix: str) -> tuple[Col, ...]:
    return (Col("embedding", TEXT, key("label")),
            *(Col(name, NUM, key(prefix + k)) for name, k in (("min", "min"), ("max", "max"), ("mean", "mean"), ("σ", "std"))))


STORED_COLUMNS, SCALED_COLUMNS = _columns(""), _columns("scaled.")


def _render(report: dict[str, Any]) -> None:
    from nbcli.cli.console import esc, stdout_console

    console = stdout_console()
    tied = "" if report["tied"] is None else " (tied: the output weight is the input embedding)" if report["tied"] else ""
    console.print(f"[bold]{esc(report['checkpoint'])}[/] ({esc(report['architecture'] or 'tensor given')}){tied}")
    rows = {row["role"]: row["tensor"] for row in report["rows"] if row["initialisation"] is None}
    console.print("tensors: " + ", ".join(f"{role}={esc(name)}" for role, name in rows.items())
                  + (f"; initialisations of {esc(report['source'])}" if report["initialisations"] else "")
                  + f"; D = {num(report['rows'][0]['shape'][1])}")
    print_rows("as stored (paper 002 tables 2, 8)", STORED_COLUMNS, report["rows"], "no embedding")
    print_rows(f"scaled by √D = {num(report['rows'][0]['scale'])} (paper 002 table 6)", SCALED_COLUMNS, report["rows"],
               "no embedding")
    if report.get("plot"):
        console.print(f"wrote {esc(report['plot'])}")


def register(app: typer.Typer) -> None:
    app.command("embedding-stats", epilog=EPILOG, cls=NbCommand)(embedding_stats)
