"""The training state: model checkpoint + AdamW moments round trip, and train-state.json validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from nbcli.errors import CheckpointError, ConfigError
from nbcli.models.lm import ModelConfig, Transformer
from nbcli.train.state import STATE_FORMAT, read_state, resume_state, save_checkpoint


def _trained_pair() -> tuple[Transformer, torch.optim.AdamW]:
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=40, seq_len=8, n_layer=1, n_head=2, d_model=16, tie_embeddings=False))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(2):
        logits, _ = model(torch.randint(0, 40, (2, 8)))
        logits.square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    return model, optimizer


def test_checkpoint_and_moments_round_trip(tmp_path: Path) -> None:
    model, optimizer = _trained_pair()
    path = save_checkpoint(tmp_path, 2, 16, model, optimizer, {"nb.format": "nb-model/1"}, "abc", 1.5)
    assert path == tmp_path / "step-2.safetensors" and path.is_file()
    state = read_state(tmp_path)
    assert (state["step"], state["sequences"], state["checkpoint"], state["ag_alpha0"]) == (2, 16, path.name, 1.5)

    torch.manual_seed(1)
    fresh = Transformer(model.cfg)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    resume_state(tmp_path, fresh, fresh_opt, "abc", torch.device("cpu"))
    for (name, a), b in zip(model.named_parameters(), fresh.parameters()):
        assert torch.equal(a, b), name
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(optimizer.state[a][key].float(), fresh_opt.state[b][key].float()), (name, key)
    with pytest.raises(ConfigError, match="data_sha256 mismatch"):
        resume_state(tmp_path, fresh, fresh_opt, "other", torch.device("cpu"))


@pytest.mark.parametrize("change, fragment", [
    ({"format": "nb-train-state/0"}, "unknown training-state format"),
    ({"step": -1}, "'step' must be a non-negative integer"),
    ({"checkpoint": "../elsewhere.safetensors"}, "'checkpoint' must name a .safetensors file"),
    ({"ag_alpha0": -1.0}, "'ag_alpha0' must be a finite number >= 0"),
])
def test_read_state_names_the_file_for_a_state_nb_did_not_write(tmp_path: Path, change: dict, fragment: str) -> None:
    state = {"format": STATE_FORMAT, "step": 1, "sequences": 8, "checkpoint": "step-1.safetensors",
             "data_sha256": "abc", "ag_alpha0": None, **change}
    (tmp_path / "train-state.json").write_text(json.dumps(state))
    with pytest.raises(CheckpointError, match=fragment) as err:
        read_state(tmp_path)
    assert str(tmp_path / "train-state.json") in str(err.value)


def test_no_state_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no checkpointed run"):
        read_state(tmp_path)
