"""Word vectors as functions (paper 002 sec. 6): read GloVe/word2vec/fastText, the analogy test."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from nbcli.api.inputs import local_path, optional_path
from nbcli.api.reports import PathLike, Report
from nbcli.arguments import public

if TYPE_CHECKING:
    from nbcli.vectors.reader import WordVectors


@public
def read_vectors(path: PathLike, *, format: Literal["auto", "glove", "word2vec", "word2vec-binary"] = "auto",
                 limit: int | None = None, vocabulary: Sequence[str] | set[str] | None = None,
                 duplicates: Literal["error", "keep-first"] = "error",
                 unicode_errors: Literal["strict", "replace", "ignore", "backslashreplace"] | None = None,
                 ) -> WordVectors:
    """Word vectors as they ship (GloVe text, word2vec text/binary, fastText .vec; gzip, bzip2, xz, zstd),
    the format read from the content: `.words` and the float32 `.vectors` [N, D] in file order, the
    first `limit` rows kept, only `vocabulary`'s words when given; words that are not UTF-8 refused (None:
    "strict" for text, escaped in word2vec binary) or read by `unicode_errors`, as gensim's (docs/vectors.md;
    the reader of `nb analogy`)."""
    from nbcli.vectors.reader import read_vectors as read

    return read(local_path(path), format=format, limit=limit, vocabulary=vocabulary, duplicates=duplicates,
                unicode_errors=unicode_errors)


@public
def analogy(vectors: PathLike, questions: PathLike, *, transform: str | Sequence[str] | None = None,
            positions: Literal["index", "random"] = "index", max_len: int = 5000, seed: int = 0,
            restrict_vocab: int = 300000, case_sensitive: bool = False, limit: int | None = None,
            vocabulary: PathLike | None = None, duplicates: Literal["error", "keep-first"] = "error",
            unicode_errors: Literal["strict", "replace", "ignore", "backslashreplace"] | None = None) -> Report:
    """The word-analogy test (`nb analogy`; paper 002 sec. 6, table 4): 3CosAdd per `: section` and
    overall, scored as gensim's evaluate_word_analogies with its defaults, after `transform`
    ("scale-sqrt-d", "xavier-std", "pos-enc", "pos-enc-scaled", applied in order); `vocabulary`: a
    word-list file, the only words kept."""
    from nbcli.vectors.analogy import analogy_report
    from nbcli.vectors.transforms import Positions, parse_transforms

    chain = parse_transforms(transform if transform is None or isinstance(transform, str) else ",".join(transform))
    return Report(analogy_report(local_path(vectors), local_path(questions), transforms=chain,
                                 positions=Positions(positions, max_len, seed), case_sensitive=case_sensitive,
                                 restrict_vocab=restrict_vocab, limit=limit, duplicates=duplicates,
                                 vocabulary=optional_path(vocabulary), unicode_errors=unicode_errors))

