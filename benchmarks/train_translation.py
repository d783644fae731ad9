#!/usr/bin/env python3
"""Benchmark `nb train --task translation`'s training throughput (issue 29) against a plain PyTorch loop
with `torch.nn.Transformer` of the same size, on the same token batches, with the same optimizer.

One run, CPU, one thread each (OMP_NUM_THREADS / torch.set_num_threads), target tokens per second
(`--device cuda --preset base --dtype bfloat16`: the same on a GPU, as benchmarks/gpu.py runs it):

1. Data: the first --pairs sentences of the bundled sample corpus (Botchan) as the source and the same
   sentence with its words reversed as the target (a toy task: only the work per token matters), as
   aligned PREFIX.de / PREFIX.en files, with the bundled 2k-piece BPE model as the joint tokenizer.
2. nb: `nbcli.tasks.translation.train_translation` (what `nb train --task translation` calls) at the
   `tiny` preset (2+2 layers, d 64, FFN 256, 4 heads, batch 32 pairs, label smoothing 0.1, AdamW
   (0.9, 0.98), inverse-sqrt warm-up) unless --layers/--d-model/--ffn/--heads/--batch-size change it,
   with --dropout (default 0 for both loops: nn.Transformer also drops attention weights, nb does not,
   so with dropout the two would not do the same work); evaluated only at step 0 and at the end. Its time is that of
   updates 1 .. steps-1 (from the log record of update 0 to that of the last update, as `on_step`
   sees them): batch building, forward, backward, AdamW, the log; not the evaluations or checkpoints.
3. Plain PyTorch: an embedding shared by source, target and output (scaled by sqrt(d), + sinusoids),
   `torch.nn.Transformer(batch_first=True)` (post-LN; it adds a final LayerNorm to each stack, nb's
   post-LN model has none), a tied output layer with a bias, `F.cross_entropy(label_smoothing=0.1)`
   summed over the labelled tokens / their count, torch.optim.AdamW with nb's groups, betas, eps and
   schedule and --dropout. Its batches are nb's own (`translation_data.collate` over nb's sampler, so
   the same pairs in the same order), built before the clock starts: the baseline does no batching
   work, which favours it.
4. Tokens: the target tokens each update predicts (labels), the same count both ways. The two loops
   alternate --repeats times (nb first, then plain, ...) so a change in the machine's load hits both;
   the table reports each repeat and the best of each.

Target: nb / plain >= 1.0x (nb is at least as fast as the plain loop).

    python3 benchmarks/train_translation.py          # table on stdout, JSON in benchmarks/out/train_translation.json
"""

from __future__ import annotations

import argparse
import gzip
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT, load_average, log, machine, print_rows, write_json  # noqa: E402


def write_pairs(folder: Path, n: int) -> Path:
    """PREFIX.de / PREFIX.en: n Botchan sentences and their words reversed; returns PREFIX."""
    from nbcli.samples import SAMPLE_CORPUS

    with gzip.open(SAMPLE_CORPUS, "rt", encoding="utf-8") as handle:
        lines = [line.strip() for line in handle if 20 < len(line.strip()) < 200][:n]
    prefix = folder / "pairs"
    (folder / "pairs.de").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "pairs.en").write_text("\n".join(" ".join(reversed(s.split())) for s in lines) + "\n",
                                     encoding="utf-8")
    return prefix


def config(args: argparse.Namespace) -> Any:
    from nbcli.tasks.translation import build_translation_config

    overrides = {"d_model": args.d_model, "n_layer": args.layers, "n_head": args.heads, "batch_size": args.batch_size}
    return build_translation_config(args.preset, {"src_lang": "de", "tgt_lang": "en", "d_ff": args.ffn},
                                    steps=args.steps, eval_every=args.steps + 1, eval_batches=1, save_every=0,
                                    dropout=args.dropout, device=args.device, dtype=args.dtype,
                                    **{k: v for k, v in overrides.items() if v})


def run_nb(cfg: Any, prefix: Path, tokenizer: Path, out: Path) -> dict[str, Any]:
    """One nb run: seconds and target tokens of updates 1 .. steps-1 (module docstring)."""
    from nbcli.tasks.translation import train_translation

    stamps: dict[int, float] = {}

    def on_step(step: int, record: dict[str, Any]) -> None:
        if "loss" in record:
            stamps[step] = time.perf_counter()

    result = train_translation(cfg, [str(prefix)], tokenizer, tokenizer, out, on_step=on_step)
    return {"seconds": stamps[cfg.steps - 1] - stamps[0], "parameters": result.parameters}


class PlainModel:
    """torch.nn.Transformer with a shared, scaled embedding, sinusoids and a tied output layer + bias."""

    def __init__(self, vocab: int, d: int, heads: int, layers: int, ffn: int, dropout: float, max_len: int) -> None:
        import torch
        from torch import nn

        from nbcli.models.blocks import sinusoid_table

        torch.manual_seed(0)
        self.embed = nn.Embedding(vocab, d)
        nn.init.normal_(self.embed.weight, 0.0, d ** -0.5)
        self.bias = nn.Parameter(torch.zeros(vocab))
        self.core = nn.Transformer(d_model=d, nhead=heads, num_encoder_layers=layers, num_decoder_layers=layers,
                                   dim_feedforward=ffn, dropout=dropout, batch_first=True)
        self.drop = nn.Dropout(dropout)
        self.positions = sinusoid_table(max_len, d)
        self.scale = math.sqrt(d)
        self.modules = nn.ModuleList([self.embed, self.core, self.drop])

    def to(self, device: Any) -> "PlainModel":
        self.modules.to(device)
        self.bias.data = self.bias.data.to(device)
        self.positions = self.positions.to(device)
        return self

    def parameters(self) -> list[Any]:
        return [*self.modules.parameters(), self.bias]

    def named_parameters(self) -> list[tuple[str, Any]]:
        return [*self.modules.named_parameters(), ("bias", self.bias)]

    def embed_tokens(self, ids: Any) -> Any:
        return self.drop(self.embed(ids) * self.scale + self.positions[:ids.size(1)])

    def __call__(self, batch: Any) -> Any:
        import torch
        import torch.nn.functional as F

        T = batch.tgt_in.size(1)
        causal = torch.nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.bool, device=batch.tgt_in.device)
        src_pad = None if batch.src_mask is None else ~batch.src_mask
        tgt_pad = None if batch.tgt_mask is None else ~batch.tgt_mask
        h = self.core(self.embed_tokens(batch.src), self.embed_tokens(batch.tgt_in), tgt_mask=causal,
                      src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad)
        return F.linear(h, self.embed.weight, self.bias)


def run_plain(cfg: Any, batches: list[Any], vocab: int, d_ff: int) -> dict[str, Any]:
    """The plain loop over nb's batches: seconds of updates 1 .. steps-1, as for nb. On CUDA: nb's
    fused AdamW, and bf16 autocast when nb trains in bf16 (--dtype), so both do the same work."""
    import contextlib

    import torch
    import torch.nn.functional as F

    from nbcli.train.runtime import resolve_device
    from nbcli.train.step import learning_rate

    device = resolve_device(cfg.device)
    model = PlainModel(vocab, cfg.d_model, cfg.n_head, cfg.n_layer, d_ff, cfg.dropout, 1024).to(device)
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = [{"params": [p for n, p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
              {"params": [p for n, p in params if p.dim() < 2], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, cfg.adam_beta2), eps=cfg.adam_eps,
                                  fused=device.type == "cuda")
    bf16 = cfg.dtype == "bfloat16" or (cfg.dtype == "auto" and device.type == "cuda")
    amp = torch.autocast(device_type=device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    model.modules.train()
    start = 0.0
    for step, batch in enumerate(batches):
        if step == 1:
            synchronize(device)
            start = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, cfg)
        with amp:
            logits = model(batch)
        n = (batch.labels != -100).sum().clamp(min=1)
        loss = F.cross_entropy(logits.flatten(0, 1), batch.labels.flatten(), ignore_index=-100,
                               label_smoothing=cfg.label_smoothing, reduction="sum") / n
        loss.backward()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    synchronize(device)
    return {"seconds": time.perf_counter() - start, "parameters": sum(p.numel() for p in model.parameters())}


def synchronize(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def nb_batches(cfg: Any, prefix: Path, tokenizer: Path) -> tuple[list[Any], int, int]:
    """nb's training batches of updates 0 .. steps-1 (its data, sampler and collate), the target tokens
    of updates 1 .. steps-1, and the vocabulary size."""
    from nbcli.tasks.translation_data import collate, conventions, tokenize_pairs
    from nbcli.tokenizers import load_tokenizer
    from nbcli.train.data import TrainSampler
    from nbcli.train.runtime import resolve_device

    tok = load_tokenizer(tokenizer)
    data = tokenize_pairs([str(prefix)], None, tok, tok, "de", "en", cfg.seq_len, cfg.val_fraction)
    conv = conventions(tok, tok)
    sampler = TrainSampler(len(data.train_src), cfg.seed)
    device = resolve_device(cfg.device)
    batches = [collate(data.train_src, data.train_tgt, sampler.blocks(step * cfg.batch_size, cfg.batch_size),
                       conv, device) for step in range(cfg.steps)]
    tokens = sum(int((b.labels != -100).sum()) for b in batches[1:])
    return batches, tokens, tok.vocab_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--layers", type=int, default=None, help="default: the tiny preset's (2)")
    parser.add_argument("--d-model", type=int, default=None, help="default: the tiny preset's (64)")
    parser.add_argument("--ffn", type=int, default=256)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--heads", type=int, default=None, help="default: the tiny preset's (4)")
    parser.add_argument("--batch-size", type=int, default=None, help="pairs per update; default: tiny's (32)")
    parser.add_argument("--preset", default="tiny", help="nb's translation preset (tiny, iwslt, base)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda (benchmarks/gpu.py) or auto")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "auto"],
                        help="nb's --dtype; bfloat16 also runs the plain loop under bf16 autocast")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--out", type=Path, default=OUT / "train_translation.json")
    args = parser.parse_args()

    import torch

    from nbcli.samples import SAMPLE_TOKENIZER

    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = config(args)
    results: dict[str, Any] = {"machine": machine(torch=torch.__version__, threads=torch.get_num_threads()),
                               "load_before": load_average(), "settings": vars(args) | {"out": str(args.out)},
                               "config": cfg.to_dict(), "repeats": []}
    with tempfile.TemporaryDirectory() as tmp:
        prefix = write_pairs(Path(tmp), args.pairs)
        batches, tokens, vocab = nb_batches(cfg, prefix, SAMPLE_TOKENIZER)
        for repeat in range(args.repeats):
            log(f"repeat {repeat + 1}/{args.repeats}: nb train --task translation ...")
            nb = run_nb(cfg, prefix, SAMPLE_TOKENIZER, Path(tmp) / f"run-{repeat}")
            log(f"repeat {repeat + 1}/{args.repeats}: plain torch.nn.Transformer loop ...")
            plain = run_plain(cfg, batches, vocab, cfg.task_options["d_ff"])
            results["repeats"].append({"nb_s": nb["seconds"], "plain_s": plain["seconds"],
                                       "nb_tokens_per_s": tokens / nb["seconds"],
                                       "plain_tokens_per_s": tokens / plain["seconds"],
                                       "ratio": plain["seconds"] / nb["seconds"]})
            results["parameters"] = {"nb": nb["parameters"], "plain": plain["parameters"]}
    results["load_after"] = load_average()
    results["tokens_timed"] = tokens
    best_nb = max(r["nb_tokens_per_s"] for r in results["repeats"])
    best_plain = max(r["plain_tokens_per_s"] for r in results["repeats"])
    results["best"] = {"nb_tokens_per_s": best_nb, "plain_tokens_per_s": best_plain, "ratio": best_nb / best_plain}
    rows = [(f"repeat {i + 1}: nb / plain tokens/s", f"{r['nb_tokens_per_s']:,.0f} / {r['plain_tokens_per_s']:,.0f} "
             f"= {r['ratio']:.2f}x") for i, r in enumerate(results["repeats"])]
    rows.append(("best: nb / plain tokens/s", f"{best_nb:,.0f} / {best_plain:,.0f} = {best_nb / best_plain:.2f}x"))
    rows.append(("parameters: nb / plain", f"{results['parameters']['nb']:,} / {results['parameters']['plain']:,}"))
    rows.append(("load average before / after", f"{results['load_before'][0]:.2f} / {results['load_after'][0]:.2f}"))
    rows.append(("work", f"{cfg.n_layer}+{cfg.n_layer} layers, d {cfg.d_model}, FFN {cfg.task_options['d_ff']}, "
                 f"{cfg.n_head} heads, batch {cfg.batch_size} pairs, updates 1..{cfg.steps - 1} timed "
                 f"({tokens:,} target tokens), {torch.get_num_threads()} thread"))
    print_rows(rows)
    write_json(args.out, results)


if __name__ == "__main__":
    main()
