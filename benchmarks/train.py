#!/usr/bin/env python3
"""Benchmark `nb train` on CPU: tiny-preset tokens/s and the papers' effects on real English text.

Arms (same steps, same data, seeds 0..S-1; validation loss evaluated at every step (--real: every
1 % of the run) so 1%, 10% and 100% of the run are exact points of the curve; ALC = trapezoid area
under the validation-loss curve normalised by the span, paper 000 sec. 4.2):

  clm  --bias-init unigram  vs  --bias-init zero                     (paper 000: lower early loss)
  mlm  --ag-fraction 0.5 --ag-alpha 100 (and 10)  vs  no guidance    (paper 001: faster convergence)

Corpus: the bundled Botchan sample (nbcli/data, real English prose, 280 kB; its 2k BPE tokenizer)
unless --corpus/--tokenizer name others, or --real:

--real uses the count benchmark's corpus (benchmarks/.cache/corpus.txt, 78 MB of real English, one
document per line, built by benchmarks/count_unigrams.py; this script never downloads anything):
  * training/validation sample: every K-th line of corpus.txt (K = ceil(corpus size / --sample-mb),
    so the sample spans every source in proportion), written once to
    benchmarks/.cache/train-sample-K<K>-<corpus tag>.txt. nb train then holds out every 20th document of it
    (--val-fraction 0.05), so no validation line is a training line (corpus.txt has no repeated
    lines; the script checks the sample has none either) and a validation line's neighbours in
    corpus.txt are K lines away.
  * tokenizer: an 8k-piece SentencePiece BPE (--vocab-size) trained once on a disjoint slice of the
    corpus (lines K/2 mod K, at most 300k lines), cached as benchmarks/.cache/train-bpe8000-*.model.
    Why not the count benchmark's 32k model: at d=128 the tiny model's tied output layer costs
    V*d multiply-adds a token against ~0.46 M for its two blocks (T=128), i.e. 90 % of the FLOPs
    at V=32k (measured: 2.1k tokens/s vs 7.7k at 8k on a quiet moment of this 2-core machine), so
    3 seeds x 5 arms would not fit in ~15 minutes. 8k still leaves the output layer ~2/3 of the
    FLOPs (4k would be ~1/2) but keeps a realistic BPE vocabulary (log V = 9.0 nats, unigram
    entropy ~7.0) for paper 000's effect. `--tokenizer benchmarks/.cache/spm-bpe32000-*.model`
    runs the study with the 32k model instead (trained on a sample of the whole corpus,
    validation lines included).
  * effect runs: tiny preset as shipped (T=128, batch 16), 200 steps = 410k tokens, about a third
    of an epoch of the sample's 1.2 M training tokens (no document is seen twice); validation every
    2 steps (1 % of the run) on one batch of 16 blocks (the first 2k validation tokens; MLM: the
    ~300 masked among them; the same tokens and masks in every arm and seed).

GPU figures (gpt2-124m bf16 tokens/s, MFU, --compile, AG overhead) need a CUDA machine; this script
measures CPU only and never fakes them.

    python3 benchmarks/train.py --real          # table on stdout, JSON in benchmarks/out/train.json
    python3 benchmarks/train.py                 # the same on the bundled Botchan sample
    python3 benchmarks/train.py --steps 50 --seeds 1   # quick look
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (CACHE, OUT, VAL_FRACTION, load_average, log, machine, real_sample, real_tokenizer,  # noqa: E402
                    run_arm, summarise, write_json)

from nbcli.samples import SAMPLE_CORPUS, SAMPLE_TOKENIZER  # noqa: E402
from nbcli.train.config import build_config  # noqa: E402
from nbcli.tokenizers import load_tokenizer  # noqa: E402
from nbcli.train.data import tokenize_corpus  # noqa: E402
from nbcli.tasks.language_model import train  # noqa: E402
from nbcli.train.rundir import read_log  # noqa: E402


# Arms. AG in the paper's released units (--ag-reduction mse): alpha_0 = 100 is table 11's value for
# RoBERTa-8; auto sets alpha_0 L_AG = L_MLM at step 0 (sec. 4.5's rule).
ARMS: dict[str, dict[str, Any]] = {
    "clm-bias-unigram": dict(objective="clm", bias_init="unigram"),
    "clm-bias-zero": dict(objective="clm", bias_init="zero"),
    "clm-untied-unigram": dict(objective="clm", bias_init="unigram", tie_embeddings=False),
    "clm-untied-rescale-fro": dict(objective="clm", bias_init="unigram", tie_embeddings=False, rescale_w="fro"),
    "mlm-no-ag": dict(objective="mlm", bias_init="zero"),
    "mlm-ag-alpha100": dict(objective="mlm", bias_init="zero", ag_fraction=0.5, ag_alpha=100.0),
    "mlm-ag-auto": dict(objective="mlm", bias_init="zero", ag_fraction=0.5, ag_alpha="auto"),
}
COMPARISONS = (("clm-bias-unigram", "clm-bias-zero"), ("clm-untied-rescale-fro", "clm-untied-unigram"),
               ("mlm-ag-alpha100", "mlm-no-ag"), ("mlm-ag-auto", "mlm-no-ag"))



def throughput(corpus: str, tokenizer: str, workdir: Path, steps: int) -> dict[str, Any]:
    """Tiny preset as shipped (T=128, batch 16): median training tokens/s after 5 warm-up steps."""
    cfg = build_config("tiny", steps=steps, eval_every=10_000, eval_batches=1, val_fraction=VAL_FRACTION, device="cpu")
    train(cfg, [corpus], tokenizer, workdir / "throughput")
    tps = [r["tokens_per_s"] for r in read_log(workdir / "throughput") if "tokens_per_s" in r][5:]
    return {"steps": steps, "tokens_per_s_median": statistics.median(tps), "tokens_per_s_max": max(tps)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--real", action="store_true",
                        help="the count benchmark's corpus (a sample of it) and an 8k BPE trained on it; see above")
    parser.add_argument("--corpus", help="corpus file (default: Botchan, or the --real sample)")
    parser.add_argument("--tokenizer", help="SentencePiece model (default: Botchan's, or the --real 8k BPE)")
    parser.add_argument("--cache", type=Path, default=CACHE, help="--real: where corpus.txt is and the sample and "
                        "tokenizer are cached (default: benchmarks/.cache)")
    parser.add_argument("--sample-mb", type=float, default=4.0, help="--real: sample size in MB (default: %(default)s)")
    parser.add_argument("--vocab-size", type=int, default=8000, help="--real: BPE vocabulary (default: %(default)s)")
    parser.add_argument("--steps", type=int, help="steps per run (default: 100; --real: 200)")
    parser.add_argument("--seq-len", type=int, help="T for the effect runs (default: 64; --real: 128, as the preset)")
    parser.add_argument("--batch-size", type=int, help="batch for the effect runs (default: 8; --real: 16, as the preset)")
    parser.add_argument("--eval-every", type=int, help="validation every N steps (default: 1; --real: steps/100)")
    parser.add_argument("--eval-batches", type=int, help="validation batches per evaluation (default: 2; --real: 1)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--preset", default="tiny", help="nb train preset of the effect runs (default: tiny)")
    parser.add_argument("--arms", help=f"comma-separated subset of: {', '.join(ARMS)} (default: all)")
    parser.add_argument("--keep", type=Path, help="keep the run directories here (for nb plot-run) instead of a "
                        "temporary directory")
    parser.add_argument("--no-throughput", action="store_true", help="skip the tiny-preset throughput run")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default: 2)")
    parser.add_argument("--json", type=Path, default=OUT / "train.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sample_info: dict[str, Any] | None = None
    if args.real:
        sample, sample_info = real_sample(args.cache, args.sample_mb)
        args.corpus = args.corpus or str(sample)
        args.tokenizer = args.tokenizer or str(real_tokenizer(args.cache, sample_info["every"], args.vocab_size))
        defaults = dict(steps=200, seq_len=128, batch_size=16, eval_batches=1)
    else:
        args.corpus = args.corpus or str(SAMPLE_CORPUS)
        args.tokenizer = args.tokenizer or str(SAMPLE_TOKENIZER)
        defaults = dict(steps=100, seq_len=64, batch_size=8, eval_batches=2, eval_every=1)
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.eval_every is None:
        args.eval_every = max(1, args.steps // 100)

    names = args.arms.split(",") if args.arms else list(ARMS)
    unknown = [n for n in names if n not in ARMS]
    if unknown:
        raise SystemExit(f"benchmarks/train.py: unknown arms {unknown}; choose from {', '.join(ARMS)}")
    arms = [(n, ARMS[n]) for n in names]
    data = tokenize_corpus([args.corpus], load_tokenizer(args.tokenizer), "clm", VAL_FRACTION)
    tokens = {"train": int(data.train.size), "val": int(data.val.size), "documents": data.documents,
              "per_run": args.steps * args.batch_size * args.seq_len}
    log(f"corpus {args.corpus}: {data.documents:,} documents, {tokens['train']:,} training / {tokens['val']:,} "
        f"validation tokens (clm); each effect run reads {tokens['per_run']:,}")
    del data
    t_start = time.perf_counter()
    load_start = load_average()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="nb-train-bench-") as tmp:
        workdir = args.keep or Path(tmp)
        speed = None
        if not args.no_throughput:
            log("throughput (tiny preset, CPU) ...")
            speed = throughput(args.corpus, args.tokenizer, workdir, 20)
        for name, options in arms:
            log(f"{name} ...")
            for seed in range(args.seeds):
                rows.append(run_arm(name, args.corpus, args.tokenizer, seed, args.steps, workdir, args.eval_every,
                                    args.eval_batches, preset=args.preset, seq_len=args.seq_len,
                                    batch_size=args.batch_size, **options))
    total = time.perf_counter() - t_start

    print(f"\nnb train benchmark: {args.preset} preset at T={args.seq_len}, batch {args.batch_size}, {args.steps} steps, "
          f"{args.seeds} seeds, corpus {Path(args.corpus).name}, tokenizer {Path(args.tokenizer).name}, "
          f"{args.threads} CPU threads")
    print(f"{tokens['documents']:,} documents: {tokens['train']:,} training and {tokens['val']:,} validation tokens "
          f"(clm); each run trains on {tokens['per_run']:,} ({tokens['per_run'] / tokens['train']:.2f} epochs)")
    marks = rows[0]["marks"]
    print(f"validation every {args.eval_every} steps on {args.eval_batches} batch(es); 1% / 10% / 100% = steps "
          f"{marks[1]} / {marks[10]} / {marks[100]}")
    if speed is not None:
        print(f"CPU tiny-preset training throughput (as shipped: T=128, batch 16): "
              f"{speed['tokens_per_s_median']:,.0f} tokens/s (median)\n")
    keys = ["step0_loss", "val_1pct", "val_10pct", "val_100pct", "alc"]
    print(f"{'arm':<18}" + "".join(f"{k:>20}" for k in keys))
    summary: dict[str, dict[str, list[float]]] = {}
    for name, _ in arms:
        arm_rows = [r for r in rows if r["arm"] == name]
        summary[name] = {k: list(summarise(arm_rows, k)) for k in keys}
        print(f"{name:<18}" + "".join(f"{m:>12.4f} ±{s:>6.4f}" for m, s in (summarise(arm_rows, k) for k in keys)))
    comparisons = {}
    for a, b in COMPARISONS:
        if a not in summary or b not in summary:
            continue
        comparisons[f"{a} - {b}"] = {k: summary[a][k][0] - summary[b][k][0] for k in keys}
        print(f"{a} minus {b}: " + ", ".join(f"{k} {v:+.4f}" for k, v in comparisons[f'{a} - {b}'].items()))
    overhead = None
    if "mlm-ag-alpha100" in summary and "mlm-no-ag" in summary:
        ag_speed = {name: statistics.median(r["train_tokens_per_s_median"] for r in rows if r["arm"] == name)
                    for name in ("mlm-ag-alpha100", "mlm-no-ag")}
        overhead = ag_speed["mlm-no-ag"] / ag_speed["mlm-ag-alpha100"] - 1
        print(f"AG overhead on CPU (median step tokens/s without / with AG - 1): {overhead:+.1%}")
    for name, _ in arms:
        ag_rows = [r for r in rows if r["arm"] == name and "ag_loss_first" in r]
        if ag_rows:
            print(f"{name}: ag_loss first step {statistics.mean(r['ag_loss_first'] for r in ag_rows):.5f} "
                  f"(x alpha_0 = {statistics.mean(r['ag_weighted_first'] for r in ag_rows):.3f} nats vs step-0 LM "
                  f"loss {statistics.mean(r['step0_loss'] for r in ag_rows):.3f}), last step "
                  f"{statistics.mean(r['ag_loss_last'] for r in ag_rows):.5f}")
    h, logv = rows[0]["unigram_entropy"], rows[0]["log_v"]
    print(f"unigram entropy of the training tokens {h:.3f} nats, log V {logv:.3f}")
    print(f"\ntotal wall time {total:.0f} s")
    payload = {
        "machine": machine(torch=torch.__version__, threads=args.threads, cuda=torch.cuda.is_available()),
        "corpus": args.corpus, "tokenizer": args.tokenizer, "steps": args.steps, "seeds": args.seeds,
        "preset": args.preset, "arms": names,
        "seq_len": args.seq_len, "batch_size": args.batch_size, "eval_every": args.eval_every,
        "eval_batches": args.eval_batches, "val_fraction": VAL_FRACTION, "real_sample": sample_info, "tokens": tokens,
        "load_average_start": load_start, "load_average_end": load_average(),
        "throughput": speed, "ag_overhead_cpu": overhead, "runs": rows, "summary": summary, "comparisons": comparisons,
        "gpu": "unmeasured (no CUDA device in this run)" if not torch.cuda.is_available() else "not run by this script",
        "total_wall_s": total,
    }
    write_json(args.json, payload)
    log(f"wrote {args.json}")
    assert all(math.isfinite(r["alc"]) for r in rows)


if __name__ == "__main__":
    main()
