"""Folder-per-class corpora (nbcli.corpus.folders): read as scikit-learn's load_files reads them (an
independent reader), what is not such a folder, and the errors."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from nbcli.corpus import ReadStats, iter_examples
from nbcli.corpus.folders import class_folders
from nbcli.errors import ConfigError, CorpusError


def make_folders(root: Path, docs: dict[str, list[bytes]]) -> Path:
    for label, texts in docs.items():
        (root / label).mkdir(parents=True, exist_ok=True)
        for i, text in enumerate(texts):
            (root / label / f"{i:03d}.txt").write_bytes(text)
    return root


WORD = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FFF, exclude_categories=("Cs",)), max_size=30)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs=st.dictionaries(st.from_regex(r"[a-z][a-z0-9_-]{0,8}", fullmatch=True),
                            st.lists(WORD, min_size=1, max_size=4), min_size=1, max_size=4))
def test_read_as_load_files_reads_it(tmp_path_factory: pytest.TempPathFactory, docs: dict[str, list[str]]) -> None:
    from sklearn.datasets import load_files

    root = make_folders(tmp_path_factory.mktemp("f") / "corpus", {k: [t.encode() for t in v] for k, v in docs.items()})
    (root / "README.TXT").write_text("not a document")       # top-level files are not documents
    got = list(iter_examples([str(root)]))
    ref = load_files(str(root), encoding="utf-8", shuffle=False)
    assert [e.text for e in got] == list(ref.data)
    assert [e.label for e in got] == [ref.target_names[i] for i in ref.target]
    assert all(e.pair is None and str(e.origin).endswith(".txt:1") for e in got)


def test_hidden_entries_invalid_utf8_and_unlabelled(tmp_path: Path) -> None:
    root = make_folders(tmp_path / "c", {"neg": [b"bad \xff byte", b"fine"], "pos": [b"good"]})
    (root / "pos" / ".DS_Store").write_bytes(b"\x00\x01")
    (root / ".git").mkdir()
    stats = ReadStats()
    got = list(iter_examples([str(root)], stats=stats))
    assert [(e.text, e.label) for e in got] == [("bad \ufffd byte", "neg"), ("fine", "neg"), ("good", "pos")]
    assert stats.notes("c") == ["c: 1 line(s) held invalid UTF-8 (replaced by U+FFFD)"]
    with pytest.raises(CorpusError, match=r"neg/000\.txt: invalid UTF-8 at byte 4"):
        list(iter_examples([str(root)], strict=True))
    assert [e.label for e in iter_examples([str(root)], label_field=None)] == [None, None, None]
    with pytest.raises(ConfigError, match="--text-pair-field does not apply"):
        list(iter_examples([str(root)], pair_field="b"))


def test_what_is_not_a_folder_per_class(tmp_path: Path) -> None:
    records = tmp_path / "records"
    (records / "part").mkdir(parents=True)
    (records / "part" / "train.jsonl").write_text('{"text": "a", "label": "x"}\n')
    assert class_folders(str(records)) is None                          # record files: read as before
    dataset = tmp_path / "ds"
    (dataset / "train").mkdir(parents=True)
    (dataset / "dataset_dict.json").write_text('{"splits": ["train"]}')
    (dataset / "train" / "data-00000-of-00001.arrow").write_bytes(b"")
    assert class_folders(str(dataset)) is None                          # a datasets save_to_disk folder
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "a.txt").write_text("x\n")
    assert class_folders(str(flat)) is None and class_folders(str(flat / "a.txt")) is None
    assert [e.text for e in iter_examples([str(records)])] == ["a"]


def test_a_folder_of_splits_and_an_empty_class_are_one_line_errors(tmp_path: Path) -> None:
    imdb = tmp_path / "aclImdb"
    for split in ("train", "test"):
        make_folders(imdb / split, {"neg": [b"awful"], "pos": [b"great"]})
    with pytest.raises(CorpusError) as err:
        list(iter_examples([str(imdb)]))
    assert f"--corpus {imdb / 'test'}" in str(err.value) and "\n" not in str(err.value)
    assert [e.label for e in iter_examples([str(imdb / "train")])] == ["neg", "pos"]
    (imdb / "train" / "unsup").mkdir()
    with pytest.raises(CorpusError, match=r"unsup: a class folder with no document"):
        list(iter_examples([str(imdb / "train")]))


def test_document_order_is_the_file_names(tmp_path: Path) -> None:
    rng = random.Random(0)
    names = [f"{rng.randrange(10**6)}.txt" for _ in range(20)]
    (tmp_path / "c" / "x").mkdir(parents=True)
    (tmp_path / "c" / "y").mkdir()
    for name in names:
        (tmp_path / "c" / "x" / name).write_text(name)
    (tmp_path / "c" / "y" / "only.txt").write_text("y")
    assert [e.text for e in iter_examples([str(tmp_path / "c")])][:-1] == sorted(set(names))
