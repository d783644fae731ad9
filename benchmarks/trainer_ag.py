#!/usr/bin/env python3
"""Benchmark `nbcli.AttentionGuidanceTrainer` (issue 30): a Trainer step with attention guidance
against the same step without it.

A random RoBERTa MLM (--layers x --width, --heads heads, V = 8000) trained on random right-padded
rows of --seq-len tokens (batch --batch) by transformers' Trainer. Four arms, each --steps
optimizer steps after --warmup, interleaved --rounds times (the machine is shared; the median step
time of each arm is reported):

    plain sdpa         Trainer, SDPA attention (the baseline)
    AG hooks sdpa      AttentionGuidanceTrainer, ag_fraction 0.5, q/k hooked (ag_source="hooks")
    plain eager        Trainer, eager attention
    AG maps eager      AttentionGuidanceTrainer, output_attentions (ag_source="attentions")

The overhead of AG is "AG hooks sdpa" / "plain sdpa" (what AG costs a Trainer script that keeps
its attention kernel) and "AG maps eager" / "plain eager" (the cost of the loss on the maps).
CUDA when present (--device), else CPU.

    python3 benchmarks/trainer_ag.py          # table on stdout, JSON in benchmarks/out/trainer_ag.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT, load_average, log, machine, print_rows, write_json  # noqa: E402

V = 8000


def arm_times(arm: str, args: argparse.Namespace, data: list[dict[str, Any]], work: Path) -> list[float]:
    import torch
    import transformers

    import nbcli

    eager = arm.endswith("eager")
    torch.manual_seed(0)
    config = transformers.RobertaConfig(vocab_size=V, hidden_size=args.width, num_hidden_layers=args.layers,
                                        num_attention_heads=args.heads, intermediate_size=4 * args.width,
                                        max_position_embeddings=args.seq_len + 2, pad_token_id=1)
    config._attn_implementation = "eager" if eager else "sdpa"
    model = transformers.RobertaForMaskedLM(config)
    times: list[float] = []

    class Clock(transformers.TrainerCallback):
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            self.start = time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            if args.device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - self.start)

    targs = transformers.TrainingArguments(str(work / arm.replace(" ", "-")), max_steps=args.warmup + args.steps,
                                           per_device_train_batch_size=args.batch, logging_steps=10**6, report_to=[],
                                           use_cpu=args.device == "cpu", save_strategy="no", disable_tqdm=True,
                                           dataloader_drop_last=True)
    common = dict(model=model, args=targs, train_dataset=data, data_collator=collate, callbacks=[Clock()])
    if arm.startswith("AG"):
        source = "hooks" if "hooks" in arm else "attentions"
        trainer = nbcli.AttentionGuidanceTrainer(**common, ag_fraction=0.5, ag_alpha=100.0, ag_source=source)
    else:
        trainer = transformers.Trainer(**common)
    trainer.remove_callback(transformers.PrinterCallback)  # its summary line would land in the table
    trainer.train()
    return times[args.warmup:]


def collate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    import torch

    T = max(len(r["input_ids"]) for r in rows)
    ids = torch.tensor([r["input_ids"] + [1] * (T - len(r["input_ids"])) for r in rows])
    mask = torch.tensor([[1] * len(r["input_ids"]) + [0] * (T - len(r["input_ids"])) for r in rows])
    chosen = (torch.rand(ids.shape) < 0.15) & mask.bool()
    labels = ids.masked_fill(~chosen, -100)
    return {"input_ids": ids.masked_fill(chosen, 4), "attention_mask": mask, "labels": labels}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--out", type=Path, default=OUT / "trainer_ag.json")
    args = parser.parse_args()

    import tempfile

    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(args.seq_len // 2, args.seq_len + 1, (args.batch * (args.warmup + args.steps),), generator=g)
    data = [{"input_ids": [0, *torch.randint(5, V, (int(n) - 2,), generator=g).tolist(), 2]} for n in lengths]
    arms = ["plain sdpa", "AG hooks sdpa", "plain eager", "AG maps eager"]
    samples: dict[str, list[float]] = {arm: [] for arm in arms}
    load_before = load_average()
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for arm in arms:
                log(f"round {round_ + 1}/{args.rounds}: {arm}")
                samples[arm] += arm_times(arm, args, data, Path(tmp))
    median = {arm: statistics.median(times) for arm, times in samples.items()}
    overhead = {"hooks_vs_plain_sdpa": median["AG hooks sdpa"] / median["plain sdpa"],
                "maps_vs_plain_eager": median["AG maps eager"] / median["plain eager"]}
    fastest = {arm: min(times) for arm, times in samples.items()}
    rows = [(f"{arm} (ms/step, median | min of {len(samples[arm])})",
             f"{1000 * median[arm]:.1f} | {1000 * fastest[arm]:.1f}") for arm in arms]
    rows += [("AG overhead, hooks under SDPA (median | min)",
              f"{overhead['hooks_vs_plain_sdpa']:.3f}x | {fastest['AG hooks sdpa'] / fastest['plain sdpa']:.3f}x"),
             ("AG overhead, maps under eager (median | min)",
              f"{overhead['maps_vs_plain_eager']:.3f}x | {fastest['AG maps eager'] / fastest['plain eager']:.3f}x")]
    print(f"RoBERTa MLM {args.layers} x {args.width}, {args.heads} heads, T <= {args.seq_len}, batch {args.batch}, "
          f"V {V}, {args.device}")
    print_rows(rows)
    write_json(args.out, {"config": vars(args) | {"out": str(args.out)}, "step_seconds": samples,
                          "median_seconds": median, "min_seconds": fastest, "overhead": overhead,
                          "load_before": load_before, "load_after": load_average(),
                          "machine": machine(torch=torch.__version__, transformers=transformers.__version__,
                                             threads=torch.get_num_threads(),
                                             gpu=torch.cuda.get_device_name(0) if args.device == "cuda" else None)})


if __name__ == "__main__":
    main()
