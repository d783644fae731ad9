"""The pure parts of nbcli.sweeps: each arm's mean ± SE / σ against the statistics module on random
values, dotted lookups, --set values, recipe bases, run names, --resources, and the order in which a
recipe's options, its arms', its scale's and --set combine."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbcli.errors import ConfigError
from nbcli.sweeps.aggregate import summarise
from nbcli.sweeps.execute import changed_options, parse_resources
from nbcli.sweeps.plan import build_plan, run_id
from nbcli.sweeps.recipe import load_recipe, merged, toml_value
from nbcli.sweeps.scoring import lookup

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@given(st.lists(finite, min_size=2, max_size=12))
def test_summary_is_the_mean_and_the_sample_spread(values: list[float]) -> None:
    cell = summarise(values, "se")
    assert cell["mean"] == pytest.approx(statistics.fmean(values), abs=1e-6)
    assert cell["sd"] == pytest.approx(statistics.stdev(values), rel=1e-6, abs=1e-6)
    assert cell["se"] == pytest.approx(statistics.stdev(values) / math.sqrt(len(values)), rel=1e-6, abs=1e-6)
    assert cell["n"] == len(values) and cell["spread"] == "se"


def test_one_seed_has_no_spread() -> None:
    assert summarise([3.5], "sd") == {"mean": 3.5, "se": None, "sd": None, "n": 1, "spread": "sd"}


def test_lookup_and_values() -> None:
    data = {"overall": {"accuracy": 0.5}, "rows": [{"kl": 1.0}, {"kl": 2.0}]}
    assert lookup(data, "overall.accuracy") == 0.5 and lookup(data, "rows.1.kl") == 2.0
    assert lookup(data, "rows.2.kl") is None and lookup(data, "overall.f1") is None and lookup(None, "a") is None
    assert [toml_value(t) for t in ("400", "0.5", "true", '"de"', "[1, 2]", "de", "")] == [400, 0.5, True, "de",
                                                                                          [1, 2], "de", ""]


@given(st.text(min_size=1, max_size=30), st.integers(min_value=0, max_value=2**63 - 1))
def test_run_names_are_file_names_with_the_seed_suffix(arm: str, seed: int) -> None:
    name = run_id(arm, seed)
    assert name.endswith(f"-s{seed}") and "/" not in name and name not in ("", ".", "..")
    assert all(c.isascii() and (c.isalnum() or c in "._-") for c in name)


def test_bases_merge_tables_and_false_removes_one() -> None:
    base = {"a": {"x": 1, "y": 2}, "evaluate": {"kind": "k"}, "list": [1]}
    assert merged(base, {"a": {"y": 3}, "evaluate": False, "list": [2]}) == {"a": {"x": 1, "y": 3}, "list": [2]}


def test_resources_and_changes() -> None:
    assert parse_resources(["GPU=1", "MEM=2.5"]) == {"GPU": 1.0, "MEM": 2.5}
    for bad in ("GPU", "GPU=0", "=1", "GPU=x"):
        with pytest.raises(ConfigError, match="--resources"):
            parse_resources([bad])
    assert changed_options({"a": 1, "b": 2}, {"a": 1, "b": 3, "c": 4}) == "b: 2 -> 3, c: None -> 4"


RECIPE = """\
task = "lm"
[data.corpus]
help = "documents"
[options]
corpus = ["{corpus}"]
tokenizer = "t.model"
steps = 100
lr = 0.001
[scales.small]
seeds = [0, 1]
options = { steps = 5 }
[scales.big]
seeds = [3]
[[axes]]
name = "bias"
values = [{ name = "unigram", options = { bias_init = "unigram", steps = 50 } }, { name = "zero", options = { bias_init = "zero" } }]
"""


def test_options_combine_recipe_then_arm_then_scale_then_set(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text(RECIPE)
    (tmp_path / "c.txt").write_text("a b\n")
    recipe = load_recipe(path)
    small = build_plan(recipe, scale="small", data=[f"corpus={tmp_path / 'c.txt'}"], sets=["lr=0.01"])
    assert [(r.id, r.options["steps"], r.options["lr"]) for r in small.runs] == [
        ("unigram-s0", 5, 0.01), ("unigram-s1", 5, 0.01), ("zero-s0", 5, 0.01), ("zero-s1", 5, 0.01)]
    assert small.runs[0].options["corpus"] == [str(tmp_path / "c.txt")] and small.runs[1].options["seed"] == 1
    big = build_plan(recipe, scale="big", data=[f"corpus={tmp_path / 'c.txt'}"], arms=["u*"])
    assert [(r.id, r.options["steps"]) for r in big.runs] == [("unigram-s3", 50)]
    assert small.runs[0].settings_hash != big.runs[0].settings_hash
    seeded = build_plan(recipe, scale="small", data=[f"corpus={tmp_path / 'c.txt'}"], seeds=[7], arms=["zero"])
    assert [(r.id, r.options["seed"]) for r in seeded.runs] == [("zero-s7", 7)]
    with pytest.raises(ConfigError, match="no scale"):
        build_plan(recipe, data=[f"corpus={tmp_path / 'c.txt'}"])   # two scales, no 'paper': name one
