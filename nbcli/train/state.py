"""The state `nb train` saves and resumes from: step-N.safetensors (the model after N updates, nb's
layout, architecture `nb`) and train-state.safetensors + train-state.json (AdamW moments by parameter
name and the data position; no pickle). A resumed run repeats the uninterrupted one (see loop.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

from nbcli.atomic import write_text_atomic
from nbcli.errors import CheckpointError, ConfigError
from nbcli.jsonsafe import load_file
from nbcli.models.lm import ModelConfig, Transformer
from nbcli.provenance import tool_version, utc_now
from nbcli.resolve import hub_inputs_metadata, local_path
from nbcli.tokenizers import Tokenizer
from nbcli.tokenizers.identity import identity_metadata
from nbcli.train.config import TrainConfig
from nbcli.train.data import TokenData
from nbcli.train.init import parse_pretrained

FORMAT = "nb-model/1"
STATE_FORMAT = "nb-train-state/1"


def checkpoint_metadata(cfg: TrainConfig, mcfg: ModelConfig, step: int, tokenizer: Tokenizer,
                        data: TokenData) -> dict[str, str]:
    return {
        "nb.format": FORMAT, "nb.config": mcfg.to_json(), "nb.version": tool_version(),
        "nb.train_config": json.dumps(cfg.to_dict(), sort_keys=True), "nb.step": str(step),
        **identity_metadata(tokenizer), "nb.data_sha256": data.fingerprint,
        "nb.inputs": json.dumps(data.inputs), "nb.created": utc_now(),
        **hub_inputs_metadata([tokenizer.path, *([local_path(parse_pretrained(cfg.embedding_init)[0])]
                                                 if cfg.embedding_init.startswith("pretrained:") else [])]),
    }


def save_model(path: Path, model: Transformer, metadata: dict[str, str]) -> None:
    from nbcli.checkpoint.writer import save_tensors

    tensors = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in model.nb_state_dict().items()}
    save_tensors(path, tensors, metadata)


def load_model_tensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    from nbcli.checkpoint.reader import open_checkpoint

    with open_checkpoint(path) as ckpt:
        tensors = {name: ckpt.get(name).clone() for name in ckpt.names()}
        metadata = dict(ckpt.metadata)
    return tensors, metadata


def save_state(out: Path, step: int, sequences: int, optimizer: torch.optim.AdamW, model: Transformer,
               fingerprint: str, alpha0: float | None = None) -> None:
    """train-state.safetensors (AdamW moments by parameter name) + train-state.json (position)."""
    from nbcli.checkpoint.writer import save_tensors

    names = {id(p): n for n, p in model.named_parameters()}
    tensors: dict[str, torch.Tensor] = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            st = optimizer.state.get(p, {})
            for key, value in st.items():
                t = value if torch.is_tensor(value) else torch.tensor(float(value))
                tensors[f"{names[id(p)]}.{key}"] = t.detach().to("cpu", torch.float32).reshape(t.shape).contiguous()
    save_tensors(out / "train-state.safetensors", tensors, {"nb.format": STATE_FORMAT, "nb.step": str(step)})
    write_text_atomic(out / "train-state.json", json.dumps({
        "format": STATE_FORMAT, "step": step, "sequences": sequences, "checkpoint": f"step-{step}.safetensors",
        "data_sha256": fingerprint, "rng": "per-step generators seeded from (seed, step, micro-batch index in the global batch)",
        "ag_alpha0": alpha0,
    }, indent=2) + "\n")


def read_state(out: Path) -> dict[str, Any]:
    """DIR/train-state.json, validated (CheckpointError naming the file for anything nb did not write)."""
    path = out / "train-state.json"
    try:
        state = load_file(path, error=CheckpointError, what="training state", max_bytes=1 << 20)
    except (FileNotFoundError, NotADirectoryError):
        raise ConfigError(f"--resume: {path} not found (no checkpointed run in {out})") from None
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        found = state.get("format") if isinstance(state, dict) else f"a JSON {type(state).__name__}"
        raise CheckpointError(f"{path}: unknown training-state format {found!r}")
    for key in ("step", "sequences"):
        if not isinstance(state.get(key), int) or isinstance(state[key], bool) or state[key] < 0:
            raise CheckpointError(f"{path}: {key!r} must be a non-negative integer, got {state.get(key)!r}")
    for key in ("checkpoint", "data_sha256"):
        if not isinstance(state.get(key), str):
            raise CheckpointError(f"{path}: {key!r} must be a string, got {state.get(key)!r}")
    alpha0 = state.get("ag_alpha0")
    if alpha0 is not None and (not isinstance(alpha0, (int, float)) or isinstance(alpha0, bool)
                               or not math.isfinite(alpha0) or alpha0 < 0):
        raise CheckpointError(f"{path}: 'ag_alpha0' must be a finite number >= 0, got {alpha0!r}")
    if Path(state["checkpoint"]).name != state["checkpoint"] or not state["checkpoint"].endswith(".safetensors"):
        raise CheckpointError(f"{path}: 'checkpoint' must name a .safetensors file in {out}, got "
                              f"{state['checkpoint']!r}")
    return state


def load_state(out: Path, optimizer: torch.optim.AdamW, model: Transformer) -> dict[str, Any]:
    state = read_state(out)
    tensors, meta = load_model_tensors(out / "train-state.safetensors")
    if meta.get("nb.step") != str(state["step"]):
        raise CheckpointError(f"{out / 'train-state.safetensors'}: step {meta.get('nb.step')} does not match "
                              f"train-state.json step {state['step']} (interrupted save?)")
    for n, p in model.named_parameters():
        keys = [k for k in tensors if k.rsplit(".", 1)[0] == n]
        if not keys:
            continue
        optimizer.state[p] = {k.rsplit(".", 1)[1]: tensors[k].to(p.device) for k in keys}
        if "step" in optimizer.state[p]:
            optimizer.state[p]["step"] = optimizer.state[p]["step"].reshape(())
            if not (optimizer.defaults.get("capturable") or optimizer.defaults.get("fused")):
                optimizer.state[p]["step"] = optimizer.state[p]["step"].cpu()
    return state




def save_checkpoint(out: Path, step: int, sequences: int, model: Transformer, optimizer: torch.optim.AdamW,
                    metadata: dict[str, str], fingerprint: str, alpha0: float | None) -> Path:
    """DIR/step-N.safetensors, then the training state that resumes from it; returns the checkpoint path."""
    path = out / f"step-{step}.safetensors"
    save_model(path, model, metadata)
    save_state(out, step, sequences, optimizer, model, fingerprint, alpha0)
    return path


def resume_state(out: Path, model: Transformer, optimizer: torch.optim.AdamW, fingerprint: str,
                 device: torch.device) -> dict[str, Any]:
    """Load the saved AdamW moments into `optimizer` and the saved checkpoint into `model`; the
    validated train-state.json. The corpus must tokenise to the run's (same data_sha256)."""
    state = load_state(out, optimizer, model)
    if state["data_sha256"] != fingerprint:
        raise ConfigError("--resume: the tokenised corpus differs from the run's (data_sha256 mismatch); "
                          "pass the same --corpus and --tokenizer")
    tensors, _ = load_model_tensors(out / state["checkpoint"])
    model.load_nb_state_dict({k: v.to(device) for k, v in tensors.items()})
    return state
