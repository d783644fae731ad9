"""`nb reproduce --data ROLE=ID:CONFIG:SPLIT`: a Hub dataset id from a Hugging Face cache built on
disk (tests/hub_cache.py), offline: kept as given and checked before anything starts (one line
naming the role, the id and the fetch command), and a classification item run from it equals the
same item run from its parquet files given as paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nbcli.errors import InputError
from nbcli.sweeps.items import item_recipe
from nbcli.sweeps.plan import check_data
from tests.cli.helpers import assert_one_line_error, run_nb
from tests.corpus.test_hub_datasets import CARD, parquet_bytes
from tests.hub_cache import add_dataset_snapshot, commit_hash


@pytest.fixture
def glue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sst2: dict[str, Path]) -> Path:
    """The sst2 fixture's TSV files as nyu-mll/glue's sst2 config in a cache under tmp_path."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def table(path: Path) -> bytes:
        rows = [line.split("\t") for line in path.read_text().splitlines()[1:]]
        return parquet_bytes({"sentence": [r[0] for r in rows], "label": [r[1] for r in rows]})

    return add_dataset_snapshot(tmp_path / "hf" / "hub", "nyu-mll/glue", {
        "README.md": CARD.encode(), "sst2/train-00000-of-00001.parquet": table(sst2["train"]),
        "sst2/validation-00000-of-00001.parquet": table(sst2["valid"])}, commit_hash("glue"))


def test_dataset_ids_are_kept_and_checked_before_anything_starts(glue: Path, tmp_path: Path) -> None:
    recipe = item_recipe("002-table1")
    data = {"sst2_train": "nyu-mll/glue:sst2:train", "sst2_valid": "nyu-mll/glue:sst2:validation",
            "bert": "bert-base-uncased"}
    assert check_data(recipe, data, set(data)) == data       # ids as given (a model id is not made a path either)
    with pytest.raises(InputError) as err:
        check_data(recipe, {**data, "sst2_train": "org/absent:sst2:train"}, set(data))
    assert str(err.value).startswith("--data sst2_train=org/absent:sst2:train: ")
    assert "hf download --repo-type dataset org/absent" in str(err.value)
    done = run_nb("reproduce", "002-table1", "--scale", "smoke", "--arms", "SST2/BERT/BERT", "--data",
                  "sst2_train=nyu-mll/glue:sst2:test", "--data", "sst2_valid=nyu-mll/glue:sst2:validation",
                  "--data", "bert=bert-base-uncased", "--out", tmp_path / "r")
    assert done.returncode == 1
    assert_one_line_error(done.stderr.decode(), "--data sst2_train=nyu-mll/glue:sst2:test", "no split 'test'")
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_an_item_from_dataset_ids_equals_the_item_from_its_files(glue: Path, tmp_path: Path,
                                                                 sst2: dict[str, Path]) -> None:
    results = {}
    for name, train, valid in (("id", "nyu-mll/glue:sst2:train", "nyu-mll/glue:sst2:validation"),
                               ("path", glue / "sst2/train-00000-of-00001.parquet",
                                glue / "sst2/validation-00000-of-00001.parquet")):
        done = run_nb("reproduce", "002-table1", "--scale", "smoke", "--arms", "SST2/BERT/BERT", "--data",
                      f"sst2_train={train}", "--data", f"sst2_valid={valid}", "--data", f"bert={sst2['bert']}",
                      "--out", tmp_path / name, "--json", timeout=600)
        assert done.returncode == 0, done.stderr.decode()
        results[name] = {r["run"].rsplit("/", 1)[-1]: r["metrics"] for r in json.loads(done.stdout)["runs"]}
    assert results["id"] == results["path"] and results["id"]
