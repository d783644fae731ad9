"""Running a plan's runs: one job per run, in this process (--jobs 1), in a local pool of --jobs
processes, or on a Dask distributed cluster (--dask ADDRESS; each job is one task, asking the worker
for --resources such as GPU=1). Every job writes its own results into OUT, so a crashed scheduler or
a killed sweep loses nothing that finished, and the aggregate is computed from OUT afterwards.

OUT/runs/ID/ is the run (an ordinary `nb train` run directory, or an analysis's result.json);
OUT/runs/ID.json, its record, says what it was made with (the settings and their hash), whether it
finished and its evaluation. A run is then:

- reused when its record says it finished with the same settings (and its directory holds the
  finished run); evaluated again only when the evaluation changed;
- resumed (the task's --resume) when its directory holds a saved training state;
- started again when it was stopped before any saved state (its directory, which the record says is
  this run's, is removed first);
- refused, before anything runs, when its record was made with other settings, or when its
  directory exists without a record (`check_out`).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from nbcli.errors import ConfigError, NbError
from nbcli.sweeps.plan import Plan, RunSpec

Job = dict[str, Any]


def record_path(out: Path, run: str) -> Path:
    return out / "runs" / f"{run}.json"


def read_record(path: Path) -> dict[str, Any] | None:
    from nbcli.jsonsafe import load_file

    if not path.is_file():
        return None
    value = load_file(path, error=ConfigError, what="run record")
    if not isinstance(value, dict) or "settings_hash" not in value:
        raise ConfigError(f"{path}: not a run record of nb reproduce (no settings_hash)")
    return value


def write_record(path: Path, record: Mapping[str, Any]) -> None:
    from nbcli.atomic import write_text_atomic
    from nbcli.jsonsafe import json_ready

    write_text_atomic(path, json.dumps(json_ready(dict(record)), indent=2, sort_keys=True) + "\n")


def changed_options(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """The options that differ, as `key: old -> new` (at most four)."""
    keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    shown = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys[:4])
    return shown + (f" and {len(keys) - 4} more" if len(keys) > 4 else "") if keys else "the kind or the record format"


def check_out(plan: Plan, out: Path) -> None:
    """Before any run: OUT holds no run of this plan made with other settings, no run directory
    without its record, and no input of the plan under OUT/runs."""
    from nbcli.outputs import inputs_inside

    inside = inputs_inside(out / "runs", list(plan.data.values()))
    if inside is not None:
        raise ConfigError(f"--out {out}: the input {inside} lies under {out / 'runs'}, which nb reproduce writes")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: exists and is not a directory")
    for spec in plan.runs:
        record = read_record(record_path(out, spec.id))
        if record is None:
            if (out / "runs" / spec.id).exists():
                raise ConfigError(f"--out {out}: runs/{spec.id} exists without its record runs/{spec.id}.json "
                                  "(not made by nb reproduce); give another --out")
        elif record["settings_hash"] != spec.settings_hash:
            raise ConfigError(f"--out {out}: runs/{spec.id} was made with other settings "
                              f"({changed_options(record.get('options', {}), spec.options)}); give another --out "
                              "or remove that run")


def run_job(job: Job) -> dict[str, Any]:
    """One run, wherever it is sent (this process, a pool worker, a Dask worker): train (or resume,
    or reuse) and evaluate, writing the record as it goes. Returns what was done."""
    from nbcli.sweeps.kinds import get_kind
    from nbcli.sweeps.scoring import evaluate, record_key
    from nbcli.threads import cpu_threads

    spec, out, threads = RunSpec(**job["spec"]), Path(job["out"]), int(job["threads"])
    path, run = record_path(out, spec.id), out / "runs" / spec.id
    kind = get_kind(spec.kind)
    record = read_record(path)
    if record is not None and record["settings_hash"] != spec.settings_hash:
        raise ConfigError(f"runs/{spec.id}: made with other settings ({changed_options(record['options'], spec.options)})")
    started, action = time.perf_counter(), "reused"
    if not (record is not None and record.get("finished") and kind.finished(run)):
        resume = kind.resumable(run)
        if run.exists() and not resume:
            if record is None:
                raise ConfigError(f"{run}: exists without its record; not removed")
            shutil.rmtree(run)                  # this run's own start, stopped before any saved state
        record = {"run": spec.id, "arm": spec.arm, "seed": spec.seed, "kind": spec.kind, "options": spec.options,
                  "settings_hash": spec.settings_hash, "finished": False, "evaluation": None}
        write_record(path, record)
        with cpu_threads(threads):
            kind.run(dict(spec.options), run, resume)
        record["finished"] = True
        write_record(path, record)
        action = "resumed" if resume else "trained"
    ev = spec.evaluation
    slot = record_key(ev["kind"]) if ev is not None else ""
    if ev is not None and (record.get(slot) or {}).get("hash") != ev["hash"]:
        with cpu_threads(threads):
            record[slot] = {"hash": ev["hash"], "result": evaluate(ev, run, out)}
        write_record(path, record)
        action = "evaluated" if action == "reused" else action + "+evaluated"
    import socket

    return {"run": spec.id, "action": action, "seconds": round(time.perf_counter() - started, 3),
            "host": socket.gethostname(), "pid": os.getpid()}


def _worker_threads(threads: int) -> None:
    """A pool worker's start: its libraries on `threads` threads from their first import."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = str(threads)


Done = Callable[[dict[str, Any]], None]


def _failure(job: Job, err: BaseException) -> dict[str, Any]:
    message = str(err) if isinstance(err, NbError) else f"{type(err).__name__}: {err}"
    return {"run": job["spec"]["id"], "action": "failed", "error": message}


def run_local(jobs: Sequence[Job], processes: int, done: Done) -> None:
    """The jobs here (`processes` 1) or in a pool of that many spawned processes; a failed run is
    reported through `done` and the others go on."""
    if processes <= 1:
        for job in jobs:
            try:
                done(run_job(job))
            except NbError as err:
                done(_failure(job, err))
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    context = multiprocessing.get_context("spawn")    # no fork of a process that may hold torch's threads
    threads = jobs[0]["threads"] if jobs else 1
    with ProcessPoolExecutor(processes, mp_context=context, initializer=_worker_threads,
                             initargs=(threads,)) as pool:
        futures = {pool.submit(run_job, job): job for job in jobs}
        try:
            for future in as_completed(futures):
                try:
                    done(future.result())
                except Exception as err:  # noqa: BLE001 - a run's failure is reported, the sweep goes on
                    done(_failure(futures[future], err))
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def parse_resources(pairs: Sequence[str]) -> dict[str, float]:
    """`--resources GPU=1` pairs (Dask worker resources a run asks for)."""
    out = {}
    for pair in pairs:
        name, sep, amount = pair.partition("=")
        try:
            out[name] = float(amount)
        except ValueError:
            sep = ""
        if not sep or not name or out.get(name, 0) <= 0:
            raise ConfigError(f"--resources {pair!r}: expected NAME=AMOUNT with AMOUNT > 0, e.g. GPU=1")
    return out


def run_dask(jobs: Sequence[Job], address: str, resources: Mapping[str, float], done: Done) -> None:
    """Each job as one task on the Dask scheduler at `address` (asking for `resources`)."""
    from nbcli.cluster import connect

    client = connect(address)
    from distributed import as_completed

    try:
        futures = {client.submit(run_job, job, pure=False, resources=dict(resources) or None,
                                 key=f"nb-reproduce-{job['spec']['id']}-{os.urandom(4).hex()}"): job for job in jobs}
        for future in as_completed(list(futures)):
            try:
                done(future.result())
            except Exception as err:  # noqa: BLE001 - a worker's failure of one run
                done(_failure(futures[future], err))
    finally:
        client.close()


def jobs_of(plan: Plan, out: Path, threads: int) -> list[Job]:
    return [{"spec": asdict(spec), "out": str(out), "threads": threads} for spec in plan.runs]
