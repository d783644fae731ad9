"""A task from another package (docs/tasks.md's example, installed as its own package from the page's
code): nb train lists it and its options only, trains it, and nb eval / nb predict run it; nothing
in nbcli names it."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
from pathlib import Path

import pytest

from conftest import english_like_lines
from tests import forked_nb
from tests.cli.helpers import assert_one_line_error

ROOT = Path(__file__).resolve().parents[2]


def _example_code() -> str:
    page = (ROOT / "docs" / "tasks.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.S)
    assert len(blocks) == 1
    return blocks[0]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding nb_sts as pip installs a package: the module and its .dist-info, whose
    entry_points.txt names the task (what `[project.entry-points."nbcli.tasks"]` writes)."""
    folder = tmp_path_factory.mktemp("site")
    (folder / "nb_sts.py").write_text(_example_code(), encoding="utf-8")
    info = folder / "nb_sts-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nb-sts\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[nbcli.tasks]\nsts = nb_sts:StsTask\n")
    return folder


def _pairs(path: Path, n: int, seed: int) -> Path:
    """Scored pairs: a sentence with its own words shuffled scores 5, with another sentence 0."""
    rng = random.Random(seed)
    lines = english_like_lines(2 * n, seed=seed, unicode=False)
    rows = []
    for i in range(n):
        a = lines[i]
        if i % 2:
            words = a.split()
            rng.shuffle(words)
            rows.append(f"{a}\t{' '.join(words)}\t5.0")
        else:
            rows.append(f"{a}\t{lines[n + i]}\t0.0")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def _nb(site: Path, *args: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "120",
           "PYTHONPATH": os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return forked_nb.run(["nb", *map(str, args)], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.slow
def test_an_installed_task_trains_evaluates_and_predicts(site: Path, tmp_path: Path, sp_model: Path) -> None:
    listed = _nb(site, "train", "--help")
    assert listed.returncode == 0 and "sts" in listed.stdout
    own = _nb(site, "train", "sts", "--help")
    assert own.returncode == 0, own.stderr
    assert "--dim" in own.stdout and "--corpus" in own.stdout
    for other in ("--beam", "--objective", "--pooling", "--bias-init"):
        assert other not in own.stdout
    train, test = _pairs(tmp_path / "train.tsv", 120, 1), _pairs(tmp_path / "test.tsv", 40, 2)
    run = tmp_path / "run"
    trained = _nb(site, "train", "sts", "--corpus", train, "-t", sp_model, "--out", run, "--steps", "150", "--json")
    assert trained.returncode == 0, trained.stderr
    summary = json.loads(trained.stdout)
    assert summary["pairs"] == 120 and json.loads((run / "config.json").read_text())["task"] == "sts"
    alias = _nb(site, "train", "--task", "sts", "--corpus", train, "-t", sp_model, "--out", tmp_path / "r2",
                "--steps", "150", "--json")
    assert json.loads(alias.stdout)["final_loss"] == summary["final_loss"]  # same seed, same run
    evaluated = _nb(site, "eval", run, "--corpus", test, "--json")
    assert evaluated.returncode == 0, evaluated.stderr
    report = json.loads(evaluated.stdout)
    assert report["pairs"] == 40 and report["pearson"] > 0.5, report   # it learnt: shuffled pairs score high
    predicted = _nb(site, "predict", run, "--corpus", test, "-o", tmp_path / "p.jsonl")
    assert predicted.returncode == 0, predicted.stderr
    scores = [json.loads(line)["score"] for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert len(scores) == 40 and all(0 <= s <= 5 for s in scores)
    refused = _nb(site, "predict", run, "--corpus", test, "-o", run / "config.json")
    assert refused.returncode == 1
    assert_one_line_error(refused.stderr, "config.json")


def test_an_installed_task_refuses_other_tasks_options_and_bad_rows(site: Path, tmp_path: Path,
                                                                    sp_model: Path) -> None:
    train = _pairs(tmp_path / "train.tsv", 10, 1)
    result = _nb(site, "train", "sts", "--corpus", train, "-t", sp_model, "--out", tmp_path / "r", "--beam", "3")
    assert result.returncode == 1
    assert_one_line_error(result.stderr, "--beam applies to --task translation, not sts")
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tb\t5\nonly one field\n")
    result = _nb(site, "train", "sts", "--corpus", bad, "-t", sp_model, "--out", tmp_path / "r")
    assert result.returncode == 1
    assert_one_line_error(result.stderr, "bad.tsv:2")
    assert not (tmp_path / "r").exists()


def test_nothing_in_nbcli_names_the_external_task() -> None:
    for path in (ROOT / "nbcli").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "nb_sts" not in text and "StsTask" not in text, path
