"""The architecture table: every layout the issue names maps to the right roles."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nbcli.checkpoint import ROLES, open_checkpoint, parse_role_map, resolve_roles
from nbcli.checkpoint.roles import detect_architecture
from nbcli.errors import CheckpointError, ConfigError
from tests.checkpoint.builders import (
    bert_tensors, gpt2_tensors, llama_tensors, nb_tensors, roberta_tensors, save, save_sharded,
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
def test_bert_encoder_without_head_uses_last_layer_ln(tmp_path: Path, prefix: str) -> None:
    roles = roles_of(tmp_path, bert_tensors(head=False, prefix=prefix, layers=12))
    assert roles.architecture == "bert" and roles["output_bias"] is None
    assert roles["final_ln_bias"] == f"{prefix}encoder.layer.11.output.LayerNorm.bias"  # 11, not "9"
    assert roles["final_ln_weight"] == f"{prefix}encoder.layer.11.output.LayerNorm.weight"


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
        resolve_roles(ckpt, "t5")


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
    llama = resolve_roles(open_checkpoint(save(tmp_path / "l.safetensors", llama_tensors())))
    with pytest.raises(CheckpointError, match="model.norm.weight|input_layernorm"):
        llama.require("final_ln_bias")  # no bias, but names the norm-like tensors it saw


def test_parse_role_map() -> None:
    assert parse_role_map(["output_bias=a.b", " final_ln_bias = c "]) == {"output_bias": "a.b", "final_ln_bias": "c"}
    for bad in ["output_bias", "=x", "nonsense=x"]:
        with pytest.raises(ConfigError):
            parse_role_map([bad])
    assert set(ROLES) == {"input_embedding", "output_weight", "output_bias", "final_ln_weight", "final_ln_bias",
                          "position_embedding"}
