#!/usr/bin/env python3
"""Benchmark `nb transplant-embeddings` (paper 002 sec. 3.3): does an embedding taken by vocabulary
overlap from a model nb trained on *another* tokenizer help a new model, against Xavier and against
the same rows shuffled?

1. source: a byte-level BPE tokenizer (HF `tokenizers`, GPT-2 style, --vocab-size pieces) trained on
   the same disjoint corpus slice as train.py's SentencePiece model, and a tiny-preset CLM trained
   with it on the train.py --real sample for --source-steps steps (cached in benchmarks/.cache);
2. `nb transplant-embeddings` from that checkpoint to train.py's 8k SentencePiece BPE (▁ vs Ġ: the
   matching must cross conventions), --missing xavier (rows the source lacks get Xavier);
3. arms, tiny preset, same steps and seeds: --embedding-init xavier; pretrained:OUT (overlap);
   pretrained:OUT --embedding-shuffle --shuffle-mode rows-columns (Pre-trained_Shuffled, sec. 3.4).

    python3 benchmarks/transplant.py --steps 60 --seeds 3   # table on stdout, JSON in benchmarks/out/transplant.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (CACHE, OUT, VAL_FRACTION, load_average, log, machine, real_sample,  # noqa: E402
                    real_tokenizer, run_arm, summarise, tokenizer_lines, write_json)

from nbcli.train.config import build_config  # noqa: E402
from nbcli.tasks.language_model import train  # noqa: E402
from nbcli.transplant import transplant  # noqa: E402


def bytelevel_tokenizer(cache: Path, every: int, vocab_size: int, max_lines: int = 300_000) -> Path:
    """A GPT-2-style byte-level BPE tokenizer.json trained (once) on the lines train.py's tokenizer uses."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    path = cache / f"transplant-bytelevel{vocab_size}-K{every}.json"
    if path.is_file():
        return path
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(tokenizer_lines(cache, every, max_lines), trainer=trainer)
    tmp = path.with_suffix(".tmp")
    tok.save(str(tmp))
    tmp.replace(path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sample-mb", type=float, default=4.0)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--source-steps", type=int, default=100)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--eval-every", type=int, default=3)
    parser.add_argument("--eval-batches", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--keep", type=Path, required=True, help="directory for the runs (kept, for nb plot-run)")
    parser.add_argument("--json", type=Path, default=OUT / "transplant.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    t_start, load_start = time.perf_counter(), load_average()
    sample, info = real_sample(CACHE, args.sample_mb)
    target_tok = real_tokenizer(CACHE, info["every"], args.vocab_size)
    source_tok = bytelevel_tokenizer(CACHE, info["every"], args.vocab_size)
    args.keep.mkdir(parents=True, exist_ok=True)
    source_dir = args.keep / "source-bytelevel"
    if not (source_dir / "summary.json").exists():
        log(f"source: tiny CLM on {source_tok.name}, {args.source_steps} steps ...")
        cfg = build_config("tiny", steps=args.source_steps, seq_len=args.seq_len, batch_size=args.batch_size,
                           eval_every=max(1, args.source_steps // 10), eval_batches=args.eval_batches,
                           val_fraction=VAL_FRACTION, device="cpu", seed=100)
        train(cfg, [str(sample)], source_tok, source_dir)
    source_summary = json.loads((source_dir / "summary.json").read_text())
    out = args.keep / "transplanted.safetensors"
    if out.exists():
        out.unlink()
    result = transplant(Path(source_summary["checkpoint"]), source_tok, target_tok, out, missing="xavier")
    cov = result.coverage
    log(f"transplant: {cov.matched:,} of {cov.target_pieces:,} target pieces matched ({cov.matched_fraction:.1%})")
    arms = {
        "emb-xavier": dict(embedding_init="xavier"),
        "emb-overlap": dict(embedding_init=f"pretrained:{out}"),
        "emb-overlap-shuffled": dict(embedding_init=f"pretrained:{out}", embedding_shuffle=True,
                                     embedding_shuffle_mode="rows-columns"),
    }
    rows: list[dict[str, Any]] = []
    for name, options in arms.items():
        log(f"{name} ...")
        for seed in range(args.seeds):
            rows.append(run_arm(name, str(sample), str(target_tok), seed, args.steps, args.keep, args.eval_every,
                                args.eval_batches, seq_len=args.seq_len, batch_size=args.batch_size, objective="clm",
                                bias_init="zero", **options))
    keys = ["step0_loss", "val_1pct", "val_10pct", "val_100pct", "alc"]
    print(f"\nnb transplant-embeddings benchmark: source = tiny CLM, {args.source_steps} steps on {source_tok.name} "
          f"(final val {source_summary['final_val_loss']:.3f}); target = {target_tok.name}")
    print(f"coverage: {cov.matched:,} of {cov.target_pieces:,} target pieces matched ({cov.matched_fraction:.1%}); "
          f"arms: tiny preset, T={args.seq_len}, batch {args.batch_size}, {args.steps} steps, {args.seeds} seeds")
    print(f"{'arm':<22}" + "".join(f"{k:>20}" for k in keys))
    summary = {}
    for name in arms:
        arm_rows = [r for r in rows if r["arm"] == name]
        summary[name] = {k: list(summarise(arm_rows, k)) for k in keys}
        print(f"{name:<22}" + "".join(f"{m:>12.4f} ±{s:>6.4f}" for m, s in (summarise(arm_rows, k) for k in keys)))
    comparisons = {}
    for a in ("emb-overlap", "emb-overlap-shuffled"):
        comparisons[f"{a} - emb-xavier"] = {k: summary[a][k][0] - summary["emb-xavier"][k][0] for k in keys}
        print(f"{a} minus emb-xavier: " + ", ".join(f"{k} {v:+.4f}" for k, v in comparisons[f'{a} - emb-xavier'].items()))
    total = time.perf_counter() - t_start
    print(f"\ntotal wall time {total:.0f} s, load average {load_start[0]:.1f} -> {load_average()[0]:.1f}")
    payload = {"machine": machine(torch=torch.__version__, threads=args.threads),
               "source": {"tokenizer": str(source_tok), "steps": args.source_steps, "summary": source_summary},
               "target_tokenizer": str(target_tok), "coverage": cov.as_dict(), "steps": args.steps,
               "seeds": args.seeds, "seq_len": args.seq_len, "batch_size": args.batch_size,
               "eval_every": args.eval_every, "runs": rows, "summary": summary, "comparisons": comparisons,
               "load_average_start": load_start, "load_average_end": load_average(), "total_wall_s": total,
               "median_tokens_per_s": statistics.median(r["train_tokens_per_s_median"] for r in rows)}
    write_json(args.json, payload)
    log(f"wrote {args.json}")


if __name__ == "__main__":
    main()
