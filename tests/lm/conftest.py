"""Tiny causal LMs for eval/generate tests: an nb checkpoint (the session's SentencePiece model) and a
random transformers GPT-2 directory (the session's byte-level tokenizer.json). Random weights, with
a non-zero final LayerNorm bias so that lambda matters."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


def save_nb_model(path: Path, vocab_size: int, tokenizer_sha256: str | None, *, seed: int = 0,
                  output_bias: bool = True, seq_len: int = 64, ln_bias: bool = True,
                  tokenizer_fingerprint: str | None = None) -> Path:
    from nbcli.models.lm import ModelConfig, Transformer
    from nbcli.train.state import FORMAT, save_model

    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=vocab_size, seq_len=seq_len, n_layer=2, n_head=2, d_model=32,
                      output_bias=output_bias)
    model = Transformer(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.3)
        model.tok_emb.weight.normal_(0, 1.0)  # peaked predictions, as a trained model's
        if not ln_bias:
            model.ln_f.bias.zero_()
    metadata = {"nb.format": FORMAT, "nb.config": cfg.to_json()}
    if tokenizer_sha256:
        metadata["nb.tokenizer_sha256"] = tokenizer_sha256
    if tokenizer_fingerprint:  # as nb train records it (without: a checkpoint from an older nb)
        metadata["nb.tokenizer_fingerprint"] = tokenizer_fingerprint
    save_model(path, model, metadata)
    return path


@pytest.fixture(scope="session")
def nb_lm(tmp_path_factory: pytest.TempPathFactory, sp_model: Path) -> Path:
    from nbcli.tokenizers import load_tokenizer

    tok = load_tokenizer(sp_model)
    return save_nb_model(tmp_path_factory.mktemp("nb-lm") / "model.safetensors", tok.vocab_size, tok.sha256,
                         tokenizer_fingerprint=tok.fingerprint)


def save_hf_gpt2(directory: Path, vocab_size: int, seed: int = 0, eos_id: int = 0) -> Path:
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=vocab_size, n_positions=64, n_embd=32, n_layer=2, n_head=2,
                     bos_token_id=eos_id, eos_token_id=eos_id)
    model = GPT2LMHeadModel(cfg)
    with torch.no_grad():
        model.transformer.ln_f.bias.normal_(0, 0.5)
    model.save_pretrained(str(directory))
    return directory


@pytest.fixture(scope="session")
def hf_lm(tmp_path_factory: pytest.TempPathFactory, hf_bytelevel_json: Path) -> Path:
    from nbcli.tokenizers import load_tokenizer

    tok = load_tokenizer(hf_bytelevel_json)
    return save_hf_gpt2(tmp_path_factory.mktemp("hf-gpt2"), tok.vocab_size, eos_id=tok.eos_id or 0)
