"""Tiny checkpoints in every layout the architecture table knows, built with safetensors itself."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

V, D, T, LAYERS = 40, 8, 6, 2


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=_g(seed)).to(dtype)


def gpt2_tensors(prefix: str = "", dtype: torch.dtype = torch.float32, vocab: int = V) -> dict[str, torch.Tensor]:
    t = {f"{prefix}wte.weight": randn(vocab, D, seed=1, dtype=dtype), f"{prefix}wpe.weight": randn(T, D, seed=2, dtype=dtype)}
    for i in range(LAYERS):
        t[f"{prefix}h.{i}.ln_1.weight"] = torch.ones(D, dtype=dtype)
        t[f"{prefix}h.{i}.ln_1.bias"] = randn(D, seed=10 + i, dtype=dtype)
        t[f"{prefix}h.{i}.attn.c_attn.weight"] = randn(D, 3 * D, seed=20 + i, dtype=dtype)
        t[f"{prefix}h.{i}.attn.c_attn.bias"] = randn(3 * D, seed=30 + i, dtype=dtype)
    t[f"{prefix}ln_f.weight"] = randn(D, seed=3, dtype=dtype).abs() + 0.5
    t[f"{prefix}ln_f.bias"] = randn(D, seed=4, dtype=dtype)
    return t


def bert_tensors(head: bool = True, prefix: str = "bert.", layers: int = LAYERS,
                 dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    t = {f"{prefix}embeddings.word_embeddings.weight": randn(V, D, seed=1, dtype=dtype),
         f"{prefix}embeddings.position_embeddings.weight": randn(T, D, seed=2, dtype=dtype),
         f"{prefix}embeddings.token_type_embeddings.weight": randn(2, D, seed=3, dtype=dtype),
         f"{prefix}embeddings.LayerNorm.weight": torch.ones(D, dtype=dtype),
         f"{prefix}embeddings.LayerNorm.bias": torch.zeros(D, dtype=dtype)}
    for i in range(layers):
        t[f"{prefix}encoder.layer.{i}.attention.self.query.weight"] = randn(D, D, seed=40 + i, dtype=dtype)
        t[f"{prefix}encoder.layer.{i}.output.LayerNorm.weight"] = torch.ones(D, dtype=dtype)
        t[f"{prefix}encoder.layer.{i}.output.LayerNorm.bias"] = randn(D, seed=60 + i, dtype=dtype)
    if head:
        t["cls.predictions.bias"] = randn(V, seed=5, dtype=dtype)
        t["cls.predictions.transform.dense.weight"] = randn(D, D, seed=6, dtype=dtype)
        t["cls.predictions.transform.LayerNorm.weight"] = torch.ones(D, dtype=dtype)
        t["cls.predictions.transform.LayerNorm.bias"] = randn(D, seed=7, dtype=dtype)
    return t


def roberta_tensors(dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    t = bert_tensors(head=False, prefix="roberta.", dtype=dtype)
    t["lm_head.dense.weight"] = randn(D, D, seed=8, dtype=dtype)
    t["lm_head.layer_norm.weight"] = torch.ones(D, dtype=dtype)
    t["lm_head.layer_norm.bias"] = randn(D, seed=9, dtype=dtype)
    t["lm_head.bias"] = randn(V, seed=11, dtype=dtype)
    return t


def llama_tensors(tied: bool = False, dtype: torch.dtype = torch.bfloat16) -> dict[str, torch.Tensor]:
    t = {"model.embed_tokens.weight": randn(V, D, seed=1, dtype=dtype),
         "model.layers.0.self_attn.q_proj.weight": randn(D, D, seed=2, dtype=dtype),
         "model.layers.0.input_layernorm.weight": torch.ones(D, dtype=dtype),
         "model.norm.weight": torch.ones(D, dtype=dtype)}
    if not tied:
        t["lm_head.weight"] = randn(V, D, seed=3, dtype=dtype)
    return t


def seq2seq_tensors(kind: str = "marian", separate: bool = False) -> dict[str, torch.Tensor]:
    """A Marian or BART save as older transformers wrote it (model.shared beside encoder/decoder
    embed_tokens copies, position tables, final_logits_bias [1, V]); `separate`: Marian with source
    and target vocabularies of their own (no model.shared)."""
    shared = randn(V, D, seed=1)
    t = {"final_logits_bias": randn(1, V, seed=2), "model.encoder.embed_positions.weight": randn(T, D, seed=3),
         "model.decoder.embed_positions.weight": randn(T, D, seed=4)}
    if separate:
        t |= {"model.encoder.embed_tokens.weight": randn(V + 8, D, seed=5),
              "model.decoder.embed_tokens.weight": randn(V, D, seed=6)}
    else:
        t |= {"model.shared.weight": shared, "model.encoder.embed_tokens.weight": shared.clone(),
              "model.decoder.embed_tokens.weight": shared.clone()}
    for i in range(LAYERS):
        for side in ("encoder", "decoder"):
            t[f"model.{side}.layers.{i}.self_attn.q_proj.weight"] = randn(D, D, seed=40 + i)
            t[f"model.{side}.layers.{i}.final_layer_norm.weight"] = torch.ones(D)
            t[f"model.{side}.layers.{i}.final_layer_norm.bias"] = randn(D, seed=50 + i)
        t[f"model.decoder.layers.{i}.encoder_attn.k_proj.weight"] = randn(D, D, seed=60 + i)
    if kind in ("bart", "mbart"):
        for side in ("encoder", "decoder"):
            t[f"model.{side}.layernorm_embedding.weight"] = torch.ones(D)
            t[f"model.{side}.layernorm_embedding.bias"] = torch.zeros(D)
    if kind == "mbart":
        t["model.decoder.layer_norm.weight"] = torch.ones(D)
        t["model.decoder.layer_norm.bias"] = randn(D, seed=7)
    return t


def nb_tensors(objective: str = "clm", tied: bool = True, bias: bool = True,
               dtype: torch.dtype = torch.float32) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    t = {"tok_emb.weight": randn(V, D, seed=1, dtype=dtype), "pos_emb.weight": randn(T, D, seed=2, dtype=dtype),
         "blocks.0.ln1.weight": torch.ones(D, dtype=dtype), "blocks.0.ln1.bias": torch.zeros(D, dtype=dtype),
         "ln_f.weight": torch.ones(D, dtype=dtype), "ln_f.bias": randn(D, seed=3, dtype=dtype)}
    if objective == "mlm":
        t["mlm.dense.weight"] = randn(D, D, seed=4, dtype=dtype)
        t["mlm.ln.weight"] = torch.ones(D, dtype=dtype)
        t["mlm.ln.bias"] = randn(D, seed=5, dtype=dtype)
    if not tied:
        t["head.weight"] = randn(V, D, seed=6, dtype=dtype)
    if bias:
        t["head.bias"] = torch.zeros(V, dtype=dtype)
    meta = {"nb.format": "nb-model/1", "nb.version": "test",
            "nb.config": json.dumps({"tie_embeddings": tied, "objective": objective, "vocab_size": V})}
    return t, meta


def save(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> Path:
    save_file(tensors, str(path), metadata=metadata)
    return path


def save_sharded(directory: Path, tensors: dict[str, torch.Tensor], shards: int = 3,
                 metadata: dict[str, str] | None = None) -> Path:
    """A Hugging Face style sharded checkpoint: model-0000i-of-0000n.safetensors + index.json."""
    directory.mkdir(parents=True, exist_ok=True)
    names = list(tensors)
    weight_map: dict[str, str] = {}
    total = 0
    for i in range(shards):
        part = {n: tensors[n] for n in names[i::shards]}
        shard = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file(part, str(directory / shard), metadata=metadata or {"format": "pt"})
        for n, x in part.items():
            weight_map[n] = shard
            total += x.numel() * x.element_size()
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    return directory


def raw_safetensors(path: Path, header: object, data: bytes = b"", length: int | None = None) -> Path:
    """Write a hand-made (possibly broken) safetensors file."""
    raw = json.dumps(header).encode() if not isinstance(header, bytes) else header
    n = len(raw) if length is None else length
    path.write_bytes(n.to_bytes(8, "little") + raw + data)
    return path
