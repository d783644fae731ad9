"""The one family of expected failures. The CLI prints `str(error)` on one line and exits 1.

Anything that is *not* an `NbError` is a bug and keeps its traceback.

An error quotes what it is about (a token, a header, a label) from files that may be hostile: a
4 KB token of NUL bytes, a megabyte line. `str(error)` is therefore at most MAX_MESSAGE characters
plus the note of the cut, under 40 (`shorten`: the middle is cut, the start that names FILE:LINE and the end that says what to do are
kept); the full text stays in `error.args[0]`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

MAX_MESSAGE = 1000
"""The longest error message, in characters (a line that still fits a few terminal rows)."""


def shorten(message: str, limit: int = MAX_MESSAGE) -> str:
    """`message` itself when it has at most `limit` characters, else its first 3/4 and its last 1/4
    of `limit` around a note of how many characters were cut (under 40 more characters)."""
    if len(message) <= limit:
        return message
    head, tail = limit * 3 // 4, limit // 4
    return f"{message[:head]} ... [{len(message) - head - tail:,} characters cut] ... {message[len(message) - tail:]}"


class NbError(Exception):
    """An expected failure caused by the user's input or environment (exit code 1); its text is
    at most MAX_MESSAGE characters and the note of the cut (module doc)."""

    def __str__(self) -> str:
        return shorten(super().__str__())


class InputError(NbError):
    """A missing, unreadable or malformed input file (corpus, tokenizer, counts)."""


class CorpusError(InputError):
    """A corpus line or file that cannot be read as asked (bad UTF-8 under --strict, bad JSON)."""


class TokenizerError(InputError):
    """A tokenizer file that is not a tokenizer nb can load."""


class CountsError(InputError):
    """A counts file of another format, or counts files that cannot be combined."""


class CheckpointError(InputError):
    """A checkpoint that is not a valid safetensors file, or lacks what an operation needs."""


class ConfigError(NbError):
    """Options that contradict each other or name impossible values."""


class OutputError(NbError):
    """An output that cannot be written (missing directory, no permission, disk full)."""


class TrainingDiverged(NbError):
    """`nb train` met a non-finite loss (NaN or inf) and stopped before applying it."""


class Interrupted(NbError):
    """The user pressed Ctrl-C; nothing was written."""


@contextlib.contextmanager
def naming(where: object) -> Iterator[None]:
    """Prefix an NbError raised inside with `where` (a file, tensor): pure functions say what is wrong,
    their callers say where. The error keeps its class."""
    try:
        yield
    except Interrupted:
        raise
    except NbError as err:
        raise type(err)(f"{where}: {err}") from None
