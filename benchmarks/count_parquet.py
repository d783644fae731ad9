#!/usr/bin/env python3
"""Benchmark `nb count-unigrams` on parquet against the same documents as plain text (issue 24).

In one run, the same documents (one per row / one per line), the same tokenizer, the same workers:

* text:     `nb count-unigrams corpus.txt`
* parquet:  `nb count-unigrams corpus.parquet` (row groups of --row-group-mb of text, default 128:
            peak memory is stated for row groups holding 100+ MB)
* jsonl:    `nb count-unigrams corpus.jsonl --format jsonl` (the reference the counts must equal)

Each is run --repeat times, interleaved; the table gives the best wall time, MB/s of text, the speed
ratio parquet/text (target >= 0.9), the CPU time of nb and its workers (the least of the runs: on a
shared machine the CPU ratio is steadier than the wall one), and each run's peak RSS (the largest process of its tree:
the parent or one worker). The counts of all three must be equal, bit for bit.

The corpus is --corpus FILE (text, one document per line), else --mb MB of generated Zipfian
English-like text (no download). The tokenizer is --tokenizer PATH, else a SentencePiece BPE model
of 8000 pieces trained here on a sample of the corpus.

Run:  python3 benchmarks/count_parquet.py [--mb 256] [--workers N] [--out benchmarks/out/count_parquet.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "benchmarks" / "out" / "count_parquet.json"
MEASURE = ("import resource, subprocess, sys, json, time; t = time.perf_counter(); "
           "p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
           "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
           "print(json.dumps({'rc': p.returncode, 'seconds': time.perf_counter() - t, 'stderr': p.stderr[-2000:], "
           "'peak_rss_mb': u.ru_maxrss / 1024, 'cpu_s': u.ru_utime + u.ru_stime}))")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def generated_lines(mb: int, seed: int = 0) -> list[str]:
    """Zipfian pseudo-English: 30k words from syllables, sentences of 5-40 words, some punctuation."""
    rng = random.Random(seed)
    syllables = [a + b for a in ("", "b", "c", "d", "f", "g", "h", "l", "m", "n", "p", "r", "s", "t", "th", "st", "w")
                 for b in ("a", "e", "i", "o", "u", "ea", "ou", "ai", "er", "in", "on", "an")]
    words = sorted({"".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(40000)})[:30000]
    rng.shuffle(words)
    weights = [1.0 / (rank + 1) ** 1.05 for rank in range(len(words))]
    lines, size = [], 0
    while size < mb * 1_000_000:
        chunk = rng.choices(words, weights=weights, k=20000)
        pos = 0
        while pos < len(chunk):
            n = rng.randint(5, 40)
            sentence = " ".join(chunk[pos:pos + n])
            pos += n
            if sentence:
                line = sentence[0].upper() + sentence[1:] + rng.choice([".", ".", "?", "!", ",", ";"])
                lines.append(line)
                size += len(line) + 1
    return lines


def train_tokenizer(lines: list[str], directory: Path) -> Path:
    import sentencepiece as spm

    prefix = directory / "bench-bpe-8000"
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines[:200000]), model_prefix=str(prefix),
                                   vocab_size=8000, model_type="bpe", byte_fallback=True, num_threads=2,
                                   minloglevel=2)
    return prefix.with_suffix(".model")


def write_inputs(lines: list[str], directory: Path, row_group_mb: int) -> dict[str, Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    text = directory / "corpus.txt"
    text.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    jsonl = directory / "corpus.jsonl"
    with jsonl.open("w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(json.dumps({"text": line}) + "\n")
    mean = max(1, sum(map(len, lines)) // max(1, len(lines)))
    rows = max(1, row_group_mb * 1_000_000 // mean)
    parquet = directory / "corpus.parquet"
    pq.write_table(pa.table({"text": pa.array(lines, pa.string())}), parquet, row_group_size=rows,
                   compression="zstd")
    return {"text": text, "parquet": parquet, "jsonl": jsonl}


def run_nb(name: str, path: Path, tokenizer: Path, workers: int, out: Path) -> dict[str, object]:
    args = ["nb", "count-unigrams", str(path), "-t", str(tokenizer), "-o", str(out), "-j", str(workers), "--json"]
    if name == "jsonl":
        args += ["--format", "jsonl"]
    measured = subprocess.run([sys.executable, "-c", MEASURE, *args], capture_output=True, text=True, check=True)
    result = json.loads(measured.stdout)
    if result["rc"] != 0:
        raise SystemExit(f"{name}: nb failed: {result['stderr']}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, help="a text file, one document per line (default: generated)")
    parser.add_argument("--mb", type=int, default=256, help="MB of generated text (default 256)")
    parser.add_argument("--tokenizer", type=Path, help="tokenizer (default: an 8k SentencePiece BPE trained here)")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--row-group-mb", type=int, default=128, help="MB of text per parquet row group")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    from safetensors.numpy import load_file

    with tempfile.TemporaryDirectory(prefix="nb-bench-parquet-") as tmp:
        work = Path(tmp)
        # Generated inputs are kept in benchmarks/.cache (a 1 GB corpus takes minutes to make).
        kept = None if args.corpus else ROOT / "benchmarks" / ".cache" / f"parquet-{args.mb}mb-rg{args.row_group_mb}"
        if kept is not None and (kept / "done").exists():
            log(f"corpus: {kept}")
            paths = {name: kept / f"corpus.{ext}" for name, ext in (("text", "txt"), ("parquet", "parquet"),
                                                                      ("jsonl", "jsonl"))}
            tokenizer = args.tokenizer or kept / "bench-bpe-8000.model"
            if not Path(tokenizer).exists() and not args.tokenizer:  # the corpus was made for another --tokenizer
                tokenizer = train_tokenizer(paths["text"].read_text("utf-8").splitlines(), kept)
        else:
            log("corpus ...")
            if args.corpus:
                lines = [ln for ln in args.corpus.read_text("utf-8", errors="replace").split("\n") if ln.strip()]
                lines = [ln.replace("\r", " ") for ln in lines]
            else:
                lines = generated_lines(args.mb)
            where = work if kept is None else kept
            where.mkdir(parents=True, exist_ok=True)
            tokenizer = args.tokenizer or train_tokenizer(lines, where)
            paths = write_inputs(lines, where, args.row_group_mb)
            del lines
            if kept is not None:
                (kept / "done").write_text("complete\n")
        import pyarrow.parquet as pq

        meta = pq.ParquetFile(paths["parquet"]).metadata
        groups = [meta.row_group(i).total_byte_size / 1e6 for i in range(meta.num_row_groups)]
        text_mb = paths["text"].stat().st_size / 1e6
        log(f"{text_mb:.0f} MB of text; parquet {paths['parquet'].stat().st_size / 1e6:.0f} MB in "
            f"{len(groups)} row groups of {max(groups):.0f} MB uncompressed at most")
        runs: dict[str, list[dict[str, object]]] = {"text": [], "parquet": [], "jsonl": []}
        load_before = os.getloadavg()
        for repeat in range(args.repeat):
            for name in runs:
                out = work / f"{name}.safetensors"
                result = run_nb(name, paths[name], tokenizer, args.workers, out)
                runs[name].append(result)
                log(f"  {name:8s} run {repeat + 1}: {result['seconds']:.2f} s, CPU {result['cpu_s']:.2f} s, "
                    f"peak RSS {result['peak_rss_mb']:.0f} MB")
        counts = {name: load_file(str(work / f"{name}.safetensors"))["counts"] for name in runs}
        exact = all((counts[name] == counts["jsonl"]).all() for name in runs)
        best = {name: min(float(r["seconds"]) for r in rs) for name, rs in runs.items()}  # type: ignore[arg-type]
        cpu = {name: min(float(r["cpu_s"]) for r in rs) for name, rs in runs.items()}  # type: ignore[arg-type]
        report = {
            "text_mb": text_mb, "row_groups": len(groups), "row_group_mb_max": max(groups),
            "workers": args.workers, "cpus": os.cpu_count(), "load_before": load_before, "load_after": os.getloadavg(),
            "tokenizer": str(tokenizer), "exact": bool(exact),
            "seconds": best, "mb_per_s": {k: text_mb / v for k, v in best.items()},
            "parquet_vs_text": best["text"] / best["parquet"],
            "cpu_s": cpu, "parquet_vs_text_cpu": cpu["text"] / cpu["parquet"],
            "runs": runs,
            "peak_rss_mb": {k: max(float(r["peak_rss_mb"]) for r in rs) for k, rs in runs.items()},  # type: ignore[arg-type]
        }
    print(f"{'input':8s} {'best s':>8s} {'MB/s':>8s} {'CPU s':>8s} {'peak RSS MB':>12s}")
    for name in runs:
        print(f"{name:8s} {best[name]:8.2f} {report['mb_per_s'][name]:8.2f} {cpu[name]:8.2f} "
              f"{report['peak_rss_mb'][name]:12.0f}")
    print(f"parquet / text speed: {report['parquet_vs_text']:.2f}x wall, {report['parquet_vs_text_cpu']:.2f}x CPU "
          f"(target >= 0.9x); counts equal: {exact}; "
          f"{len(groups)} row groups of <= {max(groups):.0f} MB; {args.workers} workers; "
          f"load {load_before[0]:.1f} -> {report['load_after'][0]:.1f} on {os.cpu_count()} CPUs")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    if not exact:
        raise SystemExit("counts differ")


if __name__ == "__main__":
    main()
