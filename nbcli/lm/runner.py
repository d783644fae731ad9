"""One model runner for `nb eval` and `nb generate`: nb's own checkpoints or Hugging Face causal LMs.

    runner = load_runner("run/step-200.safetensors")      # or a run directory, a transformers model directory
    runner.logits(ids, key_mask)       # [B, T, V] float32: a batch of token ids (right padding)
    last, state = runner.prefill(ids)  # [B, V] logits of the last position, and a KV-cache state
    last = runner.step(state, next_ids)  # one new token per row, attending to the cache
    runner.set_surgery(SurgeryOptions(scale_ln_bias=0.5))  # in memory, same functions as patch-checkpoint

Surgery (paper 003 sec. 3.2-3.3: `--scale-ln-bias`, `--remove-frequency-direction`,
`--set-output-bias`) runs `nbcli.surgery.run_surgery` on the checkpoint file, exactly as
`nb patch-checkpoint` does, and copies the resulting tensors (in their stored dtype) into the live
model instead of a file; the next `set_surgery` first restores what the previous one changed, so a
sweep over lambda always starts from the checkpoint as saved and writes nothing.

nb checkpoints (`nb.format = nb-model/*`) load into `nbcli.models.lm.Transformer` (clm objective only)
with its KV cache; any other checkpoint directory with a config.json loads with transformers'
AutoModelForCausalLM (optional extra `nbcli[hf]`; every causal entry of the architecture table:
GPT-2, GPT-J, GPT-NeoX/Pythia, OPT, BLOOM, Falcon, Phi, the Llama family, Gemma; masked LMs and
encoder-decoders are refused). Surgery names the checkpoint's tensors; `nbcli.hf.loading.loaded_names`
finds each in the loaded model, whose names transformers may have changed on load (GPT-NeoX's
embed_out is lm_head in transformers 5). Loading goes through nb's loader (nbcli.hf.loading): an
output bias the checkpoint carries but the class has none for (`patch-checkpoint --set-output-bias
--bias-name lm_head.bias`) is installed into its output layer and applied, never dropped. Weights stay
in the dtype they were saved in; CUDA when present. An nb checkpoint's output layer, h W^T + b, runs in
float32 whatever its dtype (`nbcli.models.output.output_logits`); a transformers model computes its
logits in its own dtype, and `logits`/`prefill`/`step` hand them back as float32 for the metrics
(`nbcli.lm.perplexity`: float32 log-probabilities, float64 sums).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbcli.decoding.kv_cache import KVCache
from nbcli.errors import CheckpointError, ConfigError

if TYPE_CHECKING:
    import torch

    from nbcli.checkpoint.reader import Checkpoint
    from nbcli.checkpoint.roles import Roles
    from nbcli.surgery import SurgeryOptions


class Runner:
    """The common interface; subclasses provide `_forward`, `prefill`, `step` and `_live_tensors`."""

    kind = ""

    def __init__(self, path: Path, checkpoint: Checkpoint, roles: Roles, module: Any, device: torch.device,
                 vocab_size: int, context: int | None) -> None:
        self.path = path
        self.checkpoint = checkpoint
        self.roles = roles
        self.module = module
        self.device = device
        self.vocab_size = vocab_size
        self.context = context
        self._saved: dict[str, torch.Tensor] = {}
        self.surgery: list[dict[str, Any]] = []
        self.installed_bias: str | None = None
        self.restore_training = False
        """the checkpoint's output bias that nb installed into a transformers class without one"""
        self.amp_dtype: torch.dtype | None = None
        """the forward passes' autocast dtype (`set_precision`; None: none, float32)"""
        self.tf32 = False

    # -- the interface -----------------------------------------------------------------------------
    @property
    def architecture(self) -> str:
        return self.roles.architecture

    @property
    def dtype(self) -> torch.dtype:
        return next(self.module.parameters()).dtype

    def set_precision(self, dtype: str = "auto", tf32: bool = True) -> None:
        """`--dtype` (autocast: auto = bfloat16 on CUDA, float32 on CPU) and `--tf32` (CUDA float32
        matmuls on TF32 tensor cores) for the forward passes that follow: `nbcli.precision`."""
        from nbcli.precision import autocast_dtype, set_tf32

        self.amp_dtype = autocast_dtype(dtype, self.device)
        set_tf32(self.device, tf32)
        self.tf32 = tf32 and self.device.type == "cuda"

    def _inference(self) -> contextlib.ExitStack:
        """inference mode, under the autocast `set_precision` chose."""
        import torch

        from nbcli.precision import autocast

        stack = contextlib.ExitStack()
        stack.enter_context(torch.inference_mode())
        stack.enter_context(autocast(self.device, self.amp_dtype))
        return stack

    def logits(self, ids: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [B, T, V] (float32) for token ids [B, T]; key_mask [B, T] True on real tokens
        (right padding only: every row's real tokens start at position 0)."""
        with self._inference():
            return self._forward(ids.to(self.device), None if key_mask is None else key_mask.to(self.device)).float()

    def prefill(self, ids: torch.Tensor, room: int = 0) -> tuple[torch.Tensor, Any]:
        """Run the prompt ids [B, T] (no padding); return the last position's logits [B, V] and the cache,
        with room for `room` more tokens where the cache is preallocated (nb's). The output layer runs
        on the last position only (the others' logits are never needed)."""
        raise NotImplementedError

    def step(self, state: Any, ids: torch.Tensor) -> torch.Tensor:
        """Feed one token per row (ids [B]) after the cached ones; return its logits [B, V] (float32)."""
        raise NotImplementedError

    def _forward(self, ids: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError

    def _live_tensors(self) -> dict[str, torch.Tensor]:
        """The model's tensors (sharing storage with its parameters) under the checkpoint's names."""
        raise NotImplementedError

    # -- in-memory surgery ---------------------------------------------------------------------------
    def has_ln_bias(self) -> bool:
        return self.roles.get("final_ln_bias") is not None

    def live(self, name: str) -> torch.Tensor:
        """The live tensor holding checkpoint tensor `name`."""
        tensors = self._live_tensors()
        if name not in tensors:
            raise CheckpointError(f"{self.path}: the loaded model has no tensor {name!r} (surgery can only "
                                  "change tensors the model already has)")
        return tensors[name]

    def set_surgery(self, options: SurgeryOptions | None) -> list[str]:
        """Restore every tensor an earlier call changed, then apply `options` (None: none) in memory
        through the same `run_surgery` as patch-checkpoint. Returns its warnings."""
        import torch

        from nbcli.surgery import run_surgery

        with torch.no_grad():
            for name, value in self._saved.items():
                self.live(name).copy_(value)
            self._saved.clear()
            self.surgery = []
            if options is None or not options.operations():
                return []
            tensors, _workspace, warnings = run_surgery(self.checkpoint, self.roles, options)
            targets = {name: self.live(name) for name in tensors}  # all present before anything changes
            for name, value in tensors.items():
                self._saved[name] = targets[name].detach().clone()
                targets[name].copy_(value.to(targets[name].dtype))
        self.surgery = options.operations()
        return warnings

    def ln_bias_logit_shift(self) -> torch.Tensor | None:
        """W b_LN [V] (float32) with the current tensors: what b_LN adds to every position's logits
        when the final LayerNorm feeds the output projection directly (GPT-2, nb clm); None without b_LN.
        logits without b_LN = logits - W b_LN (paper 003 sec. 3.1, table 1's "w/o b_LN")."""
        import torch

        bias_name = self.roles.get("final_ln_bias")
        if bias_name is None:
            return None
        w = self.live(self.roles.require("output_weight", "the b_LN logit shift"))
        with torch.no_grad():
            return (w.float() @ self.live(bias_name).float()).to(self.device)

    def describe(self) -> dict[str, Any]:
        return {"path": str(self.path), "kind": self.kind, "architecture": self.architecture,
                "vocab_size": self.vocab_size, "context": self.context, "dtype": str(self.dtype).replace("torch.", ""),
                "device": str(self.device), "has_ln_bias": self.has_ln_bias(),
                "autocast": None if self.amp_dtype is None else str(self.amp_dtype).replace("torch.", ""),
                "tf32": self.tf32,
                "output_bias": self.roles.get("output_bias") or self.installed_bias,
                "output_bias_installed_by_nb": self.installed_bias is not None}

    def close(self) -> None:
        self.checkpoint.close()
        if self.restore_training:  # a caller's model in memory, back in the mode it was given in
            self.module.train()


class NbRunner(Runner):
    """nb's own `nb train` checkpoints through nbcli.models.lm.Transformer, with its KV cache
    (`nbcli.decoding.kv_cache.KVCache`)."""

    kind = "nb"

    def _extend(self, cache: KVCache, ids: torch.Tensor) -> torch.Tensor:
        """Feed ids [B, T] after the cached positions; the last position's logits [B, V] (float32: the
        output layer runs on that position only, `nbcli.models.output.output_logits`). The cache grows by T."""
        from nbcli.models.output import output_logits

        kv = cache.reserve(ids.shape[0], ids.shape[1], self.amp_dtype or self.dtype, self.device)
        h, _ = self.module.encode(ids, kv=kv, past=cache.length)                  # [B, T, d]
        cache.length += ids.shape[1]
        return output_logits(h[:, -1], self.module.output_weight, self.module.head_bias)

    def _forward(self, ids: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
        return self.module(ids, key_mask=key_mask)[0]

    def prefill(self, ids: torch.Tensor, room: int = 0) -> tuple[torch.Tensor, Any]:
        cfg = self.module.cfg
        with self._inference():
            cache = KVCache(cfg.n_layer, cfg.n_head, cfg.d_model // cfg.n_head, capacity=ids.shape[1] + room)
            return self._extend(cache, ids.to(self.device)), cache

    def step(self, state: Any, ids: torch.Tensor) -> torch.Tensor:
        with self._inference():
            return self._extend(state, ids.to(self.device)[:, None])

    def _live_tensors(self) -> dict[str, torch.Tensor]:
        return self.module.nb_state_dict()


class HFRunner(Runner):
    """A transformers causal LM (AutoModelForCausalLM) with its own past_key_values cache."""

    kind = "transformers"
    _cache_kw: str | None = None
    _loaded_names: dict[str, str] | None = None

    def _forward(self, ids: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
        return self.module(input_ids=ids, attention_mask=None if key_mask is None else key_mask.long(),
                           use_cache=False).logits

    @property
    def _cache_name(self) -> str:
        """The forward argument (and output field) of the cache: `cache` since transformers 5.2x
        (`past_key_values` is deprecated there, to be removed in 5.40), `past_key_values` before."""
        if self._cache_kw is None:
            self._cache_kw = "cache" if "cache" in self._forward_parameters else "past_key_values"
        return self._cache_kw

    @property
    def _forward_parameters(self) -> Any:
        import inspect

        return inspect.signature(self.module.forward).parameters

    def _last_only(self) -> dict[str, int]:
        """The forward argument that limits the output layer to the last position: `logits_to_keep`
        (transformers >= 4.50 and 5), `num_logits_to_keep` (4.45-4.49), none for classes without it."""
        parameters = self._forward_parameters
        return next(({name: 1} for name in ("logits_to_keep", "num_logits_to_keep") if name in parameters), {})

    def prefill(self, ids: torch.Tensor, room: int = 0) -> tuple[torch.Tensor, Any]:
        """transformers' own cache class, the one its `generate` uses by default (DynamicCache): its
        StaticCache attends over the whole preallocated length, which measured slower per token
        without torch.compile (1.65 s vs 2.09 s for 4 x 256 tokens of a 4 x 256 GPT-2 on CPU)."""
        with self._inference():
            out = self.module(input_ids=ids.to(self.device), use_cache=True, **self._last_only())
        return out.logits[:, -1].float(), [getattr(out, self._cache_name)]

    def step(self, state: Any, ids: torch.Tensor) -> torch.Tensor:
        with self._inference():
            out = self.module(input_ids=ids.to(self.device)[:, None], use_cache=True, **{self._cache_name: state[0]})
        state[0] = getattr(out, self._cache_name)
        return out.logits[:, -1].float()

    def _live_tensors(self) -> dict[str, torch.Tensor]:
        live = self.module.state_dict()
        if self._loaded_names is None:
            from nbcli.hf.loading import loaded_names

            self._loaded_names = loaded_names(self.module, self.checkpoint.names(), live)
        return {name: live[loaded] for name, loaded in self._loaded_names.items()
                if tuple(live[loaded].shape) == tuple(self.checkpoint.shape(name))}


def load_runner(path: Path | str | Any, *, arch: str = "auto", overrides: dict[str, str] | None = None,
                device: str = "auto", dtype: str = "auto", tf32: bool = True) -> Runner:
    """Load an nb checkpoint or a transformers causal-LM directory for inference (eval mode); a
    model already in memory is run as it is (`model_runner`). `dtype` and `tf32`: the precision of
    its forward passes (`Runner.set_precision`, `nbcli.precision`)."""
    runner = _open_runner(path, arch, overrides, device)
    try:
        runner.set_precision(dtype, tf32)
    except BaseException:
        runner.close()
        raise
    return runner


def _open_runner(path: Path | str | Any, arch: str, overrides: dict[str, str] | None, device: str) -> Runner:
    from nbcli.checkpoint import open_checkpoint, resolve_roles
    from nbcli.checkpoint.runs import is_run_directory, run_checkpoint
    from nbcli.resolve import local_path
    from nbcli.train.runtime import resolve_device

    if not isinstance(path, (str, os.PathLike)):
        return model_runner(path, arch=arch, overrides=overrides)
    path = local_path(path, "model")
    if is_run_directory(path):  # an nb train run stands for its best checkpoint, else its last step
        path = run_checkpoint(path)
    checkpoint = open_checkpoint(path)
    try:
        roles = resolve_roles(checkpoint, arch, overrides)
        dev = resolve_device(device)
        if checkpoint.metadata.get("nb.format", "").startswith("nb-model/"):
            return _load_nb(path, checkpoint, roles, dev)
        return _load_hf(path, checkpoint, roles, dev)
    except BaseException:
        checkpoint.close()
        raise


def _load_nb(path: Path, checkpoint: Checkpoint, roles: Roles, device: torch.device) -> NbRunner:
    from nbcli.models.lm import ModelConfig, Transformer

    try:
        raw = json.loads(checkpoint.metadata.get("nb.config", "{}"))
    except json.JSONDecodeError:
        raw = None
    if isinstance(raw, dict) and raw.get("objective") == "seq2seq":
        raise CheckpointError(f"{path}: a translation (encoder-decoder) checkpoint; decode it with nb translate, "
                              "score it with nb eval --task translation")
    try:
        cfg = ModelConfig.from_json(checkpoint.metadata["nb.config"])
    except (KeyError, json.JSONDecodeError, TypeError) as err:
        raise CheckpointError(f"{path}: nb checkpoint without a readable nb.config ({err})") from None
    if not cfg.causal:
        raise CheckpointError(f"{path}: an {cfg.objective} model cannot generate or score text left to right; "
                              "eval and generate need a clm checkpoint")
    dtype = checkpoint.get(roles.require("input_embedding", "loading the model")).dtype
    model = Transformer(cfg)
    model.load_nb_state_dict({name: checkpoint.get(name) for name in checkpoint.names()})
    model = model.to(device=device, dtype=dtype).eval()
    return NbRunner(path, checkpoint, roles, model, device, cfg.vocab_size, cfg.seq_len)


def _require_causal(label: object, config: dict[str, Any], roles: Roles) -> None:
    """CheckpointError unless the model is a causal LM (config.json / config.to_dict() `config`)."""
    from nbcli.checkpoint.architectures import ARCHITECTURES

    if config.get("is_encoder_decoder"):
        raise CheckpointError(f"{label}: an encoder-decoder model ({config.get('model_type')}) cannot score "
                              "or generate text left to right on its own; eval and generate need a causal LM")
    spec = ARCHITECTURES.get(roles.architecture)
    if spec is not None and spec.masked_lm and not config.get("is_decoder"):
        raise CheckpointError(f"{label}: a masked LM ({roles.architecture}) sees the tokens it predicts and "
                              "cannot generate or score text left to right; eval and generate need a causal LM")


def _load_hf(path: Path, checkpoint: Checkpoint, roles: Roles, device: torch.device) -> HFRunner:
    from nbcli.hf.loading import from_pretrained
    from nbcli.hf.output_bias import install_carried_bias

    directory = path if path.is_dir() else path.parent
    if not (directory / "config.json").is_file():
        raise CheckpointError(f"{path}: neither an nb checkpoint (no nb.format metadata) nor a transformers "
                              f"model directory (no config.json in {directory})")
    _require_causal(directory, checkpoint.model_config or {}, roles)
    model = from_pretrained(directory)
    bias = install_carried_bias(model, checkpoint, roles, trainable=False)  # from_pretrained drops a created one
    model = model.to(device).eval()
    cfg = model.config
    context = next((getattr(cfg, key) for key in ("n_positions", "max_position_embeddings")
                    if isinstance(getattr(cfg, key, None), int)), None)
    vocab = int(model.get_output_embeddings().weight.shape[0])
    runner = HFRunner(path, checkpoint, roles, model, device, vocab, context)
    runner.installed_bias = bias
    return runner


def model_runner(model: Any, *, arch: str = "auto", overrides: dict[str, str] | None = None) -> Runner:
    """A model in memory as a Runner, on the device it is on: a transformers causal LM (roles from
    its state dict and config, as `nbcli.probe` reads them) or nb's own `Transformer` (clm). It is
    put in eval mode while the runner is open; `close()` puts it back in training mode if it was.
    In-memory surgery (eval's lambda arms) changes its tensors and restores them (`set_surgery`)."""
    from nbcli.checkpoint import resolve_roles
    from nbcli.checkpoint.memory import MemoryCheckpoint
    from nbcli.models.lm import Transformer

    if not hasattr(model, "parameters") or not callable(model.state_dict):
        raise ConfigError(f"expected a path or a loaded model, got {type(model).__name__}")
    device = next(model.parameters()).device
    if isinstance(model, Transformer):
        from nbcli.train.state import FORMAT

        if not model.cfg.causal:
            raise CheckpointError(f"{type(model).__name__}: an {model.cfg.objective} model cannot generate or score "
                                  "text left to right; eval and generate need a clm model")
        held = MemoryCheckpoint(model.nb_state_dict(), label="nb Transformer",
                                metadata={"nb.format": FORMAT, "nb.config": model.cfg.to_json()})
        runner: Runner = NbRunner(Path(held.path), held, resolve_roles(held, arch, overrides), model, device,
                                  model.cfg.vocab_size, model.cfg.seq_len)
    else:
        from nbcli.hf.output_bias import output_layer

        held = MemoryCheckpoint.from_model(model)
        roles = resolve_roles(held, arch, overrides)
        _require_causal(held.path, held.model_config or {}, roles)
        config = getattr(model, "config", None)
        rows = int(output_layer(model)[1].weight.shape[0])
        context = next((getattr(config, key) for key in ("n_positions", "max_position_embeddings")
                        if isinstance(getattr(config, key, None), int)), None)
        runner = HFRunner(Path(held.path), held, roles, model, device, rows, context)
    runner.restore_training = bool(model.training)
    model.eval()
    return runner
