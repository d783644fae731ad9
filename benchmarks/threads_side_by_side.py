"""Two `nb train` runs side by side on one machine, with every core each (the default) and with
`--threads 1` each, beside one run alone (issue 43: `--threads`). Each run is a real `nb` process on
the bundled Botchan sample and its tokenizer; the figure is each run's training throughput (summary.json
`tokens_per_s`) and the wall time of the pair. A table on stdout, JSON in benchmarks/out/threads.json.

    python3 benchmarks/threads_side_by_side.py [--steps 60]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import git_commit, load_average  # noqa: E402


def start(out: Path, corpus: Path, tokenizer: Path, steps: int, threads: int | None) -> subprocess.Popen[str]:
    args = ["nb", "train", "--corpus", str(corpus), "-t", str(tokenizer), "--out", str(out), "--steps", str(steps),
            "--seq-len", "128", "--batch-size", "16", "--eval-every", str(steps), "--eval-batches", "1",
            "--device", "cpu", "--json", "--quiet"]
    if threads is not None:
        args += ["--threads", str(threads)]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def finish(proc: subprocess.Popen[str]) -> dict[str, float]:
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"nb train failed: {err.strip()}")
    summary = json.loads(out)
    return {"tokens_per_s": summary["tokens_per_s"], "threads": summary["threads"]}


def arrangement(name: str, runs: int, threads: int | None, root: Path, corpus: Path, tokenizer: Path,
                steps: int) -> dict[str, object]:
    load = f"{load_average()[0]:.1f}"
    began = time.perf_counter()
    procs = [start(root / f"{name}-{i}", corpus, tokenizer, steps, threads) for i in range(runs)]
    results = [finish(p) for p in procs]
    return {"arrangement": name, "runs": runs, "threads_option": threads, "wall_s": time.perf_counter() - began,
            "tokens_per_s": [r["tokens_per_s"] for r in results], "threads": [r["threads"] for r in results],
            "load": load}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        corpus = root / "botchan.txt"
        corpus.write_bytes(gzip.decompress((ROOT / "nbcli/data/botchan.txt.gz").read_bytes()))
        tokenizer = ROOT / "nbcli/data/botchan-bpe2k.model"
        rows = [arrangement("alone, default threads", 1, None, root, corpus, tokenizer, args.steps),
                arrangement("two side by side, default threads", 2, None, root, corpus, tokenizer, args.steps),
                arrangement("two side by side, --threads 1 each", 2, 1, root, corpus, tokenizer, args.steps)]
    print(f"{'arrangement':<38} {'threads':>8} {'tok/s per run':>22} {'sum tok/s':>10} {'wall s':>8} {'load':>6}")
    for r in rows:
        rates = r["tokens_per_s"]
        print(f"{r['arrangement']:<38} {','.join(map(str, r['threads'])):>8} "
              f"{' / '.join(f'{x:,.0f}' for x in rates):>22} {sum(rates):>10,.0f} {r['wall_s']:>8.1f} {r['load']:>6}")
    out = ROOT / "benchmarks/out/threads.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"commit": git_commit(), "cores": os.cpu_count(), "steps": args.steps, "rows": rows},
                              indent=2) + "\n")
    print(f"JSON: {out}")


if __name__ == "__main__":
    main()
