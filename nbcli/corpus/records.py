"""THE reader for every command: documents, (source, target) pairs, labelled examples and CoNLL
sentences, from text, TSV/CSV, JSONL fields and parquet/Arrow columns, with one line rule, one format
rule and one error format.

    corpus_format(path, override=None)                  "text" | "jsonl" | "tsv" | "csv" | "parquet" | "arrow"
    iter_documents(inputs, format=None, field="text")   -> str, the documents `nb count-unigrams` counts
    read_documents(inputs, format=None, field="text")   -> list[str] (CorpusError when there are none)
    iter_pairs(inputs, "de", "en")                      -> Pair(source, target, origin)   translation
    iter_examples(inputs, text_field=..., label_field=...) -> Example(text, pair, label, origin)
    iter_conll(inputs)                                  -> Sentence(tokens, tags, origin)  tagging

Rules (docs/corpora.md):

- Format: by the file's name, `--format` (`format=`) overriding it for files that are not parquet or
  Arrow (`corpus_format`); a file whose first bytes are a parquet or Arrow file's is read as one.
- Lines: a line ends at LF or CR LF only; the ending is removed, nothing else is (`text.split_lines`:
  form feed, U+0085, U+2028 and lone CRs stay inside the line). Invalid UTF-8 is replaced by U+FFFD
  and the lines holding it counted in `ReadStats.bad_utf8_lines` (`strict=True`: an error).
- Documents: text, one per line; JSONL, the `field` of each object (blank lines skipped); TSV/CSV,
  the `field` column named by the header row; parquet/Arrow, the `field` column (nulls skipped and
  counted). An empty document is not a document; nothing else is dropped or changed (whitespace-only
  lines are documents, as `nb count-unigrams` counts them).
- Records of the other kinds: a blank line is no record; every other line (row) is one, with empty
  fields as they are. Benchmark inputs are never cleaned.
- TSV: one row per line (the line rule), fields split at TAB with quoting disabled, as GLUE's own
  reader does (MNLI and QQP hold unbalanced quote characters that a quoting reader would join across
  lines). CSV: Python's `csv` module (quotes, quoted line breaks), strict about malformed quoting.
  The first row names the columns (a UTF-8 byte-order mark before it is skipped); every row has as
  many fields as the first.
- Errors: one line, `FILE:LINE: problem` (parquet/Arrow: `FILE: row N: problem`; file-wide problems
  such as a missing column: `FILE: problem`), a `CorpusError`. `skip_bad_lines=True` skips and counts
  (`ReadStats.skipped_lines`) rows without a usable field instead.

Every record carries its `Origin` (`str(origin)` is `FILE:LINE`, or `FILE: row N`), so that a
consumer's own checks (an unknown label, a sentence too long) name the line too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from nbcli.corpus.columnar import BATCH_TEXT_BYTES, DocumentBatch, iter_rows
from nbcli.corpus.rows import (
    BAD_LINE_HINT, Column, Field, Origin, Progress, ReadStats, field_rows, line_blocks, numbered_lines, skip_or_raise,
)
from nbcli.corpus.sources import COMPRESSION_SUFFIXES, CorpusSource, corpus_format, discover_inputs
from nbcli.errors import CorpusError
from nbcli.jsonsafe import jsonl_field

__all__ = [
    "BAD_LINE_HINT", "Column", "Example", "Origin", "Pair", "ReadStats", "Sentence", "aligned_files", "corpus_format",
    "document_batches", "iter_conll", "iter_documents", "iter_examples", "iter_pairs", "jsonl_document",
    "read_documents", "source_documents",
]


@dataclass(frozen=True)
class Pair:
    """A translation pair: the source and target sentences as stored."""

    source: str
    target: str
    origin: Origin


Label = Union[str, int, float, None]


@dataclass(frozen=True)
class Example:
    """A classification example: `text`, the optional second text `pair` (NLI, paraphrase), and
    `label` as stored (TSV/CSV cells are str; JSON and parquet/Arrow values keep their type, int,
    float or str; None: no label field asked for, or a null, as in GLUE's unlabelled test splits)."""

    text: str
    pair: str | None
    label: Label
    origin: Origin


@dataclass(frozen=True)
class Sentence:
    """A CoNLL sentence: its tokens and their tags; `origin`: the line of its first token."""

    tokens: tuple[str, ...]
    tags: tuple[str, ...]
    origin: Origin


def jsonl_document(line: str, field: str) -> tuple[str | None, str | None]:
    """The document of one JSONL line: (text, None); (None, None) for a blank line (no record);
    (None, why) for a line that is not a JSON object with the string `field`."""
    if not line.strip():
        return None, None
    return jsonl_field(line, field)


# ---------------------------------------------------------------------------------------------
# Documents


def source_documents(source: CorpusSource, field: str = "text", *, strict: bool = False,
                     skip_bad_lines: bool = False, stats: ReadStats | None = None,
                     progress: Progress | None = None, hint: str = "") -> Iterator[str]:
    """The documents of one source (`discover_inputs`), read in its `format` (module doc); `hint`
    ends the error for a bad record."""
    stats = stats if stats is not None else ReadStats()
    if source.columnar:
        for text in iter_rows(source, field):
            if text is None:
                stats.skipped_nulls += 1
            elif text:
                yield text
        return
    if source.format == "text":
        for _first, lines in line_blocks(source, strict, stats, progress):
            yield from filter(None, lines)
        return
    if source.format == "jsonl":
        for first_line, lines in line_blocks(source, strict, stats, progress):
            for index, line in enumerate(lines):
                text, problem = jsonl_document(line, field)
                if problem is not None:
                    skip_or_raise(f"{source.path}:{first_line + index}", problem, skip_bad_lines, stats, hint)
                elif text:
                    yield text
        return
    for _origin, (text,) in field_rows(source, [(field,)], True, strict, skip_bad_lines, stats, progress, hint=hint):
        if text is None:
            stats.skipped_nulls += 1
        elif text:
            yield text


def iter_documents(inputs: Sequence[str], format: str | None = None, field: str = "text", *,
                   strict: bool = False, skip_bad_lines: bool = False, stats: ReadStats | None = None,
                   progress: Progress | None = None) -> Iterator[str]:
    """The documents of `inputs` (files, directories, globs, '-', URLs), in order: exactly the
    documents `nb count-unigrams` counts, for every format (module doc). `format` overrides the
    names of files that are not parquet or Arrow; `field`: the JSONL key, TSV/CSV header name or
    parquet/Arrow column holding the text; `strict`: invalid UTF-8 is an error; `stats` is filled
    with what was replaced or skipped; `progress(bytes)` follows line-based files."""
    stats = stats if stats is not None else ReadStats()
    for source in discover_inputs(list(inputs), format):
        yield from source_documents(source, field, strict=strict, skip_bad_lines=skip_bad_lines, stats=stats,
                                    progress=progress)


def read_documents(inputs: Sequence[str], format: str | None = None, field: str = "text",
                   progress: Progress | None = None) -> list[str]:
    """`iter_documents` as a list; CorpusError when there are none."""
    documents = list(iter_documents(inputs, format, field, progress=progress))
    if not documents:
        raise CorpusError(f"{', '.join(inputs)}: no non-empty documents")
    return documents


def document_batches(source: CorpusSource, field: str = "text", *, strict: bool = False,
                     skip_bad_lines: bool = False) -> Iterator[DocumentBatch]:
    """`source_documents` in `DocumentBatch`es of about BATCH_TEXT_BYTES of text (what counting
    counts for formats it does not read on bytes: TSV and CSV); each batch carries the lines
    replaced or skipped since the previous one."""
    stats = ReadStats()
    reported = ReadStats()
    docs: list[str] = []
    size = rows = 0

    def batch() -> DocumentBatch:
        """`docs` as counting takes them: those without a line break as LF-ended UTF-8 lines (the
        byte path), the others whole; with what `stats` gained since the last batch."""
        plain = [d for d in docs if "\n" not in d and "\r" not in d]
        broken = [d for d in docs if "\n" in d or "\r" in d] if len(plain) < len(docs) else []
        lines = "".join(d + "\n" for d in plain).encode("utf-8")
        done = DocumentBatch(path=source.path, first_row=rows, lines=lines, line_count=len(plain),
                             documents=broken, nulls=stats.skipped_nulls - reported.skipped_nulls,
                             text_bytes=len(lines) - len(plain) + sum(len(d.encode("utf-8")) for d in broken),
                             bad_utf8_lines=stats.bad_utf8_lines - reported.bad_utf8_lines,
                             skipped_lines=stats.skipped_lines - reported.skipped_lines)
        reported.bad_utf8_lines, reported.skipped_lines, reported.skipped_nulls = \
            stats.bad_utf8_lines, stats.skipped_lines, stats.skipped_nulls
        return done

    for text in source_documents(source, field, strict=strict, skip_bad_lines=skip_bad_lines, stats=stats,
                                 hint=BAD_LINE_HINT):
        docs.append(text)
        size += len(text)
        if size >= BATCH_TEXT_BYTES:
            yield batch()
            rows += len(docs)
            docs, size = [], 0
    if docs or stats != reported:
        yield batch()


def _text(origin: Origin, name: Column, value: Any) -> str:
    if not isinstance(value, str):
        kind = "null" if value is None else type(value).__name__
        raise CorpusError(f"{origin}: field {str(name)!r} is {kind}, not a string")
    return value


# ---------------------------------------------------------------------------------------------
# Translation pairs


def aligned_files(prefix: str, source_lang: str, target_lang: str) -> tuple[str, str] | None:
    """(PREFIX.src, PREFIX.tgt) when `prefix` names aligned plain files (each optionally compressed:
    `PREFIX.de.gz`), else None. CorpusError when only one side, or two copies of a side, exist."""
    found = []
    for lang in (source_lang, target_lang):
        names = [f"{prefix}.{lang}{suffix}" for suffix in ("", *COMPRESSION_SUFFIXES)]
        present = [name for name in names if Path(name).is_file()]
        if len(present) > 1:
            raise CorpusError(f"{prefix}: both {present[0]} and {present[1]} exist; keep one")
        found.append(present[0] if present else None)
    if found == [None, None]:
        return None
    if None in found:
        have, lang = (found[0], target_lang) if found[0] else (found[1], source_lang)
        raise CorpusError(f"{prefix}: {have} has no aligned {prefix}.{lang}")
    return found[0], found[1]  # type: ignore[return-value]


def _aligned_pairs(source_path: str, target_path: str, strict: bool, stats: ReadStats,
                   progress: Progress | None) -> Iterator[Pair]:
    source, target = discover_inputs([source_path], "text")[0], discover_inputs([target_path], "text")[0]
    left, right = numbered_lines(source, strict, stats, progress), numbered_lines(target, strict, stats, progress)
    for number, src in left:
        tgt = next(right, None)
        if tgt is None:
            raise CorpusError(f"{source_path}:{number}: {target_path} has only {number - 1} lines (aligned files "
                              "must have as many lines)")
        if src or tgt[1]:  # a blank line on both sides is no record
            yield Pair(src, tgt[1], Origin(source_path, number))
    extra = next(right, None)
    if extra is not None:
        raise CorpusError(f"{target_path}:{extra[0]}: {source_path} has only {extra[0] - 1} lines (aligned files "
                          "must have as many lines)")


def iter_pairs(inputs: Sequence[str], source_lang: str, target_lang: str, *, format: str | None = None,
               source_field: str | None = None, target_field: str | None = None, header: bool | None = None,
               strict: bool = False, stats: ReadStats | None = None, progress: Progress | None = None) -> Iterator[Pair]:
    """Translation pairs of `inputs`, in order. Each input is one of:

    - a PREFIX of aligned plain files `PREFIX.{source_lang}` and `PREFIX.{target_lang}` (Moses /
      fairseq layout; each may be compressed): line i of one is the translation of line i of the
      other; a line blank on both sides is no pair; the files must have as many lines;
    - `.tsv` / `.csv`: `source TAB target` per line, or, when the first row names the columns
      (`source_field`/`target_field`, default the language codes), those columns;
    - `.jsonl`: `{"translation": {"de": ..., "en": ...}}` (the Hugging Face WMT/IWSLT schema) or one
      key per language (`{"de": ..., "en": ...}`); `source_field`/`target_field` name others
      (`a.b`: key `b` of object `a`);
    - parquet / Arrow (files, `datasets` folders): a `translation` struct column with one child per
      language, or one string column per language.

    Files, directories and globs are expanded as for documents; `format` overrides file names."""
    stats = stats if stats is not None else ReadStats()
    src_names: Field = (source_field,) if source_field else (f"translation.{source_lang}", source_lang)
    tgt_names: Field = (target_field,) if target_field else (f"translation.{target_lang}", target_lang)
    for item in inputs:
        aligned = aligned_files(item, source_lang, target_lang) if not Path(item).exists() else None
        if aligned is not None:
            yield from _aligned_pairs(*aligned, strict, stats, progress)
            continue
        for source in discover_inputs([item], format):
            delimited = source.format in ("tsv", "csv")
            fields = [(*src_names, 0), (*tgt_names, 1)] if delimited else [src_names, tgt_names]
            if source.format == "text":
                raise CorpusError(f"{source.path}: plain text holds no pairs; give the PREFIX of aligned files "
                                  f"PREFIX.{source_lang} and PREFIX.{target_lang}, or a .tsv, .csv, .jsonl, parquet "
                                  "or Arrow file")
            for origin, (src, tgt) in field_rows(source, fields, header, strict, False, stats, progress, width=2):
                yield Pair(_text(origin, src_names[0], src), _text(origin, tgt_names[0], tgt), origin)


# ---------------------------------------------------------------------------------------------
# Classification examples


def _label(origin: Origin, name: Column, value: Any) -> Label:
    if value is None or isinstance(value, (str, float)) or (isinstance(value, int) and not isinstance(value, bool)):
        return value  # type: ignore[no-any-return]
    raise CorpusError(f"{origin}: label {str(name)!r} is {type(value).__name__}, not a string or a number")


def iter_examples(inputs: Sequence[str], *, text_field: Column = "text", pair_field: Column | None = None,
                  label_field: Column | None = "label", format: str | None = None, header: bool = True,
                  strict: bool = False, stats: ReadStats | None = None,
                  progress: Progress | None = None) -> Iterator[Example]:
    """Classification examples of `inputs` (TSV with a header as GLUE ships them, CSV, JSONL,
    parquet/Arrow as the Hugging Face `glue` dataset), in order: `text_field`, the optional second
    text `pair_field` (MNLI's sentence2, QQP's question2), and `label_field` (None: no label). With
    `header=False` a TSV/CSV has no header row and fields are 0-based column numbers (CoLA's
    in_domain_train.tsv: text_field=3, label_field=1). A text that is not a string is an error naming
    the line; labels are returned as stored (`Example`)."""
    stats = stats if stats is not None else ReadStats()
    fields: list[Field] = [(text_field,)] + ([(pair_field,)] if pair_field is not None else []) + \
        ([(label_field,)] if label_field is not None else [])
    for source in discover_inputs(list(inputs), format):
        for origin, values in field_rows(source, fields, header, strict, False, stats, progress):
            text = _text(origin, text_field, values[0])
            pair = _text(origin, pair_field, values[1]) if pair_field is not None else None
            label = _label(origin, label_field, values[-1]) if label_field is not None else None
            yield Example(text, pair, label, origin)


# ---------------------------------------------------------------------------------------------
# CoNLL sentences

_COLUMNS = re.compile(r"[ \t]+")


def iter_conll(inputs: Sequence[str], *, token_column: int = 0, tag_column: int = -1, docstart: bool = True,
               strict: bool = False, stats: ReadStats | None = None,
               progress: Progress | None = None) -> Iterator[Sentence]:
    """CoNLL sentences of `inputs` (CoNLL-2003, WNUT, CoNLL-U-like files; any name, read as lines):
    one token a line, columns separated by runs of spaces or TABs, `token_column` and `tag_column`
    (0-based; negative counts from the end) taken (a line where both are the same column has no tag:
    an error); a blank line (or one of spaces and TABs) ends a
    sentence; `-DOCSTART-` lines are skipped (`docstart=False`: kept as tokens). A line without the
    columns is an error naming FILE:LINE."""
    stats = stats if stats is not None else ReadStats()
    for source in discover_inputs(list(inputs), "text"):
        if source.columnar:
            raise CorpusError(f"{source.path}: CoNLL sentences are read from text files, not parquet or Arrow")
        tokens: list[str] = []
        tags: list[str] = []
        start = 0
        for number, line in numbered_lines(source, strict, stats, progress):
            columns = _COLUMNS.split(line.strip(" \t"))
            if columns == [""]:
                if tokens:
                    yield Sentence(tuple(tokens), tuple(tags), Origin(source.path, start))
                tokens, tags = [], []
                continue
            if docstart and columns[0] == "-DOCSTART-":
                continue
            width = len(columns)
            if not (-width <= token_column < width and -width <= tag_column < width):
                raise CorpusError(f"{source.path}:{number}: {width} column(s), no column {token_column} and "
                                  f"{tag_column} (token and tag)")
            if token_column % width == tag_column % width:
                raise CorpusError(f"{source.path}:{number}: {width} column(s): the token {columns[0]!r} has no tag")
            if not tokens:
                start = number
            tokens.append(columns[token_column])
            tags.append(columns[tag_column])
        if tokens:
            yield Sentence(tuple(tokens), tuple(tags), Origin(source.path, start))

