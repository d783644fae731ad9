"""Every command has --help with examples and a current reference page in docs/commands/; README is
a front page whose links (and those of docs/) resolve; --help stays light."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from nbcli import __version__
from nbcli.cli import app
from nbcli.cli import docs as command_docs
from tests.cli.helpers import invoke

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
COMMAND_PAGES = ROOT / "docs" / "commands"


def _command_names() -> list[str]:
    group = typer.main.get_command(app)
    ctx = group.make_context("nb", [], resilient_parsing=True)
    return list(group.list_commands(ctx))


@pytest.mark.parametrize("command", _command_names())
def test_command_has_help_with_examples(command: str) -> None:
    result = invoke(command, "--help")
    assert result.exit_code == 0
    assert "Examples" in result.stdout and f"nb {command}" in result.stdout


def test_command_pages_are_current() -> None:
    """docs/commands/ is what `nb <command> --help` prints at COLUMNS=100 (sqlite-utils' test_docs)."""
    stale = command_docs.stale(COMMAND_PAGES)
    assert not stale, f"docs/commands/ is out of date ({', '.join(stale)}): run `{command_docs.REGENERATE}`"


@pytest.mark.parametrize("command", _command_names())
def test_every_command_has_a_page_linked_from_the_index(command: str) -> None:
    page = COMMAND_PAGES / f"{command}.md"
    assert page.is_file(), f"no {page.relative_to(ROOT)}: run `{command_docs.REGENERATE}`"
    assert f"]({command}.md)" in (COMMAND_PAGES / "index.md").read_text()
    assert f"$ nb {command} --help" in page.read_text()


@pytest.mark.parametrize("command", _command_names())
def test_every_command_has_a_topic_section(command: str) -> None:
    """The prose page each reference page points to has the command's own section."""
    page, anchor = command_docs.TOPICS[command].split("#")
    assert anchor in _anchors((COMMAND_PAGES / page).resolve())


def test_readme_is_a_front_page_linking_the_reference() -> None:
    assert len(README.splitlines()) <= 250
    for target in ("docs/commands/index.md", "docs/guarantees.md", "docs/python.md",
                   "docs/design/counting.md", "docs/design/checkpoint-io.md", "BENCHMARKS.md"):
        assert f"]({target}" in README, target


def test_benchmarks_keeps_the_latest_figures_and_the_history_the_rest() -> None:
    """BENCHMARKS.md holds the latest run of each command (a page to read, <= 450 lines); every
    run, verbatim, is in docs/benchmarks-history.md, which it links."""
    page = (ROOT / "BENCHMARKS.md").read_text()
    assert len(page.splitlines()) <= 450
    assert "](docs/benchmarks-history.md" in page
    for command in ("count-unigrams", "probe-bias", "train", "transplant-embeddings", "patch-checkpoint", "generate"):
        assert f"\n## nb {command}" in page, command


def _slug(heading: str) -> str:
    """GitHub's anchor for a markdown heading."""
    text = re.sub(r"[`*]|\[|\]\([^)]*\)", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)}


_DOCS = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").rglob("*.md"))]


@pytest.mark.parametrize("path", _DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    """Every relative link in README, BENCHMARKS and docs/ names a file that exists, and its #anchor
    a heading there: moving a section breaks this test, not a reader's click."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        if not resolved.exists() or (anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved)):
            broken.append(target)
    assert not broken, f"{path.relative_to(ROOT)}: broken links {broken}"


def test_readme_setup_commands_match_ci() -> None:
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    for command in ("sh install.sh", "python3 -m pytest -q"):
        assert command in README and command in ci


def test_version() -> None:
    result = invoke("--version")
    assert result.stdout.strip() == f"nb {__version__}"


def test_help_does_not_import_heavy_modules() -> None:
    """--help of every command stays fast: no torch/numpy, and no pydantic (typer's coercion of an
    absent --help flag pulled it in, ~0.1 s, until the flag got a boolean default)."""
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom nbcli.cli import app\n"
            f"for args in [['--help']] + [[name, '--help'] for name in {_command_names()!r}]:\n"
            "    assert CliRunner().invoke(app, args).exit_code == 0\n"
            "names = [n for n in sys.modules if n.split('.')[0] in "
            "('torch', 'numpy', 'sentencepiece', 'matplotlib', 'pydantic')]\n"
            "print(','.join(sorted(names)))")
    heavy = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert heavy == ""


def _command_options() -> dict[str, set[str]]:
    """Command name -> its options; a group's (nb train's tasks) leaves as "train lm", "train translation"."""
    group = typer.main.get_command(app)
    ctx = group.make_context("nb", [], resilient_parsing=True)
    found: dict[str, set[str]] = {}
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        leaves = {f"{name} {sub}": leaf for sub, leaf in getattr(command, "commands", {}).items()} or {name: command}
        for leaf_name, leaf in leaves.items():
            found[leaf_name] = {opt for param in leaf.params for opt in param.opts + param.secondary_opts}
        found.setdefault(name, set())
    return found


def _documented_command(words: list[str], options: dict[str, set[str]]) -> tuple[str, list[str]]:
    """(command name as in `_command_options`, its words) of `nb WORDS...`: nb train's task is its
    first word, else --task TASK, else lm."""
    if f"{words[1]} lm" not in options:
        return words[1], words[2:]
    if len(words) > 2 and f"{words[1]} {words[2]}" in options:
        return f"{words[1]} {words[2]}", words[3:]
    rest = words[2:]
    task = next((rest[i + 1] for i, w in enumerate(rest[:-1]) if w == "--task"), "lm")
    return f"{words[1]} {task}", [w for i, w in enumerate(rest) if w != "--task" and (i == 0 or rest[i - 1] != "--task")]


@pytest.mark.parametrize("path", [p for p in _DOCS if p.parent != COMMAND_PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_documented_command_lines_use_real_options(path: Path) -> None:
    """Every `nb COMMAND ...` line in a code block of README, BENCHMARKS or docs/ (not the pages
    generated from --help) names a command that exists and only options that command has (the
    tours stay runnable as options change)."""
    options = _command_options()
    wrong = []
    for block in re.findall(r"```(?:sh|text)?\n(.*?)```", path.read_text(), flags=re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            words = line.strip().removeprefix("$ ").split()
            if len(words) < 2 or words[0] != "nb" or not re.fullmatch(r"[a-z][a-z-]*", words[1]):
                continue
            if words[1] not in options:
                wrong.append(f"nb {words[1]}: no such command")
                continue
            command, rest = _documented_command(words, options)
            if command not in options:
                wrong.append(f"nb {command}: no such command")
                continue
            for word in rest:
                if word == "#":
                    break
                name = word.split("=")[0]
                if name.startswith("--") and name != "--help" and name not in options[command]:
                    wrong.append(f"nb {command} {name}")
    assert not wrong, f"{path.relative_to(ROOT)}: {wrong}"
