"""The baselines benchmarks/gpu.py measures nb against, in the process of the step that runs them:
a nanoGPT-equivalent training loop (`NanoGPT`, `nanogpt_run`: train_lm), a GPT-2-size transformers model
built from its config and its `generate` and plain loss loop (generate)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from gpu_checks import sync


def nanogpt_run(cfg: Any, stream: Any, vocab: int, steps: int, warm: int, compile_: bool, device: str) -> dict[str, Any]:
    """The nanoGPT-equivalent loop (module docstring) on the same token stream and shapes."""
    import statistics

    import numpy as np
    import torch

    from nbcli.train.runtime import model_flops_utilisation, peak_flops

    torch.manual_seed(0)
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.cuda.reset_peak_memory_stats()
    padded = (vocab + 63) // 64 * 64
    model = NanoGPT(padded, cfg.seq_len, cfg.n_layer, cfg.n_head, cfg.d_model).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, cfg.adam_beta2),
                            fused=dev.type == "cuda")
    net = torch.compile(model) if compile_ else model
    B, T = cfg.batch_size, cfg.seq_len
    n_blocks = (len(stream) - 1) // T
    order = np.random.default_rng(0).permutation(n_blocks)
    amp = torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda")
    times = []
    for step in range(steps):
        t0 = time.perf_counter()
        rows = [order[(step * B + i) % n_blocks] for i in range(B)]
        chunk = torch.from_numpy(np.stack([stream[r * T:r * T + T + 1] for r in rows]))
        if dev.type == "cuda":
            chunk = chunk.pin_memory().to(dev, non_blocking=True)
        x, y = chunk[:, :-1], chunk[:, 1:]
        with amp:
            loss = net(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()                                     # nanoGPT logs the loss every step (a sync)
        times.append(time.perf_counter() - t0)
    tokens_per_s = statistics.median(B * T / t for t in times[warm:])
    flops = flops_per_token_like_nb(cfg, vocab)
    peak = peak_flops(dev)
    return {"vocab_padded": padded, "parameters": sum(p.numel() for p in model.parameters()),
            "tokens_per_s": tokens_per_s, "step_s": [round(t, 4) for t in times],
            "mfu": model_flops_utilisation(flops, B * T, B * T / tokens_per_s, peak, 1) if peak else None,
            "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else None}


def flops_per_token_like_nb(cfg: Any, vocab: int) -> float:
    """The same FLOP count nb's meter uses, for the baseline's MFU (so the two MFUs compare)."""
    from nbcli.models.lm import ModelConfig, Transformer

    mcfg = ModelConfig(vocab_size=vocab, seq_len=cfg.seq_len, n_layer=cfg.n_layer, n_head=cfg.n_head,
                       d_model=cfg.d_model)
    with __import__("torch").device("meta"):
        return Transformer(mcfg).flops_per_token()


def _nanogpt_class() -> Any:
    import torch
    import torch.nn.functional as F
    from torch import nn

    class CausalSelfAttention(nn.Module):
        def __init__(self, d: int, heads: int) -> None:
            super().__init__()
            self.c_attn, self.c_proj, self.n_head = nn.Linear(d, 3 * d), nn.Linear(d, d), heads

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(C, dim=2)
            q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    class Block(nn.Module):
        def __init__(self, d: int, heads: int) -> None:
            super().__init__()
            self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(d), CausalSelfAttention(d, heads), nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class NanoGPT(nn.Module):
        """nanoGPT's GPT (model.py): learned positions, pre-LN blocks, tied lm_head, loss in forward."""

        def __init__(self, vocab: int, block: int, layers: int, heads: int, d: int) -> None:
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block, d)
            self.h = nn.ModuleList(Block(d, heads) for _ in range(layers))
            self.ln_f = nn.LayerNorm(d)
            self.lm_head = nn.Linear(d, vocab, bias=False)
            self.wte.weight = self.lm_head.weight
            for name, p in self.named_parameters():
                if p.dim() >= 2:
                    std = 0.02 / (2 * layers) ** 0.5 if name.endswith(("c_proj.weight", "mlp.2.weight")) else 0.02
                    nn.init.normal_(p, 0.0, std)
                else:
                    nn.init.zeros_(p) if name.endswith("bias") else nn.init.ones_(p)

        def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            pos = torch.arange(idx.size(1), device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))

    return NanoGPT


def NanoGPT(*args: Any) -> Any:  # noqa: N802 (a class made on first use: torch stays out of the parent)
    return _nanogpt_class()(*args)


def gpt2_folder(folder: Path, vocab: int, layers: int, d: int, heads: int, positions: int) -> Path:
    """A GPT2LMHeadModel of this shape with random weights (seed 0), saved as a model folder."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    eos = vocab - 1
    GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=positions, n_embd=d, n_layer=layers, n_head=heads,
                               bos_token_id=eos, eos_token_id=eos, pad_token_id=eos)).save_pretrained(str(folder))
    return folder


def hf_generate(hf_dir: Path, tokenizer: Path, lines: list[str], words: int, new: int, device: str) -> tuple[float, int]:
    """transformers' greedy generate of `new` tokens after each line's first `words` words (EOS first,
    as nb's prompts start), one batch; seconds (after a warm-up) and tokens made."""
    import torch
    from transformers import GPT2LMHeadModel

    from nbcli.tokenizers import load_tokenizer

    tok = load_tokenizer(tokenizer)
    model = GPT2LMHeadModel.from_pretrained(str(hf_dir)).to(device).eval()
    eos = tok.eos_id
    ids = torch.tensor([[eos] + tok.encode(" ".join(line.split()[:words])) for line in lines], device=device)
    with torch.inference_mode():
        model.generate(ids[:, :4], attention_mask=torch.ones_like(ids[:, :4]), do_sample=False, max_new_tokens=2,
                       min_new_tokens=2, pad_token_id=eos)
        sync()
        t0 = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new,
                             min_new_tokens=new, pad_token_id=eos)
        sync()
    return time.perf_counter() - t0, int(out.shape[0] * (out.shape[1] - ids.shape[1]))


def hf_eval(hf_dir: Path, tokenizer: Path, corpus: Path, positions: int, batch: int, device: str) -> tuple[float, int]:
    """A plain loss loop over the corpus's tokens in windows of `positions` (transformers forward,
    labels = inputs): seconds and tokens scored."""
    import torch
    from transformers import GPT2LMHeadModel

    from nbcli.tokenizers import load_tokenizer

    tok = load_tokenizer(tokenizer)
    model = GPT2LMHeadModel.from_pretrained(str(hf_dir)).to(device).eval()
    ids = [i for line in corpus.read_text().splitlines() for i in [tok.eos_id, *tok.encode(line)]]
    windows = [ids[s:s + positions] for s in range(0, len(ids) - positions + 1, positions)]
    sync()
    t0 = time.perf_counter()
    with torch.inference_mode():
        for s in range(0, len(windows), batch):
            x = torch.tensor(windows[s:s + batch], device=device)
            float(model(x, labels=x).loss)
    sync()
    return time.perf_counter() - t0, len(windows) * positions
