"""The task fuzzer's files (tests/fuzz/test_tasks_fuzz.py): valid seeds of the task inputs, each with
its record count known, and the mutations that break them.

- Valid seeds: CoNLL files in four layouts (`Conll`), classification rows as TSV/CSV/JSONL/parquet
  (`Rows`), HF token-classification records with ClassLabel metadata (`parquet_bytes`, `hf_features`).
- Structural mutations keep a file valid and its record count known (a record duplicated or deleted,
  CR LF line ends, a byte-order mark, blank lines of spaces, comments, -DOCSTART-, CoNLL-U multiword
  token lines): `conll_structural`, `rows_structural`.
- Hostile mutations (byte flips, truncation, lines duplicated/deleted/inserted, columns inserted or
  deleted, random Unicode, NUL bytes, invalid UTF-8, a huge line, an empty file; JSON values of another
  type; broken ClassLabel metadata): `byte_mutation`, `json_mutation`, `metadata_mutation`.
"""

from __future__ import annotations

import io
import json
import random
from dataclasses import dataclass
from typing import Any

from tests.tasks.builders import WORDS

TAGS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC"]
LABELS = ["negative", "positive"]


def sentences(rng: random.Random, n: int) -> list[tuple[list[str], list[str]]]:
    out = []
    for _ in range(n):
        k = rng.randint(1, 5)
        out.append(([rng.choice(WORDS) for _ in range(k)], [rng.choice(TAGS) for _ in range(k)]))
    return out


def text(rng: random.Random, lo: int = 2, hi: int = 7) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


@dataclass
class Conll:
    """A CoNLL file as records: its sentences, layout and the line options that keep it valid."""

    sents: list[tuple[list[str], list[str]]]
    layout: str = "conll2003"      # conll2003 | wnut | conllu | germeval
    crlf: bool = False
    bom: bool = False
    blank: str = ""                 # the sentence separator line's content (spaces)
    docstart: bool = False
    comments: bool = False
    no_final_newline: bool = False
    multiword: bool = False          # CoNLL-U: a `k-(k+1)` multiword-token line before token k

    def args(self) -> list[str]:
        return {"conllu": ["--text-field", "1", "--label-field", "3"],
                "germeval": ["--text-field", "1", "--label-field", "2"]}.get(self.layout, [])

    def line(self, i: int, token: str, tag: str) -> str:
        if self.layout == "wnut":
            return f"{token}\t{tag}"
        if self.layout == "conllu":
            return "\t".join([str(i + 1), token, token.lower(), tag, "_", "_", str(i), "dep", "_", "_"])
        if self.layout == "germeval":
            return f"{i + 1}\t{token}\t{tag}\tO"
        return f"{token} NN B-NP {tag}"

    def render(self) -> bytes:
        lines: list[str] = []
        if self.docstart:
            lines += ["-DOCSTART- -X- -X- O", self.blank]
        for tokens, tags in self.sents:
            if self.comments:
                lines.append("# text = " + " ".join(tokens) if self.layout != "germeval" else "#\thttp://x.org/a b [2009]")
            for i, (tok, tag) in enumerate(zip(tokens, tags)):
                if self.multiword and self.layout == "conllu" and i == 0 and len(tokens) > 1:
                    lines.append("\t".join(["1-2", tok + tokens[1], "_", "_", "_", "_", "_", "_", "_", "_"]))
                lines.append(self.line(i, tok, tag))
            lines.append(self.blank)
        out = ("\r\n" if self.crlf else "\n").join(lines)
        if not self.no_final_newline:
            out += "\r\n" if self.crlf else "\n"
        return (b"\xef\xbb\xbf" if self.bom else b"") + out.encode()


def conll_structural(rng: random.Random, doc: Conll) -> str:
    """One mutation that keeps the file valid (sentence count known)."""
    kind = rng.choice(["dup", "del", "crlf", "bom", "blank", "docstart", "comments", "no_final_newline", "multiword"])
    if kind == "dup":
        doc.sents.insert(rng.randrange(len(doc.sents) + 1), rng.choice(doc.sents))
    elif kind == "del" and len(doc.sents) > 2:
        doc.sents.pop(rng.randrange(len(doc.sents)))
    elif kind == "blank":
        doc.blank = rng.choice([" ", "  ", "\t", " \t "])
    elif kind == "comments" and doc.layout == "conll2003":
        doc.docstart = True   # a '#' line in a space-separated file may have the file's columns
    elif kind != "del":
        setattr(doc, kind, True)
    return kind


@dataclass
class Rows:
    """Classification rows (text, pair, label) and how they are written."""

    rows: list[tuple[str, str | None, Any]]
    form: str = "tsv"               # tsv | csv | jsonl | parquet
    crlf: bool = False
    bom: bool = False
    blank_lines: bool = False

    def names(self) -> list[str]:
        return ["sentence1", "sentence2", "label"] if self.rows[0][1] is not None else ["sentence", "label"]

    def records(self) -> list[dict[str, Any]]:
        names = self.names()
        return [dict(zip(names, [r[0], r[1], r[2]] if r[1] is not None else [r[0], r[2]])) for r in self.rows]

    def args(self) -> list[str]:
        return ["--text-field", "sentence1", "--text-pair-field", "sentence2"] if self.rows[0][1] is not None else []

    def render(self) -> bytes:
        names, records = self.names(), self.records()
        end = "\r\n" if self.crlf else "\n"
        if self.form == "parquet":
            return parquet_bytes(records)
        if self.form == "jsonl":
            lines = [json.dumps(r) for r in records]
        elif self.form == "tsv":
            lines = ["\t".join(names)] + ["\t".join(str(r[n]) for n in names) for r in records]
        else:
            buf = io.StringIO()
            import csv

            csv.writer(buf, lineterminator="\n").writerows([names] + [[r[n] for n in names] for r in records])
            lines = buf.getvalue().splitlines()
        if self.blank_lines:
            lines = [x for line in lines for x in (line, "")][:-1]
        return (b"\xef\xbb\xbf" if self.bom else b"") + (end.join(lines) + end).encode()


def rows_structural(rng: random.Random, doc: Rows) -> str:
    kinds = ["dup", "del"] + (["crlf", "bom", "blank_lines"] if doc.form != "parquet" else [])
    kind = rng.choice(kinds)
    if kind == "dup":
        doc.rows.insert(rng.randrange(len(doc.rows) + 1), rng.choice(doc.rows))
    elif kind == "del":
        i = rng.randrange(len(doc.rows))
        if sum(r[2] == doc.rows[i][2] for r in doc.rows) > 1:   # every label stays (eval: labels of training)
            doc.rows.pop(i)
    else:
        setattr(doc, kind, True)
    return kind


def parquet_bytes(records: list[dict[str, Any]], metadata: bytes | None = None, form: str = "parquet") -> bytes:
    """Records as parquet (or an Arrow IPC file), schema metadata `huggingface` set to `metadata`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(records)
    if metadata is not None:
        table = table.replace_schema_metadata({b"huggingface": metadata})
    sink = io.BytesIO()
    if form == "arrow":
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
    else:
        pq.write_table(table, sink)
    return sink.getvalue()


def hf_features(names: Any, list_type: str = "List") -> dict[str, Any]:
    return {"info": {"features": {
        "tokens": {"feature": {"dtype": "string", "_type": "Value"}, "_type": list_type},
        "ner_tags": {"feature": {"names": names, "_type": "ClassLabel"}, "_type": list_type}}}}


# ---------------------------------------------------------------------------------------------
# Hostile mutations

ODD_TEXT = ["\u2028", "\u0085", "\x0c", "\u200b", "\u0301", "\U0001f600", "\u202e", "\r", "\x1b[31m", "\ufeff",
            "[bold]", "\x00", "\ud7ff", "Ａ", "İ", "ß", "\t", " ", "\\", '"', "'", ",", "#", "-DOCSTART-"]
ODD_LINES = ["", "   ", "\t", "-DOCSTART- -X- -X- O", "# a comment", "#\tO", '{"tokens": ["a"], "ner_tags": [0]}',
             "a\tb\tc", "a b", "1-2\tx\t_\t_\t_\t_\t_\t_\t_\t_", "x" * 5000, "\x00\x00", "null", "[]", "a,b,c"]
ODD_JSON = [0, 1, 2, -1, 10 ** 30, 1.0, 1.5, float("nan"), True, False, None, "", " ", "1", "x", [], [1], ["a"],
            {}, {"a": 1}, [[1]], "\udcff"]


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def byte_mutation(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """One hostile edit of a file's bytes."""
    kind = rng.choice(["flip", "truncate", "dup_line", "del_line", "swap_lines", "insert_line", "col_insert",
                       "col_delete", "unicode", "nul", "bad_utf8", "huge_line", "empty"])
    lines = _lines(data)
    if kind == "flip" and data:
        buf = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(buf))
            buf[i] = buf[i] ^ (1 << rng.randrange(8)) if rng.random() < 0.5 else rng.randrange(256)
        return bytes(buf), kind
    if kind == "truncate" and data:
        return data[:rng.randrange(len(data))], kind
    if kind == "dup_line":
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
    elif kind == "del_line":
        lines.pop(rng.randrange(len(lines)))
    elif kind == "swap_lines" and len(lines) > 1:
        i, j = rng.sample(range(len(lines)), 2)
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == "insert_line":
        lines.insert(rng.randrange(len(lines) + 1), rng.choice(ODD_LINES).encode("utf-8", "surrogatepass"))
    elif kind in ("col_insert", "col_delete"):
        i = rng.randrange(len(lines))
        sep = b"\t" if b"\t" in lines[i] else b"," if b"," in lines[i] else b" "
        cols = lines[i].split(sep)
        if kind == "col_insert":
            cols.insert(rng.randrange(len(cols) + 1), rng.choice([b"", b"x", b"0", b"B-PER", b'"', b"1.5"]))
        elif len(cols) > 1:
            cols.pop(rng.randrange(len(cols)))
        lines[i] = sep.join(cols)
    elif kind in ("unicode", "nul", "bad_utf8"):
        piece = {"unicode": rng.choice(ODD_TEXT).encode("utf-8", "surrogatepass"), "nul": b"\x00",
                 "bad_utf8": rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80abc", b"\xf4\x90\x80\x80"])}[kind]
        i = rng.randrange(len(data) + 1)
        return data[:i] + piece + data[i:], kind
    elif kind == "huge_line":
        lines.insert(rng.randrange(len(lines) + 1), b" ".join([rng.choice(WORDS).encode()] * 60_000))
    elif kind == "empty":
        return b"", kind
    return b"\n".join(lines), kind


def json_mutation(rng: random.Random, records: list[dict[str, Any]]) -> str:
    """One hostile edit of JSON records: a value of another type, a key deleted, renamed or added, a
    list element added, removed or retyped."""
    rec = rng.choice(records)
    kind = rng.choice(["retype", "delete", "rename", "add", "list_append", "list_pop", "list_retype", "list_empty"])
    keys = list(rec)
    if not keys:
        rec["x"] = 1
        return "add"
    key = rng.choice(keys)
    lists = [k for k in keys if isinstance(rec[k], list)]
    if kind.startswith("list_") and lists:
        key = rng.choice(lists)
        value = rec[key]
        if kind == "list_append":
            value.append(rng.choice(ODD_JSON + ["B-PER", "word"]))
        elif kind == "list_pop" and value:
            value.pop(rng.randrange(len(value)))
        elif kind == "list_retype" and value:
            value[rng.randrange(len(value))] = rng.choice(ODD_JSON)
        else:
            value.clear()
        return f"{kind}:{key}"
    if kind == "delete":
        del rec[key]
    elif kind == "rename":
        rec[key + rng.choice(["_", "X", " "])] = rec.pop(key)
    elif kind == "add":
        rec[rng.choice(["extra", "label2", "id", ""])] = rng.choice(ODD_JSON)
    else:
        rec[key] = rng.choice(ODD_JSON)
    return f"{kind}:{key}"


def metadata_mutation(rng: random.Random, names: list[str]) -> tuple[bytes, str]:
    """Schema metadata `huggingface` that is broken, or names classes the ids do not fit."""
    kind = rng.choice(["short", "ints", "dupes", "empty_names", "not_json", "bad_utf8", "sequence", "no_names",
                       "nested", "names_str", "null"])
    value: Any = {"short": names[:2], "ints": list(range(len(names))), "dupes": names + names[:1],
                  "empty_names": [], "names_str": ",".join(names), "no_names": None, "null": [None] * len(names),
                  "nested": [names]}.get(kind, names)
    if kind == "not_json":
        return b'{"info": {"features": ', kind
    if kind == "bad_utf8":
        return json.dumps(hf_features(names)).encode().replace(b"B-PER", b"B-\xffPER"), kind
    return json.dumps(hf_features(value, "Sequence" if kind == "sequence" else "List")).encode(), kind
