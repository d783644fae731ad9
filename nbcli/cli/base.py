"""Command classes shared by every `nb` command: error mapping and a lean --help flag."""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

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


class NbCommand(TyperCommand):
    """A leaf command (`nb count-unigrams`, ...)."""

    def get_help_option(self, ctx: Any) -> Any:
        return _lean_help_option(super().get_help_option(ctx))


class NbGroup(TyperGroup):
    """Maps expected failures to one line on stderr: NbError -> exit 1, Ctrl-C -> exit 130."""

    def get_help_option(self, ctx: Any) -> Any:
        return _lean_help_option(super().get_help_option(ctx))

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
