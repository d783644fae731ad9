"""Write one matrix of word vectors in every shipped format (for the reader's and analogy's tests):
independent of nbcli's reader, written as word2vec.c, GloVe and fastText write them."""

from __future__ import annotations

import bz2
import gzip
from pathlib import Path

import numpy as np

FORMATS = ("glove", "word2vec", "vec", "word2vec-binary")


def text_lines(words: list[str], x: np.ndarray) -> list[bytes]:
    return [(w + " " + " ".join(repr(float(v)) for v in row)).encode("utf-8") for w, row in zip(words, x)]


def to_bytes(kind: str, words: list[str], x: np.ndarray) -> bytes:
    """The file content of `kind` (FORMATS): glove no header; word2vec text `N D` header; fastText
    .vec (header, trailing space on each line as fastText writes); word2vec.c binary records."""
    n, d = x.shape
    if kind == "glove":
        return b"\n".join(text_lines(words, x)) + b"\n"
    if kind == "word2vec":
        return f"{n} {d}\n".encode() + b"\n".join(text_lines(words, x)) + b"\n"
    if kind == "vec":
        return f"{n} {d}\n".encode() + b"".join(line + b" \n" for line in text_lines(words, x))
    if kind == "word2vec-binary":
        out = [f"{n} {d}\n".encode()]
        for w, row in zip(words, x):
            out.append(w.encode("utf-8") + b" " + np.asarray(row, dtype="<f4").tobytes() + b"\n")
        return b"".join(out)
    raise ValueError(kind)


def write(path: Path, kind: str, words: list[str], x: np.ndarray, compress: str | None = None) -> Path:
    data = to_bytes(kind, words, x)
    if compress == "gzip":
        data = gzip.compress(data)
    elif compress == "bz2":
        data = bz2.compress(data)
    path.write_bytes(data)
    return path


def random_vectors(n: int = 50, d: int = 7, seed: int = 0) -> tuple[list[str], np.ndarray]:
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(n - 3)] + ["Ünïcode", "naïve", "日本"]
    return words, rng.standard_normal((n, d)).astype(np.float32)
