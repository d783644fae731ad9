"""Tagged sentences from Hugging Face token-classification records (records.iter_sentences): JSONL,
parquet, Arrow and `datasets` save_to_disk folders with `tokens` and `ner_tags`, tag names from the
ClassLabel feature (nbcli/corpus/features.py), read as the same sentences as CoNLL; bad records are
one-line errors naming FILE:LINE or FILE: row N. The files are built here with pyarrow in the layout
datasets 5.2 writes (schema metadata `huggingface`, `_type` "List"; "Sequence" before datasets 4)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from nbcli.corpus import iter_sentences
from nbcli.corpus.features import classlabel_names, features_file_names
from nbcli.corpus.rows import ReadStats
from nbcli.errors import CorpusError

NAMES = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]  # conll2003's order
SENTENCES = [(["EU", "rejects", "German", "call"], ["B-ORG", "O", "B-MISC", "O"]),
             (["Peter", "Blackburn"], ["B-PER", "I-PER"]),
             (["BRUSSELS", "1996-08-22"], ["B-LOC", "O"])]


def features(names: list[str] | None, list_type: str = "List", tag_field: str = "ner_tags") -> dict[str, Any]:
    """The features object datasets writes for a tokens + tag-ids data set (names None: no ClassLabel)."""
    tag = {"feature": {"names": names, "_type": "ClassLabel"} if names else {"dtype": "int64", "_type": "Value"},
           "_type": list_type}
    return {"tokens": {"feature": {"dtype": "string", "_type": "Value"}, "_type": list_type}, tag_field: tag}


def hf_table(sentences: list[tuple[list[str], list[str]]], names: list[str] | None, *, ids: bool = True,
             list_type: str = "List", tag_field: str = "ner_tags") -> pa.Table:
    """The sentences as datasets stores them: tag ids (or names, ids=False), schema metadata naming them."""
    tags = [[names.index(t) for t in tg] if ids and names else list(tg) for _, tg in sentences]
    table = pa.table({"tokens": [list(tk) for tk, _ in sentences], tag_field: tags})
    meta = {"info": {"features": features(names if ids else None, list_type, tag_field)}}
    return table.replace_schema_metadata({b"huggingface": json.dumps(meta).encode()})


def write_records(path: Path, sentences: list[tuple[list[str], list[str]]], form: str,
                  names: list[str] | None = NAMES, **kwargs: Any) -> Path:
    """`sentences` written as `form`: "jsonl" (ids, no names: what Dataset.to_json writes), "jsonl-names"
    (string tags), "parquet", "arrow" (an IPC file without metadata) or "folder" (save_to_disk)."""
    table = hf_table(sentences, names, **kwargs)
    if form in ("jsonl", "jsonl-names"):
        rows = hf_table(sentences, names, ids=form == "jsonl", **kwargs).to_pylist()
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    elif form == "parquet":
        pq.write_table(table, path)
    elif form == "arrow":
        with pa.ipc.new_file(path, table.schema.remove_metadata()) as writer:
            writer.write_table(table.replace_schema_metadata(None))
    else:
        path.mkdir()
        with pa.ipc.new_stream(path / "data-00000-of-00001.arrow", table.schema) as writer:
            writer.write_table(table)
        (path / "dataset_info.json").write_text(json.dumps({"citation": "", "features": features(names)}, indent=2))
        (path / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}],
                                                     "_fingerprint": "0", "_split": None}))
    return path


def read(paths: list[Path], **kwargs: Any) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    return [(s.tokens, s.tags) for s in iter_sentences([str(p) for p in paths], **kwargs)]


EXPECTED = [(tuple(tk), tuple(tg)) for tk, tg in SENTENCES]


@pytest.mark.parametrize("form", ["parquet", "folder", "jsonl-names"])
def test_hub_layouts_read_with_their_tag_names(tmp_path: Path, form: str) -> None:
    path = write_records(tmp_path / f"train.{'parquet' if form == 'parquet' else 'jsonl' if 'jsonl' in form else 'd'}",
                         SENTENCES, form)
    assert read([path]) == EXPECTED
    got = list(iter_sentences([str(path)]))
    assert [str(s.origin) for s in got] == ([f"{path}:{i}" for i in (1, 2, 3)] if form.startswith("jsonl") else
                                            [f"{p}: row {i}" for p, i in zip([got[0].origin.path] * 3, (0, 1, 2))])


def test_ids_without_names_use_tag_names_else_name_themselves(tmp_path: Path) -> None:
    jsonl = write_records(tmp_path / "train.jsonl", SENTENCES, "jsonl")        # Dataset.to_json: ids, no names
    arrow = write_records(tmp_path / "train.arrow", SENTENCES, "arrow")        # no schema metadata
    assert read([jsonl, arrow], tag_names=NAMES) == EXPECTED * 2
    assert read([jsonl])[0] == (EXPECTED[0][0], ("3", "0", "7", "0"))
    (tmp_path / "dataset_info.json").write_text(json.dumps({"features": features(NAMES, "Sequence")}))
    assert read([jsonl]) == EXPECTED                                           # a dataset_info.json beside it


def test_the_same_sentences_in_every_form_read_equal(tmp_path: Path) -> None:
    conll = tmp_path / "train.conll"
    conll.write_text("\n\n".join("\n".join(f"{w} {t}" for w, t in zip(tk, tg)) for tk, tg in SENTENCES) + "\n")
    forms = [write_records(tmp_path / name, SENTENCES, form) for name, form in
             [("a.parquet", "parquet"), ("b", "folder"), ("c.jsonl", "jsonl-names")]]
    assert read([conll]) == EXPECTED
    assert read(forms) == EXPECTED * 3


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sentences=st.lists(st.lists(st.tuples(st.text(min_size=1, max_size=5), st.sampled_from(NAMES)), min_size=1,
                                   max_size=5), min_size=1, max_size=5),
       list_type=st.sampled_from(["List", "Sequence"]))
def test_records_read_back_identically_in_every_form(sentences, list_type) -> None:
    """Any sentences (tokens of any text, spaces and line breaks too) as parquet with ClassLabel ids,
    a save_to_disk folder and JSONL of names read back as written."""
    pairs = [([w for w, _ in s], [t for _, t in s]) for s in sentences]
    with tempfile.TemporaryDirectory() as folder:
        paths = [write_records(Path(folder) / name, pairs, form, list_type=list_type)
                 for name, form in [("a.parquet", "parquet"), ("b", "folder"), ("c.jsonl", "jsonl-names")]]
        assert read(paths) == [(tuple(tk), tuple(tg)) for tk, tg in pairs] * 3


def test_other_fields_and_unlabelled_records(tmp_path: Path) -> None:
    path = write_records(tmp_path / "pos.parquet", SENTENCES, "parquet", tag_field="pos_tags")
    assert read([path], tag_field="pos_tags") == EXPECTED
    assert read([path], labelled=False) == [(tk, ()) for tk, _ in EXPECTED]
    with pytest.raises(CorpusError, match=r"pos\.parquet: no column 'ner_tags'; columns: tokens"):
        read([path])
    with pytest.raises(CorpusError, match=r"pos\.parquet: token field 1 is a CoNLL column number"):
        read([path], token_field=1)


@pytest.mark.parametrize("record, where", [
    ({"tokens": ["EU", "rejects"], "ner_tags": [3]}, r"2 tokens \('tokens'\) but 1 tags \('ner_tags'\)"),
    ({"tokens": ["EU"], "ner_tags": [9]}, r"tag 0 of 'ner_tags' is id 9, outside the file's ClassLabel names \(9: O, "),
    ({"tokens": ["EU"], "ner_tags": [-1]}, r"tag 0 of 'ner_tags' is id -1, not a class id"),
    ({"tokens": ["EU"], "ner_tags": [True]}, r"tag 0 of 'ner_tags' is bool, not a tag name or class id"),
    ({"tokens": ["EU"], "ner_tags": [""]}, r"tag 0 of 'ner_tags' is empty"),
    ({"tokens": "EU rejects", "ner_tags": [3, 0]}, r"field 'tokens' is str, not a list of tokens"),
    ({"tokens": ["EU", ""], "ner_tags": [3, 0]}, r"token 1 of 'tokens' is empty"),
    ({"tokens": ["EU", 7], "ner_tags": [3, 0]}, r"token 1 of 'tokens' is int"),
    ({"tokens": ["EU"], "ner_tags": None}, r"field 'ner_tags' is null, not a list of tags"),
    ({"tokens": ["EU"]}, r"no field 'ner_tags'"),
])
def test_bad_records_name_their_line(tmp_path: Path, record: dict[str, Any], where: str) -> None:
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"tokens": ["ok"], "ner_tags": [0]}) + "\n\n" + json.dumps(record) + "\n")
    (tmp_path / "dataset_info.json").write_text(json.dumps({"features": features(NAMES)}))
    with pytest.raises(CorpusError, match=rf"train\.jsonl:3: {where}") as err:
        read([path])
    assert "\n" not in str(err.value)


def test_bad_rows_of_parquet_name_their_row(tmp_path: Path) -> None:
    table = hf_table(SENTENCES, NAMES)
    tags = table.column("ner_tags").to_pylist()
    tags[2] = tags[2][:1]
    pq.write_table(table.set_column(1, "ner_tags", pa.array(tags)), tmp_path / "t.parquet")
    with pytest.raises(CorpusError, match=r"t\.parquet: row 2: 2 tokens \('tokens'\) but 1 tags"):
        read([tmp_path / "t.parquet"])


@pytest.mark.parametrize("form", ["jsonl", "parquet", "arrow"])
def test_a_record_without_tokens_is_no_sentence_and_is_counted(tmp_path: Path, form: str) -> None:
    """A row of no tokens (datasets keeps such rows) is no sentence, counted in ReadStats.skipped_empty so
    that reports warn: nb predict's output, one line a record, then has fewer lines than the file has rows
    (was: dropped silently)."""
    rows = [([], []), *SENTENCES[:2], ([], [])]
    path = write_records(tmp_path / f"t.{form}", rows, form)
    stats = ReadStats()
    got = list(iter_sentences([str(path)], stats=stats))
    assert [s.tokens for s in got] == [tuple(tk) for tk, _ in SENTENCES[:2]]
    assert [s.origin.line if form == "jsonl" else s.origin.row for s in got] == ([2, 3] if form == "jsonl" else [1, 2])
    assert stats.skipped_empty == 2
    assert stats.notes("t") == ["t: 2 record(s) with no tokens skipped (no sentence to tag)"]


def test_classlabel_names_through_every_features_shape(tmp_path: Path) -> None:
    label = {"names": ["neg", "pos"], "_type": "ClassLabel"}
    assert classlabel_names({"label": label}, "label") == ["neg", "pos"]
    for wrapped in ({"feature": label, "_type": "List"}, {"feature": label, "length": -1, "_type": "Sequence"},
                    [label]):
        assert classlabel_names({"tags": wrapped}, "tags") == ["neg", "pos"]
    assert classlabel_names({"tags": {"feature": {"dtype": "int64", "_type": "Value"}, "_type": "List"}}, "tags") is None
    assert classlabel_names({"label": label}, "other") is None
    (tmp_path / "info.json").write_text(json.dumps({"info": {"features": {"label": label}}}))
    assert features_file_names(tmp_path / "info.json", "label") == ["neg", "pos"]
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(CorpusError, match=r"bad\.json: features file is not JSON"):
        features_file_names(tmp_path / "bad.json", "label")


@pytest.mark.parametrize("where", ["metadata", "dataset_info"])
def test_repeated_classlabel_names_are_refused_naming_the_file(tmp_path: Path, where: str) -> None:
    """ClassLabel names that repeat (two ids, one name) are one line naming the file and the field (was:
    'label names repeat: O, ..., O', naming nothing)."""
    names = NAMES + ["O"]
    if where == "metadata":
        path = write_records(tmp_path / "t.parquet", SENTENCES, "parquet", names=names)
        fragment = rf"t\.parquet: schema metadata 'huggingface': the ClassLabel names of 'ner_tags' repeat 'O' \(10 names"
    else:
        path = write_records(tmp_path / "t.jsonl", SENTENCES, "jsonl")
        (tmp_path / "dataset_info.json").write_text(json.dumps({"features": features(names)}))
        fragment = r"dataset_info\.json: the ClassLabel names of 'ner_tags' repeat 'O'"
    with pytest.raises(CorpusError, match=fragment):
        read([path])
