#!/usr/bin/env python3
"""Benchmark `nb generate` (issue 12): KV cache vs none, vs transformers' generate, and the lambda table.

One run, CPU (this script never fakes GPU figures; a GPT-2-size CUDA run is left unmeasured):

1. Model: nb's reference Transformer, `small` preset (4 layers, d=256, 8 heads) with --seq-len 320
   (so a ~15-token prompt plus 256 new tokens fits), trained briefly (150 steps x 4 x 320 tokens,
   warm-up 15) with `nb train`'s own code on
   benchmarks/train.py --real's sample of real English (every K-th line of the count benchmark's
   corpus, benchmarks/.cache) and its 8k BPE. Cached in benchmarks/.cache/generate-model-*/.
2. Throughput at 256 new tokens (EOS ignored so every row makes 256), batch B, top-p 0.9:
   nb's runner with its KV cache vs the same loop recomputing the whole sequence each step
   (`--no-kv-cache`), same seeds, and the tokens checked equal. Target >= 5x.
3. vs transformers: a random GPT2LMHeadModel of the same shape (4 x 256, 8 heads, V = 8000,
   320 positions) saved to a directory; nb's loop over it (nbcli.lm.runner.HFRunner, KV cache)
   vs `model.generate(do_sample=True, top_p=0.9, min_new_tokens=256, max_new_tokens=256)`, same
   batch of prompts. Target: nb within 1.2x of transformers' time or faster.
4. The lambda table (paper 003 table 2) for the trained model: prompts = first 10 words of held-out
   (validation) documents, top-p 0.9, lambda in 0, 0.2, ..., 1 and a logit-adjustment arm
   (tau = 1, training counts), perplexity of held-out text under each arm. --lambdas, --prompts,
   --table-new-tokens and --eval-docs size it (the recorded run used small values: see BENCHMARKS.md).

    python3 benchmarks/generate.py          # table on stdout, JSON in benchmarks/out/generate.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (CACHE, OUT, VAL_FRACTION, load_average, machine, real_sample,  # noqa: E402
                    real_tokenizer, write_json)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def train_model(sample: Path, tokenizer: Path, steps: int, batch: int, cache: Path) -> tuple[Path, dict[str, Any]]:
    from nbcli.train.config import build_config
    from nbcli.tasks.language_model import train

    out = cache / f"generate-model-small-T320-b{batch}-s{steps}"
    ckpt = out / f"step-{steps}.safetensors"
    info_path = out / "bench-train.json"
    if ckpt.is_file() and info_path.is_file():
        return ckpt, json.loads(info_path.read_text())
    cfg = build_config("small", steps=steps, batch_size=batch, seq_len=320, seed=0, device="cpu", warmup=max(10, steps // 10),
                       val_fraction=VAL_FRACTION, eval_every=steps, eval_batches=4)
    log(f"training nb small (T=320, batch {batch}) for {steps} steps on {sample.name} ...")
    t0 = time.perf_counter()
    result = train(cfg, [str(sample)], str(tokenizer), out)
    info = {"steps": steps, "batch_size": batch, "seq_len": 320, "tokens": steps * batch * 320,
            "wall_s": time.perf_counter() - t0, "load_after": load_average()[0],
            "summary": {k: v for k, v in result.as_dict().items() if isinstance(v, (int, float, str))}}
    info_path.write_text(json.dumps(info, indent=2))
    return ckpt, info


def heldout_documents(sample: Path, limit: int) -> list[str]:
    """nb train's validation documents of the sample (every 20th non-empty line)."""
    every = max(2, round(1 / VAL_FRACTION))
    docs = [line.strip() for line in sample.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [d for i, d in enumerate(docs) if i % every == every - 1][:limit]


def timed_generate(runner: Any, tokenizer: Any, prompts: Any, opts: Any) -> tuple[float, list[list[int]]]:
    from nbcli.lm.generation import generate

    t0 = time.perf_counter()
    samples = generate(runner, tokenizer, prompts, opts)
    return time.perf_counter() - t0, [s.tokens for s in samples]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--train-batch", type=int, default=4)
    parser.add_argument("--batch", type=int, default=4, help="rows generated together in the speed runs")
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--prompts", type=int, default=32, help="held-out prompts in the lambda table")
    parser.add_argument("--table-new-tokens", type=int, default=128)
    parser.add_argument("--eval-docs", type=int, default=150)
    parser.add_argument("--lambdas", default="0,0.4,0.8,1")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (1: on a shared, loaded 2-core machine two threads wait on "
                        "each other's time slices; a 4x16 forward measured 2.5 s with 2 threads vs 0.27 s with 1)")
    parser.add_argument("--out", type=Path, default=OUT / "generate.json")
    args = parser.parse_args()

    import torch

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    from nbcli.lm.arms import build_arms, parse_lambdas
    from nbcli.decoding.sampling import parse_decoding
    from nbcli.lm.generation import GenerationOptions, generation_study, make_prompts
    from nbcli.lm.perplexity import tokenize_documents
    from nbcli.lm.runner import load_runner
    from nbcli.surgery import SurgeryOptions
    from nbcli.tokenizers import load_tokenizer

    threads = torch.get_num_threads()
    sample, sample_info = real_sample(args.cache, 4.0)
    tok_path = real_tokenizer(args.cache, sample_info["every"], 8000)
    tokenizer = load_tokenizer(tok_path)
    ckpt, train_info = train_model(sample, tok_path, args.steps, args.train_batch, args.cache)
    log(f"model {ckpt} (trained {train_info['wall_s']:.0f} s)")
    runner = load_runner(ckpt, device="cpu")
    docs = heldout_documents(sample, max(args.eval_docs, args.prompts * 3))
    report: dict[str, Any] = {"machine": machine(torch_threads=threads, torch=torch.__version__),
                              "sample": sample_info, "tokenizer": str(tok_path), "train": train_info}

    # -- 2. KV cache vs full recompute ------------------------------------------------------------
    speed_prompts = make_prompts(docs, 10, args.batch)
    rule = parse_decoding("top-p:0.9")
    opts = GenerationOptions(rule, args.new_tokens, samples=1, seed=0, batch_size=args.batch, stop_at_eos=False)
    load0 = load_average()[0]
    t_cache, tok_cache = timed_generate(runner, tokenizer, speed_prompts, opts)
    t_full, tok_full = timed_generate(runner, tokenizer, speed_prompts, GenerationOptions(**{**vars(opts), "use_cache": False}))
    n_tokens = sum(len(t) for t in tok_cache)
    report["kv_cache"] = {"rows": len(speed_prompts), "new_tokens": args.new_tokens, "tokens": n_tokens,
                          "cache_s": t_cache, "full_s": t_full, "cache_tokens_per_s": n_tokens / t_cache,
                          "full_tokens_per_s": n_tokens / t_full, "speedup": t_full / t_cache,
                          "same_tokens": tok_cache == tok_full, "load": [load0, load_average()[0]]}
    log(f"KV cache {n_tokens / t_cache:,.0f} tok/s vs full {n_tokens / t_full:,.0f} tok/s: {t_full / t_cache:.2f}x")

    # -- 3. vs transformers' generate on the same tiny GPT-2 ----------------------------------------
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    hf_dir = args.cache / "generate-hf-gpt2-4x256-v8000"
    eos = tokenizer.eos_id
    if not (hf_dir / "config.json").is_file():
        GPT2LMHeadModel(GPT2Config(vocab_size=tokenizer.vocab_size, n_positions=320, n_embd=256, n_layer=4, n_head=8,
                                   bos_token_id=eos, eos_token_id=eos, pad_token_id=eos)).save_pretrained(str(hf_dir))
    hf_runner = load_runner(hf_dir, device="cpu")
    same_len = [p for p in make_prompts(docs, 10, 400)]
    by_len: dict[int, list[Any]] = {}
    for p, ids in zip(same_len, tokenizer.encode_batch([p.text for p in same_len])):
        by_len.setdefault(len(ids), []).append(p)
    length, group = max(by_len.items(), key=lambda kv: len(kv[1]))
    group = group[:args.batch]                      # one batch of equal-length prompts: no padding for either
    t_nb, _ = timed_generate(hf_runner, tokenizer, group, GenerationOptions(**{**vars(opts), "batch_size": len(group)}))
    ids = torch.tensor([[eos] + tokenizer.encode(p.text) for p in group])
    model = hf_runner.module
    with torch.inference_mode():
        model.generate(ids[:, :4], do_sample=True, top_p=0.9, top_k=0, max_new_tokens=4, min_new_tokens=4)  # warm-up
        t0 = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, top_p=0.9, top_k=0,
                             max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, pad_token_id=eos)
        t_hf = time.perf_counter() - t0
    hf_tokens = int(out.shape[0] * (out.shape[1] - ids.shape[1]))
    nb_tokens = len(group) * args.new_tokens
    report["vs_transformers"] = {"rows": len(group), "prompt_tokens": length + 1, "new_tokens": args.new_tokens,
                                 "nb_s": t_nb, "transformers_s": t_hf, "nb_tokens_per_s": nb_tokens / t_nb,
                                 "transformers_tokens_per_s": hf_tokens / t_hf, "ratio_nb_over_hf_time": t_nb / t_hf,
                                 "load": load_average()[0]}
    log(f"nb loop {nb_tokens / t_nb:,.0f} tok/s vs transformers generate {hf_tokens / t_hf:,.0f} tok/s "
        f"(nb time / hf time = {t_nb / t_hf:.2f})")

    # -- 4. the lambda table ------------------------------------------------------------------------
    from nbcli.checkpoint.vocab import model_vocab, with_tokenizer
    from nbcli.lm.arms import counts_log_prior

    prompts = make_prompts(docs, 10, args.prompts)
    scored = tokenize_documents(docs[:args.eval_docs], tokenizer, runner.vocab_size)
    vocab = with_tokenizer(model_vocab(runner.checkpoint, runner.vocab_size), tokenizer, str(tokenizer.path))
    log_prior, fitted = counts_log_prior(ckpt.parent / "counts.safetensors", vocab)
    counts_info = fitted.info
    arms = build_arms(runner, parse_lambdas(args.lambdas), 1.0)
    t0 = time.perf_counter()
    rows, _records, _w = generation_study(
        runner, tokenizer, arms, SurgeryOptions(), prompts,
        GenerationOptions(rule, args.table_new_tokens, samples=1, seed=0, batch_size=16),
        log_prior=log_prior, eval_scored=scored, progress=None)
    for r in rows:
        log(f"  {r['arm']}: D {r['diversity']:.3f} D-1 {r['distinct_1']:.3f} D-2 {r['distinct_2']:.3f} "
            f"len {r['mean_tokens']:.1f} EOS {r['eos_rate']:.2f} ppl {r['perplexity']:.1f}")
    report["lambda_table"] = {"prompts": len(prompts), "new_tokens_cap": args.table_new_tokens, "decoding": rule.spec,
                              "eval_documents": scored.documents, "eval_tokens": scored.targets,
                              "counts": counts_info, "wall_s": time.perf_counter() - t0, "rows": rows}

    print(f"\nnb generate benchmark (CPU, {os.cpu_count()} cores, torch threads {threads}; load {load_average()[0]:.1f})")
    print(f"model: nb small 4x256 T=320, trained {train_info['steps']} steps x {train_info['batch_size']} x 320 "
          f"= {train_info['tokens']:,} tokens in {train_info['wall_s']:.0f} s")
    kv = report["kv_cache"]
    print(f"\n{'':28}{'tokens/s':>10}{'time s':>9}")
    print(f"{'nb, KV cache':28}{kv['cache_tokens_per_s']:>10,.0f}{kv['cache_s']:>9.1f}")
    print(f"{'nb, full recompute':28}{kv['full_tokens_per_s']:>10,.0f}{kv['full_s']:>9.1f}")
    print(f"KV cache speed-up at {args.new_tokens} new tokens, batch {kv['rows']}: {kv['speedup']:.2f}x "
          f"(target >= 5x); same tokens: {kv['same_tokens']}")
    vs = report["vs_transformers"]
    print(f"{'nb loop on tiny GPT-2':28}{vs['nb_tokens_per_s']:>10,.0f}{vs['nb_s']:>9.1f}")
    print(f"{'transformers generate':28}{vs['transformers_tokens_per_s']:>10,.0f}{vs['transformers_s']:>9.1f}")
    print(f"nb time / transformers time: {vs['ratio_nb_over_hf_time']:.2f} (target <= 1.2)")
    print(f"\nlambda table: {len(prompts)} held-out prompts, top-p 0.9, <= {args.table_new_tokens} new tokens; "
          f"ppl on {scored.documents} held-out documents ({scored.targets:,} tokens)")
    print(f"{'arm':18}{'D-1':>7}{'D-2':>7}{'D-3':>7}{'D-4':>7}{'D':>7}{'len':>7}{'EOS':>6}{'ppl':>9}")
    for r in rows:
        print(f"{r['arm']:18}{r['distinct_1']:>7.3f}{r['distinct_2']:>7.3f}{r['distinct_3']:>7.3f}{r['distinct_4']:>7.3f}"
              f"{r['diversity']:>7.3f}{r['mean_tokens']:>7.1f}{r['eos_rate']:>6.2f}{r['perplexity']:>9.2f}")
    write_json(args.out, report)
    print(f"\nJSON: {args.out}")


if __name__ == "__main__":
    main()
