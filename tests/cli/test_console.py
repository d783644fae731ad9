"""Data reaching rich is printed as it is (console.esc) and errors stay on one line (base.one_line)."""

from __future__ import annotations

import io

from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console
from rich.table import Table

from nbcli.cli.base import one_line
from nbcli.cli.console import esc
from nbcli.errors import MAX_MESSAGE

MARKUPISH = st.lists(st.sampled_from(list("[]/\\ab:=#@ ") + ["[/]", "[bold]", "[/INST]", ":smile:", "\\["]),
                     max_size=8).map("".join)
TEMPLATES = ["{}", "[bold]{}[/]", "({})", "{}[dim]y[/dim]x", "{}{}", "{}]{}", "a: {}; b: [bold]{}[/]"]


def render(markup: str) -> str:
    buffer = io.StringIO()
    Console(file=buffer, highlight=False, soft_wrap=True, emoji=False, width=400).print(markup, end="")
    return buffer.getvalue()


@given(MARKUPISH, MARKUPISH, st.sampled_from(TEMPLATES))
def test_escaped_data_prints_exactly_in_any_template(a: str, b: str, template: str) -> None:
    plain = template.replace("[bold]", "").replace("[/]", "").replace("[dim]", "").replace("[/dim]", "")
    assert render(template.format(esc(a), esc(b))) == plain.format(a, b)


@given(MARKUPISH)
def test_escaped_data_prints_exactly_in_a_table_cell(a: str) -> None:
    table = Table(show_header=False, box=None, padding=0)
    table.add_column()
    table.add_row(esc(a))
    buffer = io.StringIO()
    Console(file=buffer, highlight=False, emoji=False, width=400).print(table)
    assert buffer.getvalue().rstrip("\n").rstrip(" ") == a.rstrip(" ")


@given(st.text())
def test_one_line_is_one_line_and_reversible_for_printables(text: str) -> None:
    line = one_line(text)
    assert len(line.splitlines()) <= 1 and line.isprintable()
    if text.isprintable() and len(text) <= MAX_MESSAGE:
        assert line == text


@given(st.text(alphabet=st.characters(max_codepoint=0x3000), min_size=MAX_MESSAGE // 4, max_size=4 * MAX_MESSAGE))
def test_one_line_is_bounded_once_escaped(text: str) -> None:
    """Escaping makes a control character 4 to 10 characters long: the line is cut after escaping, so a
    file of NUL bytes quoted in an error still gives a line of at most MAX_MESSAGE characters (+ the note)."""
    line = one_line("f.txt:1: " + text)
    assert line.startswith("f.txt:1: ") and len(line) <= MAX_MESSAGE + 40 and line.isprintable()


def test_hostile_names() -> None:
    assert one_line("a\nb.safetensors") == "a\\nb.safetensors"
    assert one_line("\x1b[31mred\u2028x\udcff") == "\\x1b[31mred\\u2028x\\udcff"
    assert render(esc("[/]x[bold].safetensors")) == "[/]x[bold].safetensors"
    assert render(esc(":smile: [/INST] a\\")) == ":smile: [/INST] a\\"
