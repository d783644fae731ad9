#!/usr/bin/env python3
"""Benchmark `nb train`'s LM update loop against a plain PyTorch loop on CPU (issue 39: "LM training >= 1.0x a
plain PyTorch loop"), at a shape a CPU trains in seconds rather than benchmarks/gpu.py's GPT-2 124M.

1. Data: a WordLevel tokenizer of --vocab ids and a corpus of random words (benchmarks/gpu_steps.py's
   `word_corpus`), so only the work per token matters.
2. nb: `nbcli.tasks.language_model.train` (what `nb train` calls) on the gpt2-124m preset's settings at
   --layers x --d-model, --heads, --seq-len, --batch-size, float32, no compile, evaluated only after the
   last update; tokens/s is the median of its log records after --warm updates.
3. Plain PyTorch: nanoGPT's model and loop (benchmarks/gpu_baselines.py `NanoGPT`, `nanogpt_run`: the same
   shapes, AdamW groups, token stream), timed the same way.
4. The two run --repeats times, in alternating order (nb first, then plain first, ...) so a change in the
   machine's load, or a warmed allocator, favours neither; the table gives each repeat's ratio and the best
   of each side; one thread each unless --threads.

Target: nb / plain >= 1.0x.

    python3 benchmarks/train_lm_loop.py      # table on stdout, JSON in benchmarks/out/train_lm_loop.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import load_average, machine, print_rows, write_json  # noqa: E402
from gpu_baselines import nanogpt_run  # noqa: E402
from gpu_steps import nb_train_run, word_corpus  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warm", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out" / "train_lm_loop.json")
    args = parser.parse_args()

    import torch

    from nbcli.train.config import build_config

    torch.set_num_threads(args.threads)
    cfg = build_config("gpt2-124m", steps=args.steps, eval_every=args.steps + 1, eval_batches=1, save_every=0,
                       seed=0, device="cpu", compile=False, dtype="float32", warmup=2, n_layer=args.layers,
                       n_head=args.heads, d_model=args.d_model, seq_len=args.seq_len, batch_size=args.batch_size)
    before = load_average()
    rows, repeats = [], []
    with tempfile.TemporaryDirectory(prefix="nb-lm-loop-") as tmp:
        work = Path(tmp)
        tokenizer, corpus, stream = word_corpus(work, args.vocab, cfg.seq_len * cfg.batch_size * (args.steps + 2),
                                                 words_per_doc=2 * cfg.seq_len)
        for i in range(args.repeats):   # the order alternates: what runs second meets a warmed allocator
            runs = {"nb": lambda: nb_train_run(cfg, corpus, tokenizer, work / f"nb-{i}", args.warm)["tokens_per_s"],
                    "plain": lambda: nanogpt_run(cfg, stream, args.vocab, args.steps, args.warm, False,
                                                 "cpu")["tokens_per_s"]}
            got = {name: runs[name]() for name in (("nb", "plain") if i % 2 == 0 else ("plain", "nb"))}
            nb, plain = got["nb"], got["plain"]
            repeats.append({"nb_tokens_per_s": nb, "plain_tokens_per_s": plain, "ratio": nb / plain})
            rows.append((f"repeat {i + 1}: nb / plain tokens/s", f"{nb:,.0f} / {plain:,.0f} = {nb / plain:.2f}x"))
    best_nb, best_plain = max(r["nb_tokens_per_s"] for r in repeats), max(r["plain_tokens_per_s"] for r in repeats)
    after = load_average()
    rows += [("best: nb / plain tokens/s", f"{best_nb:,.0f} / {best_plain:,.0f} = {best_nb / best_plain:.2f}x"),
             ("load average before / after", f"{before[0]:.2f} / {after[0]:.2f}"),
             ("work", f"{args.layers} layers, d {args.d_model}, {args.heads} heads, T {args.seq_len}, batch "
                      f"{args.batch_size}, V {args.vocab}, {args.steps} updates (median after {args.warm}), "
                      f"{args.threads} thread(s), float32")]
    print_rows(rows)
    write_json(args.out, {"machine": machine(load_before=before, load_after=after), "args": {
        k: str(v) for k, v in vars(args).items()}, "repeats": repeats, "best_ratio": best_nb / best_plain})
    print(f"JSON: {args.out}")


if __name__ == "__main__":
    main()
