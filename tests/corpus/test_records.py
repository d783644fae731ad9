"""The one reader (`nbcli.corpus.records`): the same documents for count-unigrams, train, eval and
generate whatever the bytes; the same records from every format; one-line FILE:LINE errors."""

from __future__ import annotations

import bz2
import csv
import gzip
import json
import lzma
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings, strategies as st

from nbcli.corpus import (
    ReadStats, corpus_format, iter_conll, iter_documents, iter_examples, iter_pairs, read_documents,
)
from nbcli.counting import CountOptions, count_corpus
from nbcli.errors import ConfigError, CorpusError
from nbcli.lm.perplexity import tokenize_documents
from nbcli.tokenizers import load_tokenizer
from nbcli.train.data import tokenize_corpus

FUNCTION_SCOPED = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# What str.splitlines() and a careless reader treat as line ends, or strip, and nb keeps inside a line.
ODD = ["\x0c", "\u2028", "\u2029", "\x85", "\x0b", "\x1c", "\r", " ", "\t", "\ufeff"]
PIECES = st.sampled_from(["the", "model", "bias", "é", "日本", "a", *ODD])
BAD_BYTES = st.sampled_from([b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80"])


def compress(path: Path, data: bytes) -> Path:
    suffix = path.suffix
    packed = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress,
              ".zst": zstandard.ZstdCompressor().compress}[suffix](data) if suffix in (".gz", ".bz2", ".xz", ".zst") \
        else data
    path.write_bytes(packed)
    return path


def expected_documents(data: bytes) -> list[str]:
    """An independent reading of the line rule: lines end at LF (a CR before it is part of the
    ending), each line decoded alone with U+FFFD replacement, empty lines dropped."""
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    decoded = [(line[:-1] if line.endswith(b"\r") else line).decode("utf-8", errors="replace") for line in lines]
    return [line for line in decoded if line]


@st.composite
def corpus_bytes(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(st.lists(st.one_of(PIECES.map(str.encode), BAD_BYTES), max_size=6).map(b"".join),
                          min_size=1, max_size=25))
    ends = draw(st.lists(st.sampled_from([b"\n", b"\r\n"]), min_size=len(lines), max_size=len(lines)))
    body = b"".join(line + end for line, end in zip(lines, ends))
    return body if draw(st.booleans()) else body.rstrip(b"\r\n")


@FUNCTION_SCOPED
@given(data=corpus_bytes(), suffix=st.sampled_from([".txt", ".txt.gz"]))
def test_every_command_reads_the_same_documents(tmp_path: Path, sp_model: Path, data: bytes, suffix: str) -> None:
    """count-unigrams (its byte path and its stream path), train's data pipeline, eval's scored
    documents and generate's prompts all see the documents of the line rule."""
    path = compress(tmp_path / f"c{suffix}", data)
    expected = expected_documents(data)
    documents = list(iter_documents([str(path)]))
    assert documents == expected
    tok = load_tokenizer(sp_model)
    encoded = [ids + [tok.eos_id] for ids in tok.encode_batch(expected)] if expected else []
    reference = np.bincount(np.concatenate(encoded), minlength=tok.vocab_size) if encoded else None
    if not expected:
        with pytest.raises(CorpusError, match="no non-empty documents"):
            read_documents([str(path)])
        return
    # count-unigrams
    counted = count_corpus([str(path)], tok, CountOptions(), workers=1)
    assert counted.documents == len(expected)
    np.testing.assert_array_equal(counted.counts, reference)
    # train: every document once, ids then EOS, every 2nd to validation
    data_ = tokenize_corpus([str(path)], tok, "clm", 0.5)
    assert data_.documents == len(expected)
    train = [i for k, doc in enumerate(encoded) if k % 2 == 0 for i in doc]
    val = [i for k, doc in enumerate(encoded) if k % 2 == 1 for i in doc]
    assert data_.train.tolist() == train and data_.val.tolist() == val
    # eval and generate read `read_documents`: eval's scored targets are what count-unigrams counted
    assert read_documents([str(path)]) == expected
    scored = tokenize_documents(read_documents([str(path)]), tok, tok.vocab_size)
    assert scored.documents == len(expected)
    np.testing.assert_array_equal(scored.target_counts(tok.vocab_size), reference)


def test_the_issue_corpus_is_120_documents_everywhere(tmp_path: Path, sp_model: Path) -> None:
    """Issue #28: 120 lines holding form feed, U+2028 and U+0085 were 360 documents for train."""
    lines = [f"line {i} \x0c with\u2028odd\x85breaks" for i in range(120)]
    path = tmp_path / "odd.txt"
    path.write_bytes(("\n".join(lines) + "\n").encode())
    tok = load_tokenizer(sp_model)
    assert count_corpus([str(path)], tok, CountOptions(), workers=1).documents == 120
    data = tokenize_corpus([str(path)], tok, "clm", 0.25)
    assert data.documents == 120 and data.counts[tok.eos_id] == 90  # 30 documents went to validation
    assert len(read_documents([str(path)])) == 120


# ---------------------------------------------------------------------------------------------
# Every format, the same documents

# A document every format can hold: no LF, no TAB (TSV), no trailing CR (CR LF would end the line),
# not empty.
DOC = st.lists(PIECES.filter(lambda p: p != "\t"), min_size=1, max_size=6).map("".join).filter(
    lambda d: not d.endswith("\r"))


def write_all_formats(folder: Path, docs: list[str]) -> list[Path]:
    text = "".join(d + "\n" for d in docs).encode()
    jsonl = "".join(json.dumps({"id": i, "text": d}) + "\n" for i, d in enumerate(docs)).encode()
    tsv = ("id\ttext\n" + "".join(f"{i}\t{d}\n" for i, d in enumerate(docs))).encode()
    rows = [["text", "id"], *([d, str(i)] for i, d in enumerate(docs))]
    with open(folder / "d.csv", "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, lineterminator="\r\n", quoting=csv.QUOTE_ALL).writerows(rows)
    table = pa.table({"text": docs, "id": list(range(len(docs)))})
    pq.write_table(table, folder / "d.parquet", row_group_size=3)
    for name, writer in (("file.arrow", ipc.new_file), ("stream.arrow", ipc.new_stream)):
        with writer(folder / name, table.schema) as out:
            out.write_table(table, max_chunksize=4)
    paths = [folder / "d.csv", folder / "d.parquet", folder / "file.arrow", folder / "stream.arrow"]
    for base, data in (("d.txt", text), ("d.jsonl", jsonl), ("d.tsv", tsv)):
        for suffix in ("", ".gz", ".bz2", ".xz", ".zst"):
            paths.append(compress(folder / f"{base}{suffix}", data))
    paths.append(compress(folder / "d.csv.gz", (folder / "d.csv").read_bytes()))
    return paths


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs=st.lists(DOC, min_size=1, max_size=12))
def test_each_format_gives_the_same_documents(tmp_path_factory: pytest.TempPathFactory, docs: list[str]) -> None:
    folder = tmp_path_factory.mktemp("formats")
    for path in write_all_formats(folder, docs):
        assert list(iter_documents([str(path)])) == docs, path.name


def test_count_unigrams_counts_every_format_alike(tmp_path: Path, sp_model: Path) -> None:
    """count-unigrams reads each file as its name says (a .jsonl needs no --format) and records it."""
    docs = [f"doc {i} the model\x0c bias\u2028 \x85é" + (" \rcr" if i % 3 == 0 else "") for i in range(40)]
    tok = load_tokenizer(sp_model)
    reference = count_corpus([str(compress(tmp_path / "ref.txt", "".join(d + "\n" for d in docs).encode()))],
                             tok, CountOptions(), workers=1)
    assert reference.documents == 40
    for path in write_all_formats(tmp_path, docs):
        for workers in (1, 2):
            result = count_corpus([str(path)], tok, CountOptions(), workers=workers)
            np.testing.assert_array_equal(result.counts, reference.counts, err_msg=path.name)
            assert result.documents == 40
        assert result.sources[0].format == corpus_format(str(path))


def test_format_rule() -> None:
    assert [corpus_format(name) for name in ("a.txt", "a.jsonl", "a.ndjson", "a.json", "a.JSONL.GZ", "a.tsv.zst",
                                             "a.csv.bz2", "a.parquet", "a.arrow", "a.feather", "a.ipc", "a.de",
                                             "a.jsonl.txt", "-", "x.jsonl/notes")] == \
        ["text", "jsonl", "jsonl", "jsonl", "jsonl", "tsv", "csv", "parquet", "arrow", "arrow", "arrow", "text",
         "text", "text", "text"]
    assert corpus_format("a.jsonl", "text") == "text" and corpus_format("a.txt.gz", "jsonl") == "jsonl"
    assert corpus_format("a.parquet", "text") == "parquet"  # columnar files are never read as lines
    with pytest.raises(ConfigError, match="--format must be one of"):
        corpus_format("a.txt", "xml")


def test_nulls_empty_and_whitespace_documents(tmp_path: Path) -> None:
    docs = ["a", None, "", " ", "\t", "b"]
    pq.write_table(pa.table({"text": pa.array(docs, pa.string())}), tmp_path / "d.parquet")
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs if d is not None) + " \n")
    for name in ("d.parquet", "d.jsonl"):
        stats = ReadStats()
        assert list(iter_documents([str(tmp_path / name)], stats=stats)) == ["a", " ", "\t", "b"]
        assert stats.skipped_nulls == (name == "d.parquet")


def test_bad_utf8_is_replaced_and_counted_or_refused(tmp_path: Path) -> None:
    path = tmp_path / "b.tsv"
    path.write_bytes(b"text\tlabel\nok\t1\nbad \xff\t0\n")
    stats = ReadStats()
    assert list(iter_documents([str(path)], stats=stats)) == ["ok", "bad \ufffd"]
    assert stats.bad_utf8_lines == 1
    with pytest.raises(CorpusError, match=r"b\.tsv:3: invalid UTF-8 at byte 4"):
        list(iter_documents([str(path)], strict=True))


# ---------------------------------------------------------------------------------------------
# Translation pairs: four forms, one reading

SIDE = DOC.filter(lambda s: not s.startswith("\ufeff"))


def write_pair_forms(folder: Path, pairs: list[tuple[str, str]]) -> list[str]:
    de, en = [p[0] for p in pairs], [p[1] for p in pairs]
    (folder / "train.de").write_bytes("".join(s + "\n" for s in de).encode())
    compress(folder / "train.en.gz", "".join(s + "\r\n" for s in en).encode())  # CRLF ends lines too
    (folder / "p.tsv").write_bytes("".join(f"{a}\t{b}\n" for a, b in pairs).encode())
    (folder / "q.tsv").write_bytes(("en\tid\tde\n" + "".join(f"{b}\t{i}\t{a}\n" for i, (a, b) in enumerate(pairs))).encode())
    compress(folder / "p.jsonl.zst", "".join(json.dumps({"translation": {"de": a, "en": b}}) + "\n"
                                              for a, b in pairs).encode())
    (folder / "flat.jsonl").write_text("".join(json.dumps({"en": b, "de": a}) + "\n" for a, b in pairs))
    struct = pa.table({"id": list(range(len(pairs))), "translation": [{"de": a, "en": b} for a, b in pairs]})
    pq.write_table(struct, folder / "p.parquet", row_group_size=2)
    with ipc.new_stream(folder / "p.arrow", struct.schema) as out:
        out.write_table(struct, max_chunksize=3)
    pq.write_table(pa.table({"de": de, "en": en}), folder / "columns.parquet")
    return [str(folder / name) for name in ("train", "p.tsv", "q.tsv", "p.jsonl.zst", "flat.jsonl", "p.parquet",
                                            "p.arrow", "columns.parquet")]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pairs=st.lists(st.tuples(SIDE, SIDE), min_size=1, max_size=10))
def test_parallel_forms_give_identical_pairs(tmp_path_factory: pytest.TempPathFactory,
                                            pairs: list[tuple[str, str]]) -> None:
    folder = tmp_path_factory.mktemp("pairs")
    for item in write_pair_forms(folder, pairs):
        read = list(iter_pairs([item], "de", "en"))
        assert [(p.source, p.target) for p in read] == pairs, item
        assert str(read[0].origin) in (f"{folder / 'train.de'}:1", f"{item}:1", f"{item}:2", f"{item}: row 0")


def test_pairs_errors(tmp_path: Path) -> None:
    (tmp_path / "a.de").write_text("eins\nzwei\n")
    (tmp_path / "a.en").write_text("one\n")
    with pytest.raises(CorpusError, match=r"a\.de:2: .*a\.en has only 1 lines"):
        list(iter_pairs([str(tmp_path / "a")], "de", "en"))
    (tmp_path / "b.de").write_text("x\n")
    with pytest.raises(CorpusError, match=r"b\.de has no aligned .*b\.en"):
        list(iter_pairs([str(tmp_path / "b")], "de", "en"))
    (tmp_path / "c.tsv").write_text("a\tb\nc\td\te\n")
    with pytest.raises(CorpusError, match=r"c\.tsv:2: 3 fields, expected 2"):
        list(iter_pairs([str(tmp_path / "c.tsv")], "de", "en"))
    (tmp_path / "d.jsonl").write_text('{"translation": {"de": "a", "en": "b"}}\n{"translation": {"de": "a"}}\n')
    with pytest.raises(CorpusError, match=r"d\.jsonl:2: no field 'translation\.en' or 'en'"):
        list(iter_pairs([str(tmp_path / "d.jsonl")], "de", "en"))
    (tmp_path / "e.txt").write_text("a\n")
    with pytest.raises(CorpusError, match="plain text holds no pairs"):
        list(iter_pairs([str(tmp_path / "e.txt")], "de", "en"))


# ---------------------------------------------------------------------------------------------
# Classification examples and CoNLL sentences


def test_glue_tsv_keeps_quotes_and_reads_like_parquet(tmp_path: Path) -> None:
    """MNLI-style TSV: unbalanced quotes stay in the text (quoting disabled) and no row is joined."""
    rows = [("The \"big\" dog", 'It said "no', "entailment"), ("A ' B", 'C "" D', "neutral"), ('"', "x", "contradiction")]
    tsv = tmp_path / "dev_matched.tsv"
    tsv.write_text("index\tsentence1\tsentence2\tgold_label\n" + "".join(f"{i}\t{a}\t{b}\t{c}\n"
                                                                          for i, (a, b, c) in enumerate(rows)))
    pq.write_table(pa.table({"sentence1": [r[0] for r in rows], "sentence2": [r[1] for r in rows],
                             "gold_label": [r[2] for r in rows]}), tmp_path / "mnli.parquet")
    (tmp_path / "mnli.jsonl").write_text("".join(json.dumps({"sentence1": a, "sentence2": b, "gold_label": c}) + "\n"
                                                 for a, b, c in rows))
    with open(tmp_path / "mnli.csv", "w", newline="") as handle:
        csv.writer(handle).writerows([("sentence1", "sentence2", "gold_label"), *rows])
    for name in ("dev_matched.tsv", "mnli.parquet", "mnli.jsonl", "mnli.csv"):
        got = list(iter_examples([str(tmp_path / name)], text_field="sentence1", pair_field="sentence2",
                                 label_field="gold_label"))
        assert [(e.text, e.pair, e.label) for e in got] == rows, name


def test_integer_labels_headerless_columns_and_label_errors(tmp_path: Path) -> None:
    pq.write_table(pa.table({"sentence": ["good", "bad"], "label": [1, 0], "idx": [0, 1]}), tmp_path / "sst2.parquet")
    assert [(e.text, e.label) for e in iter_examples([str(tmp_path / "sst2.parquet")], text_field="sentence")] == \
        [("good", 1), ("bad", 0)]
    cola = tmp_path / "in_domain_train.tsv"  # CoLA ships without a header: source, label, original, sentence
    cola.write_text("gj04\t1\t\tOur friends won't buy this analysis.\ngj04\t0\t*\tThey drank the pub.\n")
    got = list(iter_examples([str(cola)], text_field=3, label_field=1, header=False))
    assert [(e.text, e.label, e.origin.line) for e in got] == [("Our friends won't buy this analysis.", "1", 1),
                                                               ("They drank the pub.", "0", 2)]
    (tmp_path / "l.jsonl").write_text('{"text": "a", "label": [1]}\n')
    with pytest.raises(CorpusError, match=r"l\.jsonl:1: label 'label' is list"):
        list(iter_examples([str(tmp_path / "l.jsonl")]))
    with pytest.raises(CorpusError, match=r"sst2\.parquet: no column 'text'; columns: sentence \(string\)"):
        list(iter_examples([str(tmp_path / "sst2.parquet")]))


def test_conll_sentences(tmp_path: Path) -> None:
    path = tmp_path / "eng.train"
    path.write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n \nPeter\tNNP\tB-NP\tB-PER\n"
                    "caf\u00e9\u2028x NN I-NP O\n")
    got = list(iter_conll([str(path)]))
    assert [(s.tokens, s.tags, s.origin.line) for s in got] == [(("EU", "rejects"), ("B-ORG", "O"), 3),
                                                                (("Peter", "café\u2028x"), ("B-PER", "O"), 6)]
    assert [s.tags for s in iter_conll([str(path)], tag_column=1)][0] == ("NNP", "VBZ")
    path.write_text("EU B-ORG\nrejects\n")
    with pytest.raises(CorpusError, match=r"eng\.train:2: 1 column"):
        list(iter_conll([str(path)], tag_column=1))


# ---------------------------------------------------------------------------------------------
# Errors: one line, naming FILE:LINE


@pytest.mark.parametrize("name, content, kwargs, where", [
    ("a.jsonl", b'{"text": "x"}\n{"body": "y"}\n', {}, "a.jsonl:2: no field 'text'"),
    ("b.jsonl", b'{"text": "x"}\n\n[1]\n', {}, "b.jsonl:3: not a JSON object"),
    ("c.tsv", b"id\ttext\n1\tx\n2\ty\tz\n", {}, "c.tsv:3: 3 fields, the header has 2"),
    ("d.csv", b'text\n"a"b\n', {}, "d.csv:2: malformed CSV row"),
    ("e.tsv", b"id\tbody\n1\tx\n", {}, "e.tsv: no column 'text' in the header (id, body)"),
    ("f.txt.gz", gzip.compress(b"ok\n\xff\n", mtime=0), {"strict": True}, "f.txt.gz:2: invalid UTF-8 at byte 0"),
    ("g.jsonl", b'{"text": "\\ud800"}\n', {}, "g.jsonl:1: field 'text': string holds a lone surrogate"),
])
def test_errors_are_one_line_naming_file_and_line(tmp_path: Path, name: str, content: bytes, kwargs: dict,
                                                  where: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(CorpusError) as err:
        list(iter_documents([str(path)], **kwargs))
    message = str(err.value)
    assert message.startswith(str(tmp_path / where)) and "\n" not in message, message


def test_skip_bad_lines_counts_what_it_skips(tmp_path: Path) -> None:
    path = tmp_path / "c.tsv"
    path.write_text("id\ttext\n1\tx\n2\ty\tz\n3\tw\n")
    stats = ReadStats()
    assert list(iter_documents([str(path)], skip_bad_lines=True, stats=stats)) == ["x", "w"]
    assert stats.skipped_lines == 1
