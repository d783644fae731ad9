"""The papers' tables and figures nb ships as recipes (nbcli/sweeps/recipes/ITEM.toml, package
data): found by item id (`000-fig2`), listed with what each needs (`nb reproduce --list`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nbcli.errors import ConfigError
from nbcli.sweeps.recipe import Recipe, load_recipe

RECIPES = Path(__file__).resolve().parent / "recipes"


def item_ids() -> list[str]:
    """Every packaged item, in paper then file order (000-fig2, 000-fig3, ..., 003-fig1)."""
    return sorted(p.stem for p in RECIPES.glob("*.toml"))


def item_recipe(item: str) -> Recipe:
    """The packaged recipe of `item`; ConfigError listing the items for an unknown one."""
    path = RECIPES / f"{item}.toml"
    if "/" in item or not path.is_file():
        raise ConfigError(f"no item {item!r}; nb reproduce --list shows them: {', '.join(item_ids())}")
    recipe = load_recipe(path)
    if recipe.id != item:
        raise ConfigError(f"{path}: id {recipe.id!r} differs from its file name")
    return recipe


def describe(recipe: Recipe) -> dict[str, Any]:
    """What `nb reproduce --list` shows of a recipe: what it reproduces, whether nb can run it (and
    why not), the data by role, the scales, the arms and where nb's setting differs from the paper."""
    from nbcli.sweeps.plan import recipe_arms, roles_needed, select

    return {"item": recipe.id, "title": recipe.title, "paper": recipe.paper, "where": recipe.where,
            "task": recipe.task, "runnable": not recipe.unavailable, "unavailable": recipe.unavailable or None,
            "presets": dict(recipe.presets),
            "about": recipe.about,
            "data": [{"role": r.name, "help": r.help, "source": r.source, "hub": r.hub or None,
                      "licence": r.licence or None} for r in recipe.data
                     if r.name in roles_needed(recipe)],
            "scales": [{"scale": s.name, "seeds": list(s.seeds), "note": s.note} for s in recipe.scales],
            "arms": select([name for name, _ in recipe_arms(recipe)], recipe.arms or None, recipe.path),
            "metrics": [m.label for m in recipe.metrics], "published": len(recipe.published),
            "deviations": list(recipe.deviations)}


def list_items() -> list[dict[str, Any]]:
    return [describe(item_recipe(item)) for item in item_ids()]
