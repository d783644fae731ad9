"""Option values converted without pydantic equal typer's own conversion, value and error alike;
a real `nb` run imports pydantic no more, and builds only the command it runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main
from hypothesis import given, settings
from hypothesis import strategies as st

from nbcli.cli import COMMAND_MODULES, app, build_app
from nbcli.cli.coercion import NOT_FAST, fast_value

_coercion = pytest.importorskip("typer._coercion", reason="this typer converts through click types (no pydantic)")
from typer._click import Context  # noqa: E402

SAMPLES = ["0", "7", "-3", "+5", "007", "1.5", "1e-3", ".5", "5.", "-0.0", "1E5", "abc", "", " 3", "3 ", "1_000",
           "inf", "nan", "1e400", "9" * 25, "-1", "1024", "1025", "0x10", "１２", "1.0", "text", "jsonl", "cpu",
           "CPU", "cosine", "fro", "a/b.txt", "-", "~/x", ".", "x\0y", "rows-columns"]
GROUP = typer.main.get_command(app)
PARAMS = [(name, param) for name, command in GROUP.commands.items()
          for param in command.params if getattr(param, "type_descriptor", None) is not None]
CONTEXTS = {name: Context(command) for name, command in GROUP.commands.items()}
TYPER_OWN: dict[int, Any] = {}


def _outcome(runtime: Any, value: Any, param: Any, ctx: Any) -> tuple[str, Any]:
    try:
        result = runtime.coerce(value, param=param, ctx=ctx)
    except Exception as err:  # noqa: BLE001 - the error itself is what is compared
        return "error", (type(err).__name__, str(err))
    kind = "Path" if isinstance(result, Path) else type(result).__name__  # nb's keeps the text typed (TypedPath)
    return "value", (kind, result if not isinstance(result, float) or result == result else "nan")


def _compare(command_name: str, param: Any, value: Any) -> None:
    ctx = CONTEXTS[command_name]
    typer_own = TYPER_OWN.setdefault(id(param), _coercion.build_runtime_param(param.type_descriptor))
    assert param.get_runtime_param() is not None
    assert _outcome(param.get_runtime_param(), value, param, ctx) == _outcome(typer_own, value, param, ctx), value


@pytest.mark.parametrize(("command_name", "param"), PARAMS, ids=[f"{c}:{p.name}" for c, p in PARAMS])
def test_every_option_converts_as_typer_does(command_name: str, param: Any) -> None:
    assert type(param.get_runtime_param()).__name__ == "FastRuntimeParam"
    for value in SAMPLES + [param.default]:
        if param.multiple or param.nargs == -1:
            _compare(command_name, param, (value,) if isinstance(value, str) else value)
            _compare(command_name, param, (value, "7"))
        else:
            _compare(command_name, param, value)


NUMERIC = [(c, p) for c, p in PARAMS if p.type_descriptor.annotation in (int, float)]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(NUMERIC), st.one_of(st.text(alphabet="0123456789+-.eE_ ", max_size=12),
                                           st.integers(-2**70, 2**70).map(str),
                                           st.floats(allow_nan=False).map(repr)))
def test_numbers_convert_as_typer_does(case: tuple[str, Any], text: str) -> None:
    _compare(case[0], case[1], text)


def test_plain_values_take_the_fast_path() -> None:
    info = typer.models.OptionInfo()
    assert fast_value(int, info, "12") == 12
    assert fast_value(float, info, "1e-3") == 0.001
    assert fast_value(Path, info, "a/b") == Path("a/b")
    assert fast_value(Path, info, "./a/b") == Path("a/b") and fast_value(Path, info, "./a/b").typed == "./a/b"
    assert fast_value(list[str], info, ("a", "b")) == ["a", "b"]
    assert fast_value(int, info, "1_000") is NOT_FAST  # left to typer
    assert fast_value(bytes, info, b"x") is NOT_FAST


def test_build_app_commands_match_the_table() -> None:
    assert set(typer.main.get_command(build_app()).commands) == set(COMMAND_MODULES)
    for name in COMMAND_MODULES:
        assert list(typer.main.get_command(build_app([name])).commands) == [name]


def test_a_real_run_imports_neither_pydantic_nor_rich_nor_other_commands(tmp_path: Path) -> None:
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world\n")
    tokenizer = Path(__file__).resolve().parents[2] / "nbcli" / "data" / "botchan-bpe2k.model"
    code = ("import sys; from nbcli.cli import main\n"
            "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
            "print(sorted(m for m in sys.modules if m.startswith(('pydantic', 'rich', 'nbcli.cli.'))), code)")
    out = subprocess.run([sys.executable, "-c", code, "count-unigrams", str(corpus), "-t", str(tokenizer),
                          "-o", str(tmp_path / "c.safetensors"), "--workers", "1", "--json"],
                         capture_output=True, text=True, timeout=120)
    last = out.stdout.strip().splitlines()[-1]
    assert last.endswith(" 0"), out.stderr
    assert "pydantic" not in last, last
    assert "'rich" not in last, last  # --json into a pipe renders nothing: rich is never imported
    assert "nbcli.cli.count_unigrams" in last and "nbcli.cli.train" not in last, last
