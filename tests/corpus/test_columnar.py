"""Parquet, Arrow IPC, `datasets` folders and fsspec URLs: counted as documents, bit for bit equal to
the same documents as JSONL, for every tokenizer family; nulls skipped and reported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

import nbcli.corpus.columnar as columnar
from nbcli.corpus.columnar_files import pyarrow_module
from conftest import english_like_lines
from nbcli.corpus import discover_inputs
from nbcli.counting import CountOptions, count_corpus
from nbcli.errors import CorpusError, InputError
from nbcli.tokenizers import load_tokenizer
from tests import forked_nb
from tests.tokenizers.test_families import FAMILIES

# Documents with what a column holds and text files cannot: line breaks and CRs inside, tabs, runs of
# spaces, empty and whitespace-only documents, Unicode; None is a null.
DOCS: list[str | None] = [
    *english_like_lines(300, seed=7), None, "", " ", "two\nlines", "crlf\r\nend", "lone\rcr", "\n", "tab\there",
    "  indented   runs", "日本語のテキスト 🎉", None, "trailing space ", "x" * 300, "last\n",
]


def as_jsonl(path: Path, docs: list[str | None]) -> Path:
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs if d is not None), encoding="utf-8")
    return path


def count(inputs: list[str], tokenizer: Path, workers: int = 1, **options: object) -> object:
    return count_corpus(inputs, load_tokenizer(tokenizer), CountOptions(**options), workers=workers)  # type: ignore[arg-type]


def write_parquet(path: Path, docs: list[str | None], dtype: object = pa.string(), row_group_size: int = 50,
                  **extra: object) -> Path:
    array = pa.array(docs, pa.string())
    if dtype == "dictionary":
        array = array.dictionary_encode()
    elif dtype != pa.string():
        array = array.cast(dtype)
    pq.write_table(pa.table({"text": array, **extra}), path, row_group_size=row_group_size)
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, sp_model: Path) -> object:
    return count([str(as_jsonl(tmp_path_factory.mktemp("ref") / "d.jsonl", DOCS))], sp_model, format="jsonl")


@pytest.mark.parametrize("dtype", [pa.string(), pa.large_string(), "dictionary"], ids=str)
@pytest.mark.parametrize("workers", [1, 2])
def test_parquet_equals_jsonl(tmp_path: Path, sp_model: Path, reference: object, dtype: object, workers: int) -> None:
    path = write_parquet(tmp_path / "d.parquet", DOCS, dtype, id=list(range(len(DOCS))))
    assert pq.ParquetFile(path).metadata.num_row_groups == 7
    result = count([str(path)], sp_model, workers)
    np.testing.assert_array_equal(result.counts, reference.counts)
    assert result.documents == reference.documents == len([d for d in DOCS if d])
    assert result.skipped_nulls == 2 and reference.skipped_nulls == 0
    assert result.bytes_read == sum(len(d.encode()) for d in DOCS if d)


def test_parquet_whole_documents_equal_chunked(tmp_path: Path, sp_model: Path, reference: object) -> None:
    result = count([str(write_parquet(tmp_path / "d.parquet", DOCS))], sp_model, chunked=False)
    np.testing.assert_array_equal(result.counts, reference.counts)


def test_row_groups_are_the_units(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "d.parquet", DOCS, row_group_size=100)
    units = columnar.plan_columnar(discover_inputs([str(path)]), "text")[str(path)]
    assert [(u.start, u.stop, u.first_row) for u in units] == [(0, 1, 0), (1, 2, 100), (2, 3, 200), (3, 4, 300)]
    assert sum(u.progress_bytes for u in units) == path.stat().st_size


def test_empty_and_zero_row_group_files(tmp_path: Path, sp_model: Path, reference: object) -> None:
    empty = write_parquet(tmp_path / "empty.parquet", [])
    zero = tmp_path / "zero.parquet"
    pq.ParquetWriter(zero, pa.schema([("text", pa.string())])).close()
    assert pq.ParquetFile(zero).metadata.num_row_groups == 0
    data = write_parquet(tmp_path / "d.parquet", DOCS)
    result = count([str(empty), str(zero), str(data)], sp_model)
    np.testing.assert_array_equal(result.counts, reference.counts)
    with pytest.raises(CorpusError, match="empty corpus"):
        count([str(empty), str(zero)], sp_model)


def write_arrow(path: Path, docs: list[str | None], stream: bool, chunk: int = 40) -> Path:
    table = pa.table({"text": pa.array(docs, pa.string()), "n": list(range(len(docs)))})
    with (ipc.new_stream if stream else ipc.new_file)(path, table.schema) as writer:
        writer.write_table(table, max_chunksize=chunk)
    return path


@pytest.mark.parametrize("stream", [False, True], ids=["file", "stream"])
@pytest.mark.parametrize("workers", [1, 2])
def test_arrow_ipc_equals_jsonl(tmp_path: Path, sp_model: Path, reference: object, stream: bool, workers: int,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(columnar, "UNIT_BYTES", 2000)  # several units of a few batches each
    path = write_arrow(tmp_path / "d.arrow", DOCS, stream)
    units = columnar.plan_columnar(discover_inputs([str(path)]), "text")[str(path)]
    assert len(units) > 2 and units[0].kind == ("arrow-stream" if stream else "arrow-file")
    result = count([str(path)], sp_model, workers)
    np.testing.assert_array_equal(result.counts, reference.counts)
    assert result.skipped_nulls == 2


def save_to_disk_layout(folder: Path, docs: list[str | None], shards: int = 2) -> Path:
    """The layout `datasets.Dataset.save_to_disk` writes: Arrow stream shards, state.json, dataset_info.json."""
    folder.mkdir(parents=True)
    step = -(-len(docs) // shards)
    names = []
    for i in range(shards):
        name = f"data-{i:05d}-of-{shards:05d}.arrow"
        write_arrow(folder / name, docs[i * step:(i + 1) * step], stream=True, chunk=1000)
        names.append({"filename": name})
    (folder / "state.json").write_text(json.dumps({"_data_files": names, "_fingerprint": "f", "_split": None}))
    (folder / "dataset_info.json").write_text(json.dumps({"features": {"text": {"dtype": "string",
                                                                               "_type": "Value"}}}))
    return folder


def test_datasets_folders(tmp_path: Path, sp_model: Path, reference: object) -> None:
    single = save_to_disk_layout(tmp_path / "ds", DOCS)
    assert [Path(s.path).name for s in discover_inputs([str(single)])] == \
        ["data-00000-of-00002.arrow", "data-00001-of-00002.arrow"]
    np.testing.assert_array_equal(count([str(single)], sp_model, 2).counts, reference.counts)
    splits = tmp_path / "dd"
    save_to_disk_layout(splits / "train", DOCS[:200])
    save_to_disk_layout(splits / "test", DOCS[200:], shards=1)
    (splits / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "test"]}))
    assert all(s.kind == "arrow" for s in discover_inputs([str(splits)]))
    np.testing.assert_array_equal(count([str(splits)], sp_model).counts, reference.counts)


def test_mixed_inputs_and_sniffed_kind(tmp_path: Path, sp_model: Path) -> None:
    half = len(DOCS) // 2
    text_docs = [d for d in DOCS[:half] if d and "\n" not in d and "\r" not in d]
    (tmp_path / "a.txt").write_text("".join(d + "\n" for d in text_docs), encoding="utf-8")
    write_parquet(tmp_path / "shard-00001", DOCS[half:])  # no suffix: known by its magic
    mixed = count([str(tmp_path / "a.txt"), str(tmp_path / "shard-00001")], sp_model)
    alone = count([str(as_jsonl(tmp_path / "r.jsonl", text_docs + DOCS[half:]))], sp_model, format="jsonl")
    np.testing.assert_array_equal(mixed.counts, alone.counts)
    assert [s.kind for s in mixed.sources] == ["text", "parquet"]


@pytest.mark.parametrize("fixture", list(FAMILIES))
def test_every_family_exact_against_jsonl(fixture: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    tokenizer = request.getfixturevalue(fixture)
    jsonl = count([str(as_jsonl(tmp_path / "d.jsonl", DOCS))], tokenizer, format="jsonl")
    parquet = count([str(write_parquet(tmp_path / "d.parquet", DOCS, pa.large_string()))], tokenizer)
    arrow = count([str(write_arrow(tmp_path / "d.arrow", DOCS, stream=True))], tokenizer)
    np.testing.assert_array_equal(parquet.counts, jsonl.counts)
    np.testing.assert_array_equal(arrow.counts, jsonl.counts)
    assert parquet.documents == arrow.documents == jsonl.documents


@pytest.mark.parametrize("protocol", ["memory", "file"])
def test_remote_paths_through_fsspec(tmp_path: Path, sp_model: Path, reference: object, protocol: str) -> None:
    import fsspec

    half = len(DOCS) // 2
    if protocol == "memory":
        fs = fsspec.filesystem("memory")
        for i, part in enumerate((DOCS[:half], DOCS[half:])):
            with fs.open(f"/nb-test/shard-{i}.parquet", "wb") as handle:
                pq.write_table(pa.table({"text": pa.array(part, pa.string())}), handle, row_group_size=40)
        url = "memory://nb-test/*.parquet"
    else:
        write_parquet(tmp_path / "shard-0.parquet", DOCS[:half], n=list(range(half)))  # the Arrow shard's schema
        write_arrow(tmp_path / "shard-1.arrow", DOCS[half:], stream=True)
        url = f"file://{tmp_path}"
    try:
        result = count([url], sp_model, workers=2)
    finally:
        if protocol == "memory":
            fs.rm("/nb-test", recursive=True)
    np.testing.assert_array_equal(result.counts, reference.counts)
    assert all(s.remote for s in result.sources) and len(result.sources) == 2


def test_remote_text_and_compressed(tmp_path: Path, sp_model: Path, reference: object) -> None:
    import gzip

    jsonl = as_jsonl(tmp_path / "d.jsonl", DOCS).read_bytes()
    (tmp_path / "d.jsonl.gz").write_bytes(gzip.compress(jsonl))
    result = count([f"file://{tmp_path}/d.jsonl.gz"], sp_model, format="jsonl")
    np.testing.assert_array_equal(result.counts, reference.counts)


def test_column_problems_are_one_line(tmp_path: Path, sp_model: Path) -> None:
    path = write_parquet(tmp_path / "d.parquet", DOCS, score=[1.5] * len(DOCS))
    with pytest.raises(CorpusError, match=r"d.parquet: column 'score' is double, not a string"):
        count([str(path)], sp_model, field="score")
    with pytest.raises(CorpusError, match=r"d.parquet: no column 'body' .*text \(string\), score \(double\)"):
        count([str(path)], sp_model, field="body")


def test_schema_change_within_one_input(tmp_path: Path, sp_model: Path) -> None:
    write_parquet(tmp_path / "a.parquet", DOCS, id=list(range(len(DOCS))))
    write_parquet(tmp_path / "b.parquet", DOCS, id=[str(i) for i in range(len(DOCS))])
    with pytest.raises(CorpusError, match=r"b.parquet: schema differs from .*a.parquet.*column 'id' is string here"):
        count([str(tmp_path / "*.parquet")], sp_model)
    both = count([str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")], sp_model)  # separate inputs: fine
    assert both.documents == 2 * len([d for d in DOCS if d])


def test_remote_without_its_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib
    import sys

    registry = importlib.import_module("fsspec.registry")
    monkeypatch.setattr(registry, "_registry", {k: v for k, v in registry._registry.items() if k != "hf"})
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # as if not installed
    with pytest.raises(InputError, match=r"hf://datasets/o/n/\*.parquet: .*'huggingface_hub'.*nbcli\[remote\]"):
        discover_inputs(["hf://datasets/o/n/*.parquet"])


def test_fsspec_missing_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "fsspec", None)
    with pytest.raises(InputError, match=r"memory://x.parquet: .*'fsspec'.*nbcli\[remote\]"):
        discover_inputs(["memory://x.parquet"])


def test_parquet_bytes_are_never_text(tmp_path: Path, sp_model: Path, reference: object) -> None:
    import gzip

    path = write_parquet(tmp_path / "d.parquet", DOCS)
    named_txt = tmp_path / "d.txt"
    named_txt.write_bytes(path.read_bytes())
    np.testing.assert_array_equal(count([str(named_txt)], sp_model).counts, reference.counts)
    (tmp_path / "d.parquet.gz").write_bytes(gzip.compress(path.read_bytes()))
    with pytest.raises(CorpusError, match=r"d.parquet.gz: this is a parquet file, not text"):
        count([str(tmp_path / "d.parquet.gz")], sp_model)


def test_parquet_on_stdin_is_refused(tmp_path: Path, sp_model: Path) -> None:

    path = write_parquet(tmp_path / "d.parquet", DOCS)
    out = tmp_path / "out.safetensors"
    with path.open("rb") as stdin:
        proc = forked_nb.run(["nb", "count-unigrams", "-", "-t", str(sp_model), "-o", str(out)], stdin=stdin,
                              capture_output=True, text=True)
    assert proc.returncode == 1 and not out.exists()
    assert proc.stderr.strip() == ("nb: error: standard input: this is a parquet file, not text; give it as an "
                                   "uncompressed file (parquet and Arrow need random access)")


def test_train_reads_parquet_rows_as_jsonl_documents(tmp_path: Path, sp_model: Path) -> None:
    from nbcli.train.data import tokenize_corpus

    tok = load_tokenizer(sp_model)
    from_parquet = tokenize_corpus([str(write_parquet(tmp_path / "d.parquet", DOCS))], tok, "clm", 0.1)
    from_jsonl = tokenize_corpus([str(as_jsonl(tmp_path / "d.jsonl", DOCS))], tok, "clm", 0.1)
    assert from_parquet.fingerprint == from_jsonl.fingerprint and from_parquet.documents == from_jsonl.documents
    np.testing.assert_array_equal(from_parquet.counts, from_jsonl.counts)


@pytest.mark.parametrize("workers", [1, 2])
def test_large_row_groups_are_shared_by_units(tmp_path: Path, sp_model: Path, reference: object, workers: int,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(columnar, "UNIT_BYTES", 700)  # each row group of 50 rows is cut into slices
    monkeypatch.setattr(columnar, "BATCH_TEXT_BYTES", 700)  # slices start and end inside read batches
    path = write_parquet(tmp_path / "d.parquet", DOCS)
    units = columnar.plan_columnar(discover_inputs([str(path)]), "text")[str(path)]
    assert len(units) > 2 * 7 and sum(u.rows is not None for u in units) >= 12  # 7 row groups, the last small
    assert [u.first_row for u in units] == sorted({u.first_row for u in units})
    assert sum(u.progress_bytes for u in units) == path.stat().st_size
    result = count([str(path)], sp_model, workers)
    np.testing.assert_array_equal(result.counts, reference.counts)
    assert result.documents == reference.documents and result.skipped_nulls == 2


@pytest.mark.parametrize("workers", [1, 2])
def test_row_groups_stay_whole_but_the_last_ones_when_there_are_enough(
        tmp_path: Path, sp_model: Path, reference: object, workers: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A unit starting inside a row group decodes the pages before its slice, so with at least 3
    row groups per worker only the last `workers` groups are shared (at most `workers` ways)."""
    monkeypatch.setattr(columnar, "UNIT_BYTES", 700)  # every row group would be cut into slices
    path = write_parquet(tmp_path / "d.parquet", DOCS)
    sources = discover_inputs([str(path)])
    groups = len({u.start for u in columnar.plan_columnar(sources, "text")[str(path)]})
    assert groups >= 3 * workers
    units = columnar.plan_columnar(sources, "text", workers)[str(path)]
    per_group = {g: sum(u.start == g for u in units) for g in range(groups)}
    assert all(per_group[g] == 1 for g in range(groups - workers)), per_group
    assert all(1 <= per_group[g] <= workers for g in range(groups - workers, groups)), per_group
    if workers > 1:
        assert sum(per_group.values()) > groups  # the tail is shared
    assert sum(u.progress_bytes for u in units) == path.stat().st_size
    assert columnar._parts_of_groups([5000] * 4, 2) == [2] * 4  # too few groups: all shared, `workers` ways
    assert columnar._parts_of_groups([5000, 300], 3) == [3, 1]  # at most `workers` ways, a small group whole
    assert columnar._parts_of_groups([5000], 1) == [1]  # one worker: nothing to share, decoded once
    assert columnar._parts_of_groups([5000] * 6, None) == [8] * 6  # workers unknown (Dask): all shared
    result = count([str(path)], sp_model, workers)
    np.testing.assert_array_equal(result.counts, reference.counts)
    assert result.documents == reference.documents and result.skipped_nulls == 2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=12), max_size=30), st.booleans(), st.integers(0, 5), st.integers(0, 5))
def test_joined_lines_are_each_string_and_a_newline(texts: list[str], large: bool, head: int, tail: int) -> None:
    """What counting reads of a batch: every string followed by a newline, also for a sliced
    column (an offset into shared buffers) and for large_string."""
    column = pa.array(texts, pa.large_string() if large else pa.string())
    view = column.slice(min(head, len(texts)), max(0, len(texts) - head - tail))
    expected = "".join(text + "\n" for text in view.to_pylist()).encode("utf-8")
    assert columnar._joined_lines(pyarrow_module(), view) == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.sampled_from(["", " ", "a\nb", "c\rd", "\n"]), st.text(max_size=8)),
                max_size=40), st.booleans(), st.integers(0, 9), st.integers(0, 9))
def test_document_batch_splits_rows_by_line_breaks(docs: list[str | None], large: bool, head: int, tail: int) -> None:
    """A batch's lines are the non-empty rows without LF or CR, each ending in LF; its documents the
    other non-empty rows; nulls counted; also for a sliced column (an offset into the validity
    bitmap and the offsets)."""
    column = pa.array(docs, pa.large_string() if large else pa.string())
    view = column.slice(min(head, len(docs)), max(0, len(docs) - head - tail))
    rows = view.to_pylist()
    batch = columnar._document_batch(pyarrow_module(), "d.parquet", 0, view, "d.parquet")
    plain = [r for r in rows if r and "\n" not in r and "\r" not in r]
    assert batch.lines == "".join(r + "\n" for r in plain).encode("utf-8")
    assert batch.line_count == len(plain)
    assert batch.documents == [r for r in rows if r and ("\n" in r or "\r" in r)]
    assert batch.nulls == rows.count(None)
    assert batch.text_bytes == sum(len(r.encode("utf-8")) for r in rows if r)


def test_reading_rows_never_imports_pandas(tmp_path: Path) -> None:
    """pa.array, pa.scalar and BooleanArray.to_numpy import pandas where it is installed, ~0.45 s in
    every counting worker (issue 44): a worker's reading builds its arrays from numpy buffers. A
    stand-in `pandas` first on the path records any import of it."""
    path = write_parquet(tmp_path / "d.parquet", DOCS, row_group_size=100)
    fake = tmp_path / "fake" / "pandas"
    fake.mkdir(parents=True)
    marker = tmp_path / "imported"
    (fake / "__init__.py").write_text(f"open({str(marker)!r}, 'a').write('x')\nraise ImportError('stand-in')\n")
    script = (
        "import sys\n"
        "from nbcli.corpus import discover_inputs\n"
        "from nbcli.corpus.columnar import plan_columnar, read_unit\n"
        f"source = discover_inputs([{str(path)!r}])[0]\n"
        "batches = [b for u in plan_columnar([source], 'text', 2)[source.path] for b in read_unit(u)]\n"
        "assert sum(b.nulls for b in batches) == 2 and sum(len(b.documents) for b in batches) == 5\n"
        "print('pandas' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake.parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False" and not marker.exists()
    checked = subprocess.run([sys.executable, "-c", "import pyarrow as pa; pa.scalar('x')"], env=env,
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0 and marker.exists()  # the stand-in is what pyarrow would import
