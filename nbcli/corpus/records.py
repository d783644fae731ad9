"""THE reader for every command: documents, (source, target) pairs, labelled examples and CoNLL
sentences, from text, TSV/CSV, JSONL fields and parquet/Arrow columns, with one line rule, one format
rule and one error format.

    corpus_format(path, override=None)                  "text" | "jsonl" | "tsv" | "csv" | "parquet" | "arrow"
    iter_documents(inputs, format=None, field="text")   -> str, the documents `nb count-unigrams` counts
    read_documents(inputs, format=None, field="text")   -> list[str] (CorpusError when there are none)
    iter_pairs(inputs, "de", "en")                      -> Pair(source, target, origin)   translation
    iter_examples(inputs, text_field=..., label_field=...) -> Example(text, pair, label, origin)
    iter_sentences(inputs, token_field=..., tag_field=...) -> Sentence(tokens, tags, origin) tagging
    iter_conll(inputs)                                  -> Sentence, from CoNLL text only

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
- CoNLL (tagging; `nbcli.corpus.sentences`, `nbcli.corpus.conll`): one token a line, columns split at runs of spaces and
  TABs, a blank line between sentences, `-DOCSTART-` lines skipped. Every token line has as many
  columns as the file's first token line (CoNLL-2003 4, WNUT 2, CoNLL-U 10, GermEval-2014 4): a line
  with another count is an error naming it, so a TSV of sentences or JSON lines is never read as
  one long sentence; so is a first token line that is a JSON object. A line beginning with `#` before
  a sentence is a comment unless it has the file's column count, counted at TABs in a TAB-separated
  file (CoNLL-U `# text = ...`, GermEval `#<TAB>URL [date]`); one with the file's columns is a token
  (WNUT's `#<TAB>O`). In 10-column (CoNLL-U) files read with a token column other than 0,
  multiword-token (`3-4`) and empty-node (`8.1`) lines are skipped. When column 0 numbers the tokens (CoNLL-U, GermEval) the token column
  must be given. CSV, JSONL, parquet and Arrow files are not CoNLL: `iter_sentences` reads JSONL,
  parquet and Arrow as token-classification records (`tokens`, `ner_tags`; integer tags named by
  the `datasets` ClassLabel feature, `corpus.features`).
- Errors: one line, `FILE:LINE: problem` (parquet/Arrow: `FILE: row N: problem`; file-wide problems
  such as a missing column: `FILE: problem`), a `CorpusError`. `skip_bad_lines=True` skips and counts
  (`ReadStats.skipped_lines`) rows without a usable field instead.

Every record carries its `Origin` (`str(origin)` is `FILE:LINE`, or `FILE: row N`), so that a
consumer's own checks (an unknown label, a sentence too long) name the line too.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from nbcli.corpus.columnar import BATCH_TEXT_BYTES, DocumentBatch, iter_rows
from nbcli.corpus.rows import (
    BAD_LINE_HINT, Column, Field, Origin, Progress, ReadStats, field_rows, line_blocks, numbered_lines, skip_or_raise,
)
from nbcli.corpus.sentences import Sentence, iter_conll, iter_sentences
from nbcli.corpus.sources import COMPRESSION_SUFFIXES, CorpusSource, corpus_format, discover_inputs
from nbcli.errors import ConfigError, CorpusError
from nbcli.jsonsafe import jsonl_field

__all__ = [
    "BAD_LINE_HINT", "Column", "Example", "Origin", "Pair", "ReadStats", "Sentence", "aligned_files", "corpus_format",
    "document_batches", "iter_conll", "iter_documents", "iter_examples", "iter_pairs", "iter_sentences",
    "jsonl_document", "read_documents", "source_documents",
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
                   progress: Progress | None = None, stats: ReadStats | None = None) -> list[str]:
    """`iter_documents` as a list (`stats` filled); CorpusError when there are none."""
    documents = list(iter_documents(inputs, format, field, progress=progress, stats=stats))
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
               strict: bool = False, stats: ReadStats | None = None, progress: Progress | None = None,
               columns: str | None = None) -> Iterator[Pair]:
    """Translation pairs of `inputs`, in order. Each input is one of:

    - a PREFIX of aligned plain files `PREFIX.{source_lang}` and `PREFIX.{target_lang}` (Moses /
      fairseq layout; each may be compressed): line i of one is the translation of line i of the
      other; a line blank on both sides is no pair; the files must have as many lines;
    - `.tsv` / `.csv`: when the first row names the columns (`source_field`/`target_field`, default
      the language codes), those columns; else `source TAB target` per line, or `target TAB source`
      with `columns` "tgt,src" (a file without a header has no language names: `columns`, default
      "src,tgt", says which column is which; one that contradicts the header is an error);
    - `.jsonl`: `{"translation": {"de": ..., "en": ...}}` (the Hugging Face WMT/IWSLT schema) or one
      key per language (`{"de": ..., "en": ...}`); `source_field`/`target_field` name others
      (`a.b`: key `b` of object `a`);
    - parquet / Arrow (files, `datasets` folders): a `translation` struct column with one child per
      language, or one string column per language.

    Files, directories and globs are expanded as for documents; `format` overrides file names.
    `columns` given for an input that names its sides by language (aligned files, JSONL, parquet/Arrow)
    is a ConfigError: it could not be honoured."""
    if columns not in (None, *COLUMN_ORDERS):
        raise ConfigError(f"--columns must be {' or '.join(COLUMN_ORDERS)}, got {columns!r}")
    target_first = columns == "tgt,src"
    stats = stats if stats is not None else ReadStats()
    src_names: Field = (source_field,) if source_field else (f"translation.{source_lang}", source_lang)
    tgt_names: Field = (target_field,) if target_field else (f"translation.{target_lang}", target_lang)
    for item in inputs:
        aligned = aligned_files(item, source_lang, target_lang) if not Path(item).exists() else None
        if aligned is not None:
            if columns is not None:
                raise ConfigError(f"--columns {columns}: {item} is the prefix of {aligned[0]} and {aligned[1]}, "
                                  "whose names say which side is which; --columns orders a .tsv/.csv's columns")
            yield from _aligned_pairs(*aligned, strict, stats, progress)
            continue
        for source in discover_inputs([item], format):
            delimited = source.format in ("tsv", "csv")
            if columns is not None and not delimited and source.format != "text":
                raise ConfigError(f"--columns {columns}: {source.path} names its sides by language "
                                  f"({source_lang}, {target_lang}); --columns orders a .tsv/.csv's columns")
            if delimited and not source_field and not target_field:
                target_first = _header_order(source, source_lang, target_lang, columns, header)
            fields = ([(*src_names, int(target_first)), (*tgt_names, int(not target_first))] if delimited
                      else [src_names, tgt_names])
            if source.format == "text":
                raise CorpusError(f"{source.path}: plain text holds no pairs; give the PREFIX of aligned files "
                                  f"PREFIX.{source_lang} and PREFIX.{target_lang}, or a .tsv, .csv, .jsonl, parquet "
                                  "or Arrow file")
            for origin, (src, tgt) in field_rows(source, fields, header, strict, False, stats, progress, width=2):
                yield Pair(_text(origin, src_names[0], src), _text(origin, tgt_names[0], tgt), origin)


COLUMN_ORDERS = ("src,tgt", "tgt,src")
"""--columns: which column of a .tsv/.csv without a header is the source (default: the first)."""


def _header_order(source: CorpusSource, source_lang: str, target_lang: str, columns: str | None,
                  header: bool | None) -> bool:
    """Whether the target is the first column of a delimited `source`: its header's, when its first row
    names both languages (`columns`, when given, must agree), else `columns`'s (default source first)."""
    if header is False:
        return columns == "tgt,src"
    try:
        first = next(field_rows(source, [(0,), (1,)], False, False, False, ReadStats(), None), None)
    except CorpusError:   # fewer than two columns: the read proper says so, naming the line
        first = None
    names = [str(v).removeprefix("\ufeff").strip() for v in first[1]] if first is not None else []
    if sorted(names) != sorted([source_lang, target_lang]):
        return columns == "tgt,src"
    order = "src,tgt" if names[0] == source_lang else "tgt,src"
    if columns is not None and columns != order:
        raise ConfigError(f"--columns {columns}: the header of {source.path} names its columns {names[0]}, "
                          f"{names[1]} ({order} for --src-lang {source_lang} --tgt-lang {target_lang})")
    return order == "tgt,src"


# ---------------------------------------------------------------------------------------------
# Classification examples


def _label(origin: Origin, name: Column, value: Any) -> Label:
    if isinstance(value, str) and not value.strip():
        raise CorpusError(f"{origin}: label {str(name)!r} is empty (a blank field is no class)")
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
    the line; labels are returned as stored (`Example`). A folder with one sub-folder per label is read
    as scikit-learn's load_files reads it (`nbcli.corpus.folders`: a file a document, its folder's name
    its label; the fields do not apply)."""
    from nbcli.corpus.folders import class_folders, folder_examples

    stats = stats if stats is not None else ReadStats()
    fields: list[Field] = [(text_field,)] + ([(pair_field,)] if pair_field is not None else []) + \
        ([(label_field,)] if label_field is not None else [])
    for item in inputs:
        if (classes := class_folders(item)) is not None:
            if pair_field is not None:
                raise ConfigError(f"{item}: a folder per class holds one text a file; --text-pair-field does not apply")
            for text, label, origin in folder_examples(item, classes, labelled=label_field is not None,
                                                       strict=strict, stats=stats, progress=progress):
                yield Example(text, None, label, origin)
            continue
        for source in discover_inputs([item], format):
            for origin, values in field_rows(source, fields, header, strict, False, stats, progress):
                text = _text(origin, text_field, values[0])
                pair = _text(origin, pair_field, values[1]) if pair_field is not None else None
                label = _label(origin, label_field, values[-1]) if label_field is not None else None
                yield Example(text, pair, label, origin)

