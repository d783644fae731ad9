#!/usr/bin/env python3
"""Benchmark `nb probe-bias` (issues 5, 28): full report with counts (the Zipfian section included),
no plots, on generated output embeddings.

Two generated checkpoints in nb's own layout (so every section is computed: untied `head.weight`
as the output embedding W, `ln_f.bias` as b_LN, `head.bias` as the output bias), with a planted
frequency direction and Zipf counts:

* GPT-2 size:   W 50,257 x 768, float32   (target: < 4 s, issues 28, 44; peak RSS < 2.5 x 154 MB)
* Llama-3-8B size (`--only llama`): W 128,256 x 4,096, bfloat16, a 1 GB file (target, issue 44: < 120 s
  on 2 quiet cores, peak RSS < 8 GB; the report's `precision` section gives each statistic's
  tolerance against float64, checked by tests/analysis/test_probe_precision.py)

Each case runs `nb probe-bias CKPT --counts COUNTS --json` in a subprocess, once with the
partition-function isotropy (the default full report) and once with --no-partition, and (`--report
no-counts`) the full report without counts: W^T W and the partition function, one V x d^2 product,
no Zipfian section (what issue 44's 8B figure describes); wall time and
the subprocess's own peak RSS (os.wait4 rusage; the files are generated in another child process so
the measuring parent, whose pages a forked child starts with, stays small) are reported. The nbcli
measured is this checkout's (PYTHONPATH); `--baseline DIR` also times another checkout (e.g. main's
worktree) in the same run, each repeat alternating the two, so a shared machine's load falls on both
and the ratio stays meaningful. The generated files are deleted afterwards unless --keep.

Run:  python3 benchmarks/probe_bias.py [--only gpt2|llama] [--report full|no-partition|no-counts] [--repeat N]
                                       [--baseline DIR] [--blas-threads N] [--threads N] [--out FILE]
(`--threads N` passes `nb probe-bias --threads N`: leave it out with a --baseline older than issue 44)
`--floor` also measures, in the same run, what this machine's BLAS and LAPACK alone take for the work a
report cannot avoid (`blas_floor`): the time no implementation on these cores goes under.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT, ROOT, best_of, load_average, log, machine, write_json  # noqa: E402

DEFAULT_OUT = OUT / "probe_bias.json"
#: report -> nb probe-bias's extra options (no-counts: run without --counts)
REPORTS: dict[str, tuple[str, ...]] = {"full": (), "no-partition": ("--no-partition",), "no-counts": ()}

CASES = {
    "gpt2": {"vocab": 50_257, "d": 768, "dtype": "float32", "target_s": 4.0},
    "llama": {"vocab": 128_256, "d": 4_096, "dtype": "bfloat16", "target_s": 120.0},
    "tiny": {"vocab": 2_000, "d": 64, "dtype": "bfloat16", "target_s": 5.0},   # benchmarks/gpu.py --dry-run
}


def generate(directory: Path, vocab: int, d: int, dtype: str, seed: int = 0) -> tuple[Path, Path]:
    """Write CKPT (nb layout) and COUNTS into directory; W has a planted frequency direction."""
    import numpy as np
    import torch
    from safetensors.torch import save_file

    from nbcli.counts import UnigramCounts, write_counts

    gen = torch.Generator().manual_seed(seed)
    counts = torch.from_numpy(np.random.default_rng(seed).zipf(1.2, size=vocab).clip(max=10**9)).long()
    counts[torch.randperm(vocab, generator=gen)[: vocab // 20]] = 0  # 5% never seen
    b_ln = torch.randn(d, generator=gen) * 0.1
    unit = b_ln / b_ln.norm()
    w = torch.empty(vocab, d, dtype=getattr(torch, dtype))
    step = 8192
    for start in range(0, vocab, step):  # row blocks: the generator itself stays small
        block = torch.randn(min(step, vocab - start), d, generator=gen) * 0.05
        signal = torch.log1p(counts[start:start + step].double()).float() * 0.02
        block += (signal + 0.05 * torch.randn(signal.shape, generator=gen))[:, None] * unit
        w[start:start + step] = block.to(w.dtype)
    tensors = {"tok_emb.weight": torch.zeros(1, d, dtype=w.dtype), "head.weight": w,
               "ln_f.weight": torch.ones(d), "ln_f.bias": b_ln,
               "head.bias": torch.log((counts.double() + 1) / (counts.sum() + vocab)).float()}
    ckpt = directory / f"probe-{vocab}x{d}-{dtype}.safetensors"
    save_file(tensors, str(ckpt), metadata={"nb.format": "nb-model/1", "nb.config": json.dumps(
        {"vocab_size": vocab, "d_model": d, "tie_embeddings": False, "objective": "clm"})})
    del w, tensors
    counts_path = directory / f"counts-{vocab}.safetensors"
    write_counts(counts_path, UnigramCounts(counts=counts.numpy(), metadata={"nb.note": "generated (zipf 1.2)"}))
    return ckpt, counts_path


def run_probe(ckpt: Path, counts: Path | None, *extra: str, blas_threads: int | None = None,
              checkout: Path = ROOT) -> dict[str, object]:
    """`nb probe-bias` of `checkout`'s nbcli in a subprocess (without counts for None): wall seconds,
    peak RSS (bytes) of that process, its report, the load average when it started."""
    with_counts = ["--counts", str(counts)] if counts is not None else []
    cmd = [sys.executable, "-m", "nbcli", "probe-bias", str(ckpt), *with_counts, "--json", *extra]
    env = dict(os.environ, PYTHONPATH=str(checkout))
    if blas_threads:
        env.update(OPENBLAS_NUM_THREADS=str(blas_threads), OMP_NUM_THREADS=str(blas_threads),
                   MKL_NUM_THREADS=str(blas_threads))
    load = load_average()[0]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=checkout)  # cwd: `-m` puts it first on sys.path
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err.read().decode()}")
        report = json.loads(out.read())
    return {"seconds": seconds, "cpu_seconds": usage.ru_utime + usage.ru_stime, "peak_rss_bytes": usage.ru_maxrss * 1024,
            "report": report, "load": load}


def blas_floor(vocab: int, d: int, rows: int = 16_384) -> dict[str, float]:
    """Seconds of the products and eigendecompositions each report needs at V x d, with nothing else:
    x^T x and x @ m on a float32/float64 row slice scaled to V rows, float64 `eigh` at d on every
    thread and two side by side on one thread each (as nb runs Sigma's and W^T W's). no-counts: one
    float32 syrk, one eigh, one float32 V d^2 product; full: two float64 syrks (W^T W and Sigma, which
    whitening divides by), the pair of eighs, the whitened Gram matrix's eigh, two float32 products."""
    import numpy as np

    from nbcli.analysis.passes import concurrently

    rows = min(rows, vocab)
    rng = np.random.default_rng(0)
    x32 = rng.standard_normal((rows, d), dtype=np.float32)
    x64, m = x32.astype(np.float64), rng.standard_normal((d, d), dtype=np.float32)
    sym = x64.T @ x64 / rows

    scale = vocab / rows
    part = {"ssyrk": best_of(2, lambda: x32.T @ x32) * scale, "dsyrk": best_of(2, lambda: x64.T @ x64) * scale,
            "sgemm": best_of(2, lambda: x32 @ m) * scale, "eigh": best_of(1, lambda: np.linalg.eigh(sym)),
            "eigh_pair": best_of(1, lambda: concurrently([lambda: np.linalg.eigh(sym)] * 2, 2))}
    return {**part, "no-counts": part["ssyrk"] + part["eigh"] + part["sgemm"],
            "full": 2 * part["dsyrk"] + part["eigh_pair"] + part["eigh"] + 2 * part["sgemm"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=sorted(CASES), action="append", help="Run only this case (repeatable).")
    parser.add_argument("--repeat", type=int, default=2, help="Runs per configuration; the best is reported.")
    parser.add_argument("--dir", type=Path, default=None, help="Where to generate files (default: a temp dir).")
    parser.add_argument("--blas-threads", type=int, default=None,
                        help="Set OPENBLAS/OMP/MKL_NUM_THREADS for nb (default: the BLAS library's own choice). "
                        "On a shared machine 1 avoids spinning BLAS threads fighting other processes.")
    parser.add_argument("--report", choices=REPORTS, action="append",
                        help="Run only this report (repeatable; default: full and no-partition).")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="Another nbcli checkout (e.g. /work/main) to time in the same run, alternating.")
    parser.add_argument("--keep", action="store_true", help="Keep the generated files.")
    parser.add_argument("--device", default=None, help="nb probe-bias --device (default: nb's own, auto)")
    parser.add_argument("--threads", type=int, default=None, help="nb probe-bias --threads (default: nb's own)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results (default: %(default)s)")
    parser.add_argument("--floor", action="store_true",
                        help="Also measure the BLAS/LAPACK floor of each report (`blas_floor`; ~1 min at 8B size).")
    parser.add_argument("--generate", nargs=4, metavar=("DIR", "VOCAB", "D", "DTYPE"), help=argparse.SUPPRESS)
    parser.add_argument("--floor-of", nargs=2, type=int, metavar=("VOCAB", "D"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_of:  # child process: the measuring parent stays small
        print(json.dumps(blas_floor(*args.floor_of)))
        return
    if args.generate:  # child process: torch stays out of the measuring parent
        directory, vocab, d, dtype = args.generate
        generate(Path(directory), int(vocab), int(d), dtype)
        return

    workdir = Path(tempfile.mkdtemp(prefix="nb-probe-bench-", dir=args.dir))
    results: dict[str, object] = {
        "machine": machine(),
        "command": "python3 benchmarks/probe_bias.py " + " ".join(sys.argv[1:]),
        "blas_threads": args.blas_threads, "load_average_at_start": load_average(), "cases": {}}
    rows = []
    try:
        for name in args.only or [c for c in CASES if c != "tiny"]:
            case = CASES[name]
            log(f"[{name}] generating {case['vocab']:,} x {case['d']:,} {case['dtype']} ...")
            subprocess.run([sys.executable, __file__, "--generate", str(workdir), str(case["vocab"]), str(case["d"]),
                            case["dtype"]], check=True)
            ckpt = workdir / f"probe-{case['vocab']}x{case['d']}-{case['dtype']}.safetensors"
            counts = workdir / f"counts-{case['vocab']}.safetensors"
            fp32_bytes = case["vocab"] * case["d"] * 4
            entry: dict[str, object] = {**case, "w_fp32_bytes": fp32_bytes, "file_bytes": ckpt.stat().st_size}
            checkouts = [("this", ROOT)] + ([("baseline", args.baseline)] if args.baseline else [])
            if args.floor:
                log(f"[{name}] the BLAS/LAPACK floor ...")
                entry["floor_seconds"] = json.loads(subprocess.run(
                    [sys.executable, __file__, "--floor-of", str(case["vocab"]), str(case["d"])], check=True,
                    capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout)
            for label, extra in REPORTS.items():
                if label not in (args.report or ["full", "no-partition"]):
                    continue
                runs: dict[str, list[dict[str, object]]] = {which: [] for which, _ in checkouts}
                for i in range(args.repeat):
                    for which, checkout in checkouts:
                        log(f"[{name}] {label} {which} run {i + 1}/{args.repeat}")
                        device = ("--device", args.device) if args.device else ()
                        device += ("--threads", str(args.threads)) if args.threads else ()
                        runs[which].append(run_probe(ckpt, None if label == "no-counts" else counts, *extra, *device,
                                                     blas_threads=args.blas_threads, checkout=checkout))
                entry[label] = {}
                for which, checkout in checkouts:
                    best = min(runs[which], key=lambda r: r["seconds"])
                    peak = max(r["peak_rss_bytes"] for r in runs[which])
                    report = best["report"]
                    entry[label][which] = {
                        "checkout": str(checkout), "seconds": [r["seconds"] for r in runs[which]],
                        "cpu_seconds": [r["cpu_seconds"] for r in runs[which]],
                        "loads": [r["load"] for r in runs[which]], "best_seconds": best["seconds"],
                        "peak_rss_bytes": peak, "rss_over_w_fp32": peak / fp32_bytes,
                        "spearman": report["frequency_direction"].get("spearman"),
                        "partition_ratio": report["isotropy"]["partition_ratio"]}
                    rows.append((name, label, which, f"{case['vocab']:,} x {case['d']:,} {case['dtype']}",
                                 best["seconds"], best["cpu_seconds"], case["target_s"], peak / 2**20,
                                 peak / fp32_bytes, best["load"]))
            results["cases"][name] = entry  # type: ignore[index]
            ckpt.unlink()
            counts.unlink()
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    write_json(args.out, results, indent=1)
    print(f"{'case':6} {'report':13} {'nbcli':9} {'W':27} {'wall s':>8} {'CPU s':>7} {'target s':>8} "
          f"{'peak RSS MiB':>12} {'RSS / W fp32':>12} {'load':>5}")
    for name, label, which, shape, secs, cpu, target, rss, over, load in rows:
        print(f"{name:6} {label:13} {which:9} {shape:27} {secs:8.2f} {cpu:7.2f} {target:8.1f} {rss:12.0f} "
              f"{over:12.2f} {load:5.1f}")
    for name, entry in results["cases"].items():  # type: ignore[union-attr]
        for label in REPORTS:
            floor = entry.get("floor_seconds", {}).get(label)
            if floor and label in entry:
                print(f"{name} {label}: BLAS/LAPACK floor {floor:.1f} s; this / floor = "
                      f"{entry[label]['this']['best_seconds'] / floor:.2f}x")
            if "baseline" in entry.get(label, {}):
                base, this = entry[label]["baseline"], entry[label]["this"]
                print(f"{name} {label}: baseline / this = {base['best_seconds'] / this['best_seconds']:.2f}x wall, "
                      f"{min(base['cpu_seconds']) / min(this['cpu_seconds']):.2f}x CPU")
    print(f"JSON: {args.out}")


if __name__ == "__main__":
    main()
