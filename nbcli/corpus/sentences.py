"""Tagged sentences for tagging, under `records`' rules (its module doc, "CoNLL"): token-per-line
CoNLL text (`nbcli.corpus.conll`), or JSONL, parquet and Arrow records with a token list and a tag
list (the Hugging Face token-classification schema, integer tags named by `corpus.features`).

    iter_sentences(inputs, token_field=..., tag_field=...) -> Sentence(tokens, tags, origin)
    iter_conll(inputs)                                      -> Sentence, from CoNLL text only
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from nbcli.corpus.conll import Sentence, conll_sentences
from nbcli.corpus.features import source_class_names
from nbcli.corpus.rows import Column, Field, Origin, Progress, ReadStats, field_rows, numbered_lines
from nbcli.corpus.sources import CorpusSource, discover_inputs
from nbcli.errors import CorpusError
from nbcli.jsonsafe import check_text

__all__ = ["RECORD_FORMATS", "TAG_FIELD", "TOKEN_FIELD", "Sentence", "iter_conll", "iter_sentences"]


TOKEN_FIELD = "tokens"
TAG_FIELD = "ner_tags"
RECORD_FORMATS = ("jsonl", "parquet", "arrow")


def _conll_source(source: CorpusSource, token_column: int | None, tag_column: int | None, docstart: bool, strict: bool,
                  stats: ReadStats, progress: Progress | None) -> Iterator[Sentence]:
    if source.format not in ("text", "tsv"):
        what = "a CSV file" if source.format == "csv" else "JSON lines" if source.format == "jsonl" else \
            f"a {source.format} file"
        raise CorpusError(f"{source.path}: {what}, not token-per-line CoNLL text; tagged sentences come from CoNLL "
                          f"text, or from JSONL, parquet or Arrow records with a token list and a tag list "
                          f"({TOKEN_FIELD!r}, {TAG_FIELD!r})")
    yield from conll_sentences(source.path, numbered_lines(source, strict, stats, progress), token_column,
                               tag_column, docstart)


def iter_conll(inputs: Sequence[str], *, token_column: int | None = None, tag_column: int = -1,
               docstart: bool = True, strict: bool = False, stats: ReadStats | None = None,
               progress: Progress | None = None) -> Iterator[Sentence]:
    """CoNLL sentences of `inputs` (CoNLL-2003, WNUT, CoNLL-U, GermEval-2014; any name but .csv,
    .jsonl, .json, parquet and Arrow, read as lines; module doc "CoNLL"): `token_column` and
    `tag_column` (0-based; negative counts from the end) of every token line. `token_column=None`:
    column 0, refused when it numbers the tokens (CoNLL-U, GermEval). A file that is not
    token-per-line CoNLL is a CorpusError naming FILE:LINE (`nbcli.corpus.conll`)."""
    stats = stats if stats is not None else ReadStats()
    for source in discover_inputs(list(inputs)):
        yield from _conll_source(source, token_column, tag_column, docstart, strict, stats, progress)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _token_list(origin: Origin, name: str, value: Any) -> list[str]:
    if not isinstance(value, list):
        raise CorpusError(f"{origin}: field {name!r} is {_kind(value)}, not a list of tokens (tagging needs one "
                          "token per tag)")
    for index, token in enumerate(value):
        if not isinstance(token, str) or not token:
            raise CorpusError(f"{origin}: token {index} of {name!r} is {_kind(token) if token != '' else 'empty'}, "
                              "not a word")
        if (bad := check_text(token)) is not None:
            raise CorpusError(f"{origin}: token {index} of {name!r}: {bad}")
    return value


def _tag_list(origin: Origin, name: str, value: Any, names: Sequence[str] | None, whose: str) -> list[str]:
    """The tags of one record by name: strings as stored, integer ids through `names` (None: the
    integers name themselves)."""
    if not isinstance(value, list):
        raise CorpusError(f"{origin}: field {name!r} is {_kind(value)}, not a list of tags")
    tags = []
    for index, tag in enumerate(value):
        if isinstance(tag, int) and not isinstance(tag, bool):
            if tag < 0:
                raise CorpusError(f"{origin}: tag {index} of {name!r} is id {tag}, not a class id")
            if names is not None and tag >= len(names):
                raise CorpusError(f"{origin}: tag {index} of {name!r} is id {tag}, outside {whose} "
                                  f"({len(names)}: {', '.join(names[:6])}{', ...' if len(names) > 6 else ''})")
            tags.append(names[tag] if names is not None else str(tag))
        elif isinstance(tag, str) and tag and check_text(tag) is None:
            tags.append(tag)
        else:
            problem = "empty" if tag == "" else check_text(tag) if isinstance(tag, str) else _kind(tag)
            raise CorpusError(f"{origin}: tag {index} of {name!r} is {problem}, not a tag name or class id")
    return tags


def _record_sentences(source: CorpusSource, token_field: str, tag_field: str | None,
                      tag_names: Sequence[str] | None, strict: bool, stats: ReadStats,
                      progress: Progress | None) -> Iterator[Sentence]:
    fields: list[Field] = [(token_field,)] + ([(tag_field,)] if tag_field is not None else [])
    own = source_class_names(source, tag_field) if tag_field is not None else None
    names, whose = (own, "the file's ClassLabel names") if own is not None else (tag_names, "the tag names")
    for origin, values in field_rows(source, fields, None, strict, False, stats, progress):
        tokens = _token_list(origin, token_field, values[0])
        tags: list[str] = []
        if tag_field is not None:
            tags = _tag_list(origin, tag_field, values[1], names, whose)
            if len(tags) != len(tokens):
                raise CorpusError(f"{origin}: {len(tokens)} tokens ({token_field!r}) but {len(tags)} tags "
                                  f"({tag_field!r}); they must pair up")
        if tokens:
            yield Sentence(tuple(tokens), tuple(tags), origin)
        else:  # an empty sentence is no record; counted, so that a report says so
            stats.skipped_empty += 1


def iter_sentences(inputs: Sequence[str], *, token_field: Column | None = None, tag_field: Column | None = None,
                   tag_names: Sequence[str] | None = None, labelled: bool = True, docstart: bool = True,
                   strict: bool = False, stats: ReadStats | None = None,
                   progress: Progress | None = None) -> Iterator[Sentence]:
    """Tagged sentences of `inputs`, in order, by each file's format (`corpus_format`):

    - CoNLL text (any name but .csv, .jsonl/.json, parquet, Arrow; `iter_conll`): `token_field` and
      `tag_field` are 0-based column numbers (None: column 0, and the last column); a name is an
      error (CoNLL columns have none);
    - JSONL, parquet, Arrow, `datasets` folders (the Hugging Face token-classification schema):
      the token list `token_field` (None: "tokens") and the tag list `tag_field` (None:
      "ner_tags"), paired up one to one. String tags are names; integer ids are named by the
      file's ClassLabel feature (`corpus.features`), else by `tag_names` (--label-names, a run's
      tags), else name themselves ("3"). A row of unequal lists or an id outside the names is an
      error naming FILE:LINE (FILE: row N); a row with no tokens is no sentence (counted in
      `stats.skipped_empty`: reports warn, since predictions then skip that row).

    `labelled=False` (text to tag): records need no tag field and CoNLL lines no tag column (a file
    of one token a line is read); tags are not read, the sentences' `tags` are empty."""
    stats = stats if stats is not None else ReadStats()
    for source in discover_inputs(list(inputs)):
        if source.columnar or source.format in RECORD_FORMATS:
            for what, value in (("token", token_field), ("tag", tag_field)):
                if isinstance(value, int):
                    raise CorpusError(f"{source.path}: {what} field {value} is a CoNLL column number; records "
                                      "name their fields")
            yield from _record_sentences(source, str(token_field or TOKEN_FIELD),
                                         str(tag_field or TAG_FIELD) if labelled else None, tag_names, strict,
                                         stats, progress)
            continue
        for what, value in (("token", token_field), ("tag", tag_field)):
            if isinstance(value, str):
                raise CorpusError(f"{source.path}: CoNLL text has columns, not named fields: give the {what} "
                                  f"column's 0-based number, not {value!r} (names are for JSONL, parquet and "
                                  "Arrow records)")
        tag_column = None if not labelled else -1 if tag_field is None else tag_field
        yield from _conll_source(source, token_field, tag_column, docstart, strict, stats, progress)
