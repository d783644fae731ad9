"""The text formats' rows (GloVe, word2vec -binary 0, fastText `.vec`): `word v1 ... vD` lines.

The LAST D fields are the vector and everything before them is the word, so GloVe 840B's few words
containing spaces (`. . .`, `at name@domain.com`) read whole. A line with another number of numbers
is an error, and so is a word with spaces whose last part is itself a number (a line with D + 1
numbers would otherwise pass as a word with a space). A blank line is an error (except after the
last); so are more or fewer rows than a header says. Errors name FILE:LINE (`nbcli.vectors.reader`).
"""

from __future__ import annotations

from nbcli.errors import InputError
from nbcli.vectors.rows import KeptRows, WordDecoder
from nbcli.vectors.stream import VectorStream


def all_numbers(fields: list[bytes]) -> bool:
    """Whether every field parses as a float."""
    try:
        for f in fields:
            float(f)
    except ValueError:
        return False
    return True


def _short(field: bytes) -> str:
    text = repr(field[:40].decode("utf-8", "backslashreplace"))
    return text + ("..." if len(field) > 40 else "")


def _text_row(line: bytes, dim: int, path: str, number: int, words: WordDecoder) -> tuple[str | None, list[float]]:
    """(word, values) of one text line: the last `dim` fields are the numbers, the rest the word (None:
    not UTF-8, refused by `words`)."""
    where = f"{path}:{number}"  # only for the messages: cheap next to parsing 300 numbers
    parts = line.rsplit(None, dim)
    if len(parts) != dim + 1 or not parts[0].strip():
        raise InputError(f"{where}: {max(len(line.split()) - 1, 0)} numbers, expected {dim} (the dimension of the "
                         "first row)")
    word_bytes = parts[0].strip()
    if len(word_bytes.split()) > 1 and all_numbers(word_bytes.split()[-1:]):
        raise InputError(f"{where}: {len(line.split()) - 1} numbers, expected {dim} (the dimension of the first row)")
    try:
        values = list(map(float, parts[1:]))
    except ValueError:
        bad = next(f for f in parts[1:] if not all_numbers([f]))
        raise InputError(f"{where}: {_short(bad)} is not a number") from None
    return words.decode(word_bytes, lambda: where), values


def read_text_rows(source: VectorStream, rows: KeptRows, dim: int, wanted: int | None, limit: int | None,
                   keep: set[str] | None, words: WordDecoder) -> int:
    """Read the remaining lines of `source` into `rows` (`wanted`: the header's N, None for GloVe);
    how many rows were parsed, kept or not."""
    read = 0
    path = source.path
    blank: int | None = None
    for line in source.lines():
        if wanted is not None and read == wanted:
            if line.strip():
                raise InputError(f"{path}:{source.line - 1}: more rows than the header's {wanted}")
            continue
        if not line.strip():
            blank = blank or source.line - 1
            continue
        if blank is not None:
            raise InputError(f"{path}:{blank}: blank line inside the word vectors")
        number = source.line - 1
        word, values = _text_row(line, dim, path, number, words)
        read += 1
        if word is not None and (keep is None or word in keep):
            rows.add(word, values, number)
            if limit is not None and len(rows.words) >= limit:
                break
    else:
        if wanted is not None and read < wanted:
            raise InputError(f"{path}:{source.line}: the file ends after {read} rows; its header says {wanted} "
                             "(truncated?)")
    return read
