"""Run the task fuzzer at any size and print a table of outcomes per surface (tests/fuzz/test_tasks_fuzz.py
runs it as tests at its default size; this is for the larger runs BENCHMARKS.md records).

    python3 -m tests.fuzz.tasks_run --cases 400 --seed S      # table on stdout, JSON in benchmarks/out/fuzz_tasks.json
    python3 -m tests.fuzz.tasks_run --only tag-train:17 --keep   # one case, its folder kept

Each case runs in-process through typer's CliRunner (~0.2 s a case once the libraries are loaded) or,
every --subprocess-every-th case and with --subprocess for all, as a real `nb` process (~8 s a case on
a shared 2-core machine). What breaks a promise: tests/fuzz/tasks_judge.py.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests.fuzz.tasks_cases import SURFACES, build_case, build_shared, plan
from tests.fuzz.tasks_judge import ROOT, run_case


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def load_average() -> list[float]:
    return list(os.getloadavg())


def table(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for surface in SURFACES:
        mine = [r for r in results if r["surface"] == surface]
        if not mine:
            continue
        kinds = Counter(k.split("(")[0] for r in mine for k in r["broken"])
        rows.append({"surface": surface, "cases": len(mine), "exit_0": sum(r["exit"] == 0 for r in mine),
                     "exit_1": sum(r["exit"] == 1 for r in mine), "exit_2": sum(r["exit"] == 2 for r in mine),
                     "valid": sum(r["valid"] for r in mine), "broken": sum(bool(r["broken"]) for r in mine),
                     "kinds": dict(kinds)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=300, help="cases in all, spread over the surfaces")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--surfaces", default=",".join(SURFACES))
    parser.add_argument("--only", default="", help="SURFACE:I[,SURFACE:I ...]: just these cases")
    parser.add_argument("--subprocess", action="store_true", help="every case as a real nb process (slow)")
    parser.add_argument("--subprocess-every", type=int, default=15,
                        help="every N-th case also as a real nb process (0: none)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before a case counts as a hang")
    parser.add_argument("--keep", action="store_true", help="keep the case folders (printed)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "fuzz_tasks.json")
    args = parser.parse_args()

    surfaces = [s for s in args.surfaces.split(",") if s]
    if unknown := set(surfaces) - set(SURFACES):
        raise SystemExit(f"unknown surfaces: {', '.join(sorted(unknown))}")
    chosen = [(s.rsplit(":", 1)[0], int(s.rsplit(":", 1)[1])) for s in args.only.split(",")] if args.only else \
        plan(args.cases, tuple(surfaces))
    work = Path(tempfile.mkdtemp(prefix="nb-fuzz-tasks-"))
    started = time.perf_counter()
    log(f"building the shared model and runs in {work}")
    shared = build_shared(work / "shared", ROOT / "nbcli" / "data" / "botchan-bpe2k.model")
    results = []
    for n, (surface, index) in enumerate(chosen):
        case = build_case(surface, index, args.seed, shared)
        modes = [True] if args.subprocess else [False] + ([True] if args.subprocess_every and
                                                           n % args.subprocess_every == 0 else [])
        for mode in modes:
            result = run_case(case, work / "cases", shared, args.timeout, mode)
            results.append(result)
            if result["broken"]:
                log(f"BROKEN {surface}:{index} [{result['mode']}] {result['broken']} exit={result['exit']} "
                    f"muts={case.mutations}\n    {result['stderr'].strip()[-300:]}")
            if not args.keep:
                shutil.rmtree(work / "cases" / f"{surface}-{index}", ignore_errors=True)
        if n % 25 == 0:
            log(f"{n}/{len(chosen)} cases, {time.perf_counter() - started:.0f} s")
    elapsed = time.perf_counter() - started
    rows = table(results)
    print(f"{'surface':<12} {'cases':>5} {'exit0':>5} {'exit1':>5} {'exit2':>5} {'valid':>5} {'broken':>6}  kinds")
    for r in rows:
        print(f"{r['surface']:<12} {r['cases']:>5} {r['exit_0']:>5} {r['exit_1']:>5} {r['exit_2']:>5} {r['valid']:>5} "
              f"{r['broken']:>6}  {', '.join(f'{k} {v}' for k, v in sorted(r['kinds'].items())) or '-'}")
    total = sum(r["cases"] for r in rows)
    print(f"{'all':<12} {total:>5} {'':>5} {'':>5} {'':>5} {'':>5} {sum(r['broken'] for r in rows):>6}  "
          f"({elapsed:.0f} s, load {' '.join(f'{x:.1f}' for x in load_average())})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"seed": args.seed, "cases": total, "seconds": round(elapsed, 1),
                                    "load_average": load_average(), "machine": platform.platform(), "surfaces": rows,
                                    "broken": [r for r in results if r["broken"]], "outcomes": results}, indent=2))
    log(f"wrote {args.out}" + (f"; case folders kept in {work}" if args.keep else ""))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
