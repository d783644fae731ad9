"""What the benchmark scripts share: paths, logging, machine facts, JSON results, nb's process
memory, the corpus built from registry packages and the tokenizers and training arms made from it.

Each script in benchmarks/ imports this module and no other script (`sys.path` holds benchmarks/
when a script runs, so `import common` works from any directory). Heavy libraries (torch,
sentencepiece, nbcli's training code) are imported inside the functions that need them.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "benchmarks" / ".cache"
"""Downloaded packages, the corpus, trained tokenizers (git-ignored)."""
OUT = ROOT / "benchmarks" / "out"
"""JSON results (git-ignored)."""
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the nbcli of this checkout


def log(message: str) -> None:
    """Progress on stderr (the table goes to stdout)."""
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Machine facts and results


def cores() -> int:
    """CPU cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (benchmarks record them: the machine is shared)."""
    return list(os.getloadavg())


def git_commit() -> str:
    """HEAD of the checkout the benchmark runs from, +dirty when tracked files differ ('unknown' without git)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
        return head.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def uptime() -> str:
    """`uptime`'s line (the load averages alone where there is no uptime command)."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return " ".join(f"{x:.2f}" for x in load_average())


def machine(**extra: Any) -> dict[str, Any]:
    """What every result file records about the machine, plus `extra` (torch version, threads ...)."""
    return {"platform": platform.platform(), "python": platform.python_version(),
            "cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "cores": cores(),
            **extra}


def scratch_dir(prefix: str, need_gb: float, base: Path | None = None) -> Path:
    """A fresh working folder under `base` (default: the repository's bench-data/, git-ignored);
    exits with a one-line message when the disk there has less than `need_gb` GB free."""
    import shutil
    import sys
    import tempfile

    base = base or Path("bench-data")
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    free = shutil.disk_usage(work).free
    if free < need_gb * 10**9:
        work.rmdir()
        sys.exit(f"need ~{need_gb:g} GB free in {work.parent}, have {free / 1e9:.1f} GB")
    return work


def best_of(repeats: int, fn: Any) -> float:
    """The shortest of `repeats` timed calls of fn, in seconds."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def write_json(path: Path, data: Any, indent: int = 2) -> None:
    """Write a result file (creating its folder)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=indent, default=str) + "\n")


def print_rows(rows: list[tuple[str, str]], header: tuple[str, str] = ("measure", "result")) -> None:
    """A two-column table (measure, result) on stdout."""
    width = max(len(k) for k, _ in [header, *rows])
    print(f"{header[0]:<{width}}  {header[1]}")
    print(f"{'-' * width}  {'-' * 60}")
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


def run_logged(cmd: list[str], cwd: Path) -> None:
    """Run a set-up command (a download, an unpack), echoing it on stderr."""
    log(f"  $ {' '.join(cmd)}")
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL)


# ---------------------------------------------------------------------------------------------
# Corpus: real text from Debian packages (count_unigrams.py, count_unigrams_families.py)

DEB_PACKAGES = ["dict-gcide", "dict-foldoc", "dict-jargon", "dict-devil", "fortunes",
                "python3.11-doc", "linux-doc-6.12"]


def fetch_debs(cache: Path) -> dict[str, Path]:
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
                run_logged(["apt-get", "download", package], cwd=root)
            except subprocess.CalledProcessError:
                log(f"  could not download {package} (run `apt-get update` first?): skipping it")
                continue
            deb = sorted(root.glob(f"{package}_*.deb"))[-1]
            tree.mkdir(exist_ok=True)
            run_logged(["dpkg-deb", "-x", str(deb), str(tree)], cwd=root)
            deb.unlink()
            (tree / ".done").write_text(deb.name)
        found[package] = tree
    return found


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


def train_spm_bpe(corpus: Path, cache: Path, vocab_size: int) -> tuple[Path, float | None]:
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
# nb count-unigrams in a subprocess: wall, CPU and peak RSS of its process tree


def tree_memory(pid: int) -> tuple[int, int]:
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


def compile_nb_bytecode() -> None:
    """Write nbcli's bytecode, as `pip install` of a wheel does: with an editable install under
    PYTHONDONTWRITEBYTECODE=1 (as on the team's machines) every `nb` run would otherwise compile
    ~40 modules again (~50 ms of its start-up)."""
    import compileall

    compileall.compile_dir(str(ROOT / "nbcli"), quiet=1)


def run_nb_count(corpus: Path, model: Path, output: Path, workers: int | None,
                 extra: tuple[str, ...] = ()) -> dict[str, object]:
    """Run `nb count-unigrams` (with `extra` options) in a subprocess; wall time, its --json report,
    peak RSS."""
    compile_nb_bytecode()
    cmd = [shutil.which("nb") or "nb", "count-unigrams", str(corpus), "-t", str(model), "-o", str(output), "--json",
           *extra]
    if workers:
        cmd += ["--workers", str(workers)]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak_tree = peak_process = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak_tree, peak_process
        while not stop.is_set():
            total, largest = tree_memory(proc.pid)
            peak_tree, peak_process = max(peak_tree, total), max(peak_process, largest)
            stop.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout_data = proc.stdout.read()  # type: ignore[union-attr]
    stderr_data = proc.stderr.read()  # type: ignore[union-attr]
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started  # (until 2026-11-24 this also held a 0.2 s wait for the sampler)
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


# ---------------------------------------------------------------------------------------------
# Training benchmarks (train.py, transplant.py, generate.py): a real-English sample of the count
# benchmark's corpus, a tokenizer trained on disjoint lines, and one training arm


VAL_FRACTION = 0.05


def real_sample(cache: Path, sample_mb: float) -> tuple[Path, dict[str, Any]]:
    """Every K-th line of the count benchmark's corpus (about `sample_mb` MB), written once to `cache`."""
    corpus = cache / "corpus.txt"
    if not corpus.is_file():
        raise SystemExit(f"benchmarks: {corpus} is missing; run `python3 benchmarks/count_unigrams.py` "
                         "first (it assembles the corpus; this script never downloads anything)")
    every = max(1, math.ceil(corpus.stat().st_size / (sample_mb * 1e6)))
    sample = cache / f"train-sample-K{every}-{corpus_tag(corpus)}.txt"
    if not sample.is_file():
        log(f"writing every {every}th line of {corpus} to {sample} ...")
        seen: set[str] = set()
        tmp = sample.with_suffix(".tmp")
        with corpus.open(encoding="utf-8") as src, tmp.open("w", encoding="utf-8") as dst:
            for i, line in enumerate(src):
                if i % every == 0 and line.strip():
                    if line in seen:
                        raise SystemExit(f"benchmarks: {corpus}:{i + 1} repeats an earlier sampled line; "
                                         "validation documents would not be held out")
                    seen.add(line)
                    dst.write(line)
        tmp.replace(sample)
    with sample.open(encoding="utf-8") as f:
        lines = sum(1 for line in f if line.strip())
    info = {"corpus": str(corpus), "corpus_bytes": corpus.stat().st_size, "every": every, "sample": str(sample),
            "sample_bytes": sample.stat().st_size, "documents": lines,
            "validation_documents": lines // round(1 / VAL_FRACTION)}
    return sample, info


def corpus_tag(corpus: Path) -> str:
    """Cache key of corpus.txt (its size: count_unigrams.py rebuilds it whole or not at all)."""
    return hashlib.sha256(str(corpus.stat().st_size).encode()).hexdigest()[:8]


def tokenizer_lines(cache: Path, every: int, max_lines: int) -> Iterator[str]:
    """The corpus lines the benchmarks train tokenizers on: i % K == K // 2 (disjoint from the
    sample real_sample takes, i % K == 0), non-empty, at most `max_lines`."""
    n = 0
    with (cache / "corpus.txt").open(encoding="utf-8") as src:
        for i, line in enumerate(src):
            if i % every == every // 2 and line.strip():
                yield line.rstrip("\n")
                n += 1
                if n >= max_lines:
                    return


def real_tokenizer(cache: Path, every: int, vocab_size: int, max_lines: int = 300_000) -> Path:
    """A BPE SentencePiece model trained (once) on corpus lines disjoint from the sample (i % K == K // 2)."""
    import sentencepiece as spm

    corpus = cache / "corpus.txt"
    prefix = cache / f"train-bpe{vocab_size}-K{every}-{corpus_tag(corpus)}"
    model = prefix.with_suffix(".model")
    if model.is_file():
        return model
    if every < 2:
        raise SystemExit("benchmarks: the sample is the whole corpus; no disjoint lines left to train a tokenizer on")
    log(f"training a {vocab_size}-piece BPE tokenizer on lines {every // 2} mod {every} of {corpus} (cached) ...")
    spm.SentencePieceTrainer.train(
        sentence_iterator=tokenizer_lines(cache, every, max_lines), model_prefix=str(prefix), vocab_size=vocab_size, model_type="bpe",
        character_coverage=0.9999, byte_fallback=True, num_threads=os.cpu_count() or 1, minloglevel=2)
    return model


def val_at(curve: list[tuple[int, float]], step: int) -> float:
    return dict(curve)[step]


def mark_step(steps: int, eval_every: int, pct: int) -> int:
    """The evaluated step nearest to pct % of the run (never step 0)."""
    target = steps * pct / 100
    return min(max(eval_every, eval_every * round(target / eval_every)), steps)


def summarise(rows: list[dict[str, Any]], key: str) -> tuple[float, float]:
    values = [r[key] for r in rows]
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def run_arm(name: str, corpus: str, tokenizer: str, seed: int, steps: int, workdir: Path, eval_every: int,
            eval_batches: int, preset: str = "tiny", **options: Any) -> dict[str, Any]:
    from nbcli.train.config import build_config
    from nbcli.tasks.language_model import train
    from nbcli.train.rundir import read_log

    cfg = build_config(preset, steps=steps, seed=seed, eval_every=eval_every, eval_batches=eval_batches,
                       val_fraction=VAL_FRACTION, device="cpu", **options)
    out = workdir / f"{name}-s{seed}"
    t0 = time.perf_counter()
    result = train(cfg, [corpus], tokenizer, out)
    wall = time.perf_counter() - t0
    records = read_log(out)
    curve = [(r["step"], r["val_loss"]) for r in records if "val_loss" in r]
    train_tps = [r["tokens_per_s"] for r in records if "tokens_per_s" in r]
    marks = {pct: mark_step(steps, eval_every, pct) for pct in (1, 10, 100)}
    row = {
        "arm": name, "seed": seed, "steps": steps, "marks": marks,
        "step0_loss": records[0]["loss"], "val_step0": val_at(curve, 0),
        **{f"val_{pct}pct": val_at(curve, step) for pct, step in marks.items()},
        "alc": result.alc, "wall_s": wall, "train_tokens_per_s_median": statistics.median(train_tps),
        "run_dir": str(out), "ag_alpha0": result.ag_alpha0, "warnings": result.warnings,
        "unigram_entropy": result.unigram_entropy, "log_v": result.log_v,
    }
    ag = [r["ag_loss"] for r in records if "ag_loss" in r]
    if ag:
        row["ag_loss_first"], row["ag_loss_last"] = ag[0], ag[-1]
        row["ag_weighted_first"] = records[0]["ag_alpha"] * ag[0]
    log(f"  {name} seed {seed}: step0 {row['step0_loss']:.4f} val@1% {row['val_1pct']:.4f} @10% {row['val_10pct']:.4f} "
        f"@100% {row['val_100pct']:.4f} ALC {row['alc']:.4f} ({wall:.0f} s, "
        f"{row['train_tokens_per_s_median']:,.0f} tokens/s, load {os.getloadavg()[0]:.1f})")
    return row
