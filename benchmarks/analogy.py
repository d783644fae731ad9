#!/usr/bin/env python3
"""Benchmark `nb analogy` (3CosAdd, paper 002 table 4) against gensim's
`KeyedVectors.evaluate_word_analogies` on the same vectors: equal accuracy, ratio of times.

Cases:
1. gensim's own test data (gensim/test/test_data): questions-words.txt (19,544 questions) against
   lee_fasttext.vec and the 300-d EN.1-10 vectors (tiny vocabularies: few applicable questions);
2. synthetic: --words rows x --dim (default 400,000 x 300, float32) whose first rows are the
   question words (upper-cased as they appear), random normal; --questions of the file's questions
   (a seeded sample, default 500: gensim scores one question at a time against 300,000 rows, ~0.14 s
   each on the loaded 2-core VM), half of them planted (d = b - a + c + noise) so that some are
   right; both tools on the same matrix in memory (load time is not measured).

Both scorings run in this process on the same float32 matrix: nb through `score_analogies` (the
function `nb analogy` calls), gensim through a KeyedVectors built from the same array.

    python3 benchmarks/analogy.py                       # table on stdout, JSON in benchmarks/out/analogy.json
    python3 benchmarks/analogy.py --words 100000 --questions 300
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT, load_average, log, machine, write_json  # noqa: E402


def gensim_data() -> Path:
    import gensim

    return Path(gensim.__file__).parent / "test" / "test_data"


def gensim_score(kv: Any, questions: Path) -> tuple[int, int, float]:
    start = time.perf_counter()
    _, sections = kv.evaluate_word_analogies(str(questions))
    elapsed = time.perf_counter() - start
    total = sections[-1]
    return len(total["correct"]), len(total["correct"]) + len(total["incorrect"]), elapsed


def nb_score(words: list[str], x: Any, questions: Path) -> tuple[int, int, float]:
    import torch

    from nbcli.vectors.analogy import read_questions, score_analogies

    start = time.perf_counter()
    report = score_analogies(words, torch.from_numpy(x), read_questions(questions))
    elapsed = time.perf_counter() - start
    return report["overall"]["correct"], report["overall"]["applicable"], elapsed


def case(name: str, words: list[str], x: Any, questions: Path) -> dict[str, Any]:
    from gensim.models import KeyedVectors

    kv = KeyedVectors(x.shape[1])
    kv.add_vectors(words, x)
    log(f"{name}: {len(words)} x {x.shape[1]}")
    nb_c, nb_a, nb_t = nb_score(words, x, questions)
    g_c, g_a, g_t = gensim_score(kv, questions)
    return {"case": name, "rows": len(words), "dim": int(x.shape[1]), "applicable": nb_a, "nb_correct": nb_c,
            "gensim_correct": g_c, "gensim_applicable": g_a, "equal": (nb_c, nb_a) == (g_c, g_a),
            "nb_s": nb_t, "gensim_s": g_t, "speedup": g_t / nb_t if nb_t else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--words", type=int, default=400_000)
    parser.add_argument("--dim", type=int, default=300)
    parser.add_argument("--questions", type=int, default=500, help="questions sampled for the synthetic case")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--out", type=Path, default=OUT / "analogy.json")
    args = parser.parse_args()

    import numpy as np
    import torch

    from nbcli.vectors.reader import read_vectors

    if args.threads:
        torch.set_num_threads(args.threads)
    data = gensim_data()
    qfile = data / "questions-words.txt"
    results = []
    for name in ("lee_fasttext.vec", "EN.1-10.cbow1_wind5_hs0_neg10_size300_smpl1e-05.txt"):
        wv = read_vectors(data / name)
        results.append(case(f"gensim test data: {name}", wv.words, wv.vectors, qfile))

    lines = qfile.read_text(encoding="utf-8").splitlines()
    sections = [i for i, line in enumerate(lines) if line.startswith(": ")]
    rng = random.Random(0)
    body = [i for i in range(len(lines)) if i not in set(sections)]
    chosen = sorted(rng.sample(body, min(args.questions, len(body))))
    with tempfile.TemporaryDirectory() as tmp:
        sample = Path(tmp) / "questions.txt"
        sample.write_text(": sample\n" + "\n".join(lines[i] for i in chosen) + "\n", encoding="utf-8")
        vocab = list(dict.fromkeys(w for i in body for w in lines[i].split()))
        words = vocab + [f"synthetic{i}" for i in range(args.words - len(vocab))]
        generator = np.random.default_rng(0)
        x = generator.standard_normal((len(words), args.dim), dtype=np.float32)
        row = {w: i for i, w in enumerate(vocab)}
        for i in chosen[::2]:  # plant half the answers (d = b - a + c + noise): accuracies are not all zero
            a, b, c, d = (row[w] for w in lines[i].split())
            x[d] = x[b] - x[a] + x[c] + generator.normal(0, 1.0, args.dim)
        results.append(case(f"synthetic {args.words} x {args.dim}, {len(chosen)} questions", words, x, sample))
        del x

    print("| case | applicable | nb correct | gensim correct | equal | nb s | gensim s | gensim / nb |")
    print("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
    for r in results:
        print(f"| {r['case']} | {r['applicable']} | {r['nb_correct']} | {r['gensim_correct']} | {r['equal']} | "
              f"{r['nb_s']:.3f} | {r['gensim_s']:.3f} | {r['speedup']:.1f}x |")
    write_json(args.out, {"results": results, "machine": machine(torch=torch.__version__,
                                                                  threads=torch.get_num_threads()),
                          "load_average": load_average(), "pid": os.getpid()})
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
