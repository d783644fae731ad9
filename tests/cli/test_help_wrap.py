"""Help paragraphs wrap correctly at every width nb allows (40 to 100 columns): nothing lost,
nothing reordered, no line over the width, and wrapped text filled (a line ends only where the
next word would not fit)."""

from __future__ import annotations

import re
from typing import Any

import typer.main
from hypothesis import given, settings
from hypothesis import strategies as st

from nbcli.cli import app
from nbcli.cli.base import _wrap, plain, render_help

ROOT = typer.main.get_command(app)
ROOT_CTX = ROOT.make_context("nb", [], resilient_parsing=True)
COMMANDS: list[tuple[Any, Any]] = [(ROOT, ROOT_CTX)] + [
    (command, command.make_context(name, [], parent=ROOT_CTX, resilient_parsing=True))
    for name, command in ROOT.commands.items()]
WIDTHS = st.integers(min_value=40, max_value=100)
MARKS = {"\\", "#"}  # added by the renderer: an example's continuation, a comment's own lines


def words(text: str) -> list[str]:
    return [word for word in plain(text).split() if word not in MARKS]


def paragraphs(command: Any) -> list[list[str]]:
    """Every help paragraph of `command` as its words, in the order help shows them."""
    found = [words(p) for p in re.split(r"\n\s*\n", command.help or "")]
    params = command.params
    for kind in ("argument", "option"):
        found += [words(p.help or "") for p in params if getattr(p, "param_type_name", "") == kind
                  and not getattr(p, "hidden", False)]
    found += [words(block) for block in re.split(r"\n\s*\n", command.epilog or "")]
    return [p for p in found if p]


def test_commands_are_all_covered() -> None:
    assert len(COMMANDS) == 1 + len(ROOT.commands) and len(COMMANDS) > 10


@settings(max_examples=40, deadline=None)
@given(width=WIDTHS)
def test_every_help_paragraph_keeps_its_words_in_order_within_the_width(width: int) -> None:
    for command, ctx in COMMANDS:
        text = render_help(command, ctx, width)
        for line in text.splitlines():
            if len(line) > width:  # only a word longer than its line may stand alone, whole, at column 0
                alone = line.removesuffix(" \\")
                assert " " not in alone and len(alone) > width - 2, (width, line)
        shown = words(text)
        position = 0
        for paragraph in paragraphs(command):
            found = next((i for i in range(position, len(shown) - len(paragraph) + 1)
                          if shown[i:i + len(paragraph)] == paragraph), None)
            assert found is not None, (ctx.command_path, width, " ".join(paragraph))
            position = found + len(paragraph)


def _blocks(text: str) -> list[list[str]]:
    return [block.splitlines() for block in re.split(r"\n\s*\n", text.rstrip("\n")) if block.strip()]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


@settings(max_examples=40, deadline=None)
@given(width=WIDTHS)
def test_epilog_text_is_filled_under_its_own_indent(width: int) -> None:
    """An epilog paragraph stays at its indent, and a line continuing an item (a paragraph's next
    line, a definition's hanging line) starts with a word that did not fit on the line before."""
    for command, ctx in COMMANDS:
        if not command.epilog:
            continue
        source = _blocks(plain(command.epilog))
        shown = _blocks(render_help(command, ctx, width))[-len(source):]
        for written, block in zip(source, shown):
            if re.match(r"\s*(nb|torchrun|zcat) ", written[0]):
                continue  # examples: continued with a backslash, checked above
            indent = _indent(written[0])
            gaps = {m.group(1).strip(): len(m.group(2)) for m in map(re.compile(r"( *\S.*?\S)( {2,})(?=\S)").match,
                                                                      written) if m}  # a term alone: its gap
            prose = all(_indent(line) == indent and not re.search(r"\S {2,}\S", line) for line in written)
            for before, line in zip(block, block[1:]):
                first_word = line.split()[0]
                if prose or _indent(line) > indent:
                    separator = gaps.get(before.strip(), 1)
                    assert len(before) + separator + len(first_word) > width, (ctx.command_path, width, before, line)
                if prose and len(first_word) <= width - indent:
                    assert _indent(line) == indent, (ctx.command_path, width, line)


def test_the_generate_paragraph_reported_garbled_at_80_columns() -> None:
    command = ROOT.commands["generate"]
    text = render_help(command, command.make_context("generate", [], parent=ROOT_CTX, resilient_parsing=True), 80)
    block = text.split("What it does", 1)[1].split("\n\n")[1].splitlines()
    assert all(line.startswith("  ") and not line.startswith("   ") for line in block), block
    assert " ".join(" ".join(block).split()).startswith("Prompts: the first --prompt-words words of each document")


@settings(max_examples=200, deadline=None)
@given(text=st.lists(st.text(alphabet="abcdefghij-/.", min_size=1, max_size=70), min_size=1, max_size=40),
       width=WIDTHS, indent=st.integers(0, 8), hang=st.integers(0, 20))
def test_wrap_is_greedy_keeps_words_and_the_width(text: list[str], width: int, indent: int, hang: int) -> None:
    lines = _wrap(" ".join(text), width, " " * indent, " " * hang)
    assert " ".join(lines).split() == text
    for i, line in enumerate(lines):
        assert len(line) <= width or line == line.strip() and " " not in line
        if i:
            assert len(lines[i - 1]) + 1 + len(line.split()[0]) > width
            start = hang if len(line.strip()) <= width - hang else max(0, width - len(line.strip()))
            assert _indent(line) == start


def test_usage_line_marks_repeated_arguments_once() -> None:
    """An argument taking several values reads `NAME...` in the usage line, never `NAME......`
    (a metavar that already ends in ... is not marked again)."""
    for command, ctx in COMMANDS:
        usage = render_help(command, ctx, 100).split("\n\n", 1)[0]
        assert "...." not in usage, usage
        for param in command.params:
            if getattr(param, "param_type_name", "") == "argument" and getattr(param, "nargs", 1) == -1:
                assert re.search(rf"\b{re.escape(str(param.metavar or param.name.upper()).rstrip('.'))}\.\.\.", usage)
