"""Command classes shared by every `nb` command: error mapping, a lean --help flag, and help text
that reads whole at any width.

Help is rendered here as plain text rather than by rich's panels, which at 80 columns cut option
names and help text with an ellipsis: each option on its own line (names and a metavar that says
what to give: a flag has none, a choice lists its values, a number is N or X), its help below,
indented and wrapped to the terminal (COLUMNS) width, clamped to 40-100 columns. Rich markup
tags in help strings ([bold], [/]) are removed; any other bracket ([plot], [default: ...]) stays.
An epilog is read as items: paragraphs (refilled at their own indent), `term  definition` lines
(hanging under the definition), and example command lines, which are continued with a shell
backslash where they do not fit, so they still copy and paste. Words are never cut: a word too
long for its indented line moves left, and one longer than the whole width stands alone on its line.
"""

from __future__ import annotations

import os
import re
import shutil
import textwrap
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from nbcli.cli.coercion import install_fast_coercion
from nbcli.errors import Interrupted, NbError, shorten


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


def _wrap(text: str, width: int, indent: str, hang: str | None = None) -> list[str]:
    """`text` filled greedily to `width`: the first line at `indent`, the others at `hang` (default:
    `indent`). Words are never broken; a word too long for its indented line moves left as far as it
    must, and one longer than `width` stands alone at column 0."""
    lines = textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent if hang is None else hang,
                          break_on_hyphens=False, break_long_words=False)
    return [line if len(line) <= width else line.strip().rjust(width) for line in lines]


def _paragraphs(text: str, width: int, indent: str) -> list[str]:
    """Blank-line separated paragraphs, each reflowed to `width` with `indent`."""
    lines: list[str] = []
    for paragraph in re.split(r"\n\s*\n", plain(text).strip()):
        lines += _wrap(" ".join(paragraph.split()), width, indent) + [""]
    return lines[:-1] if lines else []


def _shell_words(command: str) -> list[str]:
    """`command` split at the spaces outside quotes (the words stay as written, quotes included)."""
    words, current, quote, escaped = [], "", "", False
    for ch in command.strip():
        if escaped:
            current, escaped = current + ch, False
        elif ch == "\\" and quote != "'":
            current, escaped = current + ch, True
        elif quote:
            current += ch
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            current, quote = current + ch, ch
        elif ch == " ":
            words, current = words + [current] if current else words, ""
        else:
            current += ch
    return words + [current] if current else words


def _wrap_command(command: str, width: int, indent: str) -> list[str]:
    """A shell command line filled to `width`, each line but the last continued with ` \\` so the
    whole still pastes into a shell; a trailing `# comment` follows it, on lines of its own if need be."""
    words = _shell_words(command)
    comment = next((i for i, word in enumerate(words) if word.startswith("#")), len(words))
    words, remark = words[:comment], " ".join(words[comment:]).lstrip("#").strip()
    hang = indent + "    "
    lines: list[str] = []
    current = indent + words[0]
    for i, word in enumerate(words[1:], 2):
        room = width if i == len(words) else width - 2
        if len(current) + 1 + len(word) <= room:
            current += " " + word
            continue
        lines.append(current + " \\")
        current = hang + word if len(hang) + len(word) <= room else word.rjust(room)
    if remark and len(current) + 4 + len(remark) <= width:
        return lines + [f"{current}  # {remark}"]
    return lines + [current] + (_wrap(remark, width, hang + "# ", hang + "# ") if remark else [])


_EXAMPLE = re.compile(r"\s*(nb|torchrun|python3?|pip|zcat|cat|dask|sh) ")
_TERM_GAP = re.compile(r" *\S.*?(?<=\S)( {2,})(?=\S)")  # `  term   definition`: the gap after the term


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _epilog_items(text: str) -> list[tuple[str, list[str]]]:
    """The epilog's items, each ("blank" | "example" | "text", its source lines):

    - an example: a command line (nb, torchrun, zcat ...) with the lines its ` \\` continues;
    - a text item: a line and the lines that continue it: more indented lines (a definition's
      hanging lines), or lines at its own indent while neither holds a `term  definition` gap
      (a paragraph);
    - a blank line."""
    raw = plain(text).splitlines()
    items: list[tuple[str, list[str]]] = []
    i = 0
    while i < len(raw):
        first = raw[i]
        item = [first]
        i += 1
        if not first.strip():
            items.append(("blank", item))
            continue
        if _EXAMPLE.match(first):
            while item[-1].rstrip().endswith("\\") and i < len(raw):
                item.append(raw[i])
                i += 1
            items.append(("example", item))
            continue
        while i < len(raw) and raw[i].strip() and not _EXAMPLE.match(raw[i]) and (
                _indent(raw[i]) > _indent(first)
                or (_indent(raw[i]) == _indent(first) and _indent(item[-1]) == _indent(first)
                    and not _TERM_GAP.match(first) and not _TERM_GAP.match(raw[i]))):
            item.append(raw[i])
            i += 1
        items.append(("text", item))
    return items


def _epilog(text: str, width: int) -> list[str]:
    """Epilog lines filled to `width`: a paragraph keeps its indent, a `term  definition` item hangs
    under its definition (or under its continuation lines' indent), and an example line that does
    not fit is continued with a shell backslash."""
    lines: list[str] = []
    for kind, item in _epilog_items(text):
        first = " " * _indent(item[0])
        if kind == "blank":
            lines.append("")
        elif kind == "example":
            command = " ".join(line.strip().removesuffix("\\").strip() for line in item)
            fits = len(item) == 1 and len(item[0].rstrip()) <= width
            lines += [item[0].rstrip()] if fits else _wrap_command(command, width, first)
        else:
            gap = _TERM_GAP.match(item[0])
            if len(item) > 1:
                hang = " " * _indent(item[1])
            elif gap and gap.end() <= width // 2:
                hang = " " * gap.end()
            else:
                hang = first + "    " if gap else first
            head = item[0].strip()
            if gap:  # the term and its gap stay as written; the rest is one run of words
                term = item[0][len(first):gap.end()]
                head = term + " ".join(item[0][gap.end():].split())
            body = " ".join([head] + [" ".join(line.split()) for line in item[1:]])
            lines += _wrap(body, width, first, hang)
    return lines


def _argument_usage(param: Any) -> str:
    """An argument in the usage line: its metavar, with `...` when it takes several values (once:
    a metavar such as COUNTS... already says so)."""
    name = str(param.metavar or param.name.upper())
    many = getattr(param, "nargs", 1) == -1
    return name + "..." if many and not name.endswith("...") else name


def render_help(command: Any, ctx: Any, width: int | None = None) -> str:
    """The whole help of `command` as plain text wrapped to `width` (see the module docstring)."""
    width = width or help_width()
    params = command.get_params(ctx)
    pieces = " ".join(["[OPTIONS]"] + [
        _argument_usage(p) for p in params if getattr(p, "param_type_name", "") == "argument"]
        + (["COMMAND [ARGS]..."] if getattr(command, "commands", None) else []))
    lines = _wrap(f"{ctx.command_path} {pieces}", width, "Usage: ", " " * 9) + [""]
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
            lines += _wrap(head.strip(), width, "  ", "      ")
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
            lines += _wrap(summary, width, "      ")
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


def interrupted_message(kept: list[Path]) -> str:
    """The line of a Ctrl-C: no output written, or the outputs completed before it that stay (a run
    directory after its first saved state: `--resume` continues it)."""
    if not kept:
        return "nb: interrupted; no output written"
    kept = list(dict.fromkeys(kept))
    folders = list(dict.fromkeys(str(p.parent) for p in kept))
    names = ", ".join(p.name for p in kept[:4]) + (f" and {len(kept) - 4} more" if len(kept) > 4 else "")
    where = folders[0] if len(folders) == 1 else ", ".join(folders)
    resume = "; nb train --resume continues from its last saved state" if any(
        p.name == "train-state.json" for p in kept) else ""
    return one_line(f"nb: interrupted; kept what was completed before it in {where}: {names}{resume}")


class NbGroup(TyperGroup):
    """Maps expected failures to one line on stderr: NbError -> exit 1, Ctrl-C -> exit 130."""

    def get_help_option(self, ctx: Any) -> Any:
        return _lean_help_option(super().get_help_option(ctx))

    def format_help(self, ctx: Any, formatter: Any) -> None:
        formatter.write(render_help(self, ctx))

    def invoke(self, ctx: Any) -> Any:
        from nbcli.atomic import take_committed, take_notes

        take_notes()  # notes of an earlier in-process run (tests) are not this run's
        take_committed()
        try:
            result = super().invoke(ctx)
            for note in take_notes():  # recovered commits, removed stale temporaries
                typer.echo(f"nb: note: {note}", err=True)
            return result
        except (KeyboardInterrupt, Interrupted):
            typer.echo(interrupted_message([p for p in take_committed() if p.exists()]), err=True)
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

    An error is exactly one line on stderr whatever the file names and data it quotes hold, and at
    most `nbcli.errors.MAX_MESSAGE` characters once escaped (`shorten`)."""
    if message.isprintable():
        return shorten(message)
    return shorten("".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in message))
