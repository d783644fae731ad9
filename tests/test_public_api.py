"""The public API is what the docs say it is: every public function and report class of nbcli.api is
in its `__all__`, `import nbcli` exports exactly that, and every `nbcli.NAME` the README and docs/ use
is exported (or is a module of the package); a model given to the API as a Hub repo id opens as it
does on the command line; each package's docstring map names every module in it."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import nbcli
from nbcli import api
from nbcli.api import models as api_models

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _public_definitions(*modules: str) -> set[str]:
    """The public functions and classes defined in nbcli/api/MODULE.py for each module."""
    names = set()
    for module in modules:
        tree = ast.parse((ROOT / "nbcli" / "api" / f"{module}.py").read_text(encoding="utf-8"))
        names |= {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))
                  and not node.name.startswith("_")}
    return names


COMMAND_MODULES = sorted(p.stem for p in (ROOT / "nbcli" / "api").glob("*.py")
                         if p.stem not in ("__init__", "inputs", "models"))


def test_every_public_definition_of_api_is_in_all() -> None:
    defined = _public_definitions(*COMMAND_MODULES)
    assert {"attention_maps", "patch", "Report"} <= defined  # the walk found them
    assert defined == set(api.__all__)
    assert len(api.__all__) == len(set(api.__all__))
    models = _public_definitions("models")
    assert {"load_model", "init_output_bias"} <= models
    assert models | set(api_models.LAZY) == set(api_models.__all__)


def test_import_nbcli_exports_the_api() -> None:
    assert set(nbcli.__all__) == set(api.__all__) | set(api_models.__all__)
    for name in nbcli.__all__:
        module = api if name in api.__all__ else api_models
        assert getattr(nbcli, name) is getattr(module, name), name
    assert set(nbcli.__all__) <= set(dir(nbcli))


def test_every_nbcli_name_in_the_docs_is_exported_or_a_module() -> None:
    used = {name for page in DOCS for name in re.findall(r"\bnbcli\.([A-Za-z_]\w*)", page.read_text(encoding="utf-8"))}
    assert {"probe", "patch", "train_model"} <= used  # the docs were read
    modules = {p.stem for p in (ROOT / "nbcli").glob("*.py")} | {p.name for p in (ROOT / "nbcli").iterdir() if p.is_dir()}
    unknown = sorted(used - set(nbcli.__all__) - modules)
    assert not unknown, f"the docs use nbcli.{', nbcli.'.join(unknown)}, which nbcli does not export"


def test_the_python_page_lists_every_api_function() -> None:
    page = (ROOT / "docs" / "python.md").read_text(encoding="utf-8")
    functions = [name for module in (api, api_models) for name in module.__all__
                 if inspect.isfunction(getattr(module, name))]
    missing = [name for name in functions if f"| `{name}(" not in page]
    assert not missing, f"docs/python.md's table lacks {missing}"


def test_a_repo_id_names_a_model_as_on_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """api.py's promise: a model argument may be a Hub repo id (here from an offline cache)."""
    from tests.checkpoint.builders import gpt2_tensors, save
    from tests.hub_cache import add_snapshot, commit_hash

    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source = tmp_path / "src"
    source.mkdir()
    save(source / "model.safetensors", gpt2_tensors())
    snapshot = add_snapshot(cache, "org/tiny", source, commit_hash("tiny"))
    monkeypatch.chdir(tmp_path)  # no local folder named org/tiny
    by_id = nbcli.inspect("org/tiny").to_dict()
    by_path = nbcli.inspect(snapshot).to_dict()
    assert by_id["tensors"] == by_path["tensors"] and by_id["roles"] == by_path["roles"]
    assert by_id["hub"] == {"repo_id": "org/tiny", "commit": commit_hash("tiny")}


#: The packages whose docstring is a map of their modules (the others describe themselves as a whole).
PACKAGES = [ROOT / "nbcli" / name for name in ("checkpoint", "corpus", "counting", "decoding", "hf", "lm", "models",
                                             "reports", "surgery", "tasks", "tokenizers")]


@pytest.mark.parametrize("package", PACKAGES, ids=[p.name for p in PACKAGES])
def test_the_package_docstring_maps_every_module(package: Path) -> None:
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8"))) or ""
    modules = sorted(p.name for p in package.glob("*.py") if p.name != "__init__.py")
    assert modules
    missing = [name for name in modules if name not in doc]
    assert not missing, f"{package.relative_to(ROOT)}/__init__.py's docstring does not name {missing}"
