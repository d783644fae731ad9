#!/usr/bin/env python3
"""Benchmark the decoding loop of `nb generate` alone (issue 34): cheap, untrained, CPU or CUDA.

generate.py trains a model on real text first; this script times only the loop, on random weights
(the time per token does not depend on them; EOS is ignored so every row makes --new-tokens):

1. nb's reference Transformer (--layers x --d-model, V = --vocab, --seq-len positions) saved as an nb
   checkpoint, and a GPT2LMHeadModel of the same shape saved as a transformers directory.
2. For each: `nbcli.lm.generation.generate` (KV cache, top-p 0.9, one batch of --batch prompts of
   equal length, --new-tokens tokens per row), best of --repeats; for the GPT-2 also transformers'
   `generate(do_sample=True, top_p=0.9)` on the same ids, same number of tokens.

    python3 benchmarks/generate_loop.py          # table on stdout, JSON in benchmarks/out/generate_loop.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT, best_of, load_average, log, machine, print_rows, write_json  # noqa: E402


class Ids:
    """A tokenizer stand-in: every prompt is the same --prompt-len random ids (no text work timed)."""

    eos_id = 0
    bos_id = None

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [list(self.ids) for _ in texts]

    def decode(self, ids: list[int]) -> str:
        return ""


def build(folder: Path, args: argparse.Namespace) -> tuple[Path, Path]:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    from nbcli.models.lm import ModelConfig, Transformer
    from nbcli.train.state import FORMAT, save_model

    hf_logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=args.vocab, seq_len=args.seq_len, n_layer=args.layers, n_head=args.heads,
                      d_model=args.d_model)
    nb_path = folder / "nb.safetensors"
    save_model(nb_path, Transformer(cfg), {"nb.format": FORMAT, "nb.config": cfg.to_json()})
    hf_dir = folder / "gpt2"
    GPT2LMHeadModel(GPT2Config(vocab_size=args.vocab, n_positions=args.seq_len, n_embd=args.d_model,
                               n_layer=args.layers, n_head=args.heads, bos_token_id=0, eos_token_id=0,
                               pad_token_id=0)).save_pretrained(str(hf_dir))
    return nb_path, hf_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--seq-len", type=int, default=320)
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, default=OUT / "generate_loop.json")
    args = parser.parse_args()

    import torch

    from nbcli.decoding.sampling import parse_decoding
    from nbcli.lm.generation import GenerationOptions, Prompt, generate
    from nbcli.lm.runner import load_runner

    torch.set_num_threads(args.threads)
    ids = torch.randint(1, args.vocab, (args.prompt_len,), generator=torch.Generator().manual_seed(0)).tolist()
    tok = Ids(ids)
    prompts = [Prompt(i, f"p{i}", "") for i in range(args.batch)]
    opts = GenerationOptions(parse_decoding("top-p:0.9"), args.new_tokens, samples=1, seed=0, batch_size=args.batch,
                             stop_at_eos=False)
    tokens = args.batch * args.new_tokens
    report: dict[str, Any] = {"machine": machine(torch=torch.__version__, torch_threads=torch.get_num_threads()),
                              "args": {k: str(v) for k, v in vars(args).items()}, "load_before": load_average()}
    with tempfile.TemporaryDirectory() as tmp:
        nb_path, hf_dir = build(Path(tmp), args)
        rows = []
        for label, path in (("nb Transformer", nb_path), ("GPT-2 via nb runner", hf_dir)):
            runner = load_runner(path, device=args.device)
            generate(runner, tok, prompts[:1], GenerationOptions(**{**vars(opts), "max_new_tokens": 4}))  # warm-up
            seconds = best_of(args.repeats, lambda runner=runner: generate(runner, tok, prompts, opts))
            report[label] = {"seconds": seconds, "tokens_per_s": tokens / seconds}
            rows.append((label, f"{tokens / seconds:,.0f} tokens/s ({seconds:.2f} s)"))
            log(f"{label}: {tokens / seconds:,.0f} tokens/s")
        model = runner.module
        batch = torch.tensor([[0, *ids]] * args.batch, device=runner.device)

        def hf_generate() -> None:
            with torch.inference_mode():
                model.generate(batch, attention_mask=torch.ones_like(batch), do_sample=True, top_p=0.9, top_k=0,
                               max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, pad_token_id=0)
        seconds = best_of(args.repeats, hf_generate)
        report["transformers generate"] = {"seconds": seconds, "tokens_per_s": tokens / seconds}
        rows.append(("transformers generate", f"{tokens / seconds:,.0f} tokens/s ({seconds:.2f} s)"))
        ratio = report["GPT-2 via nb runner"]["seconds"] / seconds
        report["ratio_nb_over_transformers_time"] = ratio
        rows.append(("nb time / transformers time", f"{ratio:.2f} (same GPT-2, same tokens)"))
    report["load_after"] = load_average()
    rows.append(("load (1 min) before / after", f"{report['load_before'][0]:.2f} / {report['load_after'][0]:.2f}"))
    print(f"generate loop: {args.layers} x {args.d_model}, V {args.vocab}, batch {args.batch}, prompt "
          f"{args.prompt_len + 1}, {args.new_tokens} new tokens, {args.device}")
    print_rows(rows)
    write_json(args.out, report)
    print(f"JSON: {args.out}")


if __name__ == "__main__":
    main()
