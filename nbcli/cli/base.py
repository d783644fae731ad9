"""Command classes shared by every `nb` command: error mapping, a lean --help flag, and help text
that reads whole at any width.

Help is rendered here as plain text rather than by rich's panels, which at 80 columns cut option
names and help text with an ellipsis: each option on its own line (names and a metavar that says
what to give: a flag has none, a choice lists its values, a number is N or X), its help below,
indented and wrapped to the terminal (COLUMNS) width, clamped to 40-100 columns. Rich markup
tags in help strings ([bold], [/]) are removed; any other bracket ([plot], [default: ...]) stays.
Example lines of an epilog that do not fit are continued with a shell backslash, so they still
copy and paste.
"""

from __future__ import annotations

import os
import re
import shutil
import textwrap
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from nbcli.cli.coercion import install_fast_coercion
from nbcli.errors import Interrupted, NbError


# click's UsageError, from wherever this typer takes click (recent versions vendor it as typer._click).
_USAGE_ERRORS: tuple[type[Exception], ...] = tuple(
    cls for cls in typer.BadParameter.__mro__ if cls.__name__ == "UsageError")


def _lean_help_option(option: Any) -> Any:
    """Give the help flag a boolean default.

    typer coerces a flag whose value is not a bool through pydantic, so an absent --help (value None)
    imported pydantic (~0.1 s) on every invocation; with False it is skipped.
    """
    if option is not None and option.default is None:
        option.default = False
    return option


_MARKUP = re.compile(r"\[/?(?:bold|dim|italic|underline|yellow|red|green|cyan|magenta|blue)?\]")
_DISPLAY_METAVARS = {"int": "N", "int range": "N", "float": "X", "float range": "X", "path": "PATH",
                     "text": "TEXT", "str": "TEXT", "file": "FILE"}


def help_width() -> int:
    """The width help is wrapped to: $COLUMNS, else the terminal's, clamped to 40-100 columns."""
    try:
        width = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        width = shutil.get_terminal_size((80, 24)).columns
    return max(40, min(width, 100))


def plain(text: str) -> str:
    """`text` without rich markup tags ([bold], [/bold], [/], [dim]...); other brackets are kept,
    and rich's escaped bracket (\\[) is shown as the bracket."""
    return _MARKUP.sub("", text).replace("\\[", "[")


def _paragraphs(text: str, width: int, indent: str) -> list[str]:
    """Blank-line separated paragraphs, each reflowed to `width` with `indent`."""
    lines: list[str] = []
    for paragraph in re.split(r"\n\s*\n", plain(text).strip()):
        joined = " ".join(part.strip() for part in paragraph.splitlines())
        lines += textwrap.wrap(joined, width, initial_indent=indent, subsequent_indent=indent,
                               break_on_hyphens=False, break_long_words=False) + [""]
    return lines[:-1] if lines else []


def _metavar(param: Any, ctx: Any) -> str:
    """What to type after the option: its declared metavar, a choice's values, N, X, PATH ..."""
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return ""
    if param.metavar:
        return str(param.metavar)
    shown = str(param.display_type(ctx)).strip("<>")
    inner = re.fullmatch(r"list\[(.*)\]", shown)
    shown = inner.group(1).lower() if inner else shown
    return _DISPLAY_METAVARS.get(shown, shown if "|" in shown else shown.upper())


def _extras(param: Any) -> str:
    """[default: ...], [required], [at least N] as words, never Python types."""
    notes = []
    low, high = getattr(param, "min", None), getattr(param, "max", None)
    if low is not None and high is not None:
        notes.append(f"{low} to {high}")
    elif low is not None:
        notes.append(f"at least {low}")
    elif high is not None:
        notes.append(f"at most {high}")
    default = param.default
    if getattr(param, "required", False):
        notes.append("required")
    elif param.show_default and default is not None and default is not False and default != []:
        if getattr(param, "secondary_opts", None) and isinstance(default, bool):
            default = param.opts[0] if default else param.secondary_opts[0]
        notes.append(f"default: {default}")
    return " ".join(f"[{note}]" for note in notes)


def _wrap_example(line: str, width: int) -> list[str]:
    """A command line longer than `width`, continued with ` \\` so it still pastes into a shell."""
    indent = line[: len(line) - len(line.lstrip())]
    out: list[str] = []
    current = line.rstrip()
    while len(current) > width:
        cut = current.rfind(" ", len(indent) + 4, width - 2)
        if cut <= 0:
            break
        out.append(current[:cut] + " \\")
        current = indent + "    " + current[cut + 1:]
    return out + [current]


_EXAMPLE = re.compile(r"\s*(nb|torchrun|python3?|pip|zcat|cat|dask|sh) ")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _epilog(text: str, width: int) -> list[str]:
    """Preformatted epilog lines kept as written where they fit; an item (a line and the more
    indented lines that continue it) that does not fit is reflowed with a hanging indent, and a
    command line is continued with a backslash."""
    lines: list[str] = []
    raw = plain(text).splitlines()
    i = 0
    while i < len(raw):
        item = [raw[i]]
        i += 1
        while (i < len(raw) and raw[i].strip() and item[0].strip() and not _EXAMPLE.match(item[0])
               and (_indent(raw[i]) > _indent(item[0]) or _indent(item[0]) == 0)):
            item.append(raw[i])
            i += 1
        if all(len(line) <= width for line in item):
            lines += item
        elif _EXAMPLE.match(item[0]):
            lines += _wrap_example(item[0], width) + item[1:]
        else:
            first = " " * _indent(item[0])
            rest = " " * (_indent(item[1]) if len(item) > 1 else _indent(item[0]) + 4 if _indent(item[0]) else 0)
            lines += textwrap.wrap(" ".join(line.strip() for line in item), width, initial_indent=first,
                                   subsequent_indent=rest, break_on_hyphens=False, break_long_words=False)
    return lines


def render_help(command: Any, ctx: Any, width: int | None = None) -> str:
    """The whole help of `command` as plain text wrapped to `width` (see the module docstring)."""
    width = width or help_width()
    params = command.get_params(ctx)
    pieces = " ".join(["[OPTIONS]"] + [
        (p.metavar or p.name.upper()) + ("..." if getattr(p, "nargs", 1) == -1 else "")
        for p in params if getattr(p, "param_type_name", "") == "argument"]
        + (["COMMAND [ARGS]..."] if getattr(command, "commands", None) else []))
    usage = textwrap.wrap(f"{ctx.command_path} {pieces}", width - 7, subsequent_indent="  ",
                          break_on_hyphens=False, break_long_words=False)
    lines = [f"Usage: {usage[0]}", *[f"       {rest}" for rest in usage[1:]], ""]
    if command.help:
        lines += _paragraphs(command.help, width, "  ") + [""]
    arguments = [p for p in params if getattr(p, "param_type_name", "") == "argument"]
    options = [p for p in params if getattr(p, "param_type_name", "") == "option"
               and not getattr(p, "hidden", False)]
    if arguments:
        lines.append("Arguments:")
        for param in arguments:
            lines.append(f"  {param.metavar or param.name.upper()}")
            text = " ".join(x for x in (plain(getattr(param, "help", None) or ""), _extras(param)) if x)
            lines += _paragraphs(text, width, "      ") if text else []
        lines.append("")
    if options:
        lines.append("Options:")
        for param in options:
            names = ", ".join(sorted(param.opts, key=len) if len(param.opts) > 1 else param.opts)
            if getattr(param, "secondary_opts", None):
                names += " / " + ", ".join(param.secondary_opts)
            metavar = _metavar(param, ctx)
            head = f"  {names}" + (f" {metavar}" if metavar else "")
            lines += textwrap.wrap(head, width, subsequent_indent="      ", break_on_hyphens=False,
                                   break_long_words=False) or [head]
            text = " ".join(x for x in (plain(getattr(param, "help", None) or ""), _extras(param)) if x)
            lines += _paragraphs(text, width, "      ") if text else []
        lines.append("")
    commands = getattr(command, "commands", None)
    if commands:
        lines.append("Commands:")
        for name in command.list_commands(ctx):
            sub = commands[name]
            if getattr(sub, "hidden", False):
                continue
            summary = plain((sub.short_help or sub.help or "").strip().split("\n\n")[0])
            summary = " ".join(summary.split())
            lines.append(f"  {name}")
            lines += textwrap.wrap(summary, width, initial_indent="      ", subsequent_indent="      ",
                                   break_on_hyphens=False, break_long_words=False)
        lines.append("")
    if command.epilog:
        lines += _epilog(command.epilog, width) + [""]
    return "\n".join(lines).rstrip() + "\n"


class NbCommand(TyperCommand):
    """A leaf command (`nb count-unigrams`, ...), converting plain option values without pydantic
    (`nbcli.cli.coercion`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        install_fast_coercion(self)

    def get_help_option(self, ctx: Any) -> Any:
        return _lean_help_option(super().get_help_option(ctx))

    def format_help(self, ctx: Any, formatter: Any) -> None:
        formatter.write(render_help(self, ctx))


class NbGroup(TyperGroup):
    """Maps expected failures to one line on stderr: NbError -> exit 1, Ctrl-C -> exit 130."""

    def get_help_option(self, ctx: Any) -> Any:
        return _lean_help_option(super().get_help_option(ctx))

    def format_help(self, ctx: Any, formatter: Any) -> None:
        formatter.write(render_help(self, ctx))

    def invoke(self, ctx: Any) -> Any:
        from nbcli.atomic import take_notes

        take_notes()  # notes of an earlier in-process run (tests) are not this run's
        try:
            result = super().invoke(ctx)
            for note in take_notes():  # recovered commits, removed stale temporaries
                typer.echo(f"nb: note: {note}", err=True)
            return result
        except (KeyboardInterrupt, Interrupted):
            typer.echo("nb: interrupted; no output written", err=True)
            ctx.exit(130)
        except NbError as err:
            typer.echo(f"nb: error: {one_line(str(err))}", err=True)
            ctx.exit(1)
        except _USAGE_ERRORS as err:
            if type(err).__name__ == "NoArgsIsHelpError" or err.ctx is None:
                raise  # `nb CMD` alone prints its help
            command = err.ctx.command_path
            typer.echo(f"nb: error: {one_line(err.format_message())} (usage: {command} --help)", err=True)
            ctx.exit(err.exit_code)


def one_line(message: str) -> str:
    """`message` with every character that would break or hide part of the line escaped as in a
    Python literal: newlines and other control characters, Unicode line separators, format
    characters and lone surrogates (file names that are not UTF-8) become \\n, \\x1b, \\u2028, \\udcff.

    An error is exactly one line on stderr whatever the file names and data it quotes hold."""
    if message.isprintable():
        return message
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in message)
