"""The Python API keeps the CLI's error promise (nbcli.arguments): every public function, given an
argument of the wrong type (a model object or tensor where a path is expected, None for a tokenizer,
a string for a number), a choice outside its Literal, or an integer out of bounds, raises an NbError
naming the parameter (`tokenizer=`), before reading anything; an NbError raised inside names options
as the function's parameters (`arch=`, `mapping=`, `scale_ln_bias=`), never as command-line flags."""

from __future__ import annotations

import inspect
import keyword
import re
import typing
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import nbcli
from nbcli import api
from nbcli.arguments import BOUNDS, python_terms
from nbcli.errors import NbError
from nbcli.samples import SAMPLE_CORPUS, SAMPLE_TOKENIZER

FLAG = re.compile(r"(?<![\w-])(--[a-z]|-[octj](?![\w-]))")
FUNCTIONS = [name for name in api.__all__ if callable(getattr(api, name)) and not isinstance(getattr(api, name), type)]


def _hints(name: str) -> dict[str, Any]:
    function = getattr(api, name).__wrapped__
    parameters = inspect.signature(function).parameters
    holder = type("H", (), {"__annotations__": {k: p.annotation for k, p in parameters.items()
                                                 if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)},
                            "__module__": function.__module__})
    return typing.get_type_hints(holder)


def _is_path(hint: Any) -> bool:
    return "PathLike" in str(hint)


def _required(name: str) -> dict[str, Any]:
    """Well-typed stand-ins for the required parameters (never read: the hostile one fails first)."""
    parameters, hints = inspect.signature(getattr(api, name)).parameters, _hints(name)
    return {k: ["x"] if typing.get_origin(hints[k]) is not typing.Union and typing.get_args(hints[k]) else "x"
            for k, p in parameters.items()
            if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}


def _cases() -> list[tuple[str, str, Any]]:
    """(function, parameter, hostile value) for every parameter of every public function that a
    wrong type, choice or bound can hit, read from the signatures themselves."""
    cases = []
    for name in FUNCTIONS:
        for param, hint in _hints(name).items():
            text = str(hint)
            if _is_path(hint) and "Any" not in text:
                cases.append((name, param, torch.zeros(3)))          # a tensor where a path is expected
                if "None" not in text:
                    cases.append((name, param, None))
            elif "Literal" in text:
                cases.append((name, param, "no-such-choice"))
            elif hint in (int, float) or text in ("int | None", "float | None", "typing.Optional[int]",
                                                  "typing.Optional[float]"):
                cases.append((name, param, "half"))
            if param in BOUNDS:
                cases.append((name, param, BOUNDS[param][0] - 1))
    return cases


CASES = _cases()


def test_every_public_function_is_checked() -> None:
    assert FUNCTIONS and all(hasattr(getattr(api, name), "__wrapped__") for name in FUNCTIONS)
    names = {(function, param) for function, param, _ in CASES}
    for must in [("evaluate", "tokenizer"), ("count_unigrams", "workers"),
                 ("patch", "scale_ln_bias"), ("generate", "batch_size"), ("probe", "counts")]:
        assert must in names, must


@pytest.mark.parametrize(("function", "param", "value"), CASES,
                         ids=[f"{f}-{p}-{type(v).__name__}" for f, p, v in CASES])
def test_hostile_arguments_raise_one_nb_error_naming_the_parameter(function: str, param: str, value: Any,
                                                                   tmp_path: Path) -> None:
    before = set(tmp_path.iterdir())
    with pytest.raises(NbError) as caught:
        getattr(nbcli, function)(**{**_required(function), param: value})
    message = str(caught.value)
    assert f"{param}=" in message and "\n" not in message, message
    assert not FLAG.search(message), message
    assert set(tmp_path.iterdir()) == before


def _gpt2(folder: Path) -> Path:
    from tests.lm.conftest import save_hf_gpt2

    return save_hf_gpt2(folder, 2000)


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")  # in the test extras; never skipped in CI
    return _gpt2(tmp_path_factory.mktemp("gpt2"))


@pytest.fixture(scope="module")
def heldout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("heldout") / "heldout.txt"
    path.write_text("the cat sat on the mat and looked at the dog\nsome words again and again here\n")
    return path


def _core_cases(gpt2: Path, heldout: Path, tmp: Path) -> list[tuple[str, Any, str]]:
    """(what, call, the Python word the message must hold): errors the core raises once it runs."""
    tok = SAMPLE_TOKENIZER
    return [
        ("inspect arch", lambda: nbcli.inspect(gpt2, arch="nope"), "arch='nope'"),
        ("inspect unknown role", lambda: nbcli.inspect(gpt2, mapping={"nope": "x"}), "mapping={'nope': 'x'}"),
        ("inspect missing tensor", lambda: nbcli.inspect(gpt2, mapping={"output_bias": "absent"}), "mapping="),
        ("inspect bad item", lambda: nbcli.inspect(gpt2, mapping=["no-equals-sign"]), "mapping="),
        ("probe arch", lambda: nbcli.probe(gpt2, arch="nope"), "arch='nope'"),
        ("probe a number", lambda: nbcli.probe(42), "checkpoint="),
        ("patch lambda", lambda: nbcli.patch(gpt2, tmp / "o", scale_ln_bias=float("nan")), "scale_ln_bias="),
        ("patch no bias name", lambda: nbcli.patch(gpt2, tmp / "o", set_output_bias=tmp / "c.safetensors"),
         "bias_name="),
        ("patch standardise", lambda: nbcli.patch(gpt2, tmp / "o", standardise="half"), "standardise='half'"),
        ("patch smoothing", lambda: nbcli.patch(gpt2, tmp / "o", untie=True, smoothing="half"), "smoothing='half'"),
        ("evaluate lambdas", lambda: nbcli.evaluate(gpt2, heldout, tok, scale_ln_bias="half"), "scale_ln_bias='half'"),
        ("evaluate device", lambda: nbcli.evaluate(gpt2, heldout, tok, device="tpu"), "device"),
        ("evaluate arch", lambda: nbcli.evaluate(gpt2, heldout, tok, arch="nope"), "arch='nope'"),
        ("generate decoding", lambda: nbcli.generate(gpt2, heldout, tok, decoding="half"), "decoding='half'"),
        ("generate tau", lambda: nbcli.generate(gpt2, heldout, tok, logit_adjust=1.0), "counts="),
        ("count smoothing", lambda: nbcli.count_unigrams(SAMPLE_CORPUS, tok, tmp / "c2.safetensors", smoothing="x"),
         "smoothing='x'"),
        ("train steps", lambda: nbcli.train_model(heldout, tok, tmp / "run", steps=0), "steps"),
        ("train unknown", lambda: nbcli.train_model(heldout, tok, tmp / "run", nope=1), "nope="),
        ("train type", lambda: nbcli.train_model(heldout, tok, tmp / "run", steps="many"), "steps="),
        ("train missing", lambda: nbcli.train_model(heldout, tok), "out"),
    ]


def test_core_errors_speak_in_parameters(gpt2: Path, heldout: Path, tmp_path: Path) -> None:
    nbcli.count_unigrams(heldout, SAMPLE_TOKENIZER, tmp_path / "c.safetensors", workers=1)
    for what, call, word in _core_cases(gpt2, heldout, tmp_path):
        with pytest.raises(NbError) as caught:
            call()
        message = str(caught.value)
        assert word in message and "\n" not in message, (what, message)
        assert not FLAG.search(message), (what, message)
    assert not (tmp_path / "o").exists() and not (tmp_path / "run").exists()


def test_the_cli_keeps_its_flags(gpt2: Path) -> None:
    from tests.cli.helpers import invoke

    result = invoke("inspect", gpt2, "--arch", "nope")
    assert result.exit_code == 1 and "--arch 'nope'" in result.stderr


def _signature(*names: str, flags: tuple[str, ...] = ()) -> inspect.Signature:
    return inspect.Signature([inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None) for n in names]
                             + [inspect.Parameter(f, inspect.Parameter.KEYWORD_ONLY, default=False) for f in flags])


def test_python_terms_examples() -> None:
    sig = _signature("arch", "mapping", "scale_ln_bias", "output", "bias_name", "kv_cache", flags=("allow_nonfinite",))
    assert python_terms("--arch 'nope': expected auto", sig) == "arch='nope': expected auto"
    assert python_terms("name the roles with --map ROLE=TENSOR", sig) == "name the roles with mapping={ROLE: TENSOR}"
    assert python_terms("--map output_bias=x: no tensor", sig) == "mapping={'output_bias': 'x'}: no tensor"
    assert python_terms("pass --allow-nonfinite to keep them", sig) == "pass allow_nonfinite=True to keep them"
    assert python_terms("an output path (-o OUT)", sig) == "an output path (output=OUT)"
    assert python_terms("--scale-ln-bias needs b_LN", sig) == "scale_ln_bias needs b_LN"
    assert python_terms("e.g. --bias-name lm_head.bias", sig) == "e.g. bias_name=lm_head.bias"
    assert python_terms("a path /tmp/a--b and x-y -- z", sig) == "a path /tmp/a--b and x-y -- z"


WORDS = st.lists(st.from_regex(r"[a-z]{1,8}( [a-z]{1,8}){0,3}", fullmatch=True), min_size=1, max_size=4)
NAMES = st.lists(st.from_regex(r"(?!no_)[a-z]{1,6}(_[a-z]{1,6}){0,2}", fullmatch=True).filter(
    lambda name: not keyword.iskeyword(name)), min_size=1, max_size=4, unique=True)   # `if` names no parameter


@given(names=NAMES, words=WORDS, data=st.data())
def test_python_terms_names_every_option_by_its_parameter(names: list[str], words: list[str],
                                                          data: st.DataObject) -> None:
    """Any message of plain words and options: each `--kebab-name` becomes `snake_name` (no `--` is
    left), and the words around them are kept."""
    flags = data.draw(st.lists(st.sampled_from(names), unique=True))
    sig = _signature(*[n for n in names if n not in flags], flags=tuple(flags))
    chosen = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=4))
    message = " ".join(f"{word} --{name.replace('_', '-')}" for word, name in zip(words, chosen))
    got = python_terms(message, sig)
    assert "--" not in got
    expected = " ".join(f"{word} {name}{'=True' if name in flags else ''}" for word, name in zip(words, chosen))
    assert got == expected
