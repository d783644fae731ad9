#!/usr/bin/env python3
"""SentencePiece unigram models at corpus scale: whole documents against the per-line certificate
(issue 24: ">= 2x the limit at 1 GB", exact).

On one text file (--corpus; one document per line), with a 32k unigram model trained on its first
lines (default settings, as T5/ALBERT/XLNet models are), in one run:

* limit:      SentencePiece's own batched encode, one thread per core, of every line, timed in
              one process on a slice of the file and scaled to the file (--limit-mb; CPU time)
* whole:      `nb count-unigrams FILE` (nb's default for unigram models: whole documents)
* certified:  `nb count-unigrams FILE --unigram-certificate`

Prints a table (MB/s, ratios to the limit, CPU seconds, peak RSS) and writes JSON; the counts of
the two nb runs must be equal, bit for bit (whole documents are SentencePiece's own encoding of
each line). The corpus is whatever --corpus holds: name what it is when you report a figure.

Run:  python3 benchmarks/count_unigram_certificate.py --corpus FILE [--limit-mb 200]
      (e.g. the 1.1 GB generated text `benchmarks/count_parquet.py --mb 1100` keeps in
      benchmarks/.cache/parquet-1100mb-rg128/corpus.txt)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CACHE, OUT, cores, load_average, log, machine, run_nb_count, write_json  # noqa: E402

LIMIT = r"""
import json, sys, time
import sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
with open(sys.argv[2], "rb") as handle:
    data = handle.read(int(sys.argv[3]))
lines = [l for l in data[:data.rfind(b"\n") + 1].decode("utf-8", "replace").split("\n") if l]
c = time.process_time()
tokens = 0
for s in range(0, len(lines), 1000):
    tokens += sum(map(len, sp.encode(lines[s:s + 1000], num_threads=1)))
print(json.dumps({"cpu_s": time.process_time() - c, "bytes": data.rfind(b"\n") + 1, "tokens": tokens}))
"""

def train_unigram(corpus: Path, directory: Path) -> Path:
    import sentencepiece as spm

    prefix = directory / f"unigram32k-{corpus.stat().st_size}"
    if not prefix.with_suffix(".model").exists():
        spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(prefix), vocab_size=32000,
                                       model_type="unigram", input_sentence_size=1_000_000,
                                       shuffle_input_sentence=True, num_threads=os.cpu_count() or 1, minloglevel=2)
    return prefix.with_suffix(".model")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--limit-mb", type=float, default=200, help="MB of the corpus the limit is timed on")
    parser.add_argument("--out", type=Path, default=OUT / "count_unigram_certificate.json")
    args = parser.parse_args()
    from nbcli.counts import read_counts

    size = args.corpus.stat().st_size
    log(f"corpus {args.corpus} ({size / 1e6:.0f} MB); training a 32k unigram model on it (cached) ...")
    model = train_unigram(args.corpus, CACHE / "tokenizers")
    n = cores()
    load_before = load_average()
    limit_proc = subprocess.run([sys.executable, "-c", LIMIT, str(model), str(args.corpus), str(int(args.limit_mb * 1e6))],
                                capture_output=True, text=True, check=True)
    limit = json.loads(limit_proc.stdout)
    limit_mb_s = limit["bytes"] / 1e6 / limit["cpu_s"] * n  # one thread per core
    log(f"limit: {limit['bytes'] / 1e6:.0f} MB in {limit['cpu_s']:.2f} CPU s -> {limit_mb_s:.1f} MB/s on {n} cores")
    runs = {}
    with tempfile.TemporaryDirectory(prefix="nb-unigram-") as tmp:
        for name, extra in (("whole", ()), ("certified", ("--unigram-certificate",))):
            started = time.perf_counter()
            runs[name] = run_nb_count(args.corpus, model, Path(tmp) / f"{name}.safetensors", None, extra)
            log(f"{name}: {runs[name]['method']}, {time.perf_counter() - started:.1f} s")
        equal = bool((read_counts(Path(tmp) / "whole.safetensors").counts
                      == read_counts(Path(tmp) / "certified.safetensors").counts).all())
    rows = []
    for name, run in runs.items():
        mb_s = size / 1e6 / float(run["count_s"])  # type: ignore[arg-type]
        rows.append({"run": name, **run, "mb_per_s": mb_s, "over_limit": mb_s / limit_mb_s,
                     "wall_over_limit": size / 1e6 / float(run["wall_s"]) / limit_mb_s,  # type: ignore[arg-type]
                     "cpu_over_limit": limit["cpu_s"] * size / limit["bytes"] / float(run["cpu_s"])})  # type: ignore[arg-type]
    result = {"benchmark": "SentencePiece unigram: whole documents vs the per-line certificate (issue 24)",
              "machine": machine(), "corpus": str(args.corpus), "corpus_mb": size / 1e6, "model": str(model),
              "load_before": load_before, "load_after": load_average(),
              "limit": {**limit, "mb_per_s": limit_mb_s, "cores": n}, "rows": rows, "counts_equal": equal}
    print(f"corpus {size / 1e6:.0f} MB; limit {limit_mb_s:.1f} MB/s ({n} cores x one thread); load "
          f"{load_before[0]:.1f} -> {result['load_after'][0]:.1f}")
    print(f"{'run':10} {'method':34} {'MB/s':>7} {'/limit':>7} {'wall/limit':>10} {'CPU/limit':>9} {'CPU s':>7} {'RSS MB (all processes)':>7}")
    for row in rows:
        print(f"{row['run']:10} {row['method']:34} {row['mb_per_s']:7.1f} {row['over_limit']:7.2f} "
              f"{row['wall_over_limit']:10.2f} {row['cpu_over_limit']:9.2f} {row['cpu_s']:7.1f} {row['peak_rss_tree_mb']:7.0f}")
    print(f"counts equal: {equal}")
    write_json(args.out, result)
    print(f"JSON: {args.out}")
    if not equal:
        raise SystemExit("counts differ")


if __name__ == "__main__":
    main()
