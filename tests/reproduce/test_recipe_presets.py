"""Each packaged recipe whose paper has a preset runs that preset: at --scale paper every run's
configuration (the task's own, as nb train builds it) holds the preset's values, those the recipe's
arms vary excepted, and no recipe table types a preset value again; smoke and cpu change only what
their options name. The data have the papers' widths (D of app. A.2), built here; nothing trains."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nbcli.sweeps.items import item_ids, item_recipe
from nbcli.sweeps.plan import arm_preset, build_plan, recipe_arms
from nbcli.sweeps.recipe import Recipe
from nbcli.tasks.options import option_values
from nbcli.tasks.presets import CLASSIFICATION_PRESETS, TRANSLATION_PRESETS
from nbcli.tasks.registry import get_task

# The width of each role's embedding in the papers: GloVe 300, T5 512, BERT / mBERT / mT5 768 (paper 002 app. A.2).
WIDTHS = {"glove": 300, "t5": 512, "bert": 768, "mbert": 768, "mt5": 768}
# A value given one way of two replaces the other (nb train classification: --steps over the preset's epochs).
ONE_OF = {"steps": "epochs", "epochs": "steps", "warmup": "warmup_ratio", "warmup_ratio": "warmup"}
WITH_PRESETS = ("000-fig2", "000-fig3", "000-fig4", "001-table7", "002-table1", "002-table1-mt", "002-fig1", "002-table3")


def _data(folder: Path, recipe: Recipe) -> list[str]:
    """ROLE=PATH for every role: vectors or a model folder of the paper's width, else an empty file."""
    import torch
    from safetensors.torch import save_file

    pairs = []
    for role in recipe.data:
        path = folder / role.name
        if role.name == "glove":
            path = folder / "glove.txt"
            path.write_text("".join(f"{w} " + " ".join(["0.5"] * WIDTHS["glove"]) + "\n" for w in ("the", "of")))
        elif role.name in WIDTHS:
            path.mkdir(exist_ok=True)
            save_file({"shared.weight": torch.zeros(4, WIDTHS[role.name])}, str(path / "model.safetensors"))
        else:
            path.write_text("")
        pairs.append(f"{role.name}={path}")
    return pairs


def _fixed(task: str, preset: str) -> dict[str, tuple[str, Any]]:
    """The preset's values by key: (where the configuration keeps it: "" or its task_options /
    encoder_options, the value)."""
    table = TRANSLATION_PRESETS[preset] if task == "translation" else CLASSIFICATION_PRESETS[preset]
    nested = "task_options" if task == "translation" else "encoder_options"
    return {**{k: ("", v) for k, v in table.items() if k not in (nested, "preset")},
            **{k: (nested, v) for k, v in table.get(nested, {}).items()}}


def _config_value(cfg: Any, where: str, key: str) -> Any:
    return getattr(cfg, where)[key] if where else getattr(cfg, key)


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, default=list, sort_keys=True) == json.dumps(b, default=list, sort_keys=True)


def _varied(recipe: Recipe) -> dict[str, set[str]]:
    """Per preset: the options whose recipe values differ between its arms (what the experiment varies)."""
    by_preset: dict[str, list[dict[str, Any]]] = {}
    for name, values in recipe_arms(recipe):
        options: dict[str, Any] = {}
        for value in values:
            options.update(value.options)
        by_preset.setdefault(arm_preset(recipe, name) or "", []).append(options)
    return {preset: {k for o in arms for k in o if len({json.dumps(a.get(k), default=str) for a in arms}) > 1}
            for preset, arms in by_preset.items()}


@pytest.fixture(scope="module")
def data_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("paper-widths")


def test_the_items_with_a_paper_preset_are_those_expected() -> None:
    assert {item for item in item_ids() if item_recipe(item).presets} == set(WITH_PRESETS)


@pytest.mark.parametrize("item", WITH_PRESETS)
@pytest.mark.parametrize("scale", ["paper", "cpu", "smoke"])
def test_each_scale_runs_the_papers_preset(item: str, scale: str, data_folder: Path) -> None:
    recipe = item_recipe(item)
    plan = build_plan(recipe, scale=scale, data=_data(data_folder, recipe))
    task = get_task(recipe.task)
    varied = _varied(recipe)
    scaled = set(plan.scale.options) | {ONE_OF[k] for k in plan.scale.options if k in ONE_OF}
    checked = 0
    for run in plan.runs:
        preset = arm_preset(recipe, run.arm)
        assert preset and run.options["preset"] == preset
        cfg = task.config(option_values(task.options(), {**run.options, "out": data_folder / "x"}, task=recipe.task))
        assert (cfg.preset if recipe.task == "translation" else cfg.recipe) == preset
        free = varied[preset] | (scaled if scale != "paper" else set())
        for key, (where, value) in _fixed(recipe.task, preset).items():
            if key not in free:
                assert _same(_config_value(cfg, where, key), value), f"{item} {run.arm} {scale}: {key}"
                checked += 1
        if scale == "paper":   # what replaced a preset value is what the arms vary, nothing else
            assert set(cfg.preset_overridden) <= varied[preset], (item, run.arm, cfg.preset_overridden)
        else:
            assert set(cfg.preset_overridden) <= free, (item, run.arm, cfg.preset_overridden)
    assert checked


@pytest.mark.parametrize("item", WITH_PRESETS)
def test_no_recipe_types_a_preset_value_again(item: str) -> None:
    recipe = item_recipe(item)
    varied = _varied(recipe)
    for name, values in recipe_arms(recipe):
        preset = arm_preset(recipe, name)
        assert preset is not None
        fixed = _fixed(recipe.task, preset)
        for scale in recipe.scales:
            tables = [recipe.options, *(v.options for v in values), scale.options]
            for table in tables:
                for key, value in table.items():
                    copied = key in fixed and _same(value, fixed[key][1]) and key not in varied[preset]
                    assert not copied, f"{item} {name} [{scale.name}]: {key} = {value!r} is the preset's own"


def test_rescale_w_none_turns_off_the_unigram_arms_rescaling(data_folder: Path) -> None:
    """TOML has no null, so `--set rescale_w="none"` is how a recipe run keeps W as drawn: 000-fig2's
    unigram arm rescales (fro) by default and not with it, its unigram-unscaled arm (run only when named)
    never; any other value is still refused."""
    from nbcli.errors import ConfigError

    recipe = item_recipe("000-fig2")
    task = get_task(recipe.task)

    def rescale(sets: list[str], arm: str = "unigram") -> set[Any]:
        plan = build_plan(recipe, scale="cpu", data=_data(data_folder, recipe), arms=[arm], sets=sets)
        return {task.config(option_values(task.options(), {**run.options, "out": data_folder / "x"},
                                          task=recipe.task)).rescale_w for run in plan.runs}

    assert rescale([]) == {"fro"}
    assert rescale(['rescale_w="none"']) == {None}
    assert rescale([], arm="unigram-unscaled") == {None}      # the extra arm: W as drawn, by name only
    default = build_plan(recipe, scale="cpu", data=_data(data_folder, recipe))
    assert sorted({run.arm for run in default.runs}) == ["none", "unigram", "zero"]    # the paper's three
    every = build_plan(recipe, scale="cpu", data=_data(data_folder, recipe), arms=["*"])
    assert "unigram-unscaled" in {run.arm for run in every.runs}
    with pytest.raises(ConfigError):
        rescale(['rescale_w="frobenius"'])
