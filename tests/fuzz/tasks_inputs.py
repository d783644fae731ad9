"""The task fuzzer's inputs (tests/fuzz/test_tasks_fuzz.py): one seeded input file (or files) per
task surface, valid or broken, with what a command must report for it.

`tagging_file` (CoNLL text in four layouts, token-classification JSONL/parquet/Arrow),
`classification_file` (TSV, CSV, JSONL, parquet; one text or a pair; labels as names or ints),
`translation_files` (aligned PREFIX.de/.en, TSV, JSONL) and `vectors_file` (GloVe, word2vec text and
binary) each return the bytes, the options the file needs, the mutations done, whether it is still
valid, how many records it holds, whether it holds invalid UTF-8 and the labels a valid file holds.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from tests.fuzz.tasks_files import (LABELS, TAGS, Conll, Rows, byte_mutation, conll_structural, hf_features,
                                    json_mutation, metadata_mutation, parquet_bytes, rows_structural, sentences, text)

def hostile(rng: random.Random, data: bytes, mutations: list[str], most: int = 3) -> bytes:
    for _ in range(rng.randint(1, most)):
        data, kind = byte_mutation(rng, data)
        mutations.append(kind)
    return data


def utf8_broken(data: bytes) -> bool:
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


def _finish(rng: random.Random, inp: Input, data: bytes, rate: float) -> Input:
    """`inp` with `data` as its file, hostile byte mutations with probability `rate` (a quarter of it
    for parquet/Arrow files), now and then a special file (a directory, NUL bytes); the bad-UTF-8 flag set."""
    columnar = inp.name.endswith((".parquet", ".arrow"))
    if rng.random() < (rate / 4 if columnar else rate):
        data, inp.valid = hostile(rng, data, inp.mutations), False
    inp.files = {inp.name: data}
    if rng.random() < 0.04:
        inp.files, inp.valid = _special(rng, inp.name, data, inp.mutations), False
    inp.bad_utf8 = any(v is not None and utf8_broken(v) for k, v in inp.files.items()
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
                de = hostile(rng, de, inp.mutations, 2)
            if side in ("en", "both"):
                en = hostile(rng, en, inp.mutations, 2)
            if rng.random() < 0.3:   # an empty line on one side only
                lines = en.split(b"\n")
                lines[rng.randrange(len(lines))] = b""
                en = b"\n".join(lines)
                inp.mutations.append("empty_one_side")
            inp.valid = False
        inp.files = {"train.de": de, "train.en": en}
        if rng.random() < 0.03:
            inp.files, inp.valid = {**_special(rng, "train.de", de, inp.mutations), "train.en": en}, False
        inp.bad_utf8 = any(v is not None and utf8_broken(v) for v in inp.files.values())
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
                 rate: float = 0.8) -> tuple[str, bytes, bool]:
    form = rng.choice(["glove", "word2vec", "word2vec-bin"])
    mutations.append(form)
    if form == "glove":
        data = glove(rng, words, dim)
    elif form == "word2vec":
        data = f"{len(words)} {dim}\n".encode() + glove(rng, words, dim)
    else:
        data = word2vec_binary(rng, words, dim)
    valid = True
    if rng.random() < rate:
        kind = rng.choice(["bytes", "bytes", "header", "dim", "nan", "dup_word"])
        if kind == "bytes":
            data = hostile(rng, data, mutations, 2)
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
