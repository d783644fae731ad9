"""Token-per-line CoNLL text -> sentences, for `records.iter_conll` (the rules: records.py's
docstring, docs/corpora.md "CoNLL sentences").

A file is read as CoNLL only when it looks like one all the way down: every token line has as many
columns as the file's first token line, so a TSV of sentences (GLUE's `sentence TAB label`) or JSON
lines fail at their first line that does not fit, with the line named, instead of becoming one long
"sentence" of words and labels. The layouts this keeps readable:

    CoNLL-2003      EU NNP B-NP B-ORG            4 columns, spaces; -DOCSTART- lines
    WNUT-16/17      EU<TAB>B-ORG                 2 columns, TAB; `#<TAB>O` is a token
    CoNLL-U         1<TAB>EU<TAB>EU<TAB>PROPN... 10 columns, TAB; `# text = ...` comments,
                                                 `3-4` multiword and `8.1` empty-node lines
                                                 (skipped when the token is not column 0)
    GermEval-2014   1<TAB>EU<TAB>B-ORG<TAB>O     4 columns, TAB; `#<TAB>URL [date]` comments

A line beginning with `#` before a sentence's first token is a comment unless it has the file's
column count, counted at TABs when the file's first token line is TAB-separated (so a comment's
words never pass for columns); a `#` line inside a sentence is a token line like any other.

CoNLL-U and GermEval number their tokens in column 0: read with the default token column, the
token would be that number, so the first sentence of two or more tokens numbered 1, 2, ... in
column 0 is an error asking for the columns (CoNLL-U: FORM 1, UPOS 3; GermEval: 1 and 2). CoNLL-U's
multiword-token (`1-2`) and empty-node (`8.1`) lines do not break that count (a sentence that
opens with a contraction, `1-2 du` then `1 de`, `2 le`, is numbered all the same).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass

from nbcli.corpus.rows import Origin
from nbcli.errors import CorpusError

__all__ = ["CONLLU_WIDTH", "NOT_CONLL", "Sentence", "conll_sentences", "split_columns"]

_COLUMNS = re.compile(r"[ \t]+")
_TABS = re.compile(r"\t+")
_SUBWORD_ID = re.compile(r"[0-9]+[-.][0-9]+")  # CoNLL-U: a multiword token's range 3-4, an empty node 8.1
CONLLU_WIDTH = 10
DOCSTART = "-DOCSTART-"
NOT_CONLL = ("not token-per-line CoNLL, whose token lines all have the same columns (a TSV of sentences? JSON "
             "lines? those are read as records when named .jsonl)")


@dataclass(frozen=True)
class Sentence:
    """A tagged sentence: its tokens and their tags (empty when tags were not read); `origin`: the
    line of its first token (CoNLL, JSONL) or its row (parquet, Arrow)."""

    tokens: tuple[str, ...]
    tags: tuple[str, ...]
    origin: Origin


@dataclass(frozen=True)
class _Layout:
    """What a file's first token line says about every other: its columns, whether they are
    TAB-separated, and where it is."""

    width: int
    tabs: bool
    line: int


def split_columns(line: str) -> list[str]:
    """The columns of a CoNLL line: split at runs of spaces and TABs, those at either end ignored;
    [] for a blank line."""
    text = line.strip(" \t")
    return _COLUMNS.split(text) if text else []


def _first_token_line(path: str, number: int, line: str, columns: list[str], token_column: int,
                      tag_column: int | None) -> _Layout:
    """The layout of a file from its first token line; CorpusError when that line cannot start a
    CoNLL file (a JSON value, no such columns, no tag; `tag_column` None: no tag is read, so a file of
    tokens alone, one column, is CoNLL)."""
    text = line.strip(" \t")
    if text.startswith(("{", "[")):
        from nbcli.jsonsafe import parse

        try:
            value = parse(text, walk=False)
        except ValueError:  # JsonProblem: deep nesting too
            value = None
        if isinstance(value, (dict, list)):
            raise CorpusError(f"{path}:{number}: a JSON {'object' if isinstance(value, dict) else 'array'}, "
                              f"{NOT_CONLL}")
    width = len(columns)
    if tag_column is None:
        if not -width <= token_column < width:
            raise CorpusError(f"{path}:{number}: {width} column(s), no column {token_column} (the token)")
        return _Layout(width, "\t" in text, number)
    if not (-width <= token_column < width and -width <= tag_column < width):
        raise CorpusError(f"{path}:{number}: {width} column(s), no column {token_column} and {tag_column} "
                          "(token and tag)")
    if token_column % width == tag_column % width:
        raise CorpusError(f"{path}:{number}: {width} column(s): the token {columns[0]!r} has no tag")
    return _Layout(width, "\t" in text, number)


def _fields(line: str, columns: list[str], layout: _Layout) -> int:
    """How many columns a `#` line has as the file counts them: at TABs in a TAB-separated file (a
    comment's words are one field there: CoNLL-U `# text = ...`, GermEval `#<TAB>URL [date]`), else
    at runs of spaces and TABs."""
    return len(_TABS.split(line.strip(" \t"))) if layout.tabs else len(columns)


def _numbered(firsts: list[str]) -> bool:
    """Column 0 of a sentence counts its tokens 1, 2, ... (CoNLL-U's ID, GermEval's index); CoNLL-U's
    multiword-token (`1-2`) and empty-node (`8.1`) lines between them are no tokens of that count."""
    ids = [first for first in firsts if not _SUBWORD_ID.fullmatch(first)]
    return len(ids) >= 2 and ids == [str(i) for i in range(1, len(ids) + 1)]


def conll_sentences(path: str, lines: Iterator[tuple[int, str]], token_column: int | None = None,
                    tag_column: int | None = -1, docstart: bool = True) -> Iterator[Sentence]:
    """The sentences of one CoNLL file's numbered lines (module doc, records.py's rules).
    `token_column` None: column 0, and an error when column 0 numbers the tokens. `tag_column` None:
    the tokens alone (text to tag: any tag columns are ignored, a file of one column is read; the
    sentences' `tags` are empty)."""
    column = 0 if token_column is None else token_column
    head: list[tuple[int, str]] = []
    layout = None
    for number, line in lines:
        if number == 1:
            line = line.removeprefix("\ufeff")
        head.append((number, line))
        columns = split_columns(line)
        if columns and not columns[0].startswith("#") and not (docstart and columns[0] == DOCSTART):
            layout = _first_token_line(path, number, line, columns, column, tag_column)
            break
    if layout is None:
        return  # nothing but blank lines, comments and -DOCSTART-: no sentence
    tokens: list[str] = []
    tags: list[str] = []
    firsts: list[str] = []
    start = 0
    check_numbers = token_column is None
    conllu = layout.width == CONLLU_WIDTH and column % layout.width != 0   # column 0 is CoNLL-U's ID
    for number, line in itertools.chain(head, lines):
        columns = split_columns(line)
        if not columns:
            if tokens:
                if check_numbers and len(tokens) >= 2:
                    _refuse_numbered(path, start, firsts)
                    check_numbers = False
                yield Sentence(tuple(tokens), tuple(tags), Origin(path, start))
            tokens, tags, firsts = [], [], []
            continue
        if docstart and columns[0] == DOCSTART:
            continue
        if not tokens and columns[0].startswith("#") and _fields(line, columns, layout) != layout.width:
            continue  # a comment before a sentence
        if len(columns) != layout.width:
            raise CorpusError(f"{path}:{number}: {len(columns)} column(s), but the first token line "
                              f"({path}:{layout.line}) has {layout.width}: {NOT_CONLL}")
        if conllu and _SUBWORD_ID.fullmatch(columns[0]):
            continue  # CoNLL-U: its words are the lines that follow
        if not tokens:
            start = number
        tokens.append(columns[column])
        if tag_column is not None:
            tags.append(columns[tag_column])
        firsts.append(columns[0])
    if tokens:
        if check_numbers and len(tokens) >= 2:
            _refuse_numbered(path, start, firsts)
        yield Sentence(tuple(tokens), tuple(tags), Origin(path, start))


def _refuse_numbered(path: str, start: int, firsts: list[str]) -> None:
    if _numbered(firsts):
        raise CorpusError(f"{path}:{start}: column 0 numbers the tokens 1, 2, ... (CoNLL-U, GermEval-2014), it "
                          "holds no token; give the token and tag columns (0-based; CoNLL-U FORM and UPOS: 1 and "
                          "3, GermEval-2014: 1 and 2)")
