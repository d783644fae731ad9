"""The one safe JSON reader: every JSON nb reads from a file goes through here.

`json.loads` on hostile input can raise RecursionError (deep nesting), ValueError (integers over
Python's 4300-digit limit), accept NaN/Infinity (not JSON), or return strings holding lone
surrogates that fail later when encoded. This module turns each of those into one short message
and the caller's error class (an `NbError`) naming the file, and the line for JSONL:

    load_file(path, error=CheckpointError, what="index")      a whole JSON file (size cap, UTF-8 BOM ok)
    load_bytes(data, where, error=..., what=...)              the same for bytes already read
    parse(text)                                               -> value; raises JsonProblem (one line)
    check_text(s)                                             -> None or a problem (lone surrogate)
    jsonl_field(line, field)                                  -> (document, None) or (None, problem)
    metadata_object(metadata, key, where, error)              a JSON-object metadata value (nb.config)
    metadata_count(metadata, key, where, error)               a non-negative integer metadata value
    json_ready(value)                                         -> plain JSON data (what --json prints)

`JsonProblem` is a ValueError whose message is one line without the file name; JSONL readers
add "FILE:LINE: " themselves.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nbcli.errors import InputError, NbError

MAX_DEPTH = 64
"""Deepest nesting accepted (tokenizer.json, headers, indexes and nb's own files use < 10)."""

MAX_JSON_BYTES = 256 * 1024 * 1024
"""Largest JSON file read into memory (the largest real tokenizer.json files are ~20 MB)."""

MAX_INT_DIGITS = 30
"""Longest integer literal accepted: offsets, shapes and counts fit in 20 digits (2^64)."""

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]", re.ASCII)
_SURROGATE_CODE = re.compile(r"\\u([dD][89a-fA-F][0-9a-fA-F]{2})", re.ASCII)
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_WALK_BYTES = 1 << 16  # larger texts are checked on their bytes with numpy (`_TextFacts`)


class JsonProblem(ValueError):
    """Why a JSON text was refused, as one line without the file name."""


class DuplicateKey(JsonProblem):
    """An object names one key twice: json.loads keeps the last value, another reader may keep the
    first (refused where nb reads names that must mean one thing: safetensors headers, indexes)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"names {key!r} twice (a duplicate JSON key): ambiguous, refused")
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


def _parse_int(literal: str) -> int:
    digits = len(literal.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise JsonProblem(f"integer of {digits} digits (more than {MAX_INT_DIGITS})")
    return int(literal)


def _parse_float(literal: str) -> float:
    if len(literal) > 400:
        raise JsonProblem(f"number literal of {len(literal)} characters")
    return float(literal)


def _no_constant(name: str) -> Any:
    raise JsonProblem(f"{name} is not a JSON value")


def _nan_constant(name: str) -> float:
    return float(name.replace("Infinity", "inf"))


def _depth_and_strings(value: Any, max_depth: int, strings: bool) -> None:
    """Raise JsonProblem if `value` nests deeper than `max_depth` or (when `strings`) holds a string
    with a lone surrogate. Iterative: no recursion however deep the value is."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.items()
        elif isinstance(node, list):
            children = ((None, v) for v in node)
        else:
            if strings and isinstance(node, str):
                _check_str(node)
            continue
        if depth + 1 > max_depth:
            raise JsonProblem(f"nested more than {max_depth} levels deep")
        for key, child in children:
            if strings and isinstance(key, str):
                _check_str(key)
            if isinstance(child, (dict, list)) or (strings and isinstance(child, str)):
                stack.append((child, depth + 1))


class _TextFacts:
    """Facts of a valid JSON text read off its UTF-8 bytes with numpy, where walking a parsed
    tokenizer.json (10^5-10^6 strings and numbers) takes seconds:

    * nesting: the most brackets open at once outside strings (a string's quotes are the b'"' not
      escaped, i.e. not after an odd run of backslashes; bytes of multi-byte UTF-8 are never ASCII),
      the text's own depth: a deeper value that a duplicate key dropped from the parse still counts;
    * the longest run of digits, and of bytes that may form a number (0-9 . e E + -): no integer
      literal is longer than the first, no number literal than the second;
    * whether a \\u escape leaves a lone UTF-16 surrogate in a string or key (json.loads joins a high
      one followed at once by a low one into one character; raw surrogates cannot come from UTF-8).
    """

    def __init__(self, text: str) -> None:
        import numpy as np

        raw = np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)
        self.longest_digits = _longest_run((raw >= 0x30) & (raw <= 0x39))
        self.longest_number = _longest_run(((raw >= 0x30) & (raw <= 0x39)) | (raw == 0x2E) | (raw == 0x65)
                                           | (raw == 0x45) | (raw == 0x2B) | (raw == 0x2D))
        quotes = np.flatnonzero(raw == 0x22)
        runs = _runs(raw == 0x5C)  # backslash runs (starts, ends)
        after_run = np.searchsorted(runs[1], quotes)  # the first run ending at or after each quote
        ends_here = after_run < runs[1].shape[0]
        escaped = np.zeros(quotes.shape[0], dtype=bool)
        run = after_run[ends_here]
        escaped[ends_here] = (runs[1][run] == quotes[ends_here]) & ((runs[1][run] - runs[0][run]) % 2 == 1)
        delimiters = quotes[~escaped]
        brackets = np.flatnonzero((raw == 0x5B) | (raw == 0x5D) | (raw == 0x7B) | (raw == 0x7D))
        outside = brackets[np.searchsorted(delimiters, brackets) % 2 == 0]
        steps = np.where((raw[outside] == 0x5B) | (raw[outside] == 0x7B), 1, -1)
        self.nesting = int(np.cumsum(steps).max()) if steps.size else 0
        self.lone_surrogate = _SURROGATE_ESCAPE.search(text) is not None and _lone_surrogate_escape(text)


def _runs(mask: Any) -> tuple[Any, Any]:
    """(starts, ends) of the runs of True in a bool array, ends exclusive."""
    import numpy as np

    edges = np.flatnonzero(np.diff(np.concatenate(([False], mask, [False])).view(np.int8)))
    return edges[0::2], edges[1::2]


def _longest_run(mask: Any) -> int:
    starts, ends = _runs(mask)
    return int((ends - starts).max()) if starts.size else 0


def _lone_surrogate_escape(text: str) -> bool:
    """Whether a \\u escape of `text` (valid JSON) leaves a lone surrogate (see `_TextFacts`)."""
    escapes = []
    for match in _SURROGATE_CODE.finditer(text):
        backslashes, at = 1, match.start() - 1
        while at >= 0 and text[at] == "\\":
            backslashes, at = backslashes + 1, at - 1
        if backslashes % 2:  # an escape, not a literal "\\u..." after an escaped backslash
            escapes.append((match.start(), int(match.group(1), 16)))
    paired = set()
    for index, (at, code) in enumerate(escapes):
        if code >= 0xDC00:
            if at not in paired:
                return True
            continue
        following = escapes[index + 1] if index + 1 < len(escapes) else None
        if following is None or following[0] != at + 6 or following[1] < 0xDC00:
            return True
        paired.add(following[0])
    return False


def _check_str(text: str) -> None:
    problem = check_text(text)
    if problem:
        raise JsonProblem(problem)


def check_text(text: str) -> str | None:
    """None, or why `text` (a parsed JSON string) cannot be used: a lone UTF-16 surrogate
    (`"\\ud800"`) decodes to a str that no UTF-8 encoder accepts."""
    match = _LONE_SURROGATE.search(text)
    if match is None:
        return None
    return f"string holds a lone surrogate U+{ord(match.group()):04X} (not Unicode text)"


def parse(text: str, *, max_depth: int = MAX_DEPTH, allow_nan: bool = False, walk: bool = True,
          unique_keys: bool = False) -> Any:
    """Parse one JSON text; JsonProblem (one line) for anything `json.loads` would accept unsafely
    or refuse with another exception. `walk=False` skips the depth and surrogate check of the
    parsed value (the caller checks the one string it uses; the parser's own recursion limit
    still applies). `unique_keys`: an object naming a key twice is DuplicateKey."""
    facts = _TextFacts(text) if walk and len(text) > _WALK_BYTES else None
    try:  # the literal hooks only where a literal could be long (a tokenizer.json holds ~10^5 numbers)
        long_int = facts is None or facts.longest_digits > MAX_INT_DIGITS
        long_number = facts is None or facts.longest_number > 400
        value = json.loads(text, parse_int=_parse_int if long_int else None,
                           parse_float=_parse_float if long_number else None,
                           parse_constant=_nan_constant if allow_nan else _no_constant,
                           object_pairs_hook=_unique_pairs if unique_keys else None)
    except JsonProblem:
        raise
    except RecursionError:
        raise JsonProblem(f"nested more than {max_depth} levels deep") from None
    except json.JSONDecodeError as err:
        raise JsonProblem(f"{err.msg} at line {err.lineno} column {err.colno}") from None
    except (ValueError, OverflowError, MemoryError) as err:
        raise JsonProblem(str(err).split(";")[0]) from None
    if not walk:
        return value
    if facts is not None and isinstance(value, (dict, list)):
        if facts.nesting > max_depth:
            raise JsonProblem(f"nested more than {max_depth} levels deep")
        if facts.lone_surrogate:  # the walk names the surrogate
            _depth_and_strings(value, max_depth, strings=True)
        return value
    if isinstance(value, (dict, list)):
        _depth_and_strings(value, max_depth, strings=_SURROGATE_ESCAPE.search(text) is not None)
    elif isinstance(value, str):
        _check_str(value)
    return value


def jsonl_field(line: str, field: str) -> tuple[str | None, str | None]:
    """The string `field` of one JSONL line: (text, None), or (None, why the line is unusable).

    A UTF-8 byte-order mark before the object is skipped (the first line of files saved by some
    editors). Other fields are parsed but not walked: only the document must be clean text.
    """
    try:
        record = parse(line.removeprefix("\ufeff"), walk=False)
    except JsonProblem as err:
        return None, f"not valid JSON ({err})"
    if not isinstance(record, dict):
        return None, "not a JSON object"
    if field not in record:
        return None, f"no field {field!r}"
    text = record[field]
    if not isinstance(text, str):
        return None, f"field {field!r} is {type(text).__name__}, not a string"
    problem = check_text(text)
    if problem is not None:
        return None, f"field {field!r}: {problem}"
    return text, None


def load_bytes(data: bytes, where: str | Path, *, error: type[NbError] = InputError, what: str = "JSON file",
               max_bytes: int = MAX_JSON_BYTES, max_depth: int = MAX_DEPTH, allow_nan: bool = False,
               bom: bool = True, unique_keys: bool = False) -> Any:
    """Decode (UTF-8; a leading BOM skipped when `bom`) and parse; `error` names `where`.
    `unique_keys`: refuse an object that names a key twice (see DuplicateKey)."""
    if len(data) > max_bytes:
        raise error(f"{where}: {what} of {len(data):,} bytes exceeds the {max_bytes:,}-byte limit")
    if bom and data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise error(f"{where}: {what} is not UTF-8 (byte {err.start})") from None
    try:
        return parse(text, max_depth=max_depth, allow_nan=allow_nan, unique_keys=unique_keys)
    except DuplicateKey as err:
        raise error(f"{where}: {what} {err}") from None
    except JsonProblem as err:
        raise error(f"{where}: {what} is not JSON: {err}") from None


def load_file(path: Path | str, *, error: type[NbError] = InputError, what: str = "JSON file",
              max_bytes: int = MAX_JSON_BYTES, allow_nan: bool = False) -> Any:
    """Read and parse a whole JSON file; FileNotFoundError is left to the caller (it knows what a
    missing file means), other OS errors become `error`."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
            if len(data) > max_bytes:
                size = max(os.fstat(handle.fileno()).st_size, len(data))
                raise error(f"{path}: {what} of {size:,} bytes exceeds the {max_bytes:,}-byte limit")
    except (FileNotFoundError, NotADirectoryError):
        raise
    except IsADirectoryError:
        raise error(f"{path}: {what} is a directory") from None
    except OSError as err:
        raise error(f"{path}: cannot read {what}: {err.strerror or err}") from None
    return load_bytes(data, path, error=error, what=what, max_bytes=max_bytes, allow_nan=allow_nan)


def metadata_object(metadata: Mapping[str, str], key: str, where: str | Path, *,
                    error: type[NbError] = InputError) -> dict[str, Any] | None:
    """The metadata value `key` parsed as a JSON object, None when absent."""
    raw = metadata.get(key)
    if raw is None:
        return None
    try:
        value = parse(raw)
    except JsonProblem as err:
        raise error(f"{where}: metadata {key} is not valid JSON: {err}") from None
    if not isinstance(value, dict):
        raise error(f"{where}: metadata {key} is a JSON {type(value).__name__}, expected an object")
    return value


def metadata_count(metadata: Mapping[str, str], key: str, where: str | Path, *,
                   error: type[NbError] = InputError, default: int | None = 0) -> int | None:
    """The metadata value `key` as a non-negative decimal integer (`default` when absent)."""
    raw = metadata.get(key)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit() and len(raw) <= MAX_INT_DIGITS):
        shown = raw if len(raw) <= 40 else raw[:40] + "..."
        raise error(f"{where}: metadata {key} is {shown!r}, expected a non-negative integer")
    return int(raw)


def json_ready(value: Any) -> Any:
    """`value` as plain JSON data, as `--json` prints it: NaN -> None, +-inf -> "inf"/"-inf" (strict
    JSON has neither), tuples -> lists, dict keys -> str, numpy/torch scalars -> Python numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        return json_ready(value.item())
    return value
