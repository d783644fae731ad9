"""A recipe expanded into runs: arms (one value of every axis) x seeds, each with every option
resolved (`{ROLE}` -> the path given for a data role, `{dim:ROLE}` -> the width of that role's
embedding or word vectors), checked against the options of its kind, and hashed. Everything here
happens before any run starts: an unknown option, a value of the wrong type, a missing data role or
an output directory holding runs made with other settings is one error naming the recipe file and
the key (or the run).
"""

from __future__ import annotations

import fnmatch
import hashlib
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbcli.errors import ConfigError
from nbcli.sweeps.by_frequency import KIND as BY_FREQUENCY
from nbcli.sweeps.kinds import Kind, Option, get_kind
from nbcli.sweeps.recipe import AxisValue, Recipe, Scale

PLACEHOLDER = re.compile(r"\{(dim:)?([A-Za-z0-9_.-]+)\}")
RECORD_VERSION = 1


@dataclass(frozen=True)
class RunSpec:
    """One run: its directory name under OUT/runs, arm, seed, kind, resolved options, and the hash
    of what makes it (kind and options); `evaluation` what it is scored on after training."""

    id: str
    arm: str
    seed: int
    kind: str
    options: dict[str, Any]
    settings_hash: str
    evaluation: dict[str, Any] | None = None


@dataclass(frozen=True)
class Plan:
    recipe: Recipe
    scale: Scale
    data: dict[str, str]
    arms: list[str]
    runs: list[RunSpec]


def recipe_arms(recipe: Recipe) -> list[tuple[str, list[AxisValue]]]:
    """(arm name, its value of each axis) for every arm: one value of every axis, named by the
    values joined with '/' (no axes: one arm named after the recipe)."""
    if not recipe.axes:
        return [(recipe.id, [])]
    return [("/".join(v.name for v in combo), list(combo))
            for combo in itertools.product(*(axis.values for axis in recipe.axes))]


def evaluation_role(recipe: Recipe, values: Sequence[AxisValue]) -> str | None:
    """The data role an arm's runs are evaluated on: its last axis value's `evaluate_data`, else
    [evaluate]'s `data` (None without [evaluate]); ConfigError when neither names one."""
    if recipe.evaluation is None:
        return None
    role = next((v.evaluate_data for v in reversed(values) if v.evaluate_data), recipe.evaluation.data)
    if not role:
        raise ConfigError(f"{recipe.path}: [evaluate] has no data role for arm {'/'.join(v.name for v in values)!r} "
                          "(set [evaluate].data or the axis value's evaluate_data)")
    return role


def select(names: Sequence[str], patterns: Sequence[str] | None, path: Path) -> list[str]:
    """The arm names matching any of `patterns` (fnmatch; None: all), in the recipe's order."""
    if not patterns:
        return list(names)
    chosen = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    if not chosen:
        raise ConfigError(f"{path}: --arms {','.join(patterns)} matches no arm; its arms: {', '.join(names)}")
    return chosen


def run_id(arm: str, seed: int) -> str:
    """A run's directory name: the arm with every character but [A-Za-z0-9._-] as '-', and -sSEED
    (the seed suffix nb plot-run strips to name an arm)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", arm).strip("-") + f"-s{seed}"


def settings_hash(kind: str, options: Mapping[str, Any]) -> str:
    """sha256 of the kind and options (canonical JSON): what a run is made with."""
    blob = json.dumps({"record": RECORD_VERSION, "kind": kind, "options": options}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _value_ok(value: Any, option: Option) -> str | None:
    """Why `value` does not fit `option` (None: it fits). Placeholders stand for their values."""
    from nbcli.arguments import conforms, describe

    if isinstance(value, str) and PLACEHOLDER.fullmatch(value) and value.startswith("{dim:"):
        value = 1
    hint = option.type
    if isinstance(value, str) and hint is not str and "Path" in str(hint):
        return None
    if not conforms(value, hint):
        return f"takes {describe(hint)}, got {value!r}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if (option.min is not None and value < option.min) or (option.max is not None and value > option.max):
            return f"{value!r} is out of range ({option.min:g} to {option.max:g})" if option.max is not None \
                else f"{value!r}: expected at least {option.min:g}"
    return None


def check_table(recipe: Recipe, kind: Kind, where: str, options: Mapping[str, Any]) -> None:
    """Every key of `options` is an option of `kind`, not one the runner sets, with a value it takes."""
    known = kind.options()
    for key, value in options.items():
        place = f"{recipe.path}: {where}: options.{key}"
        if key in kind.managed:
            raise ConfigError(f"{place}: set by nb reproduce for each run (runs/NAME), not by a recipe")
        if key not in known:
            raise ConfigError(f"{place}: {recipe.task!r} takes no option {key!r}{kind.elsewhere(key)}")
        problem = _value_ok(value, known[key])
        if problem:
            raise ConfigError(f"{place}: {problem}")


def arm_preset(recipe: Recipe, arm: str) -> str | None:
    """The paper preset of `arm`: the recipe's `preset` pattern it matches (None: the recipe has none)."""
    return next((name for pattern, name in recipe.presets if fnmatch.fnmatchcase(arm, pattern)), None)


def check_presets(recipe: Recipe, kind: Kind, tables: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
    """The recipe's `preset`: a preset of its task, every arm matched by exactly one pattern, and no
    options table setting `preset` too (the paper's settings in one place)."""
    if not recipe.presets:
        return
    option = kind.options().get("preset")
    for pattern, name in recipe.presets:
        problem = f"{recipe.task!r} takes no --preset" if option is None else _value_ok(name, option)
        if problem:
            raise ConfigError(f"{recipe.path}: preset {pattern!r}: {problem}")
    for arm, _ in recipe_arms(recipe):
        matched = [p for p, _ in recipe.presets if fnmatch.fnmatchcase(arm, p)]
        if len(matched) != 1:
            raise ConfigError(f"{recipe.path}: preset: arm {arm!r} matches {len(matched)} patterns "
                              f"({', '.join(matched) or 'none'}); each arm takes one preset")
    for where, options in tables:
        if "preset" in options:
            raise ConfigError(f"{recipe.path}: {where}: options.preset: the recipe's preset sets it (a scale "
                              "scales down over the preset with other options)")


def check_recipe(recipe: Recipe) -> Kind:
    """The recipe's options, scales, axes and preset against its kind (before any data is read); the kind."""
    if recipe.unavailable:
        raise ConfigError(f"{recipe.path}: nb cannot run {recipe.id} yet: {recipe.unavailable}")
    try:
        kind = get_kind(recipe.task)
    except ConfigError as err:
        raise ConfigError(f"{recipe.path}: {err}") from None
    tables = [("[options]", recipe.options), *((f"[scales.{s.name}]", s.options) for s in recipe.scales),
              *((f"[[axes]] {a.name!r} value {v.name!r}", v.options) for a in recipe.axes for v in a.values)]
    for where, options in tables:
        check_table(recipe, kind, where, options)
    check_presets(recipe, kind, tables)
    if "seed" not in kind.options() and any(len(s.seeds) > 1 for s in recipe.scales):
        raise ConfigError(f"{recipe.path}: seeds: {recipe.task!r} takes no seed, so one seed per scale")
    roles_needed(recipe)   # every arm has a data role to be evaluated on
    arms = {name for name, _ in recipe_arms(recipe)}
    for pattern in recipe.arms:
        if not any(fnmatch.fnmatchcase(a, pattern) for a in arms):
            raise ConfigError(f"{recipe.path}: arms: {pattern!r} matches no arm; its arms: {', '.join(sorted(arms))}")
    if recipe.evaluation is not None and recipe.evaluation.kind == BY_FREQUENCY and recipe.metrics:
        raise ConfigError(f"{recipe.path}: [[metrics]]: a translation-by-frequency item tables per-bin values, "
                          "not metrics; give none")
    for p in recipe.published:
        if p.arm not in arms and not p.note:
            raise ConfigError(f"{recipe.path}: [[published]] arm {p.arm!r} is no arm of the recipe (a number nb "
                              f"does not run needs a note saying why); its arms: {', '.join(sorted(arms))}")
    return kind


def parse_data(pairs: Sequence[str], recipe: Recipe) -> dict[str, str]:
    """`--data ROLE=PATH` pairs as {role: path}; an unknown role or a repeated one is an error."""
    roles = {r.name for r in recipe.data}
    data: dict[str, str] = {}
    for pair in pairs:
        role, sep, path = pair.partition("=")
        if not sep or not role or not path:
            raise ConfigError(f"--data {pair!r}: expected ROLE=PATH (roles of {recipe.id}: {', '.join(roles) or 'none'})")
        if role not in roles:
            raise ConfigError(f"--data {role}=...: {recipe.id} has no data role {role!r}; its roles: "
                              f"{', '.join(sorted(roles)) or 'none'}")
        if role in data:
            raise ConfigError(f"--data {role}= is given twice")
        data[role] = path
    return data


def _roles_used(value: Any) -> set[str]:
    if isinstance(value, str):
        return {m.group(2) for m in PLACEHOLDER.finditer(value)}
    if isinstance(value, (list, tuple)):
        return set().union(*map(_roles_used, value)) if value else set()
    if isinstance(value, dict):
        return _roles_used(list(value.values()))
    return set()


def roles_needed(recipe: Recipe) -> list[str]:
    """The data roles some run of the recipe uses (in [data]'s order), at any scale."""
    tables = [recipe.options, *(s.options for s in recipe.scales), *(v.options for a in recipe.axes for v in a.values)]
    used = set().union(*(_roles_used(t) for t in tables))
    used |= {evaluation_role(recipe, values) for _, values in recipe_arms(recipe)} - {None}
    return [r.name for r in recipe.data if r.name in used]


def hub_sources(recipe: Recipe, roles: set[str]) -> dict[str, str]:
    """The Hub source (`[data.ROLE] hub`) of each of `roles` that has one: what --download takes for a role
    not given by --data."""
    return {r.name: r.hub for r in recipe.data if r.name in roles and r.hub}


def check_data(recipe: Recipe, data: Mapping[str, str], needed: set[str], *, download: bool = False) -> dict[str, str]:
    """The data roles `needed`, each given and found: a path (a file, a folder, or the PREFIX of
    PREFIX.LANG files; made absolute), a Hub dataset id with a config or split (`ID:CONFIG:SPLIT`,
    checked in the local cache now; with `download`, fetched into it first when missing) or a Hub repo
    id (a model or dataset, resolved when used). With `download` a role not in `data` takes its recipe's
    Hub source (`hub_sources`)."""
    declared = {r.name: r for r in recipe.data}
    for role in needed - set(declared):
        raise ConfigError(f"{recipe.path}: the options use {{{role}}}, which is no role of [data]")
    fetched = hub_sources(recipe, needed - set(data))
    if download:
        data = {**fetched, **data}
    missing = [r for r in sorted(needed) if r not in data]
    if missing:
        wanted = "; ".join(f"{r}: {declared[r].help}" for r in missing)
        hint = ("; --download fetches " + ", ".join(sorted(fetched)) + " from the Hub") if fetched and not download \
            else "; no Hub source for these: give --data" if download else ""
        raise ConfigError(f"{recipe.id} needs --data {' '.join(f'{r}=PATH' for r in missing)} ({wanted}){hint}")
    from nbcli.errors import InputError
    from nbcli.resolve import looks_like_repo_id
    from nbcli.resolve_datasets import dataset_split, fetch_dataset, parse_dataset_spec

    found = {}
    for role in sorted(needed):
        text = data[role]
        path = Path(text).expanduser()
        if path.exists() or any(path.parent.glob(path.name + ".*")):
            found[role] = str(path.resolve())
            continue
        if ":" in text and parse_dataset_spec(text) is not None:
            try:
                (fetch_dataset if download else dataset_split)(text)
            except InputError as err:
                raise type(err)(f"--data {role}={err}") from None
        elif not looks_like_repo_id(text):
            raise ConfigError(f"--data {role}={text}: no such file, folder or PREFIX.* files")
        found[role] = text
    return found


def embedding_width(path: str) -> int:
    """The width D of a data role's embedding: word vectors' dimension, else the input embedding of a
    checkpoint or model folder (`{dim:ROLE}`: paper 002 sets D to the pretrained embedding's)."""
    from nbcli.vectors.reader import is_vector_file, read_vectors

    if is_vector_file(path):
        return int(read_vectors(path, limit=1).vectors.shape[1])
    from nbcli.checkpoint.reader import open_checkpoint
    from nbcli.train.init import pretrained_tensor

    with open_checkpoint(path) as ckpt:
        return int(ckpt.shape(pretrained_tensor(ckpt, Path(path), None))[1])


def resolve(value: Any, data: Mapping[str, str], widths: dict[str, int]) -> Any:
    """`value` with each `{ROLE}` replaced by its path and each whole `{dim:ROLE}` by its width."""
    if isinstance(value, str):
        whole = PLACEHOLDER.fullmatch(value)
        if whole and whole.group(1):
            role = whole.group(2)
            if role not in widths:
                widths[role] = embedding_width(data[role])
            return widths[role]
        return PLACEHOLDER.sub(lambda m: data[m.group(2)], value)
    if isinstance(value, (list, tuple)):
        return [resolve(v, data, widths) for v in value]
    if isinstance(value, dict):
        return {k: resolve(v, data, widths) for k, v in value.items()}
    return value


def parse_sets(pairs: Sequence[str]) -> dict[str, Any]:
    """`--set OPTION=VALUE` pairs: VALUE read as a TOML value (100, 0.5, true, "de", [1, 2]), else
    as a string."""
    from nbcli.sweeps.recipe import toml_value

    sets: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {pair!r}: expected OPTION=VALUE, e.g. --set steps=400")
        sets[key.strip()] = toml_value(text)
    return sets


def check_sets(recipe: Recipe, overrides: Mapping[str, Any], merged: Mapping[str, Mapping[str, Any]]) -> None:
    """--set of an option the chosen arms take in different values (an axis varies it, or the preset
    differs by arm) is refused: the arms would no longer be the recipe's; choose arms with --arms."""
    for key in sorted(overrides):
        if len({json.dumps(options.get(key), sort_keys=True, default=str) for options in merged.values()}) < 2:
            continue
        axis = next((a.name for a in recipe.axes if any(key in v.options for v in a.values)), None)
        which = f"the axis {axis!r}" if axis else "the preset of each arm"
        raise ConfigError(f"--set {key}: {which} of {recipe.path} varies it among the arms chosen; choose arms "
                          "with --arms instead")


def build_plan(recipe: Recipe, *, scale: str | None = None, data: Sequence[str] = (),
               arms: Sequence[str] | None = None, sets: Sequence[str] = (), seeds: Sequence[int] | None = None,
               download: bool = False) -> Plan:
    """The runs of `recipe` at `scale` for the `arms` patterns (None: all), with `data` (ROLE=PATH
    pairs) bound, `sets` (OPTION=VALUE, over every arm's options) and `seeds` instead of the scale's
    (None: the scale's): every check made, nothing run. With `download`, roles not in `data` take their
    Hub source and datasets missing from the local cache are fetched (`check_data`)."""
    import dataclasses

    from nbcli.sweeps.scoring import evaluation_spec

    kind = check_recipe(recipe)
    chosen_scale = recipe.scale(scale)
    if seeds is not None:
        if not seeds or len(set(seeds)) != len(seeds) or not all(0 <= s < 2**63 for s in seeds):
            raise ConfigError(f"--seeds {','.join(map(str, seeds))}: expected distinct seeds 0 to 2^63-1, at least one")
        chosen_scale = dataclasses.replace(chosen_scale, seeds=tuple(seeds))
    overrides = parse_sets(sets)
    check_table(recipe, kind, "--set", overrides)
    every = recipe_arms(recipe)
    chosen = select([name for name, _ in every], arms or list(recipe.arms) or None, recipe.path)
    merged: dict[str, dict[str, Any]] = {}
    tested: dict[str, str | None] = {}
    for name, values in every:
        if name in chosen:
            preset = arm_preset(recipe, name)
            options = {**({"preset": preset} if preset else {}), **recipe.options}
            for value in values:
                options.update(value.options)
            merged[name] = {**options, **chosen_scale.options}   # a smoke run is short whatever the arm
            tested[name] = evaluation_role(recipe, values)
    check_sets(recipe, overrides, merged)
    merged = {name: {**options, **overrides} for name, options in merged.items()}
    needed = set().union(*(_roles_used(o) for o in merged.values())) | (set(tested.values()) - {None})
    bound = check_data(recipe, parse_data(data, recipe), needed, download=download)
    known = kind.options()
    required = [n for n, o in known.items() if o.required and n not in kind.managed]
    widths: dict[str, int] = {}
    runs = []
    for name in chosen:
        options = resolve(merged[name], bound, widths)
        missing = [r for r in required if r not in options]
        if missing:
            raise ConfigError(f"{recipe.path}: arm {name!r} at scale {chosen_scale.name!r} sets no "
                              f"{', '.join(missing)} (required by {recipe.task!r})")
        for seed in chosen_scale.seeds:
            values = {**options, "seed": seed} if "seed" in known else dict(options)
            digest = settings_hash(recipe.task, values)
            evaluation = evaluation_spec(recipe, chosen_scale, values, bound.get(tested[name] or ""), digest)
            runs.append(RunSpec(run_id(name, seed), name, seed, recipe.task, values, digest, evaluation))
    ids = [r.id for r in runs]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{recipe.path}: two arms give the same run directory name; rename an axis value")
    return Plan(recipe, chosen_scale, bound, chosen, runs)
