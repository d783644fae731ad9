"""The one family of expected failures. The CLI prints `str(error)` on one line and exits 1.

Anything that is *not* an `NbError` is a bug and keeps its traceback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class NbError(Exception):
    """An expected failure caused by the user's input or environment (exit code 1)."""


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
