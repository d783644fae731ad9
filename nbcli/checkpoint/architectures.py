"""THE architecture table: one entry per model family, naming the tensor that plays each role.

This is the one file to edit to teach nb a model. To add one:
  1. Add an entry to ARCHITECTURES: `_decoder(...)` for a decoder-only language model (input
     embedding, output layer, final norm), `Architecture(...)` for anything else. Give, per role,
     the candidate tensor names (first present wins), the `signature` regexes that identify its
     tensor names, the config.json `model_type`s that name it, the roles it has not (`absent`, and
     why: said instead of suggesting a wrong tensor), its untie rules (`untied_output`,
     `untie_bias_names`, `untie_input_names`, `scaled_tied_head`), whether it is a masked LM
     (`masked_lm`), and the name transformers gives a tensor once loaded where it renames it
     (`loaded_output`).
  2. Put its name in DETECTION_ORDER before any entry whose signature would also match its names.
  3. Add a tiny checkpoint of its layout to tests/checkpoint/builders.py and a case to
     tests/checkpoint/test_roles.py; where transformers has the model, add its tiny random model to
     LAYOUTS in tests/hf_layouts.py (tests/cli/test_model_folders.py: inspect, every operation,
     from_pretrained, logits; tests/lm/test_runner_architectures.py: eval and generate).
Resolving roles for a checkpoint from this table is `nbcli.checkpoint.roles`.

Entries: gpt2 (also GPT-Neo), gptj, gpt_neox (Pythia), opt, bloom, falcon, phi, llama (Mistral,
Mixtral, Qwen2/3), gemma, t5, bert, roberta, distilbert, nb, and custom (every role from --map);
encoder-decoders for translation: bart (also mBART) and marian.

Roles: input_embedding [V, d]; output_weight [V, d] (may be tied to input_embedding, then both
names are the same tensor and `tied` is True); output_bias [V] (Marian's and BART's
final_logits_bias is a [1, V] row: read as [V], written back in its stored shape);
final_ln_weight / final_ln_bias [d]
(the norm right before the output projection: GPT-2's ln_f, BERT's MLM-head transform LayerNorm,
RoBERTa's lm_head.layer_norm, DistilBERT's vocab_layer_norm, Pythia's final_layer_norm, OPT's
decoder.final_layer_norm, nb's ln_f or mlm.ln; Llama's, Gemma's and T5's are RMS-style: a weight, no
bias); position_embedding [T, d] (absent for rotary, ALiBi and relative-position models).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

ROLES = ("input_embedding", "output_weight", "output_bias", "final_ln_weight", "final_ln_bias",
         "position_embedding")



@dataclass(frozen=True)
class Architecture:
    """Candidate tensor names per role (first present wins) and the names that identify it.

    `signature`: regular expressions; a checkpoint with a tensor name matching one is this
    architecture (tried in DETECTION_ORDER). `model_types`: config.json `model_type` values that name
    it (a model folder's config wins over names). `tie_to_input`: when no output weight is found,
    the output projection is the input embedding. `head_prefixes`: for encoder families, the
    prediction head exists only when some tensor name starts with one of these. `absent`: roles the
    architecture does not have, and why (said instead of suggesting a wrong tensor).
    """

    name: str
    description: str
    signature: tuple[str, ...]
    candidates: dict[str, tuple[str, ...]]
    model_types: tuple[str, ...] = ()
    tie_to_input: bool = True
    head_prefixes: tuple[str, ...] = ()
    absent: dict[str, str] = field(default_factory=dict)
    untied_output: str = ""
    """Name for a separate output weight written by `--untie`."""
    untie_bias_names: tuple[str, ...] = ()
    """Further names the loader reads for the output bias once the output layer is untied
    (BERT's cls.predictions.decoder.bias): `--untie` writes them too."""
    untie_input_names: tuple[str, ...] = ()
    """Names the loader ties to the input embedding only while tie_word_embeddings is true
    (Marian's and BART's encoder/decoder embed_tokens beside model.shared): `--untie` writes them as
    copies of the input embedding, so the untied model still finds them."""
    input_aliases: tuple[str, ...] = ()
    """Other names of the input embedding that some saves hold (T5's encoder/decoder.embed_tokens)."""
    bias_row: bool = False
    """The output bias is kept as a [1, V] row (Marian's and BART's final_logits_bias): one that
    `--set-output-bias` creates under a name of the table gets that shape."""
    scaled_tied_head: bool = False
    """With a tied head the decoder output is scaled by d_model^-0.5 before the output layer (T5):
    `--untie` carries the factor into the copy and switches the scaling off (see untie_rule)."""
    masked_lm: bool = False
    """A bidirectional masked LM (BERT, RoBERTa, DistilBERT): `nb eval` and `nb generate` refuse it
    (a causal reading would see the tokens it predicts) unless its config.json says `is_decoder`."""
    attention_qk: tuple[str, str] = ()
    """Regexes over a transformers model's module names: each layer's query and key projections, in
    layer order (the same module twice for a fused q, k, v projection: GPT-2's c_attn). Attention
    guidance hooks them to recompute the guided heads' maps without eager attention
    (`nbcli.hf.guidance.capture_qk`); empty: that model gives its maps only with output_attentions."""



def _prefixed(prefixes: Sequence[str], suffix: str) -> tuple[str, ...]:
    return tuple(f"{p}{suffix}" for p in prefixes)


_GPT2 = ("", "transformer.")
_BERT = ("bert.", "")
_ROBERTA = ("roberta.", "")
_DISTIL = ("distilbert.", "")
_BLOOM = ("transformer.", "")
_RMS = "its final norm is an RMSNorm (a scale, no bias), so it has no b_LN"
_ROTARY = "rotary position embeddings: no position-embedding tensor"
_SELF_ATTENTION_QK = (r"(^|\.)layer\.\d+\.attention\.self\.query$", r"(^|\.)layer\.\d+\.attention\.self\.key$")
_NO_LM_BIAS = ("its output layer has no bias (--set-output-bias --bias-name NAME creates one; transformers' "
               "from_pretrained drops it, nbcli.load_model installs it)")


def _decoder(name: str, description: str, signature: tuple[str, ...], model_types: tuple[str, ...], *,
             embedding: tuple[str, ...], output: str, ln: tuple[str, ...], bias: tuple[str, ...] = (),
             position: tuple[str, ...] = (), absent: dict[str, str] | None = None,
             loaded_output: tuple[str, ...] = (), attention_qk: tuple[str, str] = ()) -> Architecture:
    """A decoder-only language model: one input embedding, an output layer, a final norm.
    `loaded_output`: the output layer's name in a loaded model's state dict where transformers
    renames it on load (its conversion mapping), so an in-memory model resolves like its files."""
    return Architecture(
        name, description, signature=signature, model_types=model_types,
        candidates={"input_embedding": embedding, "output_weight": (output, *loaded_output),
                    "output_bias": bias or (output.rsplit(".", 1)[0] + ".bias",),
                    "final_ln_weight": tuple(f"{p}.weight" for p in ln),
                    "final_ln_bias": tuple(f"{p}.bias" for p in ln), "position_embedding": position},
        absent={**({} if bias else {"output_bias": _NO_LM_BIAS}),
                **({} if position else {"position_embedding": _ROTARY}), **(absent or {})},
        untied_output=output, attention_qk=attention_qk)


_POST_LN = ("post-LN: every layer ends in its own LayerNorm and no norm follows the decoder stack (mBART's "
            "model.decoder.layer_norm is absent here); the norm right before the output layer is the last decoder "
            "layer's final_layer_norm: name it with --map final_ln_bias=model.decoder.layers.N.final_layer_norm.bias")


_EMBED_TOKENS = ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")


def _seq2seq(name: str, description: str, signature: tuple[str, ...], model_types: tuple[str, ...], *,
             position: tuple[str, ...], absent: dict[str, str]) -> Architecture:
    """A Marian/BART-layout encoder-decoder (transformers' MarianMTModel, BartForConditionalGeneration,
    MBartForConditionalGeneration; nb's translation exports). The input embedding is model.shared
    (encoder and decoder embed_tokens are aliases of it in saves that hold them) or, with separate
    vocabularies (Marian's share_encoder_decoder_embeddings=false), the encoder's embed_tokens; the
    output weight is lm_head when saved untied, else the tensor transformers ties it to (model.shared,
    or the decoder's embed_tokens); the output bias b is `final_logits_bias`, stored as a [1, V] row."""
    return Architecture(
        name, description, signature=signature, model_types=model_types,
        candidates={"input_embedding": ("model.shared.weight", "model.encoder.embed_tokens.weight"),
                    "output_weight": ("lm_head.weight", "model.shared.weight", "model.decoder.embed_tokens.weight"),
                    "output_bias": ("final_logits_bias",),
                    "final_ln_weight": ("model.decoder.layer_norm.weight",),
                    "final_ln_bias": ("model.decoder.layer_norm.bias",), "position_embedding": position},
        absent={"final_ln_weight": _POST_LN, "final_ln_bias": _POST_LN, **absent},
        untied_output="lm_head.weight", bias_row=True, input_aliases=_EMBED_TOKENS, untie_input_names=_EMBED_TOKENS)


ARCHITECTURES: dict[str, Architecture] = {
    "gpt2": _decoder(
        "gpt2", "GPT-2 (wte/wpe/ln_f; hub layout or transformer.-prefixed), also GPT-Neo",
        (r"^(transformer\.)?wte\.weight$",), ("gpt2", "gpt_neo"),
        embedding=_prefixed(_GPT2, "wte.weight"), output="lm_head.weight", ln=_prefixed(_GPT2, "ln_f"),
        position=_prefixed(_GPT2, "wpe.weight"), attention_qk=(r"(^|\.)h\.\d+\.attn\.c_attn$",) * 2),
    "gptj": _decoder(
        "gptj", "GPT-J (transformer.wte, transformer.ln_f, lm_head with bias; rotary)",
        (r"^transformer\.h\.\d+\.mlp\.fc_in\.weight$",), ("gptj",),
        embedding=("transformer.wte.weight",), output="lm_head.weight", ln=("transformer.ln_f",),
        bias=("lm_head.bias",)),
    "gpt_neox": _decoder(
        "gpt_neox", "GPT-NeoX / Pythia (gpt_neox.embed_in, embed_out, gpt_neox.final_layer_norm)",
        (r"^gpt_neox\.embed_in\.weight$", r"^embed_out\.weight$"), ("gpt_neox",),
        embedding=("gpt_neox.embed_in.weight", "embed_in.weight"), output="embed_out.weight",
        ln=("gpt_neox.final_layer_norm", "final_layer_norm"),
        loaded_output=("lm_head.weight",)),  # transformers 5 loads embed_out as lm_head (and saves embed_out)
    "opt": _decoder(
        "opt", "OPT (model.decoder.embed_tokens, model.decoder.final_layer_norm, tied lm_head)",
        (r"^(model\.)?decoder\.embed_tokens\.weight$",), ("opt",),
        embedding=("model.decoder.embed_tokens.weight", "decoder.embed_tokens.weight"), output="lm_head.weight",
        ln=("model.decoder.final_layer_norm", "decoder.final_layer_norm"),
        position=("model.decoder.embed_positions.weight", "decoder.embed_positions.weight")),
    "bloom": _decoder(
        "bloom", "BLOOM (transformer.word_embeddings + word_embeddings_layernorm, ln_f; ALiBi)",
        (r"^(transformer\.)?word_embeddings_layernorm\.weight$",), ("bloom",),
        embedding=_prefixed(_BLOOM, "word_embeddings.weight"), output="lm_head.weight",
        ln=_prefixed(_BLOOM, "ln_f"), absent={"position_embedding": "ALiBi: no position-embedding tensor"}),
    "falcon": _decoder(
        "falcon", "Falcon (transformer.word_embeddings, transformer.ln_f; rotary or ALiBi)",
        (r"^transformer\.word_embeddings\.weight$",), ("falcon",),
        embedding=("transformer.word_embeddings.weight",), output="lm_head.weight", ln=("transformer.ln_f",),
        absent={"position_embedding": "rotary or ALiBi positions: no position-embedding tensor"}),
    "phi": _decoder(
        "phi", "Phi-1/1.5/2 (model.embed_tokens, model.final_layernorm, lm_head with bias)",
        (r"^model\.final_layernorm\.weight$",), ("phi",),
        embedding=("model.embed_tokens.weight",), output="lm_head.weight", ln=("model.final_layernorm",),
        bias=("lm_head.bias",)),
    "llama": _decoder(
        "llama", "Llama family: Llama, Mistral, Mixtral, Qwen2/3 (model.embed_tokens, lm_head, RMSNorm model.norm)",
        (r"^model\.embed_tokens\.weight$",), ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3"),
        embedding=("model.embed_tokens.weight", "embed_tokens.weight"), output="lm_head.weight",
        ln=("model.norm", "norm"), absent={"final_ln_bias": _RMS}),
    "gemma": _decoder(
        "gemma", "Gemma (Llama's tensor names; told apart by config.json model_type; RMSNorm, tied)",
        (), ("gemma", "gemma2", "gemma3_text"),
        embedding=("model.embed_tokens.weight",), output="lm_head.weight", ln=("model.norm",),
        absent={"final_ln_bias": _RMS}),
    "t5": Architecture(
        "t5", "T5 / mT5 encoder-decoder (shared, lm_head, RMS-style decoder.final_layer_norm)",
        signature=(r"^shared\.weight$", r"^(encoder|decoder)\.block\.\d+\.layer\.\d+\."),
        model_types=("t5", "mt5", "umt5"),
        candidates={"input_embedding": ("shared.weight",), "output_weight": ("lm_head.weight",),
                    "output_bias": ("lm_head.bias",), "final_ln_weight": ("decoder.final_layer_norm.weight",),
                    "final_ln_bias": (), "position_embedding": ()},
        head_prefixes=("decoder.",),
        absent={"final_ln_bias": "T5's layer norms are RMS-style (a scale, no bias), so it has no b_LN",
                "output_bias": _NO_LM_BIAS,
                "position_embedding": "relative position buckets: no position-embedding tensor"},
        untied_output="lm_head.weight", input_aliases=("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"),
        scaled_tied_head=True),
    "bart": _seq2seq(
        "bart", "BART / mBART encoder-decoder (model.shared, final_logits_bias [1, V]; layernorm_embedding; "
        "mBART's model.decoder.layer_norm)",
        (r"^model\.(encoder|decoder)\.layernorm_embedding\.weight$",), ("bart", "mbart"),
        position=("model.encoder.embed_positions.weight",),
        absent={"position_embedding": "no stored position table in this save"}),
    "marian": _seq2seq(
        "marian", "MarianMT encoder-decoder (model.shared or separate encoder/decoder embed_tokens, "
        "final_logits_bias [1, V]; post-LN, sinusoidal positions)",
        (r"^final_logits_bias$", r"^model\.decoder\.layers\.\d+\.encoder_attn\."), ("marian",),
        position=("model.encoder.embed_positions.weight",),
        absent={"position_embedding": "sinusoidal positions, computed rather than stored (transformers does not "
                                      "save them)"}),
    "bert": Architecture(
        "bert", "BERT with its MLM head (cls.predictions.*), or an encoder without one",
        signature=(r"^bert\.embeddings\.word_embeddings\.weight$", r"^cls\.predictions\.",
                   r"^(bert\.)?encoder\.layer\.\d+\.", r"^embeddings\.word_embeddings\.weight$"),
        model_types=("bert",),
        candidates={
            "input_embedding": _prefixed(_BERT, "embeddings.word_embeddings.weight"),
            "output_weight": ("cls.predictions.decoder.weight",),
            "output_bias": ("cls.predictions.bias", "cls.predictions.decoder.bias"),
            "final_ln_weight": ("cls.predictions.transform.LayerNorm.weight",),
            "final_ln_bias": ("cls.predictions.transform.LayerNorm.bias",),
            "position_embedding": _prefixed(_BERT, "embeddings.position_embeddings.weight"),
        },
        head_prefixes=("cls.predictions.",), untied_output="cls.predictions.decoder.weight",
        untie_bias_names=("cls.predictions.decoder.bias",), masked_lm=True, attention_qk=_SELF_ATTENTION_QK),
    "roberta": Architecture(
        "roberta", "RoBERTa / XLM-R with its LM head (lm_head.*), or an encoder without one",
        signature=(r"^roberta\.", r"^lm_head\.layer_norm\.", r"^lm_head\.dense\."),
        model_types=("roberta", "xlm-roberta", "camembert"),
        candidates={
            "input_embedding": _prefixed(_ROBERTA, "embeddings.word_embeddings.weight"),
            "output_weight": ("lm_head.decoder.weight",),
            "output_bias": ("lm_head.bias", "lm_head.decoder.bias"),
            "final_ln_weight": ("lm_head.layer_norm.weight",),
            "final_ln_bias": ("lm_head.layer_norm.bias",),
            "position_embedding": _prefixed(_ROBERTA, "embeddings.position_embeddings.weight"),
        },
        head_prefixes=("lm_head.",), untied_output="lm_head.decoder.weight", untie_bias_names=("lm_head.decoder.bias",),
        masked_lm=True, attention_qk=_SELF_ATTENTION_QK),
    "distilbert": Architecture(
        "distilbert", "DistilBERT with its MLM head (vocab_transform/vocab_layer_norm/vocab_projector)",
        signature=(r"^distilbert\.", r"^vocab_projector\.", r"^transformer\.layer\.\d+\.attention\.q_lin\."),
        model_types=("distilbert",),
        candidates={
            "input_embedding": _prefixed(_DISTIL, "embeddings.word_embeddings.weight"),
            "output_weight": ("vocab_projector.weight",), "output_bias": ("vocab_projector.bias",),
            "final_ln_weight": ("vocab_layer_norm.weight",), "final_ln_bias": ("vocab_layer_norm.bias",),
            "position_embedding": _prefixed(_DISTIL, "embeddings.position_embeddings.weight"),
        },
        head_prefixes=("vocab_projector.", "vocab_layer_norm.", "vocab_transform."),
        untied_output="vocab_projector.weight", masked_lm=True,
        attention_qk=(r"(^|\.)layer\.\d+\.attention\.q_lin$", r"(^|\.)layer\.\d+\.attention\.k_lin$")),
    # nb's translation checkpoints (`nb train --task translation`, nbcli.models.seq2seq) carry Marian's
    # names without `model.`: the input embedding is the target side's (shared.weight, else the decoder's
    # embed_tokens: the one W is tied to), W is lm_head.weight when untied, b is final_logits_bias [V];
    # post-LN has no final norm before the output layer, pre-LN has decoder.layer_norm.
    "nb": Architecture(
        "nb", "nb's own `nb train` checkpoints (tok_emb, head, ln_f; MLM: mlm.ln; translation: shared / "
        "decoder.embed_tokens, lm_head, final_logits_bias)",
        signature=(r"^tok_emb\.weight$",),
        candidates={
            "input_embedding": ("tok_emb.weight", "shared.weight", "decoder.embed_tokens.weight"),
            "output_weight": ("head.weight", "lm_head.weight", "decoder.embed_tokens.weight"),
            "output_bias": ("head.bias", "final_logits_bias"),
            "final_ln_weight": ("mlm.ln.weight", "ln_f.weight", "decoder.layer_norm.weight"),
            "final_ln_bias": ("mlm.ln.bias", "ln_f.bias", "decoder.layer_norm.bias"),
            "position_embedding": ("pos_emb.weight", "decoder.embed_positions.weight"),
        }, untied_output="head.weight"),
    "custom": Architecture(
        "custom", "no table entry: every role comes from --map ROLE=TENSOR (tied when output_weight and "
        "input_embedding name the same tensor)", signature=(), candidates={}, tie_to_input=False),
}

#: The order signatures are tried in: the more specific layouts first (GPT-J's transformer.wte
#: would match GPT-2's; BLOOM's word_embeddings Falcon's; Phi's model.embed_tokens Llama's;
#: RoBERTa's and DistilBERT's unprefixed encoders BERT's; BART's and Marian's older saves hold
#: model.decoder.embed_tokens, OPT's signature; BART's layernorm_embedding tells it from Marian).
DETECTION_ORDER = ("nb", "t5", "bart", "marian", "gptj", "gpt_neox", "opt", "bloom", "falcon", "phi", "llama",
                   "gpt2", "distilbert", "roberta", "bert")



def untie_rule(arch: str, config: Mapping[str, object] | None) -> tuple[float, dict[str, object]]:
    """How `--untie` keeps the model's function: (factor for the copied output weight, config.json
    changes). transformers re-ties the output layer unless `tie_word_embeddings` is false. A
    `scaled_tied_head` model (T5) with a tied head scales the decoder output by d_model^-0.5 before
    lm_head (`scale_decoder_outputs`, which transformers 5 derives from tie_word_embeddings): the
    untied copy carries that factor and the scaling is switched off, so the logits are unchanged."""
    changes: dict[str, object] = {"tie_word_embeddings": False}
    spec = ARCHITECTURES.get(arch)
    if spec is None or not spec.scaled_tied_head:
        return 1.0, changes
    config = config or {}
    scaled = config.get("scale_decoder_outputs", config.get("tie_word_embeddings", True)) is not False
    d_model = config.get("d_model")
    if not scaled:
        return 1.0, changes
    changes["scale_decoder_outputs"] = False
    return (float(d_model) ** -0.5 if isinstance(d_model, (int, float)) and d_model > 0 else math.nan), changes


# ---------------------------------------------------------------------------------------------
# What other modules ask of the table


def by_model_type(model_type: object) -> str | None:
    """The entry a config.json `model_type` names, or None."""
    for name, spec in ARCHITECTURES.items():
        if model_type in spec.model_types:
            return name
    return None


def candidate_names(arch: str, role: str) -> tuple[str, ...]:
    """The tensor names `arch` looks for in `role`, likeliest first (none for an unknown arch)."""
    spec = ARCHITECTURES.get(arch)
    return spec.candidates.get(role, ()) if spec else ()


def new_bias_shape(arch: str, name: str, vocab: int) -> tuple[int, ...]:
    """The shape of an output bias `--set-output-bias` creates: [1, V] under a table name of a
    `bias_row` entry (Marian's final_logits_bias, which transformers loads), else [V]."""
    spec = ARCHITECTURES.get(arch)
    return (1, vocab) if spec and spec.bias_row and name in spec.candidates.get("output_bias", ()) else (vocab,)


def untied_output_name(arch: str) -> str:
    """The name `--untie` gives the separate output weight (lm_head.weight when the entry names none)."""
    spec = ARCHITECTURES.get(arch)
    return spec.untied_output if spec and spec.untied_output else "lm_head.weight"


def untie_bias_names(arch: str) -> tuple[str, ...]:
    """Further output-bias names the loader reads once the output layer is untied (written by `--untie`)."""
    spec = ARCHITECTURES.get(arch)
    return spec.untie_bias_names if spec else ()


def untie_input_names(arch: str) -> tuple[str, ...]:
    """Input-embedding names the loader no longer ties once the output layer is untied (written by `--untie`)."""
    spec = ARCHITECTURES.get(arch)
    return spec.untie_input_names if spec else ()
