"""The generated hostile-input suite (issue 9): every case must fail cleanly. See tests/fuzz/harness.py
for what is asserted, tests/fuzz/cases.py for the families. In-process (CliRunner) for speed; a
sample of cases also runs as a real `nb` process (checks C-level logging and leftover processes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fuzz import cases
from tests.fuzz.harness import check_case

ALL = cases.all_cases()


def _params(selected: list[cases.Case]) -> list[object]:
    return [pytest.param(c, id=f"{c.family}/{c.id}",
                         marks=[pytest.mark.xfail(strict=True, reason=c.known)] if c.known else [])
            for c in selected]


FAMILIES_NEEDING_RUN = {"resume"}


def _run(case: cases.Case, tmp_path: Path, shared: dict[str, Path], request: pytest.FixtureRequest, *,
         subprocess_mode: bool) -> None:
    if case.family in FAMILIES_NEEDING_RUN:
        request.getfixturevalue("fuzz_run")  # built only when a resume case runs
    check_case(case, tmp_path, shared, subprocess_mode=subprocess_mode)


def test_enough_cases() -> None:
    assert len(FAST) >= 500, (len(FAST), len(ALL))
    assert len(SAMPLE) == len(SAMPLE_IDS), sorted(set(SAMPLE_IDS) - {f"{c.family}/{c.id}" for c in SAMPLE})
    assert len({(c.family, c.id) for c in ALL}) == len(ALL)


FAST = [c for c in ALL if c.fast]


@pytest.mark.parametrize("case", _params(FAST))
def test_hostile_input_fails_cleanly(case: cases.Case, tmp_path: Path, fuzz_shared: dict[str, Path],
                                     request: pytest.FixtureRequest) -> None:
    _run(case, tmp_path, fuzz_shared, request, subprocess_mode=False)


# A real `nb` process for a few cases of each kind of input (C-level logging to fd 2, exit status,
# leftover processes); every other case runs as a process under the fuzz_slow marker.
SAMPLE_IDS = ("header/inspect-header-deep-array", "counts/merge-dtype-bfloat16", "names/inspect-name2",
              "index/inspect-deep", "tokenizer/count-json-deep", "tokenizer/count-random-bytes",
              "corpus/count-gzip-flipped", "corpus/count-jsonl-lone-surrogate", "options/000-count-unigrams-j-1",
              "tokenizer/train-wordlevel-missing-unk", "columnar/count-parquet-truncated")
SAMPLE = [c for c in ALL if f"{c.family}/{c.id}" in SAMPLE_IDS]


@pytest.mark.slow
@pytest.mark.parametrize("case", _params(SAMPLE))
def test_hostile_input_fails_cleanly_as_a_process(case: cases.Case, tmp_path: Path, fuzz_shared: dict[str, Path],
                                                  request: pytest.FixtureRequest) -> None:
    _run(case, tmp_path, fuzz_shared, request, subprocess_mode=True)


@pytest.mark.fuzz_slow
@pytest.mark.parametrize("case", _params([c for c in ALL if not c.fast]))
def test_the_other_hostile_inputs_fail_cleanly(case: cases.Case, tmp_path: Path, fuzz_shared: dict[str, Path],
                                               request: pytest.FixtureRequest) -> None:
    _run(case, tmp_path, fuzz_shared, request, subprocess_mode=False)


SLOW = [c for c in ALL if c not in SAMPLE]


@pytest.mark.fuzz_slow
@pytest.mark.parametrize("case", _params(SLOW))
def test_every_hostile_input_as_a_process(case: cases.Case, tmp_path: Path, fuzz_shared: dict[str, Path],
                                          request: pytest.FixtureRequest) -> None:
    _run(case, tmp_path, fuzz_shared, request, subprocess_mode=True)
