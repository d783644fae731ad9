"""Tiny transformers models for the nbcli.hf tests, and nb's own model copied into transformers' GPT-2.

nb's clm model is GPT-2's block layout (pre-LN, learned positions, fused qkv, exact GELU), so a
GPT2LMHeadModel with activation "gelu", no dropout and the same weights (Conv1D stores W^T) computes
the same function; nb's `head.bias` goes in as the output bias GPT-2 lacks (`install_output_bias`).
"""

from __future__ import annotations

from typing import Any

import torch

from nbcli.models.lm import ModelConfig, Transformer


def nb_model(vocab_size: int = 61, *, objective: str = "clm", seed: int = 0, n_head: int = 4) -> Transformer:
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=vocab_size, seq_len=24, n_layer=2, n_head=n_head, d_model=4 * n_head,  # type: ignore[arg-type]
                      objective=objective,
                      mask_id=vocab_size - 1 if objective == "mlm" else None)
    model = Transformer(cfg)
    with torch.no_grad():  # sharper maps and a bias worth seeing than at init
        for name, p in model.named_parameters():
            p.add_(torch.randn_like(p) * (0.3 if name.endswith("bias") else 0.2))
    return model.eval()


def gpt2_from_nb(model: Transformer) -> Any:
    """A transformers GPT2LMHeadModel (eager attention) computing what nb's clm `model` computes."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from nbcli.hf.output_bias import install_output_bias

    cfg = model.cfg
    config = GPT2Config(vocab_size=cfg.vocab_size, n_positions=cfg.seq_len, n_embd=cfg.d_model, n_layer=cfg.n_layer,
                        n_head=cfg.n_head, n_inner=cfg.ff_width, activation_function="gelu",
                        layer_norm_epsilon=cfg.layer_norm_eps, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        bos_token_id=0, eos_token_id=0, tie_word_embeddings=cfg.tie_embeddings)
    config._attn_implementation = "eager"
    gpt2 = GPT2LMHeadModel(config).eval()
    nb = model.state_dict()
    own = {"transformer.wte.weight": nb["tok_emb.weight"], "transformer.wpe.weight": nb["pos_emb.weight"],
           "transformer.ln_f.weight": nb["ln_f.weight"], "transformer.ln_f.bias": nb["ln_f.bias"]}
    for i in range(cfg.n_layer):
        ours, theirs = f"blocks.{i}.", f"transformer.h.{i}."
        for a, b in (("ln1", "ln_1"), ("ln2", "ln_2")):
            own[f"{theirs}{b}.weight"], own[f"{theirs}{b}.bias"] = nb[f"{ours}{a}.weight"], nb[f"{ours}{a}.bias"]
        for a, b in (("attn.qkv", "attn.c_attn"), ("attn.proj", "attn.c_proj"), ("mlp.fc", "mlp.c_fc"),
                     ("mlp.proj", "mlp.c_proj")):
            own[f"{theirs}{b}.weight"] = nb[f"{ours}{a}.weight"].T.contiguous()  # Conv1D keeps W^T
            own[f"{theirs}{b}.bias"] = nb[f"{ours}{a}.bias"]
    with torch.no_grad():
        live = gpt2.state_dict()
        for name, value in own.items():
            live[name].copy_(value)
    if model.head_bias is not None:
        install_output_bias(gpt2, model.head_bias.detach())
    return gpt2
