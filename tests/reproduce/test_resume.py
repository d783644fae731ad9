"""Resumable and idempotent: a sweep killed with SIGKILL and run again trains only its unfinished runs
and aggregates to the same bytes as an uninterrupted sweep; a run stopped after a saved state resumes
from it (the task's --resume) rather than starting over."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import nbcli
from tests import forked_nb
from tests.cli.helpers import run_nb
from tests.reproduce.conftest import translation_data

RESULTS = ("000-fig3/results.json", "000-fig3/results.csv", "000-fig3/results.md")


def _finished(record: Path) -> bool:
    try:
        return bool(json.loads(record.read_text())["finished"])
    except (OSError, ValueError, KeyError):
        return False


@pytest.mark.slow
@pytest.mark.faults
def test_sigkill_then_rerun_trains_only_unfinished_runs_to_the_same_bytes(tmp_path: Path, pairs: Path) -> None:
    args = ["reproduce", "000-fig3", "--scale", "smoke", *translation_data(pairs, test=False), "--arms", "unigram",
            "--arms", "zero", "--no-figures", "--json"]
    cut = tmp_path / "cut"
    sweep = forked_nb.Popen(["nb", *args, "--out", str(cut)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    first = cut / "runs" / "unigram-s0.json"
    deadline = time.monotonic() + 300
    while not _finished(first) and sweep.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sweep.poll() is None, "the sweep ended before it could be killed: " + sweep.stderr.read().decode()
    os.kill(sweep.pid, signal.SIGKILL)
    sweep.wait()
    records = sorted((cut / "runs").glob("*.json"))
    done = {p.stem for p in records if _finished(p)}
    assert "unigram-s0" in done and len(done) < 4
    stamps = {name: (cut / "runs" / name / "log.jsonl").stat().st_mtime_ns for name in done}
    assert not any((cut / name).exists() for name in RESULTS)     # nothing aggregated from a partial sweep

    again = run_nb(*args, "--out", cut, timeout=600)
    assert again.returncode == 0, again.stderr.decode()
    actions = {o["run"]: o["action"] for o in json.loads(again.stdout)["outcomes"]}
    assert len(actions) == 4
    assert all(actions[name] == "reused" for name in done), actions
    assert all(actions[name] in ("trained", "resumed") for name in set(actions) - done), actions
    assert stamps == {name: (cut / "runs" / name / "log.jsonl").stat().st_mtime_ns for name in done}

    whole = run_nb(*args, "--out", tmp_path / "whole", timeout=600)
    assert whole.returncode == 0, whole.stderr.decode()
    for name in RESULTS:
        assert (cut / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name


def test_a_stopped_run_resumes_from_its_saved_state(tmp_path: Path, pairs: Path) -> None:
    from nbcli.sweeps.execute import record_path, write_record
    from nbcli.sweeps.items import item_recipe
    from nbcli.sweeps.plan import build_plan
    from nbcli.tasks.runs import train_task

    data = [a for a in translation_data(pairs, test=False) if a != "--data"]
    plan = build_plan(item_recipe("000-fig3"), scale="smoke", data=data, arms=["unigram"])
    spec, out = plan.runs[0], tmp_path / "out"
    (out / "runs").mkdir(parents=True)
    write_record(record_path(out, spec.id), {"run": spec.id, "arm": spec.arm, "seed": spec.seed, "kind": spec.kind,
                                             "options": spec.options, "settings_hash": spec.settings_hash,
                                             "finished": False, "evaluation": None})
    train_task("translation", {**spec.options, "out": out / "runs" / spec.id, "stop_at": 3})  # what a kill leaves
    report = nbcli.reproduce("000-fig3", out, data=data, scale="smoke", arms=["unigram"], figures=False)
    assert {o["run"]: o["action"] for o in report.outcomes} == {spec.id: "resumed", plan.runs[1].id: "trained"}
    whole = nbcli.reproduce("000-fig3", tmp_path / "whole", data=data, scale="smoke", arms=["unigram"], figures=False)
    resumed = [json.loads(line) for line in (out / "runs" / spec.id / "log.jsonl").read_text().splitlines()]
    straight = [json.loads(line) for line in (tmp_path / "whole" / "runs" / spec.id / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in resumed] == [r["step"] for r in straight]
    for a, b in zip(resumed, straight):
        for key in ("loss", "val_loss", "val_bleu"):
            if key in b:
                assert a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-7), (a["step"], key)
    assert report.rows[0]["metrics"]["alc_val_bleu"]["mean"] == \
        pytest.approx(whole.rows[0]["metrics"]["alc_val_bleu"]["mean"], rel=1e-6)
