"""Hub dataset ids (`ID[@REV][:CONFIG[:SPLIT]]`) read from a Hugging Face cache built on disk in
huggingface_hub's layout (snapshots of links into blobs; tests/hub_cache.py), offline: the spec
parser, the configs and splits of a dataset card and of the Hub's file layouts, the records equal to
the parquet files' own (read by pyarrow), and one-line errors naming the id and the fetch command."""

from __future__ import annotations

import io
import json
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbcli.corpus import discover_inputs, iter_examples, iter_pairs, read_documents
from nbcli.errors import InputError
from nbcli.dataset_layout import snapshot_layout
from nbcli.resolve_datasets import DatasetSpec, dataset_files, dataset_repo_ids, dataset_split, parse_dataset_spec
from tests.hub_cache import add_dataset_snapshot, commit_hash

LABELS = ["negative", "positive"]
CARD = """---
configs:
- config_name: sst2
  data_files:
  - split: train
    path: sst2/train-*
  - split: validation
    path: sst2/validation-*
- config_name: cola
  data_files:
  - split: train
    path: cola/train-*
---
# GLUE
"""


def parquet_bytes(columns: dict[str, list], names: list[str] | None = None) -> bytes:
    """A parquet file of `columns`; `names`: the `label` column's ClassLabel names in the schema metadata,
    as `datasets` writes them."""
    table = pa.table(columns)
    if names is not None:
        features = {"label": {"names": names, "_type": "ClassLabel"}}
        table = table.replace_schema_metadata({"huggingface": json.dumps({"info": {"features": features}})})
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def sentences(n: int, seed: int) -> dict[str, list]:
    words = "the cat sat on a mat and a dog ran off".split()
    return {"sentence": [" ".join(words[(seed + i + k) % len(words)] for k in range(3 + i % 4)) for i in range(n)],
            "label": [(seed * 7 + i) % 2 for i in range(n)], "idx": list(range(n))}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    cache = tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    return cache


@pytest.fixture
def glue(cache):
    """nyu-mll/glue with a card naming two configs (sst2: train in two shards and validation; cola)."""
    return add_dataset_snapshot(cache, "nyu-mll/glue", {
        "README.md": CARD.encode(),
        "sst2/train-00000-of-00002.parquet": parquet_bytes(sentences(5, 1), LABELS),
        "sst2/train-00001-of-00002.parquet": parquet_bytes(sentences(4, 2), LABELS),
        "sst2/validation-00000-of-00001.parquet": parquet_bytes(sentences(3, 3), LABELS),
        "cola/train-00000-of-00001.parquet": parquet_bytes(sentences(2, 4)),
    }, commit_hash("glue"))


# ---------------------------------------------------------------------------------------------
# The spec


@pytest.mark.parametrize("text, spec", [
    ("nyu-mll/glue:sst2:train", DatasetSpec("nyu-mll/glue", None, "sst2", "train")),
    ("glue:sst2:train", DatasetSpec("glue", None, "sst2", "train")),
    ("stanfordnlp/imdb", DatasetSpec("stanfordnlp/imdb")),
    ("stanfordnlp/imdb:test", DatasetSpec("stanfordnlp/imdb", None, "test")),
    ("org/name::validation", DatasetSpec("org/name", None, None, "validation")),
    ("org/name@refs/convert/parquet:default:train", DatasetSpec("org/name", "refs/convert/parquet", "default", "train")),
])
def test_spec_is_parsed(text, spec) -> None:
    assert parse_dataset_spec(text) == spec


@pytest.mark.parametrize("text", ["", "train.parquet", "./glue", "data/*.parquet", "hf://datasets/a/b", "a/b/c",
                                  "org/name:", "org/name:a:", "org/name:a:b:c", "org/name:a b", "C:\\data"])
def test_paths_and_malformed_specs_are_no_dataset_ids(text) -> None:
    assert parse_dataset_spec(text) is None


_NAME = st.from_regex(r"[a-z][a-z0-9]{0,6}(-[a-z0-9]{1,4})?", fullmatch=True)


@given(owner=st.none() | _NAME, name=_NAME, config=st.none() | _NAME, split=st.none() | _NAME)
def test_spec_round_trips(owner, name, config, split) -> None:
    repo = f"{owner}/{name}" if owner else name
    text = repo + (f":{config or ''}:{split}" if split else f":{config}" if config else "")
    assert parse_dataset_spec(text) == DatasetSpec(repo, None, config, split)


@given(text=st.text(alphabet=st.sampled_from("ab/:@._-*~ \\0"), max_size=20))
def test_any_text_parses_to_a_spec_or_none_and_a_missing_one_is_an_input_error(text) -> None:
    spec = parse_dataset_spec(text)
    assert spec is None or (spec.repo_id and text.startswith(spec.repo_id))
    with tempfile.TemporaryDirectory() as empty, pytest.MonkeyPatch.context() as env:
        env.setenv("HF_HUB_CACHE", empty)
        try:
            assert dataset_files(text) is None                    # an empty cache has no files to find
        except InputError as err:
            assert spec is not None and str(err).startswith(text + ": ") and "\n" not in str(err)


# ---------------------------------------------------------------------------------------------
# Configs, splits and files


def test_card_configs_name_the_files_of_each_split(glue) -> None:
    found = dataset_split("nyu-mll/glue:sst2:train")
    assert found.folder == glue and found.commit == commit_hash("glue")
    assert [f.relative_to(glue).as_posix() for f in found.files] == [
        "sst2/train-00000-of-00002.parquet", "sst2/train-00001-of-00002.parquet"]
    assert found.to_dict()["config"] == "sst2" and found.to_dict()["split"] == "train"
    assert dataset_split("nyu-mll/glue:sst2:validation").files == (glue / "sst2/validation-00000-of-00001.parquet",)
    assert dataset_split("nyu-mll/glue:sst2:dev").split == "validation"         # dev names validation
    assert dataset_split("nyu-mll/glue:sst2").split == "train"                  # no split: train
    assert dataset_split("nyu-mll/glue:cola").files == (glue / "cola/train-00000-of-00001.parquet",)


def test_examples_equal_the_parquet_files_read_by_pyarrow(glue) -> None:
    expected = []
    for shard in ("sst2/train-00000-of-00002.parquet", "sst2/train-00001-of-00002.parquet"):
        table = pq.read_table(glue / shard).to_pydict()
        expected += list(zip(table["sentence"], table["label"]))
    got = [(ex.text, ex.label) for ex in iter_examples(["nyu-mll/glue:sst2:train"], text_field="sentence")]
    assert got == expected and len(got) == 9
    assert [s.origin for s in discover_inputs(["nyu-mll/glue:sst2:train"])] == ["nyu-mll/glue:sst2:train"] * 2


@pytest.mark.parametrize("files, spec, wanted", [
    ({"data/train-00000-of-00001.parquet": 4, "data/test-00000-of-00001.parquet": 2}, "o/d:test",
     ["data/test-00000-of-00001.parquet"]),
    ({"plain_text/train/0000.parquet": 3, "plain_text/train/0001.parquet": 2, "plain_text/unsupervised/0000.parquet": 1},
     "o/d:plain_text:unsupervised", ["plain_text/unsupervised/0000.parquet"]),
    ({"dev.jsonl": 2, "train.jsonl": 3, "notes.txt": 1}, "o/d::validation", ["dev.jsonl"]),
    ({"corpus.jsonl": 2}, "o/d", ["corpus.jsonl"]),   # no split in any name: all of it is train
])
def test_splits_inferred_from_the_hub_layouts(cache, files, spec, wanted) -> None:
    contents = {name: (parquet_bytes(sentences(n, 0)) if name.endswith(".parquet") else
                       "".join(json.dumps({"text": s}) + "\n" for s in sentences(n, 0)["sentence"]).encode())
                for name, n in files.items()}
    snapshot = add_dataset_snapshot(cache, "o/d", contents, commit_hash("d"))
    assert [f.relative_to(snapshot).as_posix() for f in dataset_split(spec).files] == wanted


def test_documents_of_a_dataset_id_equal_those_of_its_files(glue) -> None:
    files = dataset_files("nyu-mll/glue:sst2:train")
    assert read_documents(["nyu-mll/glue:sst2:train"], field="sentence") == read_documents(files, field="sentence")


def test_translation_pairs_from_a_cached_translation_dataset(cache) -> None:
    rows = [{"de": f"satz {i}", "en": f"sentence {i}"} for i in range(5)]
    add_dataset_snapshot(cache, "wmt/wmt16", {
        "de-en/validation-00000-of-00001.parquet": parquet_bytes({"translation": rows})}, commit_hash("wmt"))
    pairs = list(iter_pairs(["wmt/wmt16:de-en:validation"], "en", "de"))
    assert [(p.source, p.target) for p in pairs] == [(r["en"], r["de"]) for r in rows]


def test_a_local_path_of_the_same_name_wins(glue, tmp_path) -> None:
    (tmp_path / "nyu-mll").mkdir()
    (tmp_path / "nyu-mll" / "glue").write_text("a local line\n")
    assert read_documents(["nyu-mll/glue"]) == ["a local line"]


def test_the_card_default_config_is_taken(cache) -> None:
    card = "---\nconfigs:\n- config_name: a\n  data_files: a.jsonl\n- config_name: b\n  default: true\n  data_files: b.jsonl\n---\n"
    add_dataset_snapshot(cache, "o/two", {"README.md": card.encode(), "a.jsonl": b'{"text": "a"}\n',
                                          "b.jsonl": b'{"text": "b"}\n'}, commit_hash("two"))
    assert read_documents(["o/two"]) == ["b"] and read_documents(["o/two:a"]) == ["a"]


def test_repo_ids_of_the_inputs(glue) -> None:
    assert dataset_repo_ids(["nyu-mll/glue:sst2:train", "x.txt", "nyu-mll/glue:sst2:validation", "glue:cola"]) == [
        "nyu-mll/glue", "glue"]


def test_layout_of_a_snapshot(glue) -> None:
    layout, default = snapshot_layout(glue)
    assert default is None and {c: sorted(s) for c, s in layout.items()} == {
        "sst2": ["train", "validation"], "cola": ["train"]}


# ---------------------------------------------------------------------------------------------
# One line when the cache lacks something


def test_missing_dataset_names_the_id_and_the_fetch_command(cache) -> None:
    with pytest.raises(InputError) as err:
        discover_inputs(["org/absent:cfg:train"])
    message = str(err.value)
    assert message.startswith("org/absent:cfg:train: ") and "\n" not in message
    assert "hf download --repo-type dataset org/absent" in message and str(cache) in message


def test_a_bare_name_that_is_not_cached_stays_a_missing_file(cache) -> None:
    with pytest.raises(InputError, match=r"^nope: no such file or directory$"):
        discover_inputs(["nope"])


@pytest.mark.parametrize("spec, fragments", [
    ("nyu-mll/glue:mnli:train", ["no config 'mnli'", "sst2, cola"]),
    ("nyu-mll/glue:sst2:test", ["no split 'test'", "train, validation"]),
    ("nyu-mll/glue@v2:sst2", ["revision 'v2'", "cached: main", "--revision v2"]),
    ("nyu-mll/glue", ["2 configs (sst2, cola)", "ID:CONFIG"]),
])
def test_what_the_cache_lacks_is_one_line(glue, spec, fragments) -> None:
    with pytest.raises(InputError) as err:
        discover_inputs([spec])
    message = str(err.value)
    assert message.startswith(spec + ": ") and "\n" not in message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_a_partial_snapshot_says_which_files_to_fetch(cache) -> None:
    card = CARD.replace("- config_name: cola", "- config_name: cola\n  default: false")
    add_dataset_snapshot(cache, "o/partial", {"README.md": card.encode(),
                                              "sst2/train-00000-of-00002.parquet": parquet_bytes(sentences(2, 0))},
                         commit_hash("partial"))
    with pytest.raises(InputError, match=r"^o/partial:cola: .*lacks the files of config 'cola' split 'train'.*"
                                         r"hf download --repo-type dataset o/partial"):
        discover_inputs(["o/partial:cola"])


def test_a_script_only_dataset_is_refused(cache) -> None:
    add_dataset_snapshot(cache, "o/scripted", {"scripted.py": b"import datasets\n", "README.md": b"# x\n"},
                         commit_hash("scripted"))
    with pytest.raises(InputError, match=r"^o/scripted: .*loading script \(scripted.py\), which nb never runs.*"
                                         r"--revision refs/convert/parquet"):
        dataset_split("o/scripted")
