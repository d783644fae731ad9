#!/usr/bin/env python3
"""Where `nb count-unigrams` spends its fixed start-up (issue 24: "profile where the first 0.3 s go").

Each step below is a fresh process, run --repeat times interleaved; the table gives the median and
what each step adds to the one before it:

  python            `python -c pass`: the interpreter and site (.pth files) alone
  + numpy           `import numpy` (the counting core needs it before forking workers)
  + nb's CLI        `import nbcli.cli` (typer; no command built yet)
  + counting        `import nbcli.counting` (numpy, the corpus readers, the chunk table)
  + tokenizer       the tokenizer loaded and its chunk rule prepared (`--tokenizer`)
  nb, 1 worker      `nb count-unigrams TINY -t TOK -o OUT --workers 1 --json` (a 2-line file)
  nb, N workers     the same with the default workers (forked after the tokenizer is loaded)

and, for a --mb file of the whitespace-heavy kind, nb's wall time minus the counting time its
report gives (what start-up and the end cost on a real run). nbcli's bytecode is written first, as
`pip install` of a wheel does. Prints a table and writes JSON (default benchmarks/out/startup.json).

Run:  python3 benchmarks/startup.py [--tokenizer PATH] [--repeat 7] [--corpus FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CACHE, OUT, ROOT, compile_nb_bytecode, load_average, log, machine, write_json  # noqa: E402

MISTRAL = CACHE / "tokenizers" / "mistral-7b-v0.1.model"  # fetched by count_unigrams_families.py
BUNDLED = ROOT / "nbcli" / "data" / "botchan-bpe2k.model"

STEPS = {
    "python": "pass",
    "+ numpy": "import numpy",
    "+ nb's CLI": "import numpy, nbcli.cli",
    "+ counting": "import numpy, nbcli.cli, nbcli.counting",
    "+ tokenizer": ("import numpy, nbcli.cli, nbcli.counting; from nbcli.tokenizers import load_tokenizer; "
                    "t = load_tokenizer({tok!r}); t.segmenter is None or t.segmenter.prepare()"),
}


def timed(cmd: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", type=Path, default=MISTRAL if MISTRAL.exists() else BUNDLED)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--corpus", type=Path, default=CACHE / "whitespace-corpus-64mb.txt",
                        help="a larger file for wall minus counting time (skipped if absent)")
    parser.add_argument("--mb", type=int, default=16, help="how much of --corpus to count (default 16)")
    parser.add_argument("--out", type=Path, default=OUT / "startup.json")
    args = parser.parse_args()
    compile_nb_bytecode()
    nb = [sys.executable, "-m", "nbcli"] if not (Path(sys.executable).parent / "nb").exists() \
        else [str(Path(sys.executable).parent / "nb")]
    load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="nb-startup-") as tmp:
        tiny = Path(tmp) / "tiny.txt"
        tiny.write_text("hello world\n    indented  text\n", encoding="utf-8")
        sample = None
        if args.corpus.exists():
            sample = Path(tmp) / "sample.txt"
            with args.corpus.open("rb") as src:
                sample.write_bytes(src.read(args.mb * 1_000_000).rsplit(b"\n", 1)[0] + b"\n")
        commands = {name: [sys.executable, "-c", code.format(tok=str(args.tokenizer))] for name, code in STEPS.items()}
        commands["nb, 1 worker"] = [*nb, "count-unigrams", str(tiny), "-t", str(args.tokenizer), "-o",
                                    str(Path(tmp) / "a.safetensors"), "--workers", "1", "--json"]
        commands["nb, N workers"] = [*nb, "count-unigrams", str(tiny), "-t", str(args.tokenizer), "-o",
                                     str(Path(tmp) / "b.safetensors"), "--json"]
        times: dict[str, list[float]] = {name: [] for name in commands}
        fixed: list[float] = []
        for run in range(args.repeat):
            for name, cmd in commands.items():
                for output in Path(tmp).glob("*.safetensors"):
                    output.unlink()
                times[name].append(timed(cmd))
            if sample is not None:
                out = Path(tmp) / "s.safetensors"
                out.unlink(missing_ok=True)
                started = time.perf_counter()
                proc = subprocess.run([*nb, "count-unigrams", str(sample), "-t", str(args.tokenizer), "-o", str(out),
                                       "--json"], check=True, capture_output=True, text=True)
                wall = time.perf_counter() - started
                fixed.append(wall - json.loads(proc.stdout)["seconds"])
            log(f"run {run + 1}/{args.repeat} done")
    rows = []
    previous = 0.0
    for name, values in times.items():
        median = statistics.median(values)
        adds = median - previous if name.startswith("+") else None
        rows.append({"step": name, "median_s": median, "adds_s": adds, "runs_s": values})
        if name == "python" or name.startswith("+"):
            previous = median
    result = {
        "benchmark": "nb count-unigrams start-up, step by step (issue 24)",
        "machine": machine(), "load_before": load_before, "load_after": load_average(),
        "tokenizer": str(args.tokenizer), "repeat": args.repeat, "rows": rows,
        "wall_minus_counting_s": {"corpus_mb": args.mb if sample else None,
                                  "median": statistics.median(fixed) if fixed else None, "runs": fixed},
    }
    print(f"tokenizer: {args.tokenizer.name}; {args.repeat} runs each, interleaved; load "
          f"{load_before[0]:.1f} -> {result['load_after'][0]:.1f}")
    print(f"{'step':16} {'median s':>9} {'adds s':>8}")
    for row in rows:
        adds = "" if row["adds_s"] is None else f"{row['adds_s']:.3f}"
        print(f"{row['step']:16} {row['median_s']:9.3f} {adds:>8}")
    if fixed:
        print(f"{args.mb} MB file: nb wall minus its counting time, median {statistics.median(fixed):.3f} s")
    write_json(args.out, result)
    print(f"JSON: {args.out}")


if __name__ == "__main__":
    main()
