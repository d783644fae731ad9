#!/usr/bin/env python3
"""Check that a restructuring left training unchanged (issue 39, the Task seam): the five tasks'
tiny runs (LM clm with the unigram bias, MLM with attention guidance, translation, classification
and tagging from scratch), same seeds, once with an older checkout of nb and once with this one, and
their log.jsonl records (timing fields aside) and every checkpoint tensor compared bit for bit.

    git worktree add /tmp/nb-base <older commit>
    python3 benchmarks/behaviour_unchanged.py --base /tmp/nb-base [--out benchmarks/out/unchanged.json]

Data: the bundled Botchan sample and 2k-piece BPE model: documents for the LM; sentences and their
words reversed as aligned train/valid.de/.en for translation; a TSV of sentences labelled long/short for
classification; CoNLL words tagged CAP/O for tagging. Each side runs as `python3 -m nbcli` with
PYTHONPATH set to its tree, one thread. Prints a table; writes the JSON given by --out.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

HERE = Path(__file__).resolve().parents[1]
RUNS = {
    "lm clm": ["train", "--corpus", "lm.txt", "-t", "spm.model", "--steps", "6", "--eval-every", "3", "--batch-size",
               "8", "--seq-len", "32", "--bias-init", "unigram"],
    "lm mlm": ["train", "--corpus", "lm.txt", "-t", "spm.model", "--objective", "mlm", "--steps", "6", "--eval-every",
               "3", "--batch-size", "8", "--seq-len", "32", "--ag-fraction", "0.5"],
    "translation": ["train", "--task", "translation", "--corpus", "train", "--valid", "valid", "--src-lang", "de",
                    "--tgt-lang", "en", "-t", "spm.model", "--steps", "6", "--eval-every", "3", "--batch-size", "16",
                    "--eval-sentences", "8", "--beam", "2", "--bias-init", "unigram"],
    "classification": ["train", "--task", "classification", "-t", "spm.model", "--corpus", "cls.tsv", "--valid",
                       "dev=dev.tsv", "--steps", "6", "--batch-size", "8", "--lr", "1e-3"],
    "tagging": ["train", "--task", "tagging", "-t", "spm.model", "--corpus", "tag.conll", "--steps", "6",
                "--batch-size", "8", "--lr", "1e-3"],
}


def make_data(folder: Path) -> None:
    with gzip.open(HERE / "nbcli" / "data" / "botchan.txt.gz", "rt", encoding="utf-8") as handle:
        lines = [line.strip() for line in handle if len(line.split()) >= 4][:1200]
    (folder / "lm.txt").write_text("\n".join(lines) + "\n")
    for split, part in (("train", lines[:800]), ("valid", lines[800:880])):
        (folder / f"{split}.de").write_text("\n".join(part) + "\n")
        (folder / f"{split}.en").write_text("\n".join(" ".join(reversed(s.split())) for s in part) + "\n")

    def labelled(part: list[str]) -> str:
        return "\n".join(["text\tlabel", *(f"{s}\t{'long' if len(s.split()) > 10 else 'short'}" for s in part)]) + "\n"

    (folder / "cls.tsv").write_text(labelled(lines[:300]))
    (folder / "dev.tsv").write_text(labelled(lines[300:360]))
    conll = [line for s in lines[:200] for line in
             [*(f"{w}\t{'CAP' if w[:1].isupper() else 'O'}" for w in s.split()[:12]), ""]]
    (folder / "tag.conll").write_text("\n".join(conll) + "\n")
    shutil.copy(HERE / "nbcli" / "data" / "botchan-bpe2k.model", folder / "spm.model")


def run_all(tree: Path, data: Path, out: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    for name, args in RUNS.items():
        run = out / name.replace(" ", "-")
        subprocess.run([sys.executable, "-m", "nbcli", *args, "--out", str(run), "--json"], cwd=data, env=env,
                       check=True, capture_output=True)


def compare(base: Path, new: Path) -> dict[str, dict[str, object]]:
    def records(path: Path) -> list[dict[str, object]]:
        return [{k: v for k, v in json.loads(line).items() if not any(t in k for t in ("per_s", "seconds", "time", "mfu"))}
                for line in (path / "log.jsonl").read_text().splitlines()]

    found = {}
    for name in RUNS:
        a, b = base / name.replace(" ", "-"), new / name.replace(" ", "-")
        names = sorted(p.name for p in a.glob("*.safetensors"))
        tensors_equal = names == sorted(p.name for p in b.glob("*.safetensors")) and all(
            x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x)
            for x, y in ((load_file(a / n), load_file(b / n)) for n in names))
        found[name] = {"records": len(records(a)), "log_identical": records(a) == records(b),
                       "checkpoints": len(names), "tensors_identical": tensors_equal}
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="a checkout of the nb to compare with")
    parser.add_argument("--out", type=Path, default=HERE / "benchmarks" / "out" / "behaviour_unchanged.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_data(root)
        run_all(args.base.resolve(), root, root / "base")
        run_all(HERE, root, root / "new")
        found = compare(root / "base", root / "new")
    print(f"{'task':<16}{'log records':>12}{'log identical':>15}{'checkpoints':>13}{'tensors identical':>19}")
    for name, row in found.items():
        print(f"{name:<16}{row['records']:>12}{str(row['log_identical']):>15}{row['checkpoints']:>13}"
              f"{str(row['tensors_identical']):>19}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"base": str(args.base), "runs": found}, indent=2) + "\n")
    return 0 if all(r["log_identical"] and r["tensors_identical"] for r in found.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
