"""How often the space-delimited chunk rule reorders or changes a unigram SentencePiece model's output.

A unigram model's Viterbi search decides ties by float sums that include the score of the text before
a chunk, so encoding chunks alone can order tied pieces differently from encoding the whole line
(docs/design/counting.md, "Unigram SentencePiece models"). This trains a unigram model on part of the
count benchmark's corpus (run benchmarks/count_unigrams.py first, or pass --corpus) and compares, on
held-out lines, sp.encode(line) with the concatenation of sp.encode(chunk): ids in order, and counts.
Prints a table and writes JSON (default benchmarks/out/unigram_chunk_check.json). ~2 minutes.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CACHE, OUT, write_json  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=CACHE / "corpus.txt")
    parser.add_argument("--vocab-size", type=int, default=16000)
    parser.add_argument("--train-lines", type=int, default=300_000)
    parser.add_argument("--test-lines", type=int, default=200_000)
    parser.add_argument("--out", type=Path, default=OUT / "unigram_chunk_check.json")
    args = parser.parse_args()
    import sentencepiece as spm

    lines = [line for line in args.corpus.read_text(encoding="utf-8").split("\n") if line]
    random.Random(0).shuffle(lines)
    train, test = lines[:args.train_lines], lines[args.train_lines:args.train_lines + args.test_lines]
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(train), model_prefix=f"{tmp}/u", vocab_size=args.vocab_size,
            model_type="unigram", num_threads=1, minloglevel=2)
        train_s = time.perf_counter() - started
        sp = spm.SentencePieceProcessor(model_file=f"{tmp}/u.model")
    reordered = changed = 0
    for line, whole in zip(test, sp.encode(test)):
        parts = [i for chunk in line.split(" ") if chunk for i in sp.encode(chunk)]
        if parts != whole:
            reordered += 1
            changed += Counter(parts) != Counter(whole)
    result = {"corpus": str(args.corpus), "vocab_size": args.vocab_size, "train_lines": len(train),
              "test_lines": len(test), "lines_with_other_order": reordered,
              "lines_with_other_counts": changed, "train_seconds": round(train_s, 1)}
    for key, value in result.items():
        print(f"{key:24} {value}")
    write_json(args.out, result)


if __name__ == "__main__":
    main()
