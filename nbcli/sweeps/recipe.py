"""A recipe: one table or figure of a paper (or a user's own grid) as data, read from TOML and
checked whole before anything runs.

A recipe names the kind of run (`task`: an `nb train` task, or one of nb's analyses, `kinds.py`),
the data it needs by role, the paper's preset (`preset`: one `--preset` name for every arm, or a
table of arm patterns -> preset: paper 002 sets one per dataset and embedding), the options of every
run, its axes (each value sets options; an arm is one value of every axis), its scales (smoke | cpu |
paper: the seeds and the options over the arms'; at the paper scale the preset's own settings, at
smoke and cpu documented scale-downs over it), what each run is scored on after training
(`[evaluate]`), the metrics aggregated over seeds (mean ± SE or σ, as the paper reports) and the
paper's published numbers. The keys of `options` are the task's
own option names (`nb train TASK --help`, `nbcli.tasks.options`): any option can be an arm.

Every error names the recipe file and the key (`recipe.toml: [[axes]] 'bias init' value 'zero':
options.bais_init: ...`), before any run starts.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbcli.errors import ConfigError

SCHEMA = 1
SPREADS = ("se", "sd", "none")
#: Where a metric's per-run value comes from (`aggregate.run_value`).
SOURCES = ("evaluation", "result", "summary", "alc", "log-max", "log-min", "log-last", "log-mean",
           "epoch-at-max", "epoch-at-min")
EVALUATIONS = ("translation-test", "translation-by-frequency")


@dataclass(frozen=True)
class Role:
    """A piece of data the recipe needs: `--data NAME=PATH`."""

    name: str
    help: str
    source: str = ""          # where to get it (a URL, a dataset, a package)
    hub: str = ""             # what --download fetches: a Hub dataset ID:CONFIG:SPLIT or a model repo id
    licence: str = ""         # the licence the Hub's card states for `hub`


@dataclass(frozen=True)
class Scale:
    """smoke | cpu | paper (or a user's name): the seeds and the options over the recipe's and the arms'."""

    name: str
    seeds: tuple[int, ...]
    options: Mapping[str, Any]
    note: str = ""
    evaluate: Mapping[str, Any] = field(default_factory=dict)   # [evaluate] options at this scale


@dataclass(frozen=True)
class AxisValue:
    name: str
    options: Mapping[str, Any]
    evaluate_data: str = ""   # the data role [evaluate] scores this value's arms on (a dataset's test set)


@dataclass(frozen=True)
class Axis:
    name: str
    values: tuple[AxisValue, ...]


@dataclass(frozen=True)
class Evaluation:
    """What each finished run is scored on: `translation-test` (BLEU and chrF of the `data` role's
    test pairs, decoded by the run's best checkpoint with `options`: beam, lenpen, batch_size) or
    `translation-by-frequency` (that and paper 000 fig. 4's by-frequency section against the
    training targets' counts, `nbcli.sweeps.by_frequency`; options bins, smoothing too). An
    axis value's `evaluate_data` names the role for its arms instead (each dataset its test set)."""

    kind: str
    data: str
    options: Mapping[str, Any]


@dataclass(frozen=True)
class Metric:
    name: str
    label: str
    source: str               # one of SOURCES
    key: str
    spread: str = "se"        # what ± means: standard error, sample σ (ddof 1), or none
    scale: float = 1.0        # multiplier (accuracy -> %)
    digits: int = 2


@dataclass(frozen=True)
class Published:
    """One number the paper prints: `arm`'s `metric`, with its spread when printed."""

    arm: str
    metric: str
    value: float
    spread: float | None = None
    note: str = ""


@dataclass(frozen=True)
class Recipe:
    path: Path
    id: str
    title: str
    task: str
    paper: str = ""
    where: str = ""
    about: str = ""
    unavailable: str = ""      # why nb cannot run it yet ("" = it can)
    deviations: tuple[str, ...] = ()
    data: tuple[Role, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    scales: tuple[Scale, ...] = ()
    axes: tuple[Axis, ...] = ()
    arms: tuple[str, ...] = ()   # the arms run unless --arms says (patterns as --arms; () = all)
    evaluation: Evaluation | None = None
    metrics: tuple[Metric, ...] = ()
    alc_steps: int | None = None
    published: tuple[Published, ...] = ()
    published_note: str = ""
    presets: tuple[tuple[str, str], ...] = ()   # (arm pattern, --preset name): the paper's settings

    def scale(self, name: str | None) -> Scale:
        """The scale called `name` (None: 'paper' when the recipe has one, else its only one)."""
        names = [s.name for s in self.scales]
        if name is None:
            name = "paper" if "paper" in names or len(names) != 1 else names[0]
        for s in self.scales:
            if s.name == name:
                return s
        raise ConfigError(f"{self.path}: no scale {name!r}; its scales: {', '.join(names)}")

    def metric(self, name: str) -> Metric:
        return next(m for m in self.metrics if m.name == name)


def toml_module() -> Any:
    """The standard library's TOML reader (tomli, its backport, before Python 3.11)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    return tomllib


def read_toml(path: Path) -> dict[str, Any]:
    """A TOML file as a dict; ConfigError naming the file."""
    tomllib = toml_module()
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the recipe ({err.strerror})") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML ({err})") from None


def toml_value(text: str) -> Any:
    """A command line's VALUE as TOML reads it (100, 0.5, true, "de", [1, 2]); anything else as the string."""
    tomllib = toml_module()
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


class Reader:
    """Reads one recipe table, refusing unknown keys and values of the wrong type, every error
    naming the file and the key's place (`where`)."""

    def __init__(self, path: Path, table: Any, where: str) -> None:
        self.path, self.where = path, where
        if not isinstance(table, dict):
            self.fail(f"expected a table, got {type(table).__name__}")
        self.table: dict[str, Any] = table

    def fail(self, message: str, key: str | None = None) -> None:
        place = f"{self.where}.{key}" if self.where and key else (key or self.where)
        raise ConfigError(f"{self.path}: {place}: {message}" if place else f"{self.path}: {message}")

    def only(self, *keys: str) -> None:
        for key in self.table:
            if key not in keys:
                self.fail(f"unknown key {key!r} (known: {', '.join(keys)})", key)

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ..., *, empty: bool = True) -> Any:
        if key not in self.table:
            if default is ...:
                self.fail("missing", key)
            return default
        value = self.table[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            self.fail(f"expected {' or '.join(k.__name__ for k in kinds)}, got {value!r}", key)
        if not empty and not value:
            self.fail("is empty", key)
        return value

    def sub(self, key: str, where: str | None = None) -> Reader:
        return Reader(self.path, self.get(key, dict, {}), where or (f"{self.where}.{key}" if self.where else key))

    def strings(self, key: str) -> tuple[str, ...]:
        values = self.get(key, list, [])
        if not all(isinstance(v, str) for v in values):
            self.fail("expected a list of strings", key)
        return tuple(values)


TOP_KEYS = ("schema", "id", "title", "task", "paper", "where", "about", "unavailable", "deviations", "data",
            "preset", "options", "scales", "seeds", "axes", "arms", "evaluate", "metrics", "alc_steps", "published", "published_note")


def merged(base: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    """`child` over `base`: tables merged key by key, anything else replaced; `false` removes a table."""
    out = dict(base)
    for key, value in child.items():
        if value is False and isinstance(base.get(key), dict):
            out.pop(key)
        elif isinstance(value, dict) and isinstance(base.get(key), dict):
            out[key] = merged(base[key], value)
        else:
            out[key] = value
    return out


def read_recipe_table(path: Path, depth: int = 0) -> dict[str, Any]:
    """A recipe file's table, over the table of the recipe its `base` names (a file beside it):
    000-fig3 is 000-fig2's runs with other metrics, so the two share their runs in one OUT."""
    table = read_toml(path)
    base = table.pop("base", None)
    if base is None:
        return table
    if not isinstance(base, str) or depth > 4:
        raise ConfigError(f"{path}: base: expected the file name of another recipe (at most 5 deep)")
    parent = path.parent / base
    if not parent.is_file():
        raise ConfigError(f"{path}: base: {parent} not found")
    return merged(read_recipe_table(parent, depth + 1), table)


def load_recipe(path: Path | str) -> Recipe:
    """The recipe in `path`, its structure checked (its options against its kind: `plan.check_recipe`)."""
    path = Path(path)
    top = Reader(path, read_recipe_table(path), "")
    top.only(*TOP_KEYS)
    if top.get("schema", int, SCHEMA) != SCHEMA:
        top.fail(f"schema {top.table['schema']}: this nb reads schema {SCHEMA}", "schema")
    data = tuple(_role(top.sub("data").sub(name, f"[data.{name}]")) for name in top.get("data", dict, {}))
    metrics = tuple(_metric(Reader(path, m, f"[[metrics]] #{i + 1}")) for i, m in enumerate(top.get("metrics", list, [])))
    names = [m.name for m in metrics]
    if len(set(names)) != len(names):
        top.fail(f"metric names repeat: {names}", "metrics")
    alc = top.get("alc_steps", int, None)
    if alc is not None and alc < 0:
        top.fail("must be 0 (the whole curve) or more", "alc_steps")
    recipe = Recipe(
        path=path, id=top.get("id", str, path.stem), title=top.get("title", str, path.stem), task=top.get("task", str),
        paper=top.get("paper", str, ""), where=top.get("where", str, ""), about=top.get("about", str, ""),
        unavailable=top.get("unavailable", str, ""), deviations=top.strings("deviations"), data=data,
        options=top.get("options", dict, {}), scales=_scales(top), axes=_axes(top, {r.name for r in data}),
        arms=top.strings("arms"),
        evaluation=_evaluation(top) if "evaluate" in top.table else None, metrics=metrics,
        alc_steps=alc or None, published=_published(top, names), published_note=top.get("published_note", str, ""),
        presets=_presets(top))
    if recipe.evaluation is not None and recipe.evaluation.data not in {"", *(r.name for r in data)}:
        top.fail(f"data role {recipe.evaluation.data!r} is not declared in [data]", "evaluate.data")
    return recipe


def _presets(top: Reader) -> tuple[tuple[str, str], ...]:
    """`preset = "NAME"` (every arm) or `[preset]` of "ARM PATTERN" = "NAME" (fnmatch, as --arms)."""
    value = top.get("preset", (str, dict), None)
    if value is None:
        return ()
    table = {"*": value} if isinstance(value, str) else value
    if not table:
        top.fail("is empty", "preset")
    for pattern, name in table.items():
        if not isinstance(name, str) or not name:
            top.fail(f"{pattern!r}: expected a preset name, got {name!r}", "preset")
    return tuple(table.items())


def _role(r: Reader) -> Role:
    r.only("help", "source", "hub", "licence")
    hub = r.get("hub", str, "")
    if hub:
        from nbcli.resolve import looks_like_repo_id
        from nbcli.resolve_datasets import parse_dataset_spec

        if not (parse_dataset_spec(hub) if ":" in hub else looks_like_repo_id(hub)):
            r.fail(f"{hub!r} is neither a Hub dataset ID:CONFIG:SPLIT nor a repo id", "hub")
        if not r.get("licence", str, ""):
            r.fail("a role with a hub source states its licence (the dataset or model card's)", "licence")
    return Role(r.where[len("[data."):-1], r.get("help", str), r.get("source", str, ""), hub,
                r.get("licence", str, ""))


def _seeds(r: Reader, default: Any = ...) -> tuple[int, ...]:
    seeds = r.get("seeds", list, default)
    if not seeds:
        r.fail("is empty: a run needs at least one seed", "seeds")
    if not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**63 for s in seeds):
        r.fail(f"expected seeds 0 to 2^63-1, got {seeds!r}", "seeds")
    if len(set(seeds)) != len(seeds):
        r.fail(f"a seed repeats: {seeds!r}", "seeds")
    return tuple(seeds)


def _scales(top: Reader) -> tuple[Scale, ...]:
    default = _seeds(top) if "seeds" in top.table else None
    scales = []
    for name in top.get("scales", dict, {}):
        r = top.sub("scales").sub(name, f"[scales.{name}]")
        r.only("seeds", "options", "note", "evaluate")
        seeds = _seeds(r) if "seeds" in r.table else default
        if seeds is None:
            r.fail("missing (and no top-level seeds)", "seeds")
        scales.append(Scale(name, seeds, r.get("options", dict, {}), r.get("note", str, ""),
                            r.get("evaluate", dict, {})))
    if not scales:
        if default is None:
            top.fail("missing: give seeds = [...] or [scales.NAME] tables", "seeds")
        scales.append(Scale("default", default, {}))
    return tuple(scales)


def _axes(top: Reader, roles: set[str]) -> tuple[Axis, ...]:
    axes = []
    for i, table in enumerate(top.get("axes", list, [])):
        r = Reader(top.path, table, f"[[axes]] #{i + 1}")
        r.only("name", "values")
        name = r.get("name", str, empty=False)
        r.where = f"[[axes]] {name!r}"
        values = []
        for item in r.get("values", list, empty=False):
            v = Reader(top.path, item, f"{r.where} value")
            v.only("name", "options", "evaluate_data")
            value = v.get("name", str, empty=False)
            if "*" in value or "?" in value or "[" in value:
                v.fail(f"{value!r}: * ? [ are --arms patterns, not name characters", "name")
            v.where = f"{r.where} value {value!r}"
            role = v.get("evaluate_data", str, "")
            if role and role not in roles:
                v.fail(f"data role {role!r} is not declared in [data]", "evaluate_data")
            values.append(AxisValue(value, v.get("options", dict, {}), role))
        if len({v.name for v in values}) != len(values):
            r.fail("value names repeat", "values")
        axes.append(Axis(name, tuple(values)))
    return tuple(axes)


def _evaluation(top: Reader) -> Evaluation:
    r = top.sub("evaluate", "[evaluate]")
    r.only("kind", "data", "options")
    kind = r.get("kind", str)
    if kind not in EVALUATIONS:
        r.fail(f"{kind!r}: expected one of {', '.join(EVALUATIONS)}", "kind")
    return Evaluation(kind, r.get("data", str, ""), r.get("options", dict, {}))


def _metric(r: Reader) -> Metric:
    r.only("name", "label", "from", "key", "spread", "scale", "digits")
    source = r.get("from", str)
    if source not in SOURCES:
        r.fail(f"{source!r}: expected one of {', '.join(SOURCES)}", "from")
    spread = r.get("spread", str, "se")
    if spread not in SPREADS:
        r.fail(f"{spread!r}: expected one of {', '.join(SPREADS)}", "spread")
    name = r.get("name", str, empty=False)
    return Metric(name, r.get("label", str, name), source, r.get("key", str, empty=False), spread,
                  float(r.get("scale", (int, float), 1.0)), r.get("digits", int, 2))


def _published(top: Reader, metrics: list[str]) -> tuple[Published, ...]:
    out = []
    for i, table in enumerate(top.get("published", list, [])):
        r = Reader(top.path, table, f"[[published]] #{i + 1}")
        r.only("arm", "metric", "value", "spread", "note")
        metric = r.get("metric", str)
        if metric not in metrics:
            r.fail(f"{metric!r} is no [[metrics]] name ({', '.join(metrics) or 'none'})", "metric")
        spread = r.get("spread", (int, float), None)
        out.append(Published(r.get("arm", str), metric, float(r.get("value", (int, float))),
                             None if spread is None else float(spread), r.get("note", str, "")))
    return tuple(out)
