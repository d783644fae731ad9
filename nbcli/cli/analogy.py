"""`nb analogy`: the word-analogy test (3CosAdd) on word vectors or a checkpoint's embedding, after
paper 002 table 4's transforms."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import typer

from nbcli.cli.base import NbCommand
from nbcli.cli.options import (
    CsvOption, JsonOption, ThreadsOption, TsvOption, UnicodeErrorsOption, on_threads, seed_option,
)
from nbcli.cli.render import NUM, TEXT, Col, key, num, percent, print_rows

EPILOG = """\
[bold]Scoring[/] (Mikolov et al. 2013; paper 002 sec. 6, table 4), as gensim's
KeyedVectors.evaluate_word_analogies with its defaults, so the accuracies are equal:
  answer = argmax cos(v, b̂ + ĉ − â) over the first --restrict-vocab rows (300000), the three question
  words (and their case variants) excluded; words compared after str.upper() unless --case-sensitive
  (a word with several case variants takes the first row); a question counts as applicable when its
  four words are among those rows; lines without four words are skipped (a warning says how many).
  accuracy = correct / applicable, per `: section` and overall.

[bold]Vectors[/]: GloVe text (no header), word2vec text or binary (`N D` header), fastText .vec;
gzip/bzip2/xz/zstd; the format and compression are read from the content (docs/vectors.md).

[bold]Transforms[/] (--transform, applied in the order given to all rows read; table 4's rows):
  scale-sqrt-d     × √D
  xavier-std       eq. 1: mean 0, σ = sqrt(2/(N+D)), N the rows kept (--limit, --vocabulary)
  pos-enc          + sinusoidal positional encoding (Vaswani) at each row's position (--row-positions)
  pos-enc-scaled   + the encoding × σp/σx (σp the matrix's σ, σx Xavier's)
--row-positions index puts row i at position i; random draws positions in [0, --max-position) with --seed
(paper 002 footnote 6).

[bold]Examples[/]

  nb analogy glove.6B.300d.txt --questions questions-words.txt
  nb analogy glove.6B.300d.txt --questions questions-words.txt --transform xavier-std,pos-enc --json
  nb analogy glove.840B.300d.txt.gz --questions questions-words.txt --vocabulary multi30k-words.txt \\
      --transform scale-sqrt-d,pos-enc --row-positions random
  nb analogy GoogleNews-vectors-negative300.bin.gz --questions questions-words.txt --limit 300000
  nb analogy runs/glove-words --questions questions-words.txt        # an nb run: its tokenizer.json's words
  nb analogy openai-community/gpt2 --questions questions-words.txt   # GPT-2's Ġword rows
"""


@on_threads
def analogy(
    vectors: Annotated[Path, typer.Argument(
        metavar="VECTORS", show_default=False,
        help="Word vectors: GloVe .txt, word2vec .txt/.bin, fastText .vec, optionally compressed (told by "
        "content). Or a checkpoint, model folder, Hub repo id or nb run directory: its input embedding's "
        "whole-word rows under -t (docs/vectors.md).")],
    questions: Annotated[Path, typer.Option(
        "--questions", metavar="FILE", show_default=False,
        help="Analogy questions in questions-words.txt format (`: section` lines, then `a b c d` lines).")],
    transform: Annotated[Optional[str], typer.Option(
        "--transform", metavar="T,...",
        help="Transforms applied in order before scoring: scale-sqrt-d, xavier-std, pos-enc, pos-enc-scaled.")] = None,
    positions: Annotated[Literal["index", "random"], typer.Option(
        "--row-positions", help="Positions of the rows for pos-enc: index (row i at i) or random (seeded, "
        "in [0, --max-position)).")] = "index",
    max_len: Annotated[int, typer.Option(
        "--max-position", min=1, help="Length of the positional table that random positions are drawn from.")] = 5000,
    seed: Annotated[int, seed_option("Seed of the random positions")] = 0,
    restrict_vocab: Annotated[int, typer.Option(
        "--restrict-vocab", min=0, help="Only the first N rows are candidates and count as present "
        "(gensim's default; 0: all rows).")] = 300000,
    case_sensitive: Annotated[bool, typer.Option(
        "--case-sensitive", help="Compare words as written (default: after str.upper(), as gensim).")] = False,
    limit: Annotated[Optional[int], typer.Option(
        "--limit", min=1, metavar="N", help="Read only the first N rows of the vectors.")] = None,
    vocabulary: Annotated[Optional[Path], typer.Option(
        "--vocabulary", metavar="FILE", help="Keep only these words (the first field of each line), e.g. a "
        "training set's vocabulary as paper 002 app. A.2 does (5893 Multi30k words).")] = None,
    tokenizer: Annotated[Optional[Path], typer.Option(
        "--tokenizer", "-t", metavar="TOK", show_default=False,
        help="A checkpoint's tokenizer (default: the tokenizer.json/tokenizer.model beside it): its whole-word "
        "pieces are the words (▁word, Ġword, WordPiece words without ##, every word-level piece).")] = None,
    duplicates: Annotated[Literal["error", "keep-first"], typer.Option(
        "--duplicates", help="A word twice in the vectors: an error naming both lines, or keep the first row.")
    ] = "error",
    unicode_errors: UnicodeErrorsOption = None,
    csv: CsvOption = None,
    tsv: TsvOption = None,
    threads: ThreadsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Score word vectors on the word-analogy test (3CosAdd, as gensim's evaluate_word_analogies) per section and overall, after paper 002 table 4's transforms."""  # noqa: E501
    from nbcli.cli.console import check_table_targets, print_report, print_warnings
    from nbcli.vectors.analogy import analogy_report
    from nbcli.vectors.transforms import Positions, parse_transforms

    check_table_targets(as_json, csv, tsv, [vectors, questions])
    chain = parse_transforms(transform)
    report = analogy_report(vectors, questions, transforms=chain, positions=Positions(positions, max_len, seed),
                            case_sensitive=case_sensitive, restrict_vocab=restrict_vocab, limit=limit,
                            duplicates=duplicates, vocabulary=vocabulary, tokenizer=tokenizer,
                            unicode_errors=unicode_errors)
    print_warnings(report["warnings"])
    print_report(report, as_json, _render, csv=csv, tsv=tsv, table="sections")


#: One row per `: section`, then the overall row.
COLUMNS = (Col("section", TEXT, key("section")), Col("correct", NUM, key("correct")),
           Col("applicable", NUM, key("applicable")), Col("total", NUM, key("total")),
           Col("accuracy", NUM, key("accuracy"), percent))


def _render(report: dict[str, Any]) -> None:
    from nbcli.cli.console import esc, stdout_console

    console = stdout_console()
    v = report["vectors"]
    console.print(f"[bold]{esc(v['path'])}[/] ({esc(v['format'])}{', ' + esc(v['compression']) if v['compression'] else ''}"
                  f"): {num(v['rows'])} words × {num(v['dim'])}; candidates: the first {num(report['candidates'])}; "
                  f"transforms: {esc(','.join(report['transforms']) or 'none')}")
    print_rows(f"3CosAdd on {report['questions']}", COLUMNS, [*report["sections"], report["overall"]],
               "no question")


def register(app: typer.Typer) -> None:
    app.command("analogy", epilog=EPILOG, cls=NbCommand)(analogy)
