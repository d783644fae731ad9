"""word2vec's binary records (`word2vec -binary 1`, GoogleNews-vectors-negative300.bin): after the
`N D` header line, N records `word<space>` + D little-endian float32 (+ an optional newline), as
word2vec.c writes them. Errors name FILE: record K (byte B) (`nbcli.vectors.reader`)."""

from __future__ import annotations

import numpy as np

from nbcli.errors import InputError
from nbcli.vectors.rows import KeptRows, WordDecoder
from nbcli.vectors.stream import VectorStream


def read_binary_records(source: VectorStream, rows: KeptRows, dim: int, wanted: int | None, limit: int | None,
                        keep: set[str] | None, words: WordDecoder) -> int:
    """Read the header's `wanted` records of `source` into `rows`; how many were parsed, kept or not
    (reading stops at the `limit`-th row kept)."""
    assert wanted is not None
    width = 4 * dim
    path = source.path
    for record in range(1, wanted + 1):
        start = source.offset
        raw = source.read_until_space()
        raw = b"" if raw is None else raw.lstrip(b"\n")
        data = source.read(width) if raw else b""
        where = f"{path}: record {record} (byte {start})" if not raw or len(data) < width else ""
        if not raw:
            raise InputError(f"{where}: the file ends after {record - 1} records; its header says {wanted} (truncated)")
        if len(data) < width:
            raise InputError(f"{where}: truncated: {len(data)} of the vector's {width} bytes")
        word = words.decode(raw, lambda: f"{path}: record {record} (byte {start})")
        if word is not None and (keep is None or word in keep):
            rows.add(word, np.frombuffer(data, dtype="<f4"), record)
            if limit is not None and len(rows.words) >= limit:
                return record
    return wanted
