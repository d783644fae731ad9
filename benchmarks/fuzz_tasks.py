#!/usr/bin/env python3
"""Fuzz the task input surfaces through the real `nb` CLI and tally every broken promise of
docs/guarantees.md (the input surfaces that tests/fuzz does not reach: tagging, classification and
translation data, `-t words:` specs, word vectors, analogy questions).

Each case is a command line plus input files written into the case's own folder; the command runs
in-process through typer's CliRunner (as tests/cli/helpers.py `invoke` does; ~0.2 s a case once the
libraries are loaded) or, every --subprocess-every-th case and with --subprocess for all, as a real
`python -m nbcli` process (as `run_nb`; ~8 s a case on the shared 2-core machine). The inputs are
seeded mutations of small valid files:

- structural mutations that keep a file valid and its record count known (a record duplicated or
  deleted, CR LF line ends, a byte-order mark, blank lines of spaces, comments, -DOCSTART-, CoNLL-U
  multiword-token lines, rows without tokens, a class written as 1 and "1"): such a case must exit 0,
  with the label set the file holds (training) and, where the command reports a count (nb eval's
  sentences/examples, nb predict's records, translation's pairs), the count the file holds;
- hostile mutations (byte flips, truncation, lines duplicated/deleted/inserted, columns inserted or
  deleted, JSON values of another type, random Unicode, NUL bytes, invalid UTF-8, a huge line, also
  under NB_MAX_LINE_MB=0.1, broken ClassLabel metadata, an empty file, a directory for a file, bad
  `-t words:` specs, vector files with bad headers, dimensions, NaN, duplicate words): exit 0, or 1
  (2: usage) with the one-line error;
- inputs nb must refuse (a CoNLL-U or GermEval file read without its columns): exit 1.

An outcome breaks the promise when it is: a traceback; an exit code other than 0, 1, 2; an error
that is not one `nb: error:` line, with anything on stdout, longer than 2000 characters, or naming
neither the case's files nor an option; a file left behind in the case folder after an error
(partial output), or outside the run folder / -o file after a success; an input (or the shared
model/run folders) changed; a run longer than --timeout (hang); a valid input refused, or an input
to refuse accepted; a label set or count other than the file's; nb predict reporting fewer (or more)
records than the file holds without a warning that says it skipped some; invalid UTF-8 read without
a warning. Everything is seeded: `--seed S --only SURFACE:I` reruns one case.

    python3 benchmarks/fuzz_tasks.py --cases 300          # table on stdout, JSON in benchmarks/out/fuzz_tasks.json
    python3 benchmarks/fuzz_tasks.py --only tag-train:17 --keep   # one case, its folder kept

Surfaces: tag-train / tag-eval / tag-predict (CoNLL text, HF token-classification records), cls-train /
cls-eval / cls-predict (TSV, CSV, JSONL, parquet), mt-train (aligned files, TSV, JSONL), words-spec
(`-t words:SPEC`), pretrained (`--embedding-init pretrained:VECTORS`), analogy (vectors + questions).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT, ROOT, load_average, log, machine, write_json  # noqa: E402
from finetune import WORDS, build  # noqa: E402  (the tiny BERT of the fine-tuning benchmark)
from tests.fuzz.harness import Outcome, run_inprocess, run_subprocess, snapshot  # noqa: E402  (tests/fuzz's runners)

Snapshot = dict[str, tuple[int, str]]

# ---------------------------------------------------------------------------------------------
# Valid seeds

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


# ---------------------------------------------------------------------------------------------
# Cases


@dataclass
class Case:
    surface: str
    index: int
    args: list[str]
    files: dict[str, bytes | None]          # None: a directory
    mutations: list[str]
    valid: bool                             # only structural mutations: must exit 0
    expected: int | None = None             # the record count the command must report (valid cases)
    count_key: str | None = None            # where: "predictions" (len), or a key of the JSON report
    env: dict[str, str] = field(default_factory=dict)
    bad_utf8: bool = False                  # some input holds invalid UTF-8: a warning (or error) must say so
    must_fail: bool = False                 # an input nb must refuse (exit 0 is a silently wrong result)
    labels: list[str] | None = None         # the label set a valid training run must report


Shared = dict[str, Path]


def _hostile(rng: random.Random, data: bytes, mutations: list[str], most: int = 3) -> bytes:
    for _ in range(rng.randint(1, most)):
        data, kind = byte_mutation(rng, data)
        mutations.append(kind)
    return data


def _utf8_broken(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _special(rng: random.Random, name: str, data: bytes, mutations: list[str]) -> dict[str, bytes | None]:
    """A file replaced by a directory (empty, or holding a file) or a file of NUL bytes, now and then."""
    kind = rng.choice(["dir", "dir_with_file", "nuls"])
    mutations.append(f"special:{kind}")
    if kind == "dir":
        return {name: None}
    if kind == "dir_with_file":
        return {name: None, f"{name}/inner.txt": data}
    return {name: b"\x00" * rng.randint(1, 4096)}


def conll_doc(rng: random.Random) -> Conll:
    """A valid CoNLL file of 3-6 sentences in one of the four layouts (CoNLL-U: half with multiword tokens)."""
    doc = Conll(sentences(rng, rng.randint(3, 6)), rng.choice(["conll2003", "wnut", "conllu", "germeval"]))
    doc.multiword = doc.layout == "conllu" and rng.random() < 0.5
    return doc


@dataclass
class Input:
    """One generated input: the corpus argument (relative to the case folder), the files, the options
    it needs, what was done to it, whether it is still valid, how many records it holds, whether it
    holds invalid UTF-8, and the label names a valid file holds."""

    name: str
    files: dict[str, bytes | None]
    args: list[str]
    mutations: list[str]
    valid: bool
    records: int
    bad_utf8: bool = False
    labels: list[str] = field(default_factory=list)


def _finish(rng: random.Random, inp: Input, data: bytes, hostile: float) -> Input:
    """`inp` with `data` as its file, hostile byte mutations with probability `hostile` (a quarter of it
    for parquet/Arrow files), now and then a special file (a directory, NUL bytes); the bad-UTF-8 flag set."""
    columnar = inp.name.endswith((".parquet", ".arrow"))
    if rng.random() < (hostile / 4 if columnar else hostile):
        data, inp.valid = _hostile(rng, data, inp.mutations), False
    inp.files = {inp.name: data}
    if rng.random() < 0.04:
        inp.files, inp.valid = _special(rng, inp.name, data, inp.mutations), False
    inp.bad_utf8 = any(v is not None and _utf8_broken(v) for k, v in inp.files.items()
                       if not k.endswith((".parquet", ".arrow")))
    return inp


def _jsonl(rng: random.Random, records: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r, allow_nan=True, ensure_ascii=rng.random() < 0.5) + "\n"
                   for r in records).encode("utf-8", "surrogatepass")


def tagging_file(rng: random.Random) -> Input:
    """A tagging input: CoNLL text (four layouts, structural mutations, then maybe hostile ones), or
    token-classification records (jsonl with ids or names, parquet/Arrow with ClassLabel metadata;
    JSON value and metadata mutations)."""
    if rng.random() < 0.55:
        doc = conll_doc(rng)
        mutations = [doc.layout] + (["multiword"] if doc.multiword else [])
        for _ in range(rng.randint(0, 3)):
            mutations.append(conll_structural(rng, doc))
        inp = Input(rng.choice(["train.conll", "train.txt", "train.iob"]), {}, doc.args(), mutations, True,
                    len(doc.sents), labels=sorted({t for _tk, tg in doc.sents for t in tg}))
        return _finish(rng, inp, doc.render(), 0.6)
    form = rng.choice(["jsonl", "jsonl-names", "parquet", "arrow"])
    sents = sentences(rng, rng.randint(3, 6))
    records: list[dict[str, Any]] = [{"tokens": tk, "ner_tags": tg if form == "jsonl-names" else
                                      [TAGS.index(t) for t in tg]} for tk, tg in sents]
    used = {t for _tk, tg in sents for t in tg}
    labels = TAGS if form in ("parquet", "arrow") else sorted(used) if form == "jsonl-names" else \
        [str(i) for i in range(max(TAGS.index(t) for t in used) + 1)]   # ids without names name themselves
    inp = Input("train." + ("jsonl" if form.startswith("jsonl") else form), {}, [], [form], True, 0, labels=labels)
    if rng.random() < 0.3:
        records.insert(rng.randrange(len(records) + 1), json.loads(json.dumps(rng.choice(records))))
        inp.mutations.append("dup")
    if rng.random() < 0.15:   # a row without tokens (datasets keeps such rows): no sentence
        records.insert(rng.randrange(len(records) + 1), {"tokens": [], "ner_tags": []})
        inp.mutations.append("empty_row")
    inp.records = len(records)
    metadata = json.dumps(hf_features(TAGS)).encode() if form in ("parquet", "arrow") else None
    if rng.random() < 0.6:
        inp.mutations += [json_mutation(rng, records) for _ in range(rng.randint(1, 2))]
        inp.valid = False
    if metadata is not None and rng.random() < 0.35:
        metadata, kind = metadata_mutation(rng, TAGS)
        inp.mutations.append(f"metadata:{kind}")
        inp.valid = False
    if metadata is None:
        return _finish(rng, inp, _jsonl(rng, records), 0.6 if inp.valid else 0.0)
    try:
        data = parquet_bytes(records, metadata, form)
    except Exception as err:   # noqa: BLE001 - pyarrow cannot type the mutated records: keep them as JSONL
        inp.mutations.append(f"as-jsonl({type(err).__name__})")
        inp.name, data = "train.jsonl", _jsonl(rng, records)
    return _finish(rng, inp, data, 0.6 if inp.valid else 0.0)


def classification_file(rng: random.Random) -> Input:
    """A classification input: TSV/CSV/JSONL/parquet rows (one text or a pair; labels names or ints),
    structural mutations, then JSON value mutations, a label cell of another kind or hostile bytes."""
    pair = rng.random() < 0.4
    rows = [(text(rng), text(rng) if pair else None, LABELS[i % 2]) for i in range(rng.randint(4, 8))]
    form = rng.choice(["tsv", "csv", "jsonl", "parquet"])
    kind = rng.choice(["names", "ints"])
    mutations = []
    if kind == "ints":
        rows = [(a, b, int(label == "positive") if form in ("jsonl", "parquet") else str(int(label == "positive")))
                for a, b, label in rows]
        if form == "jsonl" and rng.random() < 0.3:   # 1 and "1": one class written two ways
            i = rng.randrange(len(rows))
            rows[i] = (rows[i][0], rows[i][1], str(rows[i][2]))
            mutations.append("int_as_string")
    doc = Rows(rows, form)
    mutations += [form, f"labels:{kind}", "pair" if pair else "single"]
    mutations += [rows_structural(rng, doc) for _ in range(rng.randint(0, 2))]
    inp = Input(f"train.{form}", {}, doc.args(), mutations, True, len(doc.rows),
                labels=["0", "1"] if kind == "ints" else LABELS)
    if form in ("jsonl", "parquet") and rng.random() < 0.5:
        records = doc.records()
        inp.mutations += [json_mutation(rng, records) for _ in range(rng.randint(1, 2))]
        inp.valid = False
        try:
            data = parquet_bytes(records) if form == "parquet" else _jsonl(rng, records)
        except Exception as err:   # noqa: BLE001 - untypable records: as JSONL
            inp.mutations.append(f"as-jsonl({type(err).__name__})")
            inp.name, data = "train.jsonl", _jsonl(rng, records)
        return _finish(rng, inp, data, 0.0)
    data = doc.render()
    if form in ("tsv", "csv") and rng.random() < 0.3:   # a label cell of another kind
        lines = data.split(b"\n")
        i = rng.randrange(1, max(2, len(lines) - 1))
        sep = b"\t" if form == "tsv" else b","
        cols = lines[i].split(sep)
        if len(cols) > 1:
            cols[-1] = rng.choice([b"0", b"1", b"2", b"1.0", b"1.5", b"True", b"null", b"", b"  ", b"-1", b"01",
                                   b"NaN", "\uff11".encode(), b"positive\r", b"Positive", b" positive"])
            lines[i] = sep.join(cols)
            inp.mutations.append("label_cell")
            inp.valid = False
            data = b"\n".join(lines)
    return _finish(rng, inp, data, 0.55)


def translation_files(rng: random.Random) -> Input:
    """A translation input: aligned PREFIX.de/.en (one side or both mutated, a line emptied on one side),
    a TSV, or JSONL `translation` records (or flat `de`/`en` keys) with JSON value mutations."""
    n = rng.randint(6, 10)
    src = [text(rng) for _ in range(n)]
    tgt = [" ".join(reversed(s.split())) for s in src]
    form = rng.choice(["aligned", "aligned", "tsv", "jsonl", "jsonl-flat"])
    inp = Input("train", {}, [], [form], True, n)
    if form == "aligned":
        de, en = ("\n".join(src) + "\n").encode(), ("\n".join(tgt) + "\n").encode()
        if rng.random() < 0.3:
            kind = rng.choice(["crlf", "blank_both", "dup_both"])
            inp.mutations.append(kind)
            if kind == "crlf":
                de, en = de.replace(b"\n", b"\r\n"), en.replace(b"\n", b"\r\n")
            elif kind == "blank_both":   # a line blank on both sides is no pair
                de, en = b"\n" + de, b"\n" + en
            else:
                de, en = de + src[0].encode() + b"\n", en + tgt[0].encode() + b"\n"
                inp.records += 1
        if rng.random() < 0.7:
            side = rng.choice(["de", "en", "both"])
            inp.mutations.append(f"side:{side}")
            if side in ("de", "both"):
                de = _hostile(rng, de, inp.mutations, 2)
            if side in ("en", "both"):
                en = _hostile(rng, en, inp.mutations, 2)
            if rng.random() < 0.3:   # an empty line on one side only
                lines = en.split(b"\n")
                lines[rng.randrange(len(lines))] = b""
                en = b"\n".join(lines)
                inp.mutations.append("empty_one_side")
            inp.valid = False
        inp.files = {"train.de": de, "train.en": en}
        if rng.random() < 0.03:
            inp.files, inp.valid = {**_special(rng, "train.de", de, inp.mutations), "train.en": en}, False
        inp.bad_utf8 = any(v is not None and _utf8_broken(v) for v in inp.files.values())
        return inp
    if form == "tsv":
        inp.name, data = "train.tsv", "".join(f"{s}\t{t}\n" for s, t in zip(src, tgt)).encode()
    else:
        recs = [{"translation": {"de": s, "en": t}} if form == "jsonl" else {"de": s, "en": t}
                for s, t in zip(src, tgt)]
        if rng.random() < 0.5:
            flat = [r["translation"] if "translation" in r else r for r in recs]
            inp.mutations += [json_mutation(rng, flat if rng.random() < 0.7 else recs)
                              for _ in range(rng.randint(1, 2))]
            inp.valid = False
        inp.name, data = "train.jsonl", _jsonl(rng, recs)
    return _finish(rng, inp, data, 0.5)


def glove(rng: random.Random, words: list[str], dim: int) -> bytes:
    return "".join(w + " " + " ".join(f"{rng.uniform(-1, 1):.4f}" for _ in range(dim)) + "\n" for w in words).encode()


def word2vec_binary(rng: random.Random, words: list[str], dim: int) -> bytes:
    import struct

    out = f"{len(words)} {dim}\n".encode()
    for w in words:
        out += w.encode() + b" " + struct.pack(f"<{dim}f", *[rng.uniform(-1, 1) for _ in range(dim)])
    return out


def vectors_file(rng: random.Random, mutations: list[str], dim: int, words: list[str],
                 hostile: float = 0.8) -> tuple[str, bytes, bool]:
    form = rng.choice(["glove", "word2vec", "word2vec-bin"])
    mutations.append(form)
    if form == "glove":
        data = glove(rng, words, dim)
    elif form == "word2vec":
        data = f"{len(words)} {dim}\n".encode() + glove(rng, words, dim)
    else:
        data = word2vec_binary(rng, words, dim)
    valid = True
    if rng.random() < hostile:
        kind = rng.choice(["bytes", "bytes", "header", "dim", "nan", "dup_word"])
        if kind == "bytes":
            data = _hostile(rng, data, mutations, 2)
        elif kind == "header":
            mutations.append("header")
            head, _, rest = data.partition(b"\n")
            data = rng.choice([b"3", b"-1 4", b"99999999999999999999 4", b"2 0", b"x y", b"5 4 3", b"1 4"]) + \
                b"\n" + (rest if form != "glove" else data)
        elif kind == "dim":
            mutations.append("dim")
            lines = data.split(b"\n")
            first = 0 if form == "glove" else 1
            i = rng.randrange(first, max(first + 1, len(lines) - 1))
            lines[i] = lines[i].rsplit(b" ", 1)[0] if rng.random() < 0.5 else lines[i] + b" 0.5"
            data = b"\n".join(lines)
        elif kind == "nan":
            mutations.append("nan")
            data = data.replace(b" ", b" nan ", 1) if form == "glove" else data.replace(b"\n", b"\n" + words[0].encode() + b" " + b" ".join([b"inf"] * dim) + b"\n", 1)
        else:
            mutations.append("dup_word")
            if form == "word2vec-bin":
                head, _, rest = data.partition(b"\n")
                count, d = head.split()
                data = f"{int(count) + 1} {d.decode()}\n".encode() + rest + word2vec_binary(rng, words[:1], dim).split(b"\n", 1)[1]
            else:
                data = data.replace(b"\n", b"\n" + glove(rng, words[:1], dim), 1) if form == "word2vec" else \
                    data + glove(rng, words[:1], dim)
        valid = False
    return "v." + ("bin" if form == "word2vec-bin" else "txt"), data, valid


def build_case(surface: str, index: int, seed: int, shared: Shared) -> Case:
    """The seeded case `index` of `surface` (its files written relative to the case folder, `{DIR}`
    in args); half the cases with a huge line run under a line cap below it (NB_MAX_LINE_MB=0.1)."""
    case = _build_case(surface, index, seed, shared)
    if "huge_line" in case.mutations and random.Random(f"{seed}:{surface}:{index}:env").random() < 0.5:
        case.env["NB_MAX_LINE_MB"] = "0.1"
        case.mutations.append("NB_MAX_LINE_MB=0.1")
    return case


def _build_case(surface: str, index: int, seed: int, shared: Shared) -> Case:
    rng = random.Random(f"{seed}:{surface}:{index}")
    base_tag = ["--steps", "1", "--batch-size", "4", "--max-len", "16", "--device", "cpu", "--json"]
    if surface == "tag-train":
        inp = tagging_file(rng)
        must_fail = False
        if inp.args and inp.valid and rng.random() < 0.3:   # CoNLL-U / GermEval read without their columns
            inp.args, inp.valid, must_fail = [], False, True
            inp.mutations.append("columns-not-given")
        args = ["train", "--task", "tagging", "--init", str(shared["bert"]), "--corpus", "{DIR}/" + inp.name,
                "--out", "{DIR}/run", *inp.args, *base_tag]
        return Case(surface, index, args, inp.files, inp.mutations, inp.valid, bad_utf8=inp.bad_utf8,
                    must_fail=must_fail, labels=inp.labels if inp.valid else None)
    if surface in ("tag-eval", "tag-predict"):
        inp = tagging_file(rng)
        if surface == "tag-eval":
            args = ["eval", str(shared["tag_run"]), "--task", "tagging", "--corpus", "{DIR}/" + inp.name, "--json"]
            key = "sentences"
        else:
            args = ["predict", str(shared["tag_run"]), "--corpus", "{DIR}/" + inp.name, "--json"] + \
                (["-o", "{DIR}/preds.jsonl"] if rng.random() < 0.5 else [])
            key = "predictions"
        must_fail = False
        if inp.args:   # the shared run reads CoNLL column 0: a CoNLL-U/GermEval file's column 0 numbers the tokens
            inp.mutations.append("layout-needs-columns")
            must_fail, inp.valid = inp.valid, False
        return Case(surface, index, args, inp.files, inp.mutations, inp.valid, inp.records, key,
                    bad_utf8=inp.bad_utf8, must_fail=must_fail)
    if surface == "cls-train":
        inp = classification_file(rng)
        args = ["train", "--task", "classification", "--init", str(shared["bert"]), "--corpus", "{DIR}/" + inp.name,
                "--out", "{DIR}/run", *inp.args, *base_tag]
        return Case(surface, index, args, inp.files, inp.mutations, inp.valid, bad_utf8=inp.bad_utf8,
                    labels=inp.labels if inp.valid else None)
    if surface in ("cls-eval", "cls-predict"):
        inp = classification_file(rng)
        if "pair" in inp.mutations:   # the shared run reads one text (`text`, else `sentence`)
            inp.mutations.append("pair-file-for-single-run")
            inp.valid = False
        if "labels:ints" in inp.mutations and surface == "cls-eval":
            inp.mutations.append("int-labels-against-names")
            inp.valid = False
        if surface == "cls-eval":
            args = ["eval", str(shared["cls_run"]), "--task", "classification", "--corpus", "{DIR}/" + inp.name,
                    "--json"]
            key = "examples"
        else:
            args = ["predict", str(shared["cls_run"]), "--corpus", "{DIR}/" + inp.name, "--json"] + \
                (["-o", "{DIR}/preds.jsonl"] if rng.random() < 0.5 else [])
            key = "predictions"
        return Case(surface, index, args, inp.files, inp.mutations, inp.valid, inp.records, key,
                    bad_utf8=inp.bad_utf8)
    if surface == "mt-train":
        inp = translation_files(rng)
        args = ["train", "--task", "translation", "--corpus", "{DIR}/" + inp.name, "--src-lang", "de", "--tgt-lang",
                "en", "-t", str(shared["spm"]), "--steps", "1", "--batch-size", "4", "--eval-every", "1",
                "--eval-batches", "1", "--eval-sentences", "2", "--beam", "1", "--d-model", "16", "--val-fraction",
                "0.25", "--device", "cpu", "--out", "{DIR}/run", "--json"]
        return Case(surface, index, args, inp.files, inp.mutations, inp.valid, inp.records, "pairs",
                    bad_utf8=inp.bad_utf8)
    if surface == "words-spec":
        spec, valid = rng.choice([("min-freq=1", True), ("min-freq=2,lower", True), ("min-freq=1,lower", True),
                                  ("min-freq=0", False), ("min-freq=-1", False), ("min-freq=", False),
                                  ("min-freq=x", False), ("min-freq=1e3", False), ("min-freq=2.5", False),
                                  ("min-freq=99999999999999999999", False), ("min-freq=1,upper", False),
                                  ("min-freq=1,lower,lower", False), ("min-freq=1,,lower", False), ("", False),
                                  ("min-freq=1 ", False), ("MIN-FREQ=1", False), ("min_freq=1", False),
                                  ("min-freq=\uff11", False), ("min-freq=50", False), ("lower", False),
                                  ("min-freq=1,lower,min-freq=2", False), ("min-freq=+1", False)])
        inp = classification_file(rng)
        muts = [repr(spec), *inp.mutations]
        task = rng.choice(["classification", "classification", "lm"])
        if task == "lm":   # an LM reads the `text` field: these files have none
            args = ["train", "-t", f"words:{spec}", "--corpus", "{DIR}/" + inp.name, "--out", "{DIR}/run", *base_tag]
            muts.append("task:lm")
            valid = False
        else:
            args = ["train", "--task", task, "-t", f"words:{spec}", "--corpus", "{DIR}/" + inp.name, "--d-model", "8",
                    "--n-head", "2", "--out", "{DIR}/run", *inp.args, *base_tag]
        return Case(surface, index, args, inp.files, muts, valid and inp.valid, bad_utf8=inp.bad_utf8)
    if surface == "pretrained":
        muts = []
        rows = [(text(rng), None, LABELS[i % 2]) for i in range(6)]
        vocab = sorted({w for r in rows for w in r[0].split()})
        vname, vdata, valid = vectors_file(rng, muts, 4, vocab[: rng.randint(1, len(vocab))])
        args = ["train", "--task", "classification", "-t", "words:min-freq=1", "--corpus", "{DIR}/train.tsv",
                "--embedding-init", f"pretrained:{{DIR}}/{vname}", "--d-model", "4", "--n-head", "2",
                "--out", "{DIR}/run", *base_tag]
        return Case(surface, index, args, {"train.tsv": Rows(rows).render(), vname: vdata}, muts, valid,
                    bad_utf8=_utf8_broken(vdata) and vname.endswith(".txt"))
    if surface == "analogy":
        muts = []
        words = list(WORDS[:24])
        q_lines = [": section-a"] + [" ".join(rng.sample(words, 4)) for _ in range(6)] + \
            [": section-b"] + [" ".join(rng.sample(words, 4)) for _ in range(4)]
        questions = ("\n".join(q_lines) + "\n").encode()
        vname, vdata, vvalid = vectors_file(rng, muts, 5, words, hostile=0.5)
        qvalid = True
        if rng.random() < 0.6:
            muts.append("questions")
            questions = _hostile(rng, questions, muts, 3)
            qvalid = False
        args = ["analogy", "{DIR}/" + vname, "--questions", "{DIR}/q.txt", "--json"]
        if rng.random() < 0.3:
            args += rng.choice([["--transform", "xavier-std,pos-enc"], ["--limit", "3"], ["--restrict-vocab", "2"],
                                ["--duplicates", "keep-first"], ["--case-sensitive"]])
        return Case(surface, index, args, {vname: vdata, "q.txt": questions}, muts, vvalid and qvalid,
                    bad_utf8=(_utf8_broken(vdata) and vname.endswith(".txt")) or _utf8_broken(questions))
    raise SystemExit(f"unknown surface {surface}")


SURFACES = ("tag-train", "tag-eval", "tag-predict", "cls-train", "cls-eval", "cls-predict", "mt-train", "words-spec",
            "pretrained", "analogy")
WEIGHTS = {"tag-train": 3, "tag-eval": 1.5, "tag-predict": 1.5, "cls-train": 3, "cls-eval": 1.5, "cls-predict": 1.5,
           "mt-train": 2, "words-spec": 1.5, "pretrained": 1.5, "analogy": 2}


# ---------------------------------------------------------------------------------------------
# Shared inputs (a tiny BERT folder, runs to evaluate with, the packaged SentencePiece model)


def build_shared(root: Path) -> Shared:
    from typer.testing import CliRunner

    from nbcli.cli import app

    (root / "bert").mkdir(parents=True)
    with contextlib.redirect_stderr(io.StringIO()):   # transformers' progress bar
        build(root / "bert", hidden=16, layers=2, heads=2)   # benchmarks/finetune.py's tiny BERT (WordLevel of WORDS)
    shared: Shared = {"bert": root / "bert", "spm": ROOT / "nbcli" / "data" / "botchan-bpe2k.model"}
    rng = random.Random(0)
    (root / "tag.conll").write_bytes(Conll(sentences(rng, 8)).render())
    (root / "cls.tsv").write_bytes(Rows([(text(rng), None, LABELS[i % 2]) for i in range(8)]).render())
    for key, task, corpus in (("tag_run", "tagging", "tag.conll"), ("cls_run", "classification", "cls.tsv")):
        result = CliRunner().invoke(app, ["train", "--task", task, "--init", str(shared["bert"]), "--corpus",
                                          str(root / corpus), "--steps", "1", "--batch-size", "4", "--max-len", "16",
                                          "--device", "cpu", "--out", str(root / key)])
        if result.exit_code != 0:
            raise SystemExit(f"building the shared {task} run failed: {result.stderr}")
        shared[key] = root / key
    return shared


# ---------------------------------------------------------------------------------------------
# Running one case and judging it


def reported_count(case: Case, stdout: str) -> int | None:
    try:
        report = json.loads(stdout)
    except ValueError:
        return None
    if case.count_key == "predictions":   # with -o: only the count ("records"), the predictions in the file
        preds = report.get("predictions")
        return len(preds) if isinstance(preds, list) else report.get("records")
    value = report.get(case.count_key) if case.count_key else None
    if value is None and case.count_key == "examples":
        value = report.get("metrics", {}).get("examples") if isinstance(report.get("metrics"), dict) else None
    return value if isinstance(value, int) else None


def file_records(path: Path, task: str) -> int | None:
    """How many records an input holds, counted independently of nb (for nb predict's count): JSONL
    non-blank lines, parquet/Arrow rows, TSV/CSV rows after the header, CoNLL groups of token lines
    (-DOCSTART- and `#` lines before a sentence aside). None for what this count does not cover."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.is_file():
        return None
    try:
        if path.suffix == ".parquet":
            return pq.ParquetFile(path).metadata.num_rows
        if path.suffix == ".arrow":
            with pa.ipc.open_file(path) as reader:
                return reader.read_all().num_rows
    except Exception:   # noqa: BLE001 - nb read it; this count does not try harder
        return None
    lines = path.read_bytes().decode("utf-8", "replace").removeprefix("\ufeff").split("\n")
    lines = [x.removesuffix("\r") for x in lines]
    if path.suffix == ".jsonl":
        return sum(bool(x.strip()) for x in lines)
    if path.suffix in (".tsv", ".csv"):
        return sum(bool(x) for x in lines[1:]) if task == "classification" else None
    groups, inside = 0, False
    for x in lines:
        fields = x.strip(" \t").split()
        if not fields:
            inside = False
        elif fields[0] == "-DOCSTART-" or (not inside and fields[0].startswith("#")):
            continue
        elif not inside:
            groups, inside = groups + 1, True
    return groups


def judge(case: Case, ran: Outcome, before: Snapshot, after: Snapshot, folder: Path) -> list[str]:
    """The promises this outcome breaks (empty: kept)."""
    broken: list[str] = []
    if ran.hung:
        return ["hang"]
    if ran.processes_left:
        broken.append("processes_left")
    try:
        report = json.loads(ran.stdout) if ran.exit_code == 0 else {}
    except ValueError:
        report = {}
    warned = json.dumps(report.get("warnings", [])) + ran.stderr
    if ran.traceback:
        broken.append("traceback")
    if ran.exit_code not in (0, 1, 2):
        broken.append("exit_code")
    if any(after.get(p) != h for p, h in before.items()):
        broken.append("input_changed")
    if ran.exit_code != 0:
        lines = [x for x in ran.stderr.splitlines() if x.strip()]
        if len(lines) != 1 or not lines[0].startswith("nb: error: "):
            broken.append("not_one_line")
        elif len(lines[0]) > 2000:
            broken.append(f"long_error({len(lines[0])})")
        elif str(folder) not in lines[0] and not any(a.startswith("-") and a in lines[0] for a in case.args):
            broken.append("unnamed")
        if ran.stdout.strip():
            broken.append("stdout_on_error")
        if set(after) - set(before):
            broken.append("partial_output")
        if case.valid:
            broken.append("valid_refused")
    else:
        added = set(after) - set(before)
        stray = [p for p in added if not (p.startswith(str(folder / "run")) or p == str(folder / "preds.jsonl"))]
        if stray:
            broken.append("stray_output")
        if case.valid and case.expected is not None and case.count_key and "skipped" not in warned:
            got = reported_count(case, ran.stdout)
            if got != case.expected:
                broken.append(f"count({got}!={case.expected})")
        if case.bad_utf8 and "utf-8" not in warned.lower():
            broken.append("utf8_unwarned")
        if case.must_fail:
            broken.append("accepted_invalid")
        if case.valid and case.labels is not None and sorted(report.get("labels") or []) != sorted(case.labels):
            broken.append(f"labels({report.get('labels')}!={sorted(case.labels)})")
        if case.count_key == "predictions" and "skipped" not in warned:
            corpus = Path(case.args[case.args.index("--corpus") + 1].replace("{DIR}", str(folder)))
            expected = file_records(corpus, "tagging" if case.surface.startswith("tag") else "classification")
            got = reported_count(case, ran.stdout)
            if expected is not None and got != expected:
                broken.append(f"dropped_unwarned({got}!={expected})")
    return broken


def run_case(case: Case, work: Path, shared: Shared, timeout: float, subprocess_mode: bool) -> dict[str, Any]:
    folder = work / f"{case.surface}-{case.index}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for name, data in sorted(case.files.items(), key=lambda kv: kv[0].count("/")):
        path = folder / name
        if data is None:
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    watched = [folder, shared["bert"], shared["tag_run"], shared["cls_run"]]
    before = snapshot(watched)
    args = [a.replace("{DIR}", str(folder)) for a in case.args]
    start = time.perf_counter()
    # a real nb process imports this checkout's nbcli (as tests/cli/helpers.py's run_nb under PYTHONPATH)
    ran = run_subprocess(args, folder, timeout, {"PYTHONPATH": str(ROOT), **case.env}) if subprocess_mode else \
        run_inprocess(args, timeout, case.env)
    seconds = time.perf_counter() - start
    after = snapshot(watched)
    broken = judge(case, ran, before, after, folder)
    return {"surface": case.surface, "index": case.index, "mode": "subprocess" if subprocess_mode else "in-process",
            "exit": ran.exit_code, "valid": case.valid, "mutations": case.mutations, "broken": broken,
            "seconds": round(seconds, 3), "args": args,
            "stderr": ran.stderr[-600:] if broken or ran.exit_code else "",
            "traceback": ran.stderr[-1500:] if ran.traceback else ""}


# ---------------------------------------------------------------------------------------------


def plan(cases: int, surfaces: list[str]) -> list[tuple[str, int]]:
    """`cases` (surface, index) pairs spread by WEIGHTS, interleaved."""
    total = sum(WEIGHTS[s] for s in surfaces)
    counts = {s: max(1, round(cases * WEIGHTS[s] / total)) for s in surfaces}
    order = [(s, i) for i in range(max(counts.values())) for s in surfaces if i < counts[s]]
    return order


def table(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for surface in SURFACES:
        mine = [r for r in results if r["surface"] == surface]
        if not mine:
            continue
        kinds = Counter(k.split("(")[0] for r in mine for k in r["broken"])
        rows.append({"surface": surface, "cases": len(mine), "exit_0": sum(r["exit"] == 0 for r in mine),
                     "exit_1": sum(r["exit"] == 1 for r in mine), "exit_2": sum(r["exit"] == 2 for r in mine),
                     "valid": sum(r["valid"] for r in mine), "broken": sum(bool(r["broken"]) for r in mine),
                     "kinds": dict(kinds)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=300, help="cases in all, spread over the surfaces")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--surfaces", default=",".join(SURFACES))
    parser.add_argument("--only", default="", help="SURFACE:I[,SURFACE:I ...]: just these cases")
    parser.add_argument("--subprocess", action="store_true", help="every case as a real nb process (slow)")
    parser.add_argument("--subprocess-every", type=int, default=15,
                        help="every N-th case also as a real nb process (0: none)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before a case counts as a hang")
    parser.add_argument("--keep", action="store_true", help="keep the case folders (printed)")
    parser.add_argument("--out", type=Path, default=OUT / "fuzz_tasks.json")
    args = parser.parse_args()

    surfaces = [s for s in args.surfaces.split(",") if s]
    if unknown := set(surfaces) - set(SURFACES):
        raise SystemExit(f"unknown surfaces: {', '.join(sorted(unknown))}")
    chosen = [(s.rsplit(":", 1)[0], int(s.rsplit(":", 1)[1])) for s in args.only.split(",")] if args.only else \
        plan(args.cases, surfaces)
    work = Path(tempfile.mkdtemp(prefix="nb-fuzz-tasks-"))
    started = time.perf_counter()
    log(f"building the shared model and runs in {work}")
    shared = build_shared(work / "shared")
    results = []
    for n, (surface, index) in enumerate(chosen):
        case = build_case(surface, index, args.seed, shared)
        modes = [True] if args.subprocess else [False] + ([True] if args.subprocess_every and
                                                           n % args.subprocess_every == 0 else [])
        for mode in modes:
            result = run_case(case, work / "cases", shared, args.timeout, mode)
            results.append(result)
            if result["broken"]:
                log(f"BROKEN {surface}:{index} [{result['mode']}] {result['broken']} exit={result['exit']} "
                    f"muts={case.mutations}\n    {result['stderr'].strip()[-300:]}")
            if not args.keep:
                shutil.rmtree(work / "cases" / f"{surface}-{index}", ignore_errors=True)
        if n % 25 == 0:
            log(f"{n}/{len(chosen)} cases, {time.perf_counter() - started:.0f} s")
    elapsed = time.perf_counter() - started
    rows = table(results)
    print(f"{'surface':<12} {'cases':>5} {'exit0':>5} {'exit1':>5} {'exit2':>5} {'valid':>5} {'broken':>6}  kinds")
    for r in rows:
        print(f"{r['surface']:<12} {r['cases']:>5} {r['exit_0']:>5} {r['exit_1']:>5} {r['exit_2']:>5} {r['valid']:>5} "
              f"{r['broken']:>6}  {', '.join(f'{k} {v}' for k, v in sorted(r['kinds'].items())) or '-'}")
    total = sum(r["cases"] for r in rows)
    print(f"{'all':<12} {total:>5} {'':>5} {'':>5} {'':>5} {'':>5} {sum(r['broken'] for r in rows):>6}  "
          f"({elapsed:.0f} s, load {' '.join(f'{x:.1f}' for x in load_average())})")
    write_json(args.out, {"seed": args.seed, "cases": total, "seconds": round(elapsed, 1),
                          "load_average": load_average(), "machine": machine(), "surfaces": rows,
                          "broken": [r for r in results if r["broken"]], "outcomes": results})
    log(f"wrote {args.out}" + (f"; case folders kept in {work}" if args.keep else ""))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
