"""The task fuzzer as tests: seeded mutations of tagging, classification and translation data, `-t words:`
specs, word vectors and analogy questions through `nb train|eval|predict|analogy`, each outcome judged
against docs/guarantees.md (tests/fuzz/tasks_judge.py). The cases are tests/fuzz/tasks_cases.py's.

The default size (NB_FUZZ_TASKS_CASES, 50 cases of seed NB_FUZZ_TASKS_SEED 0, in-process; two of them
also as real `nb` processes; about 30 s on a quiet core) runs with the suite; the fuzz_slow tier adds the rest of 400 cases. A larger
run with a table of outcomes: `python3 -m tests.fuzz.tasks_run --cases 400 --seed S`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.fuzz.harness import Outcome
from tests.fuzz.tasks_cases import Case, Shared, build_case, build_shared, plan
from tests.fuzz.tasks_judge import ROOT, judge, run_case

CASES = int(os.environ.get("NB_FUZZ_TASKS_CASES", "50"))
SEED = int(os.environ.get("NB_FUZZ_TASKS_SEED", "0"))
TIMEOUT = 120.0   # seconds before a case counts as a hang (a loaded 2-core machine runs a case in ~2 s)
DEFAULT = plan(CASES)
AS_PROCESS = [("cls-train", 1), ("analogy", 1)]   # a real `nb` process: C-level output, exit status
SLOW = [c for c in plan(400) if c not in DEFAULT]


def _ids(cases: list[tuple[str, int]]) -> list[str]:
    return [f"{surface}:{index}" for surface, index in cases]


@pytest.fixture(scope="session")
def tasks_shared(tmp_path_factory: pytest.TempPathFactory) -> Shared:
    return build_shared(tmp_path_factory.mktemp("fuzz-tasks-shared"), ROOT / "nbcli" / "data" / "botchan-bpe2k.model")


def _check(surface: str, index: int, shared: Shared, work: Path, subprocess_mode: bool) -> None:
    case = build_case(surface, index, SEED, shared)
    result = run_case(case, work, shared, TIMEOUT, subprocess_mode)
    assert not result["broken"], json.dumps({k: result[k] for k in ("broken", "exit", "mutations", "args", "stderr",
                                                                    "traceback")}, indent=1)


def test_the_default_run_covers_every_surface() -> None:
    from tests.fuzz.tasks_cases import SURFACES

    assert len(DEFAULT) >= min(CASES, 50) and {s for s, _ in DEFAULT} == set(SURFACES)
    assert set(AS_PROCESS) <= set(DEFAULT)


@pytest.mark.parametrize(("surface", "index"), DEFAULT, ids=_ids(DEFAULT))
def test_task_input_keeps_the_promises(surface: str, index: int, tasks_shared: Shared, tmp_path: Path) -> None:
    _check(surface, index, tasks_shared, tmp_path, subprocess_mode=False)


@pytest.mark.slow
@pytest.mark.parametrize(("surface", "index"), AS_PROCESS, ids=_ids(AS_PROCESS))
def test_task_input_keeps_the_promises_as_a_process(surface: str, index: int, tasks_shared: Shared,
                                                     tmp_path: Path) -> None:
    _check(surface, index, tasks_shared, tmp_path, subprocess_mode=True)


@pytest.mark.fuzz_slow
@pytest.mark.parametrize(("surface", "index"), SLOW, ids=_ids(SLOW))
def test_every_task_input_keeps_the_promises(surface: str, index: int, tasks_shared: Shared, tmp_path: Path) -> None:
    _check(surface, index, tasks_shared, tmp_path, subprocess_mode=False)


def _outcome(exit_code: int, stdout: str = "", stderr: str = "", traceback: bool = False) -> Outcome:
    return Outcome(exit_code, stdout, stderr, traceback)


def test_the_judge_sees_each_broken_promise(tmp_path: Path) -> None:
    """The judge is what makes a case fail: each kind of broken promise on a made-up outcome."""
    folder = tmp_path / "case"
    corpus = f"{folder}/train.tsv"
    valid = Case("cls-train", 0, ["train", "--corpus", corpus], {}, [], True, labels=["a", "b"])
    bad = Case("cls-train", 1, ["train", "--corpus", corpus], {}, ["flip"], False)
    before = {corpus: (0o100644, "x")}
    one_line = f"nb: error: {corpus}:3: no label"
    assert judge(bad, _outcome(1, stderr=one_line), before, before, folder) == []
    assert judge(bad, _outcome(1, stderr=one_line + "\nmore"), before, before, folder) == ["not_one_line"]
    assert judge(bad, _outcome(1, stderr="nb: error: something"), before, before, folder) == ["unnamed"]
    assert judge(bad, _outcome(1, stderr="Traceback ...\nnb: error: x", traceback=True), before, before,
                 folder)[0] == "traceback"
    assert judge(bad, _outcome(3, stderr=one_line), before, before, folder) == ["exit_code"]
    assert judge(bad, _outcome(1, stderr=one_line), before, {corpus: (0o100644, "y")}, folder) == ["input_changed"]
    left = {**before, f"{folder}/run/x": (0o100644, "z")}
    assert judge(bad, _outcome(1, stderr=one_line), before, left, folder) == ["partial_output"]
    assert judge(valid, _outcome(1, stderr=one_line), before, before, folder) == ["valid_refused"]
    labels = json.dumps({"labels": ["a"]})
    assert judge(valid, _outcome(0, stdout=labels), before, before, folder) == ["labels(['a']!=['a', 'b'])"]
    stray = {**before, f"{tmp_path}/elsewhere": (0o100644, "z")}
    assert judge(bad, _outcome(0, stdout="{}"), before, stray, folder) == ["stray_output"]
