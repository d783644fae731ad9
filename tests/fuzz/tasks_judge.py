"""The task fuzzer's judge (tests/fuzz/test_tasks_fuzz.py): run one case and list the promises of
docs/guarantees.md its outcome breaks.

An outcome breaks a promise when it is: a traceback; an exit code other than 0, 1, 2; an error that is
not one `nb: error:` line, with anything on stdout, longer than 2000 characters, or naming neither the
case's files nor an option; a file left behind in the case folder after an error (partial output), or
outside the run folder / -o file after a success; an input (or the shared model/run folders) changed;
a run longer than the timeout (hang); a valid input refused, or an input to refuse accepted; a label
set or count other than the file's; nb predict reporting fewer (or more) records than the file holds
without a warning that says it skipped some; invalid UTF-8 read without a warning.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from tests.fuzz.harness import Outcome, run_inprocess, run_subprocess, snapshot
from tests.fuzz.tasks_cases import Case, Shared

ROOT = Path(__file__).resolve().parents[2]
Snapshot = dict[str, tuple[int, str]]


def reported_count(case: Case, stdout: str) -> int | None:
    try:
        report = json.loads(stdout)
    except ValueError:
        return None
    if case.count_key == "predictions":   # with -o: only the count ("records"), the predictions in the file
        preds = report.get("predictions")
        return len(preds) if isinstance(preds, list) else report.get("records")
    value = report.get(case.count_key) if case.count_key else None
    if value is None and case.count_key == "examples":
        value = report.get("metrics", {}).get("examples") if isinstance(report.get("metrics"), dict) else None
    return value if isinstance(value, int) else None


def file_records(path: Path, task: str) -> int | None:
    """How many records an input holds, counted independently of nb (for nb predict's count): JSONL
    non-blank lines, parquet/Arrow rows, TSV/CSV rows after the header, CoNLL groups of token lines
    (-DOCSTART- and `#` lines before a sentence aside). None for what this count does not cover."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.is_file():
        return None
    try:
        if path.suffix == ".parquet":
            return pq.ParquetFile(path).metadata.num_rows
        if path.suffix == ".arrow":
            with pa.ipc.open_file(path) as reader:
                return reader.read_all().num_rows
    except Exception:   # noqa: BLE001 - nb read it; this count does not try harder
        return None
    lines = path.read_bytes().decode("utf-8", "replace").removeprefix("\ufeff").split("\n")
    lines = [x.removesuffix("\r") for x in lines]
    if path.suffix == ".jsonl":
        return sum(bool(x.strip()) for x in lines)
    if path.suffix in (".tsv", ".csv"):
        return sum(bool(x) for x in lines[1:]) if task == "classification" else None
    groups, inside = 0, False
    for x in lines:
        fields = x.strip(" \t").split()
        if not fields:
            inside = False
        elif fields[0] == "-DOCSTART-" or (not inside and fields[0].startswith("#")):
            continue
        elif not inside:
            groups, inside = groups + 1, True
    return groups


def judge(case: Case, ran: Outcome, before: Snapshot, after: Snapshot, folder: Path) -> list[str]:
    """The promises this outcome breaks (empty: kept)."""
    broken: list[str] = []
    if ran.hung:
        return ["hang"]
    if ran.processes_left:
        broken.append("processes_left")
    try:
        report = json.loads(ran.stdout) if ran.exit_code == 0 else {}
    except ValueError:
        report = {}
    warned = json.dumps(report.get("warnings", [])) + ran.stderr
    if ran.traceback:
        broken.append("traceback")
    if ran.exit_code not in (0, 1, 2):
        broken.append("exit_code")
    if any(after.get(p) != h for p, h in before.items()):
        broken.append("input_changed")
    if ran.exit_code != 0:
        lines = [x for x in ran.stderr.splitlines() if x.strip()]
        if len(lines) != 1 or not lines[0].startswith("nb: error: "):
            broken.append("not_one_line")
        elif len(lines[0]) > 2000:
            broken.append(f"long_error({len(lines[0])})")
        elif str(folder) not in lines[0] and not any(a.startswith("-") and a in lines[0] for a in case.args):
            broken.append("unnamed")
        if ran.stdout.strip():
            broken.append("stdout_on_error")
        if set(after) - set(before):
            broken.append("partial_output")
        if case.valid:
            broken.append("valid_refused")
    else:
        added = set(after) - set(before)
        stray = [p for p in added if not (p.startswith(str(folder / "run")) or p == str(folder / "preds.jsonl"))]
        if stray:
            broken.append("stray_output")
        if case.valid and case.expected is not None and case.count_key and "skipped" not in warned:
            got = reported_count(case, ran.stdout)
            if got != case.expected:
                broken.append(f"count({got}!={case.expected})")
        if case.bad_utf8 and "utf-8" not in warned.lower():
            broken.append("utf8_unwarned")
        if case.must_fail:
            broken.append("accepted_invalid")
        if case.valid and case.labels is not None and sorted(report.get("labels") or []) != sorted(case.labels):
            broken.append(f"labels({report.get('labels')}!={sorted(case.labels)})")
        if case.count_key == "predictions" and "skipped" not in warned:
            corpus = Path(case.args[case.args.index("--corpus") + 1].replace("{DIR}", str(folder)))
            expected = file_records(corpus, "tagging" if case.surface.startswith("tag") else "classification")
            got = reported_count(case, ran.stdout)
            if expected is not None and got != expected:
                broken.append(f"dropped_unwarned({got}!={expected})")
    return broken


def run_case(case: Case, work: Path, shared: Shared, timeout: float, subprocess_mode: bool) -> dict[str, Any]:
    folder = work / f"{case.surface}-{case.index}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for name, data in sorted(case.files.items(), key=lambda kv: kv[0].count("/")):
        path = folder / name
        if data is None:
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    watched = [folder, shared["bert"], shared["tag_run"], shared["cls_run"]]
    before = snapshot(watched)
    args = [a.replace("{DIR}", str(folder)) for a in case.args]
    start = time.perf_counter()
    # a real nb process imports this checkout's nbcli (as tests/cli/helpers.py's run_nb under PYTHONPATH)
    ran = run_subprocess(args, folder, timeout, {"PYTHONPATH": str(ROOT), **case.env}) if subprocess_mode else \
        run_inprocess(args, timeout, case.env)
    seconds = time.perf_counter() - start
    after = snapshot(watched)
    broken = judge(case, ran, before, after, folder)
    return {"surface": case.surface, "index": case.index, "mode": "subprocess" if subprocess_mode else "in-process",
            "exit": ran.exit_code, "valid": case.valid, "mutations": case.mutations, "broken": broken,
            "seconds": round(seconds, 3), "args": args,
            "stderr": ran.stderr[-600:] if broken or ran.exit_code else "",
            "traceback": ran.stderr[-1500:] if ran.traceback else ""}
