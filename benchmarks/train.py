#!/usr/bin/env python3
"""Benchmark `nb train` on CPU: tiny-preset tokens/s and the papers' effects on real English text.

Arms (same steps, same data, seeds 0..S-1; validation loss evaluated at every step so 1%, 10% and
100% of the run are exact points of the curve; ALC = trapezoid area under the validation-loss curve
normalised by the span, paper 000 sec. 4.2):

  clm  --bias-init unigram  vs  --bias-init zero                     (paper 000: lower early loss)
  mlm  --ag-fraction 0.5 --ag-alpha 100 (and 10)  vs  no guidance    (paper 001: faster convergence)

Corpus: the bundled Botchan sample (nbcli/data, real English prose, 280 kB; its 2k BPE tokenizer)
unless --corpus/--tokenizer name others. GPU figures (gpt2-124m bf16 tokens/s, MFU, --compile, AG
overhead) need a CUDA machine: `--gpu` runs them there; this script never fakes them.

    python3 benchmarks/train.py                 # table on stdout, JSON in benchmarks/out/train.json
    python3 benchmarks/train.py --steps 50 --seeds 1   # quick look
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nbcli.samples import SAMPLE_CORPUS, SAMPLE_TOKENIZER  # noqa: E402
from nbcli.train.config import build_config  # noqa: E402
from nbcli.train.loop import read_log, train  # noqa: E402


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def val_at(curve: list[tuple[int, float]], step: int) -> float:
    return dict(curve)[step]


def run_arm(name: str, corpus: str, tokenizer: str, seed: int, steps: int, workdir: Path,
            **options: Any) -> dict[str, Any]:
    cfg = build_config("tiny", steps=steps, seed=seed, eval_every=1, eval_batches=2, device="cpu", **options)
    out = workdir / f"{name}-s{seed}"
    t0 = time.perf_counter()
    result = train(cfg, [corpus], tokenizer, out)
    wall = time.perf_counter() - t0
    records = read_log(out)
    curve = [(r["step"], r["val_loss"]) for r in records if "val_loss" in r]
    train_tps = [r["tokens_per_s"] for r in records if "tokens_per_s" in r]
    marks = {pct: max(1, round(steps * pct / 100)) for pct in (1, 10, 100)}
    row = {
        "arm": name, "seed": seed, "steps": steps,
        "step0_loss": records[0]["loss"], "val_step0": val_at(curve, 0),
        **{f"val_{pct}pct": val_at(curve, step) for pct, step in marks.items()},
        "alc": result.alc, "wall_s": wall, "train_tokens_per_s_median": statistics.median(train_tps),
        "unigram_entropy": result.unigram_entropy, "log_v": result.log_v,
    }
    ag = [r["ag_loss"] for r in records if "ag_loss" in r]
    if ag:
        row["ag_loss_first"], row["ag_loss_last"] = ag[0], ag[-1]
    log(f"  {name} seed {seed}: val@100% {row['val_100pct']:.4f} ALC {row['alc']:.4f} ({wall:.0f} s)")
    return row


def summarise(rows: list[dict[str, Any]], key: str) -> tuple[float, float]:
    values = [r[key] for r in rows]
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def throughput(corpus: str, tokenizer: str, workdir: Path, steps: int) -> dict[str, Any]:
    """Tiny preset as shipped (T=128, batch 16): median training tokens/s after 5 warm-up steps."""
    cfg = build_config("tiny", steps=steps, eval_every=10_000, eval_batches=1, device="cpu")
    train(cfg, [corpus], tokenizer, workdir / "throughput")
    tps = [r["tokens_per_s"] for r in read_log(workdir / "throughput") if "tokens_per_s" in r][5:]
    return {"steps": steps, "tokens_per_s_median": statistics.median(tps), "tokens_per_s_max": max(tps)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default=str(SAMPLE_CORPUS))
    parser.add_argument("--tokenizer", default=str(SAMPLE_TOKENIZER))
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--seq-len", type=int, default=64, help="T for the effect runs (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=8, help="batch for the effect runs (default: %(default)s)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default: 2)")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "out" / "train.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    arms = [
        ("clm-bias-unigram", dict(objective="clm", bias_init="unigram")),
        ("clm-bias-zero", dict(objective="clm", bias_init="zero")),
        ("mlm-ag", dict(objective="mlm", bias_init="zero", ag_fraction=0.5, ag_alpha=100.0)),
        ("mlm-ag-alpha10", dict(objective="mlm", bias_init="zero", ag_fraction=0.5, ag_alpha=10.0)),
        ("mlm-no-ag", dict(objective="mlm", bias_init="zero")),
    ]
    t_start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="nb-train-bench-") as tmp:
        workdir = Path(tmp)
        log("throughput (tiny preset, CPU) ...")
        speed = throughput(args.corpus, args.tokenizer, workdir, 20)
        for name, options in arms:
            log(f"{name} ...")
            for seed in range(args.seeds):
                rows.append(run_arm(name, args.corpus, args.tokenizer, seed, args.steps, workdir,
                                    seq_len=args.seq_len, batch_size=args.batch_size, **options))
    total = time.perf_counter() - t_start

    print(f"\nnb train benchmark: tiny preset (2x4x128) at T={args.seq_len}, batch {args.batch_size}, {args.steps} steps, "
          f"{args.seeds} seeds, corpus {Path(args.corpus).name}, {args.threads} CPU threads")
    print(f"CPU tiny-preset training throughput (as shipped: T=128, batch 16): "
          f"{speed['tokens_per_s_median']:,.0f} tokens/s (median)\n")
    keys = ["step0_loss", "val_1pct", "val_10pct", "val_100pct", "alc"]
    print(f"{'arm':<18}" + "".join(f"{k:>20}" for k in keys))
    summary: dict[str, dict[str, list[float]]] = {}
    for name, _ in arms:
        arm_rows = [r for r in rows if r["arm"] == name]
        summary[name] = {k: list(summarise(arm_rows, k)) for k in keys}
        print(f"{name:<18}" + "".join(f"{m:>12.4f} ±{s:>6.4f}" for m, s in (summarise(arm_rows, k) for k in keys)))
    comparisons = {}
    for a, b in (("clm-bias-unigram", "clm-bias-zero"), ("mlm-ag", "mlm-no-ag"), ("mlm-ag-alpha10", "mlm-no-ag")):
        comparisons[f"{a} - {b}"] = {k: summary[a][k][0] - summary[b][k][0] for k in keys}
        print(f"{a} minus {b}: " + ", ".join(f"{k} {v:+.4f}" for k, v in comparisons[f'{a} - {b}'].items()))
    ag_speed = {name: statistics.median(r["train_tokens_per_s_median"] for r in rows if r["arm"] == name)
                for name in ("mlm-ag", "mlm-no-ag")}
    overhead = ag_speed["mlm-no-ag"] / ag_speed["mlm-ag"] - 1
    print(f"AG overhead on CPU (median step tokens/s without / with AG - 1): {overhead:+.1%}")
    for name, _ in arms:
        ag_rows = [r for r in rows if r["arm"] == name and "ag_loss_first" in r]
        if ag_rows:
            print(f"{name}: ag_loss first step {statistics.mean(r['ag_loss_first'] for r in ag_rows):.4f}, "
                  f"last step {statistics.mean(r['ag_loss_last'] for r in ag_rows):.4f}")
    print(f"\ntotal wall time {total:.0f} s")
    payload = {
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "torch": torch.__version__,
                    "cpus": os.cpu_count(), "threads": args.threads, "cuda": torch.cuda.is_available()},
        "corpus": args.corpus, "tokenizer": args.tokenizer, "steps": args.steps, "seeds": args.seeds,
        "seq_len": args.seq_len, "batch_size": args.batch_size,
        "throughput": speed, "ag_overhead_cpu": overhead, "runs": rows, "summary": summary, "comparisons": comparisons,
        "gpu": "unmeasured (no CUDA device in this run)" if not torch.cuda.is_available() else "not run by this script",
        "total_wall_s": total,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(payload, indent=2) + "\n")
    log(f"wrote {args.json}")
    assert all(math.isfinite(r["alc"]) for r in rows)


if __name__ == "__main__":
    main()
