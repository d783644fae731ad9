"""How results are printed for a person (stdout): the one number format and the one table printer of
every command. No computation happens here.

- `num`: every number in a table or a sentence: integers with thousands separators; other numbers
  with `SIG` significant digits, in scientific notation (`6.2742e10`, `1.0000e-5`) when very large
  or very small (|x| >= 1e6 or < 1e-4); None is `-`.
- `table` + `print_table`: columns are numbers (`NUM`: right-aligned, never wrapped), keys (`KEY`:
  short labels such as an arm or a bin, never wrapped) or text (`TEXT`: names and paths, folded
  when the width is short). A number is never cut or wrapped, whatever the width: on a terminal the
  text columns fold first and, if the numbers still do not fit, the table is printed wider than
  the terminal; through a pipe or into a file (no terminal) the table is printed at its natural
  width, with no wrapping at all (COLUMNS does not shrink it).
- `print_rows`: a table of rows, or one sentence when there are none (never an empty table).
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nbcli.cli.console import esc, stdout_console

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

NUM, KEY, TEXT = "num", "key", "text"
SIG = 5
"""Significant digits of a non-integer number (0.90005 stays 0.90005)."""


def num(value: Any, sig: int = SIG) -> str:
    """One number as every table and sentence prints it (the module docstring); `-` for None."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) or (hasattr(value, "dtype") and getattr(value.dtype, "kind", "") in "iu"):
        return f"{int(value):,}"
    x = float(value)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "0"
    exponent = math.floor(math.log10(abs(x)))
    if abs(float(f"{x:.{sig - 1}e}")) >= 1e6:  # 999999.7 rounds to 1.0000e6
        exponent = max(exponent, 6)
    if exponent >= 6 or exponent < -4:
        mantissa, _, power = f"{x:.{sig - 1}e}".partition("e")
        return f"{mantissa}e{int(power)}"
    text = f"{x:.{max(sig - 1 - exponent, 0)}f}"
    rounded = float(text)
    if rounded != 0 and math.floor(math.log10(abs(rounded))) != exponent:  # 9.99996 -> 10.0000: one digit less
        text = f"{x:.{max(sig - 2 - exponent, 0)}f}"
    return text


def percent(fraction: float | None) -> str:
    """A share as a percentage (0.1234 -> `12.34 %`), `-` for None."""
    return "-" if fraction is None else f"{num(100 * fraction, 4)} %"


def table(title: str | None, columns: Sequence[tuple[str, str]], *, header: bool = True) -> Table:
    """A table with `columns` (header, kind): NUM right-aligned and never wrapped, KEY never wrapped,
    TEXT folded when short of width (a path folds, a number does not)."""
    from rich.table import Table

    t = Table(title=title, title_justify="left", show_header=header)
    for name, kind in columns:
        if kind == NUM:
            t.add_column(name, justify="right", no_wrap=True)
        elif kind == KEY:
            t.add_column(name, justify="left", no_wrap=True)
        else:
            t.add_column(name, justify="left", overflow="fold")
    return t


def _padding(t: Table) -> int:
    left, right = t.padding[3], t.padding[1]
    return left + right


def needed_width(console: Console, t: Table) -> int:
    """The narrowest width at which no NUM or KEY cell is cut or wrapped: those columns at their full
    width, TEXT columns folded down to 8 characters, plus padding and borders."""
    from rich.measure import Measurement

    options = console.options.update_width(10**6)
    total = len(t.columns) + 1  # vertical rules (or the padding edge) between and around columns
    for column in t.columns:
        cells = [column.header, *column.cells]
        sizes = [Measurement.get(console, options, cell) for cell in cells]
        if column.no_wrap:
            width = max((m.maximum for m in sizes), default=1)
        else:  # folded text: at least its longest number, which must stay whole
            numbers = [len(n) for cell in cells for n in _NUMBER.findall(_plain(cell))]
            width = max(min(max((m.minimum for m in sizes), default=1), 8), *numbers, 1)
        total += width + _padding(t)
    return total


_NUMBER = re.compile(r"[-+]?\d[\d.,]*(?:e[-+]?\d+)?")


def _plain(cell: Any) -> str:
    from rich.text import Text

    if isinstance(cell, Text):
        return cell.plain
    return Text.from_markup(cell).plain if isinstance(cell, str) else ""


def natural_width(console: Console, t: Table) -> int:
    """The table's width when nothing in it wraps."""
    from rich.measure import Measurement

    return Measurement.get(console, console.options.update_width(10**6), t).maximum


@contextlib.contextmanager
def _width(console: Console, width: int) -> Iterator[None]:
    """Print at `width` for a moment (a table wider than the terminal rather than a number cut)."""
    kept = console.width
    console.width = width
    try:
        yield
    finally:
        console.width = kept


def print_table(t: Table, console: Console | None = None) -> None:
    """Print a table so that no number in it is cut or wrapped (the module docstring)."""
    console = console or stdout_console()
    width = console.width if console.is_terminal else natural_width(console, t)
    width = max(width, needed_width(console, t))
    with _width(console, width):
        console.print(t)


@dataclass(frozen=True)
class Col:
    """A column of a row table: its header, its kind (NUM, KEY, TEXT) and how a row gives its value;
    `show` turns the value into the cell (default: `num` for NUM, the text escaped otherwise)."""

    header: str
    kind: str
    value: Callable[[Any], Any]
    show: Callable[[Any], str] | None = None

    def cell(self, row: Any) -> str:
        value = self.value(row)
        if self.show is not None:
            return self.show(value)
        return num(value) if self.kind == NUM else esc("-" if value is None else value)


def key(name: str) -> Callable[[dict[str, Any]], Any]:
    """A row's value under `name` (dotted for nested dicts: `after.norm`)."""
    def get(row: dict[str, Any]) -> Any:
        value: Any = row
        for part in name.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return value
    return get


def print_rows(title: str, columns: Sequence[Col], rows: Sequence[Any], empty: str,
               console: Console | None = None, *, sections: Callable[[Any], bool] | None = None) -> None:
    """A table of `rows` in `columns`, or `title: empty` as one sentence when there are none (never
    an empty table). `sections(row)`: a rule after the rows for which it is true."""
    console = console or stdout_console()
    if not rows:
        console.print(f"[bold]{esc(title)}[/]: {esc(empty)}")
        return
    t = table(title, [(c.header, c.kind) for c in columns])
    for row in rows:
        t.add_row(*(c.cell(row) for c in columns), end_section=bool(sections and sections(row)))
    print_table(t, console)


def print_pairs(title: str, pairs: Sequence[tuple[str, ...]], empty: str, console: Console | None = None,
                note: bool = False, kind: str = NUM) -> None:
    """A two-column (or, with `note`, three-column) key-value table without a header, or a sentence
    when there is nothing to show. `pairs` hold markup-safe strings (esc() any data); the values are
    one number each (`kind` NUM) or TEXT whose numbers stay whole."""
    console = console or stdout_console()
    if not pairs:
        console.print(f"[bold]{esc(title)}[/]: {esc(empty)}")
        return
    columns = [("statistic", KEY), ("value", kind)] + ([("", TEXT)] if note else [])
    t = table(title, columns, header=False)
    t.columns[0].style = "bold"
    for pair in pairs:
        t.add_row(*pair)
    print_table(t, console)


def _marker_text(added: bool, token: dict[str, Any] | None) -> str:
    """`yes ([SEP], id 102)` / `no (</s>, id 2)` / `no (none in the vocabulary)`."""
    where = esc(f"({token['piece']}, id {token['id']})") if token else "(none in the vocabulary)"
    return f"{'yes' if added else 'no'} {where}"


#: The widest a note under a table is printed (its table keeps short values; the why is a note).
NOTE_WIDTH = 100


def print_notes(notes: Sequence[tuple[str, str]], console: Console | None = None) -> None:
    """`name: text` sentences under a table, wrapped at NOTE_WIDTH (the terminal's width when narrower)
    so a log file gets no 200-character line; text is data (escaped)."""
    import textwrap

    console = console or stdout_console()
    width = min(NOTE_WIDTH, console.width) if console.is_terminal else NOTE_WIDTH
    for name, text in notes:
        lines = textwrap.wrap(f"{name}: {text}", width, subsequent_indent="  ", break_on_hyphens=False)
        console.print(esc("\n".join(lines)), highlight=False)


def render_count_summary(report: dict[str, Any]) -> None:
    """count-unigrams' summary: a table of short values, why EOS is counted and how the corpus was
    encoded as notes under it, then the top pieces."""
    console = stdout_console()
    summary = table(f"unigram counts -> {esc(report['output'])}", [("", KEY), ("", TEXT)], header=False)
    summary.columns[0].style = "bold"
    rows = [
        ("tokens", num(report["tokens"])),
        ("documents", num(report["documents"])),
        ("bytes read", num(report["bytes_read"])),
        ("distinct types", f"{num(report['distinct_types'])} of {num(report['vocab_size'])} "
                           f"({percent(report['vocab_coverage'])} vocabulary coverage)"),
        ("unigram entropy", f"{num(report['entropy_nats'])} nats = {num(report['entropy_bits'])} bits"),
        ("EOS per document", _marker_text(report["eos"], report.get("eos_token"))),
        ("BOS per document", _marker_text(report["bos"], report.get("bos_token"))),
        ("method", f"{report['method']}, {report['workers']} worker(s)"),
        ("throughput", f"{num(report['mb_per_s'])} MB/s, {num(report['tokens_per_s'])} tokens/s "
                       f"({num(report['seconds'])} s)"),
    ]
    if report.get("tsv"):
        rows.append(("tsv", esc(report["tsv"])))
    for key, value in rows:
        summary.add_row(key, value)
    print_table(summary, console)
    notes = [("EOS", report["eos_reason"])] if report.get("eos_reason") else []
    notes.append(("method", report["method_reason"]))
    if report.get("tokenizer_adjustments"):
        notes.append(("tokenizer", "; ".join(report["tokenizer_adjustments"])
                      + " (counting needs every token, nothing added)"))
    print_notes(notes, console)
    print_rows("top 10 pieces", TOP_COLUMNS, list(enumerate(report["top"], 1)), "the corpus has no tokens", console)


#: count-unigrams' top pieces: (rank, entry) rows.
TOP_COLUMNS = (Col("rank", NUM, lambda r: r[0]), Col("id", NUM, lambda r: r[1]["id"]),
               Col("piece", TEXT, lambda r: repr(r[1]["piece"])), Col("count", NUM, lambda r: r[1]["count"]),
               Col("share", NUM, lambda r: r[1]["share"], percent))


def print_scalars(title: str, report: dict[str, Any]) -> None:
    """A report of plain data as (key, value) rows: its numbers and strings, nested objects skipped."""
    rows = [(esc(str(key)), esc(value if isinstance(value, str) else num(value))) for key, value in report.items()
            if value is None or isinstance(value, (int, float, str))]
    print_pairs(title, rows, "nothing to report", kind=TEXT)
