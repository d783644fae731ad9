"""The package's import graph is acyclic, and no module uses another module's private names.

Read statically (`ast`), so that every import counts: top-level ones, those inside functions (lazy),
under `if TYPE_CHECKING:`, in `try:` blocks; relative imports are resolved.

The graph's nodes are the modules of nbcli/, a package being its `__init__.py`. Each import statement
gives an edge from the module holding it to each module it names:

* `import a.b.c` names `a.b.c`;
* `from a.b import c` names the submodule `a.b.c` when there is one, else the package `a.b` (its
  `__init__`: `c` is a name the package defines or re-exports).

So a package's re-exports count through the package: its `__init__` has an edge to each submodule
it re-exports from, and a module that takes a name from the package has an edge to the `__init__`.
A module that imports a name from its own package while that package's `__init__` (transitively)
imports the module is a circle. What is not an edge is the parent packages Python initialises on the
way to a submodule (`import a.b.c` also runs `a/__init__` and `a/b/__init__`): counting those would
make any package that re-exports its submodules a circle with every module below it that one of them
uses. A circle is a strongly connected component of two or more modules; the failure lists each one
with the imports (file:line) that close it.

Private names: a name starting with one underscore (dunders are public) may be used only in the
module that defines it; `from nbcli.x import _name` and `x._name` (x an imported nbcli module) in
another module fail, and so does `obj._name` on anything but `self`/`cls` in a module that defines no
`_name` (an object of another module's class: `counter._add_rows`). Third-party libraries' private
modules and names (`typer._coercion`) are not imported either, except those in ALLOWED_PRIVATE, which
need typer pinned to a range CI tests at both ends. (`getattr(obj, "_name")` strings are not read.)

Floors: every module belongs to one floor of `LAYERS` (top to bottom) and imports only its own floor
and those below; an import back up the floors fails with its file:line, and so does a module no floor
holds (a new room is placed in the plan when it is made).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "nbcli"


@dataclass(frozen=True)
class Import:
    line: int
    target: str  # the module named (a package: its __init__)
    names: tuple[str, ...]  # the names taken from it (`from ... import`), () for `import a.b`


def module_files(root: Path, package: str = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of `package` under `root`."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _absolute(module: str, is_package: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def imports_of(module: str, path: Path, modules: dict[str, Path], package: str = PACKAGE) -> Iterator[Import]:
    """Every import of `package` modules in `module` (anywhere in the file), targets resolved."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(node.lineno, alias.name, ())
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, is_package, node.level, node.module)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield Import(node.lineno, sub, ()) if sub in modules else Import(node.lineno, base, (alias.name,))


def import_graph(root: Path, package: str = PACKAGE) -> dict[str, dict[str, int]]:
    """Module -> {module it imports: first line}, over the package's own modules."""
    modules = module_files(root, package)
    graph: dict[str, dict[str, int]] = {m: {} for m in modules}
    for module, path in modules.items():
        for imp in imports_of(module, path, modules, package):
            if imp.target in modules and imp.target != module:
                graph[module].setdefault(imp.target, imp.line)
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of two or more modules (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def shortest_circle(graph: dict[str, dict[str, int]], start: str, members: set[str]) -> list[str]:
    """The shortest path start -> ... -> start within `members` (breadth first)."""
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w not in members or w in parent:
                    continue
                parent[w] = v
                if w == start:
                    path = [start]
                    while path[-1] != start or len(path) == 1:
                        path.append(parent[path[-1]])
                    return path[::-1]
                following.append(w)
        frontier = following
    return []


def describe_cycles(graph: dict[str, dict[str, int]], files: dict[str, Path], root: Path) -> list[str]:
    """Per circle (strongly connected component): its modules, then the shortest circle through
    each of them (distinct ones once), every import with its file:line."""
    lines = []
    for component in cycles(graph):
        lines.append(f"{len(component)} modules: {', '.join(component)}")
        members, seen = set(component), set()
        for start in component:
            path = shortest_circle(graph, start, members)
            key = frozenset(zip(path, path[1:]))
            if key in seen:
                continue
            seen.add(key)
            steps = [f"{files[a].relative_to(root)}:{graph[a][b]} -> {b}" for a, b in zip(path, path[1:])]
            lines.append("    " + "; ".join(steps))
    return lines


#: The floors of nbcli, top to bottom. A module belongs to the floor of the longest name listed that is
#: it or a package above it (the package `nbcli` itself: its __init__ only); it may import modules of its
#: own floor and of the floors below, never one above.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # the faces: the CLI (one module per command), the Python API, and sweeps of its calls (nb reproduce / sweep)
    ("faces", ("nbcli", "nbcli.__main__", "nbcli.cli", "nbcli.api", "nbcli.sweeps")),
    # a task's training, evaluation, inference and export (the Task seam), over the loop and the models
    ("tasks", ("nbcli.tasks", "nbcli.translate", "nbcli.export")),
    # one report builder per command: it loads models and runs, calls the analysis, draws the figures
    ("reports", ("nbcli.reports",)),
    # the training loop and its trackers, the models, decoding, the LM runner with nb eval / generate's cores
    ("models", ("nbcli.train", "nbcli.trackers", "nbcli.model", "nbcli.models", "nbcli.decoding", "nbcli.lm",
                "nbcli.hf", "nbcli.translation_frequency")),
    # drawing: figures of the numbers below, in the house style
    ("figures", ("nbcli.plots", "nbcli.figure_style")),
    # pure statistics and formulas of the papers' figures and tables: arrays in, numbers out
    ("analysis", ("nbcli.analysis", "nbcli.probes", "nbcli.translation_eval")),
    # what is stored and read: checkpoints (and run directories), counting, surgery, word vectors
    ("store", ("nbcli.checkpoint", "nbcli.counting", "nbcli.surgery", "nbcli.transplant", "nbcli.vectors")),
    # the papers' pure tensor functions, on the counts' smoothing formula
    ("formulas", ("nbcli.ops", "nbcli.array_ops")),
    # the counts file and the one smoothing formula
    ("counts", ("nbcli.counts",)),
    # raw inputs: corpora, tokenizers, the safetensors header format
    ("inputs", ("nbcli.corpus", "nbcli.tokenizers", "nbcli.checkpoint.format")),
    # the floor: errors, atomic outputs, hashing, the resolvers (models, datasets), limits, JSON, precision, padding,
    # the Dask cluster, CPU threads
    ("floor", ("nbcli.errors", "nbcli.atomic", "nbcli.outputs", "nbcli.provenance", "nbcli.resolve",
               "nbcli.resolve_datasets", "nbcli.dataset_layout", "nbcli.datasets_cache",
               "nbcli.jsonsafe", "nbcli.limits", "nbcli.version", "nbcli.seeds", "nbcli.samples",
               "nbcli.precision", "nbcli.arguments", "nbcli.tables", "nbcli.padding", "nbcli.cluster",
               "nbcli.threads")),
]


def layer_of(module: str, layers: list[tuple[str, tuple[str, ...]]], package: str = PACKAGE) -> int | None:
    """Index in `layers` of the floor holding `module` (longest matching name), None when none does."""
    found: tuple[int, int] | None = None
    for index, (_name, rooms) in enumerate(layers):
        for room in rooms:
            if module == room or (room != package and module.startswith(room + ".")):
                if found is None or len(room) > found[1]:
                    found = (index, len(room))
    return None if found is None else found[0]


def upward_imports(graph: dict[str, dict[str, int]], files: dict[str, Path], root: Path,
                   layers: list[tuple[str, tuple[str, ...]]]) -> list[str]:
    """`file:line: module (floor) imports target (a floor above)` for each import back up `layers`,
    and `module: on no floor` for each module no floor holds."""
    problems = [f"{files[m].relative_to(root)}: {m} is on no floor" for m in sorted(graph)
                if layer_of(m, layers) is None]
    for module in sorted(graph):
        own = layer_of(module, layers)
        for target, line in sorted(graph[module].items()):
            floor = layer_of(target, layers)
            if own is not None and floor is not None and floor < own:
                problems.append(f"{files[module].relative_to(root)}:{line}: {module} ({layers[own][0]}) imports "
                                f"{target} ({layers[floor][0]}, a floor above)")
    return problems


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def _own_names(tree: ast.AST) -> set[str]:
    """Names a module defines: functions, classes, assigned names, arguments, attributes set on
    `self`/`cls`."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _on_self(node):
            names.add(node.attr)
    return names


def _on_self(node: ast.Attribute) -> bool:
    return isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")


def private_uses(root: Path, package: str = PACKAGE) -> list[str]:
    """`file:line: what` for each use of another module's private name: `from nbcli.x import _name`,
    `x._name` with x an imported nbcli module, `obj._name` read or set on anything but self/cls where
    this module defines no `_name` (an object of another module's class), and a third-party
    library's private module or name (`from typer._coercion import ...`)."""
    modules = module_files(root, package)
    found = []
    for module, path in modules.items():
        where = path.relative_to(root)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        own = _own_names(tree)
        aliases: dict[str, str] = {}  # local dotted name -> the nbcli module it stands for
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    if parts[0] != package:
                        if any(map(_is_private, parts)):
                            found.append(f"{where}:{node.lineno}: import {alias.name}")
                    elif alias.asname:
                        aliases[alias.asname] = alias.name
                    else:
                        aliases.update({".".join(parts[:i]): ".".join(parts[:i]) for i in range(1, len(parts) + 1)})
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(module, is_package, node.level, node.module)
                if base.split(".")[0] != package:
                    names = [a.name for a in node.names]
                    if any(map(_is_private, base.split("."))) or any(map(_is_private, names)):
                        found.append(f"{where}:{node.lineno}: from {base} import {', '.join(names)}")
                    continue
                for alias in node.names:
                    if f"{base}.{alias.name}" in modules:
                        aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
                    if base != module and _is_private(alias.name):
                        found.append(f"{where}:{node.lineno}: from {base} import {alias.name}")
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _is_private(node.attr)) or _on_self(node):
                continue
            head = _dotted(node.value)
            target = aliases.get(head) if head is not None else None
            if target is not None and target != module:
                found.append(f"{where}:{node.lineno}: {head}.{node.attr} ({target})")
            elif target is None and node.attr not in own:
                found.append(f"{where}:{node.lineno}: {ast.unparse(node)} (not defined in this module)")
    return sorted(set(found))


# -- the package ----------------------------------------------------------------------------------

def test_nbcli_has_no_import_cycles() -> None:
    graph = import_graph(ROOT)
    assert len(graph) > 100 and sum(map(len, graph.values())) > 300  # the walk found the package
    problems = describe_cycles(graph, module_files(ROOT), ROOT)
    if problems:
        pytest.fail("import circles in nbcli/ (place the shared code where both can import it):\n"
                    + "\n".join(problems), pytrace=False)


def test_no_import_runs_back_up_the_floors() -> None:
    problems = upward_imports(import_graph(ROOT), module_files(ROOT), ROOT, LAYERS)
    if problems:
        pytest.fail("imports back up the floors of nbcli/ (LAYERS; move the shared code down to a floor both "
                    "can import):\n" + "\n".join(problems), pytrace=False)


def test_an_upward_edge_in_nbcli_is_found() -> None:
    """The floors test on the real package fails when one import runs up: the error module (the
    floor) importing the CLI's train command, as a lazy import would add it."""
    graph, files = import_graph(ROOT), module_files(ROOT)
    graph["nbcli.errors"] = {**graph["nbcli.errors"], "nbcli.cli.train": 7}
    assert upward_imports(graph, files, ROOT, LAYERS) == [
        "nbcli/errors.py:7: nbcli.errors (floor) imports nbcli.cli.train (faces, a floor above)"]


#: The only private names of a library nb uses: typer's conversion internals, which keep plain option
#: values off typer 0.29's pydantic path (nbcli/cli/coercion.py). Allowed because pyproject.toml pins
#: typer to a range whose both ends .ci/typer-range tests (test_typer_is_pinned_to_a_tested_range).
ALLOWED_PRIVATE = {
    "nbcli/cli/coercion.py: from typer._param_types import coerce_cli_path",
    "nbcli/cli/coercion.py: from typer._coercion import RuntimeParam, build_runtime_param",
    "nbcli/cli/coercion.py: param._runtime_param (not defined in this module)",
}


def _without_line(use: str) -> str:
    where, _line, what = use.split(":", 2)
    return f"{where}:{what}"


def test_nbcli_uses_no_private_names_across_modules() -> None:
    problems = [use for use in private_uses(ROOT) if _without_line(use) not in ALLOWED_PRIVATE]
    if problems:
        pytest.fail("private names used outside their module (make them public or move the code):\n"
                    + "\n".join(problems), pytrace=False)


def test_allowed_private_uses_are_still_there() -> None:
    """An allowance nb no longer needs is removed with the code that needed it."""
    assert ALLOWED_PRIVATE <= {_without_line(use) for use in private_uses(ROOT)}


def test_typer_is_pinned_to_a_tested_range() -> None:
    """typer's private modules are used (ALLOWED_PRIVATE), so typer is pinned below its next minor
    release, and CI runs the CLI tests under the oldest and the newest typer of the range."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    (spec,) = re.findall(r'"(typer[^"]*)"', pyproject)
    assert re.fullmatch(r"typer>=0\.(\d+)(?:\.\d+)?,<0\.(\d+)", spec), spec
    low, high = map(int, re.fullmatch(r"typer>=0\.(\d+)(?:\.\d+)?,<0\.(\d+)", spec).groups())
    assert high == low + 1, f"{spec}: one minor release of typer (its private modules change between them)"
    assert ".ci/typer-range" in (ROOT / ".ci" / "run").read_text()
    script = (ROOT / ".ci" / "typer-range").read_text()
    assert "tests/cli/test_coercion.py" in script and "typer==$floor" in script


# -- the checks themselves, on planted packages -----------------------------------------------------

def _plant(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "nbcli" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


@pytest.mark.parametrize(("files", "expected"), [
    # a lazy import inside a function closes the circle
    ({"__init__.py": "", "a.py": "import nbcli.b\n", "b.py": "def f():\n    from nbcli import a\n"},
     [["nbcli.a", "nbcli.b"]]),
    # a TYPE_CHECKING import, relative form
    ({"__init__.py": "", "a.py": "from nbcli.b import X\n",
      "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import Y\nX = 1\n"},
     [["nbcli.a", "nbcli.b"]]),
    # three modules in two packages, `from package import module` form
    ({"__init__.py": "", "p/__init__.py": "", "p/a.py": "from nbcli.q import b\n",
      "q/__init__.py": "", "q/b.py": "from ..p import c\n", "p/c.py": "from nbcli.p.a import Z\n"},
     [["nbcli.p.a", "nbcli.p.c", "nbcli.q.b"]]),
    # a package re-exports a module that takes a name from the package
    ({"__init__.py": "", "p/__init__.py": "from nbcli.p.a import A\nB = 2\n", "p/a.py": "from nbcli.p import B\nA = 1\n"},
     [["nbcli.p", "nbcli.p.a"]]),
    # no circle: a submodule of a re-exporting package used by a sibling (parents are not edges)
    ({"__init__.py": "", "p/__init__.py": "from nbcli.p.a import A\n", "p/a.py": "from nbcli.p.b import B\nA = 1\n",
      "p/b.py": "B = 2\n"}, []),
])
def test_cycles_are_found(tmp_path: Path, files: dict[str, str], expected: list[list[str]]) -> None:
    assert cycles(import_graph(_plant(tmp_path, files))) == expected


def test_private_uses_are_found(tmp_path: Path) -> None:
    root = _plant(tmp_path, {
        "__init__.py": "",
        "a.py": "_x = 1\n__all__ = []\ndef _f():\n    return _x\n",
        "b.py": "from nbcli.a import _f, __all__\nfrom nbcli import a\nimport nbcli.a\nimport nbcli.a as alias\n"
                "a._x, nbcli.a._x, alias._f, a.__doc__\n",
        "c.py": "from typer._coercion import RuntimeParam\nimport torch._dynamo\nfrom torch import _C\n"
                "class K:\n    def m(self, other):\n        self._y = other._z\n        return self._y, other._y\n"
                "def f(param):\n    param._hidden = 1\n",
        "d.py": "from .a import _x\n",
    })
    assert private_uses(root) == [
        "nbcli/b.py:1: from nbcli.a import _f",
        "nbcli/b.py:5: a._x (nbcli.a)",
        "nbcli/b.py:5: alias._f (nbcli.a)",
        "nbcli/b.py:5: nbcli.a._x (nbcli.a)",
        "nbcli/c.py:1: from typer._coercion import RuntimeParam",
        "nbcli/c.py:2: import torch._dynamo",
        "nbcli/c.py:3: from torch import _C",
        "nbcli/c.py:6: other._z (not defined in this module)",
        "nbcli/c.py:9: param._hidden (not defined in this module)",
        "nbcli/d.py:1: from nbcli.a import _x",
    ]


def test_upward_imports_are_found(tmp_path: Path) -> None:
    """On a planted package with three floors: an import down or within a floor passes; one up fails
    (at module level, lazily inside a function, under TYPE_CHECKING), naming file:line; a module on no
    floor is named."""
    root = _plant(tmp_path, {
        "__init__.py": "",
        "top/__init__.py": "", "top/face.py": "from nbcli.mid import work\nfrom nbcli.top import other\n",
        "top/other.py": "import nbcli.low\n",
        "mid/__init__.py": "", "mid/work.py": "def f():\n    from nbcli.top.face import x\n",
        "mid/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from nbcli.top import other\n",
        "low.py": "import nbcli.mid.work\n", "stray.py": "",
    })
    layers = [("top", ("nbcli", "nbcli.top")), ("mid", ("nbcli.mid",)), ("low", ("nbcli.low",))]
    assert layer_of("nbcli.top.face", layers) == 0 and layer_of("nbcli.stray", layers) is None
    assert upward_imports(import_graph(root), module_files(root), root, layers) == [
        "nbcli/stray.py: nbcli.stray is on no floor",
        "nbcli/low.py:1: nbcli.low (low) imports nbcli.mid.work (mid, a floor above)",
        "nbcli/mid/typed.py:3: nbcli.mid.typed (mid) imports nbcli.top.other (top, a floor above)",
        "nbcli/mid/work.py:2: nbcli.mid.work (mid) imports nbcli.top.face (top, a floor above)",
    ]
