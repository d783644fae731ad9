"""The architecture table: every layout the issue names maps to the right roles."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nbcli.checkpoint import ROLES, open_checkpoint, parse_role_map, resolve_roles
from nbcli.checkpoint.roles import detect_architecture, look_alikes, vector_length
from nbcli.errors import CheckpointError, ConfigError
from tests.checkpoint.builders import (
    bert_tensors, gpt2_tensors, llama_tensors, nb_tensors, roberta_tensors, save, save_sharded, seq2seq_tensors,
)


def roles_of(tmp_path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None,
             **kwargs: object):  # noqa: ANN201
    return resolve_roles(open_checkpoint(save(tmp_path / "m.safetensors", tensors, metadata)), **kwargs)


@pytest.mark.parametrize("prefix", ["", "transformer."])
def test_gpt2_both_layouts(tmp_path: Path, prefix: str) -> None:
    roles = roles_of(tmp_path, gpt2_tensors(prefix))
    assert roles.architecture == "gpt2" and roles.tied
    assert roles.tensors == {
        "input_embedding": f"{prefix}wte.weight", "output_weight": f"{prefix}wte.weight", "output_bias": None,
        "final_ln_weight": f"{prefix}ln_f.weight", "final_ln_bias": f"{prefix}ln_f.bias",
        "position_embedding": f"{prefix}wpe.weight"}


def test_gpt2_with_separate_lm_head(tmp_path: Path) -> None:
    tensors = gpt2_tensors("transformer.")
    tensors["lm_head.weight"] = torch.randn(40, 8)
    roles = roles_of(tmp_path, tensors)
    assert roles["output_weight"] == "lm_head.weight" and not roles.tied


def test_bert_with_mlm_head_and_decoder_bias_alias(tmp_path: Path) -> None:
    tensors = bert_tensors()
    tensors["cls.predictions.decoder.bias"] = tensors["cls.predictions.bias"].clone()
    roles = roles_of(tmp_path, tensors)
    assert roles.architecture == "bert" and roles.tied
    assert roles["input_embedding"] == roles["output_weight"] == "bert.embeddings.word_embeddings.weight"
    assert roles["output_bias"] == "cls.predictions.bias"
    assert roles.aliases["output_bias"] == ("cls.predictions.decoder.bias",)
    assert roles["final_ln_bias"] == "cls.predictions.transform.LayerNorm.bias"
    assert roles["position_embedding"] == "bert.embeddings.position_embeddings.weight"


@pytest.mark.parametrize("prefix", ["bert.", ""])
def test_bert_encoder_without_head_has_no_head_roles(tmp_path: Path, prefix: str) -> None:
    roles = roles_of(tmp_path, bert_tensors(head=False, prefix=prefix, layers=12))
    assert roles.architecture == "bert" and not roles.head and not roles.tied
    assert roles["input_embedding"] == f"{prefix}embeddings.word_embeddings.weight"
    for role in ("output_weight", "output_bias", "final_ln_weight", "final_ln_bias"):
        assert roles[role] is None and "no prediction head" in roles.notes[role]
    with pytest.raises(CheckpointError, match="has no final_ln_bias.*no prediction head"):
        roles.require("final_ln_bias", "--scale-ln-bias")
    # a layer's LayerNorm can still be named explicitly
    mapped = roles_of(tmp_path, bert_tensors(head=False, prefix=prefix, layers=12),
                      overrides={"final_ln_bias": f"{prefix}encoder.layer.11.output.LayerNorm.bias"})
    assert mapped["final_ln_bias"] == f"{prefix}encoder.layer.11.output.LayerNorm.bias"


def test_roberta(tmp_path: Path) -> None:
    roles = roles_of(tmp_path, roberta_tensors())
    assert roles.architecture == "roberta" and roles.tied
    assert roles["output_bias"] == "lm_head.bias" and roles["final_ln_bias"] == "lm_head.layer_norm.bias"
    assert roles["input_embedding"] == "roberta.embeddings.word_embeddings.weight"


@pytest.mark.parametrize("tied", [False, True])
def test_llama(tmp_path: Path, tied: bool) -> None:
    roles = roles_of(tmp_path, llama_tensors(tied=tied))
    assert roles.architecture == "llama" and roles.tied is tied
    assert roles["output_weight"] == ("model.embed_tokens.weight" if tied else "lm_head.weight")
    assert roles["final_ln_weight"] == "model.norm.weight"
    assert roles["output_bias"] is None and roles["final_ln_bias"] is None and roles["position_embedding"] is None


@pytest.mark.parametrize("kind", ["marian", "bart", "mbart"])
def test_marian_and_bart_older_saves(tmp_path: Path, kind: str) -> None:
    """model.shared with encoder/decoder embed_tokens copies (aliases, kept equal by writers), the head
    tied to it, b = final_logits_bias [1, V]; detected by names before OPT (whose signature
    model.decoder.embed_tokens they also hold); a final norm only where the model has one (mBART),
    else said why (post-LN), naming the last layer's norm to --map."""
    roles = roles_of(tmp_path, seq2seq_tensors(kind))
    assert roles.architecture == ("marian" if kind == "marian" else "bart") and roles.tied
    assert roles["input_embedding"] == roles["output_weight"] == "model.shared.weight"
    assert roles.aliases["input_embedding"] == ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")
    assert roles["output_bias"] == "final_logits_bias" and roles.candidates("output_bias") == ["final_logits_bias"]
    assert roles["position_embedding"] == "model.encoder.embed_positions.weight"
    if kind == "mbart":
        assert roles["final_ln_bias"] == "model.decoder.layer_norm.bias"
        return
    assert roles["final_ln_weight"] is None and roles["final_ln_bias"] is None
    with pytest.raises(CheckpointError) as err:
        roles.require("final_ln_bias", "--scale-ln-bias")
    assert "post-LN" in str(err.value) and "model.decoder.layers.1.final_layer_norm.bias" in str(err.value)


def test_marian_with_separate_vocabularies(tmp_path: Path) -> None:
    """No model.shared: the input embedding is the encoder's (source vocabulary), the output weight
    the decoder's embed_tokens that lm_head is tied to (target vocabulary, b's length)."""
    roles = roles_of(tmp_path, seq2seq_tensors("marian", separate=True))
    assert roles.architecture == "marian" and not roles.tied and not roles.aliases
    assert roles["input_embedding"] == "model.encoder.embed_tokens.weight"
    assert roles["output_weight"] == "model.decoder.embed_tokens.weight" and roles["output_bias"] == "final_logits_bias"


def test_a_bias_row_counts_as_a_vector() -> None:
    assert vector_length((7,)) == 7 == vector_length((1, 7))
    assert vector_length((2, 7)) is None and vector_length((7, 1)) is None and vector_length(()) is None
    found = look_alikes({"emb": (40, 8), "logits_bias": (1, 40), "other": (2, 40)})
    assert found["output_bias"] == ["logits_bias"]


@pytest.mark.parametrize(("objective", "ln"), [("clm", "ln_f.bias"), ("mlm", "mlm.ln.bias")])
@pytest.mark.parametrize("tied", [True, False])
def test_nb_layout(tmp_path: Path, objective: str, ln: str, tied: bool) -> None:
    tensors, meta = nb_tensors(objective=objective, tied=tied)
    roles = roles_of(tmp_path, tensors, meta)
    assert roles.architecture == "nb" and roles.tied is tied
    assert roles["final_ln_bias"] == ln and roles["output_bias"] == "head.bias"
    assert roles["output_weight"] == ("tok_emb.weight" if tied else "head.weight")


def test_detection_through_shards(tmp_path: Path) -> None:
    ckpt = open_checkpoint(save_sharded(tmp_path / "s", llama_tensors()))
    assert detect_architecture(ckpt) == "llama"


def test_unknown_architecture_and_forced_arch(tmp_path: Path) -> None:
    path = save(tmp_path / "m.safetensors", {"encoder.emb": torch.randn(40, 8), "decoder.norm.bias": torch.randn(8)})
    ckpt = open_checkpoint(path)
    with pytest.raises(CheckpointError, match="cannot tell the architecture"):
        resolve_roles(ckpt)
    roles = resolve_roles(ckpt, "gpt2", {"input_embedding": "encoder.emb", "final_ln_bias": "decoder.norm.bias"})
    assert roles["output_weight"] == "encoder.emb" and roles.tied
    with pytest.raises(ConfigError, match="--arch"):
        resolve_roles(ckpt, "t6")


def test_custom_architecture_from_map_alone(tmp_path: Path) -> None:
    path = save(tmp_path / "m.safetensors", {"net.emb": torch.randn(40, 8), "net.out": torch.randn(40, 8),
                                             "net.norm.bias": torch.randn(8)})
    ckpt = open_checkpoint(path)
    roles = resolve_roles(ckpt, overrides={"output_weight": "net.out", "final_ln_bias": "net.norm.bias"})
    assert roles.architecture == "custom" and not roles.tied
    assert roles.tensors == {"input_embedding": None, "output_weight": "net.out", "output_bias": None,
                             "final_ln_weight": None, "final_ln_bias": "net.norm.bias", "position_embedding": None}
    tied = resolve_roles(ckpt, "custom", {"output_weight": "net.emb", "input_embedding": "net.emb"})
    assert tied.tied
    with pytest.raises(ConfigError, match="--arch custom"):
        resolve_roles(ckpt, "custom")


def test_unknown_layout_error_lists_look_alikes_per_role(tmp_path: Path) -> None:
    """T5-like names under another prefix: the error names, for each role, tensors that look like it
    (not the first names alphabetically, which would all be block 0)."""
    tensors = {f"net.decoder.block.{i}.layer.{j}.layer_norm.weight": torch.ones(8) for i in range(3) for j in range(2)}
    tensors |= {"net.shared.weight": torch.randn(40, 8), "net.lm_head.weight": torch.randn(40, 8),
                "net.decoder.final_layer_norm.weight": torch.ones(8), "net.pos.weight": torch.randn(6, 8)}
    with pytest.raises(CheckpointError) as err:
        resolve_roles(open_checkpoint(save(tmp_path / "m.safetensors", tensors)))
    message = str(err.value)
    assert "input_embedding: net.shared.weight" in message
    assert "output_weight: net.lm_head.weight" in message
    assert "final_ln_weight: net.decoder.final_layer_norm.weight, net.decoder.block.2." in message
    assert "output_bias: none" in message and "position_embedding: net.pos.weight" in message
    assert "--map ROLE=TENSOR" in message


def test_rmsnorm_has_no_bias_said_not_guessed(tmp_path: Path) -> None:
    roles = roles_of(tmp_path, llama_tensors())
    with pytest.raises(CheckpointError) as err:
        roles.require("final_ln_bias", "--scale-ln-bias")
    message = str(err.value)
    assert "RMSNorm" in message and "no bias" in message
    assert "--map final_ln_bias=" not in message and "model.norm.weight" not in message


def test_map_overrides_and_validates(tmp_path: Path) -> None:
    tensors = gpt2_tensors()
    tensors["my.bias"] = torch.zeros(40)
    ckpt = open_checkpoint(save(tmp_path / "m.safetensors", tensors))
    assert resolve_roles(ckpt, overrides={"output_bias": "my.bias"})["output_bias"] == "my.bias"
    with pytest.raises(CheckpointError, match="no tensor named 'nope'"):
        resolve_roles(ckpt, overrides={"output_bias": "nope"})
    with pytest.raises(ConfigError, match="unknown role"):
        resolve_roles(ckpt, overrides={"bias": "my.bias"})


def test_missing_role_lists_candidates(tmp_path: Path) -> None:
    tensors = gpt2_tensors()
    tensors["head.b"] = torch.zeros(40)
    roles = roles_of(tmp_path, tensors)
    with pytest.raises(CheckpointError) as err:
        roles.require("output_bias", "--rescale-w")
    message = str(err.value)
    assert "no output_bias" in message and "head.b" in message and "--map output_bias=" in message
    assert "ln_f.bias" not in message  # wrong shape for an output bias
    other = resolve_roles(open_checkpoint(save(tmp_path / "l.safetensors", llama_tensors())), "gpt2",
                          {"input_embedding": "model.embed_tokens.weight"})
    with pytest.raises(CheckpointError, match="model.norm.weight"):
        other.require("final_ln_bias")  # no bias, but names the norm-like tensors it saw


def test_parse_role_map() -> None:
    assert parse_role_map(["output_bias=a.b", " final_ln_bias = c "]) == {"output_bias": "a.b", "final_ln_bias": "c"}
    for bad in ["output_bias", "=x", "nonsense=x"]:
        with pytest.raises(ConfigError):
            parse_role_map([bad])
    assert set(ROLES) == {"input_embedding", "output_weight", "output_bias", "final_ln_weight", "final_ln_bias",
                          "position_embedding"}
