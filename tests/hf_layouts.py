"""transformers' own tiny random model of every architecture in nb's table (no network, no weights
downloaded): the model class and config, and what a test knows independently of nb's table (the
role names, the final norm's module path, tied or not).

tests/cli/test_model_folders.py runs every patch-checkpoint operation on them; tests/lm/
test_runner_architectures.py runs eval and generate. `build(layout)` gives the random model, with
a non-zero final-norm bias and output bias (untrained ones are 0: no direction).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
import transformers

V = 96


@dataclass(frozen=True)
class Layout:
    """A transformers model class and config, and what the test knows independently of nb's table:
    the final norm's module path (None: RMS-style or absent) and the expected role names."""

    arch: str
    make: Callable[[], Any]
    model_class: str
    roles: dict[str, str | None]
    final_norm: str | None
    tied: bool


def _decoder_cfg(cls: str, **extra: Any) -> Callable[[], Any]:
    def make() -> Any:
        config_class = getattr(transformers, cls)
        return config_class(vocab_size=V, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=32, max_position_embeddings=32, **extra)
    return make


def _cfg(cls: str, **kwargs: Any) -> Callable[[], Any]:
    return lambda: getattr(transformers, cls)(vocab_size=V, **kwargs)


def _roles(emb: str, out: str | None, bias: str | None, lnw: str | None, lnb: str | None,
           pos: str | None = None) -> dict[str, str | None]:
    return {"input_embedding": emb, "output_weight": out or emb, "output_bias": bias, "final_ln_weight": lnw,
            "final_ln_bias": lnb, "position_embedding": pos}


ENC = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, max_position_embeddings=40)
_S2S = dict(d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
            encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32)
LAYOUTS = [
    Layout("gpt2", _cfg("GPT2Config", n_embd=16, n_layer=2, n_head=2, n_positions=32, bos_token_id=0, eos_token_id=0),
           "GPT2LMHeadModel", _roles("transformer.wte.weight", None, None, "transformer.ln_f.weight", "transformer.ln_f.bias",
                                     "transformer.wpe.weight"), "transformer.ln_f", True),
    Layout("gptj", _cfg("GPTJConfig", n_embd=16, n_layer=2, n_head=2, n_positions=32, rotary_dim=4, bos_token_id=0,
                        eos_token_id=0),
           "GPTJForCausalLM", _roles("transformer.wte.weight", "lm_head.weight", "lm_head.bias", "transformer.ln_f.weight",
                                     "transformer.ln_f.bias"), "transformer.ln_f", False),
    Layout("gpt_neox", _decoder_cfg("GPTNeoXConfig", bos_token_id=0, eos_token_id=0), "GPTNeoXForCausalLM",
           _roles("gpt_neox.embed_in.weight", "embed_out.weight", None, "gpt_neox.final_layer_norm.weight",
                  "gpt_neox.final_layer_norm.bias"), "gpt_neox.final_layer_norm", False),
    Layout("opt", _cfg("OPTConfig", hidden_size=16, num_hidden_layers=2, num_attention_heads=2, ffn_dim=32,
                       max_position_embeddings=32, word_embed_proj_dim=16, bos_token_id=0, eos_token_id=0, pad_token_id=1),
           "OPTForCausalLM", _roles("model.decoder.embed_tokens.weight", None, None, "model.decoder.final_layer_norm.weight",
                                    "model.decoder.final_layer_norm.bias", "model.decoder.embed_positions.weight"),
           "model.decoder.final_layer_norm", True),
    Layout("bloom", _cfg("BloomConfig", hidden_size=16, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0),
           "BloomForCausalLM", _roles("transformer.word_embeddings.weight", None, None, "transformer.ln_f.weight",
                                      "transformer.ln_f.bias"), "transformer.ln_f", True),
    Layout("falcon", _cfg("FalconConfig", hidden_size=16, num_hidden_layers=2, num_attention_heads=2, bos_token_id=0,
                          eos_token_id=0),
           "FalconForCausalLM", _roles("transformer.word_embeddings.weight", None, None, "transformer.ln_f.weight",
                                       "transformer.ln_f.bias"), "transformer.ln_f", True),
    Layout("phi", _decoder_cfg("PhiConfig", bos_token_id=0, eos_token_id=0), "PhiForCausalLM",
           _roles("model.embed_tokens.weight", "lm_head.weight", "lm_head.bias", "model.final_layernorm.weight",
                  "model.final_layernorm.bias"), "model.final_layernorm", False),
    *[Layout("llama", _decoder_cfg(cls, num_key_value_heads=1, bos_token_id=0, eos_token_id=0), model,
             _roles("model.embed_tokens.weight", "lm_head.weight", None, "model.norm.weight", None), None, False)
      for cls, model in (("LlamaConfig", "LlamaForCausalLM"), ("MistralConfig", "MistralForCausalLM"),
                         ("Qwen2Config", "Qwen2ForCausalLM"))],
    Layout("gemma", _decoder_cfg("GemmaConfig", num_key_value_heads=1, head_dim=8, bos_token_id=0, eos_token_id=0,
                                 pad_token_id=0),
           "GemmaForCausalLM", _roles("model.embed_tokens.weight", None, None, "model.norm.weight", None), None, True),
    Layout("t5", _cfg("T5Config", d_model=16, d_ff=32, d_kv=8, num_layers=2, num_heads=2, decoder_start_token_id=0),
           "T5ForConditionalGeneration", _roles("shared.weight", None, None, "decoder.final_layer_norm.weight", None),
           None, True),
    Layout("marian", _cfg("MarianConfig", pad_token_id=V - 1, decoder_start_token_id=V - 1, **_S2S), "MarianMTModel",
           _roles("model.shared.weight", None, "final_logits_bias", None, None), None, True),
    Layout("marian", lambda: transformers.MarianConfig(  # separate source (112) and target (V) vocabularies
        vocab_size=112, decoder_vocab_size=V, share_encoder_decoder_embeddings=False, pad_token_id=V - 1,
        decoder_start_token_id=V - 1, **_S2S), "MarianMTModel",
           _roles("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "final_logits_bias", None,
                  None), None, False),
    Layout("bart", _cfg("BartConfig", **_S2S), "BartForConditionalGeneration",
           _roles("model.shared.weight", None, "final_logits_bias", None, None, "model.encoder.embed_positions.weight"),
           None, True),
    Layout("bart", _cfg("MBartConfig", **_S2S), "MBartForConditionalGeneration",
           _roles("model.shared.weight", None, "final_logits_bias", "model.decoder.layer_norm.weight",
                  "model.decoder.layer_norm.bias", "model.encoder.embed_positions.weight"), "model.decoder.layer_norm", True),
    Layout("bert", _cfg("BertConfig", **ENC), "BertForMaskedLM",
           _roles("bert.embeddings.word_embeddings.weight", None, "cls.predictions.bias",
                  "cls.predictions.transform.LayerNorm.weight", "cls.predictions.transform.LayerNorm.bias",
                  "bert.embeddings.position_embeddings.weight"), "cls.predictions.transform.LayerNorm", True),
    Layout("roberta", _cfg("RobertaConfig", pad_token_id=1, **ENC), "RobertaForMaskedLM",
           _roles("roberta.embeddings.word_embeddings.weight", None, "lm_head.bias", "lm_head.layer_norm.weight",
                  "lm_head.layer_norm.bias", "roberta.embeddings.position_embeddings.weight"), "lm_head.layer_norm", True),
    Layout("distilbert", _cfg("DistilBertConfig", dim=16, n_layers=2, n_heads=2, hidden_dim=32, max_position_embeddings=32),
           "DistilBertForMaskedLM",
           _roles("distilbert.embeddings.word_embeddings.weight", None, "vocab_projector.bias", "vocab_layer_norm.weight",
                  "vocab_layer_norm.bias", "distilbert.embeddings.position_embeddings.weight"), "vocab_layer_norm", True),
]
IDS = [f"{layout.arch}-{layout.model_class.removesuffix('ForCausalLM')}" if layout.arch == "llama"
       else f"{layout.model_class.removesuffix('ForConditionalGeneration')}{'' if layout.tied else '-separate'}"
       if layout.arch in ("marian", "bart") else layout.arch for layout in LAYOUTS]


def build(layout: Layout, vocab_size: int | None = None, seed: int = 0) -> Any:
    """The layout's random model (eval mode), with `vocab_size` output rows (None: the layout's own,
    which keeps a separate-vocabulary Marian's larger source vocabulary)."""
    torch.manual_seed(seed)
    config = layout.make()
    if vocab_size is not None:
        config.vocab_size = vocab_size
        if getattr(config, "decoder_vocab_size", None) is not None:  # Marian's target vocabulary
            config.decoder_vocab_size = vocab_size
    model = getattr(transformers, layout.model_class)(config).eval()
    with torch.no_grad():  # untrained norms have bias 0 (no direction): give them one
        if layout.final_norm is not None:
            model.get_submodule(layout.final_norm).bias.normal_()
        bias = getattr(model.get_output_embeddings(), "bias", None)
        if bias is not None:
            bias.normal_()
        if hasattr(model, "final_logits_bias"):  # Marian, BART: b is a [1, V] buffer beside lm_head
            model.final_logits_bias.normal_()
    return model
