"""`nb train`'s loop: build the model with the papers' initialisations, train, evaluate, checkpoint.

DIR layout: config.json (TrainConfig), log.jsonl (one object per step; eval fields on eval steps),
step-N.safetensors (model after N updates, nb's layout, architecture `nb`), train-state.safetensors
+ train-state.json (optimizer moments and the data position for --resume; no pickle), summary.json.

Exactness of --resume: the data order is a function of (seed, sequence index), MLM masks and dropout
are drawn from generators seeded by (seed, step, rank, micro-step), the LR schedule is a function of
the step, and the AdamW moments are saved in float32; so a resumed run repeats the uninterrupted one.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from nbcli.atomic import write_text_atomic
from nbcli.counts import log_unigram
from nbcli.errors import CheckpointError, ConfigError, Interrupted, OutputError, TrainingDiverged, naming
from nbcli.jsonsafe import load_file
from nbcli.model import ModelConfig, Transformer, lm_loss, mlm_mask
from nbcli.probes import bias_vs_unigram
from nbcli.provenance import tool_version, utc_now
from nbcli.resolve import hub_inputs_metadata, local_path
from nbcli.tokenizers import Tokenizer, load_tokenizer
from nbcli.train import init
from nbcli.train.config import TrainConfig
from nbcli.train.data import (Batch, BlockStream, TokenData, TrainSampler, block_prefix, never_predicted,
                              tokenize_corpus)
from nbcli.train.guidance import (Guidance, ag_alpha, assign_heads, auto_alpha, delimiter_ids,
                                  period_piece_ids)
from nbcli.train.runs import area_under_curve, read_log_records

FORMAT = "nb-model/1"
STATE_FORMAT = "nb-train-state/1"
# Settings that may change between a run and its --resume (they do not change the trajectory).
RESUMABLE_CHANGES = {"device", "compile", "eval_every", "eval_batches", "save_every", "extra"}
# bf16 dense peak FLOP/s by device name (for MFU); unknown devices get no MFU.
BF16_PEAK = {"H100 SXM": 989e12, "H100 NVL": 835e12, "H100 PCIe": 756e12, "H100": 989e12, "H200": 989e12,
             "A100": 312e12, "L40S": 362e12, "A10G": 70e12, "4090": 165e12}


# ---------------------------------------------------------------------------------------------
# Environment: device, precision, distributed


@dataclass
class Runtime:
    device: torch.device
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    amp_dtype: torch.dtype | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def resolve_device(choice: str) -> torch.device:
    """auto: CUDA when present, else CPU. cuda without CUDA is a one-line error."""
    if choice == "cuda" and not torch.cuda.is_available():
        reason = "this torch build has no CUDA" if torch.version.cuda is None else "no CUDA device is visible"
        raise ConfigError(f"--device cuda: CUDA is not available ({reason}); use --device cpu or --device auto")
    if choice == "auto":
        choice = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(choice)


def setup_runtime(cfg: TrainConfig) -> Runtime:
    """Single process, or one rank of a `torchrun` job (RANK/WORLD_SIZE/LOCAL_RANK set): DDP."""
    device = resolve_device(cfg.device)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if world > 1:
        import torch.distributed as dist

        if device.type == "cuda":
            device = torch.device("cuda", local_rank)
            torch.cuda.set_device(device)
        if not dist.is_initialized():
            dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
        if cfg.batch_size % (world * cfg.grad_accum):
            raise ConfigError(f"--batch-size {cfg.batch_size} is not divisible by world size {world} x "
                              f"--grad-accum {cfg.grad_accum}")
    amp: torch.dtype | None = None
    if cfg.dtype == "bfloat16" or (cfg.dtype == "auto" and device.type == "cuda"):
        if device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ConfigError("--dtype bfloat16: this GPU does not support bf16; use --dtype float32")
        amp = torch.bfloat16
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return Runtime(device=device, rank=rank, world=world, local_rank=local_rank, amp_dtype=amp)


def _all_reduce_sum(values: torch.Tensor, rt: Runtime) -> torch.Tensor:
    if rt.world > 1:
        import torch.distributed as dist

        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, value in BF16_PEAK.items():
        if key in name:
            return value
    return None


# ---------------------------------------------------------------------------------------------
# Model construction


def mask_token_id(tokenizer: Tokenizer) -> tuple[int, int]:
    """(mask id, model vocabulary size) for MLM: the tokenizer's <mask>/[MASK] piece if it has one,
    otherwise one extra row appended after the tokenizer's vocabulary."""
    for i in sorted(tokenizer.special_ids) + list(range(min(tokenizer.vocab_size, 1000))):
        if tokenizer.piece(i) in ("<mask>", "[MASK]"):
            return i, tokenizer.vocab_size
    return tokenizer.vocab_size, tokenizer.vocab_size + 1


def model_config(cfg: TrainConfig, tokenizer: Tokenizer) -> ModelConfig:
    mask_id, vocab = (None, tokenizer.vocab_size)
    specials: tuple[int, ...] = ()
    if cfg.objective == "mlm":
        mask_id, vocab = mask_token_id(tokenizer)
        specials = tuple(sorted(never_predicted(tokenizer) | {mask_id}))
    return ModelConfig(vocab_size=vocab, seq_len=cfg.seq_len, n_layer=cfg.n_layer, n_head=cfg.n_head,
                       d_model=cfg.d_model, dropout=cfg.dropout, objective=cfg.objective,
                       tie_embeddings=cfg.tie_embeddings, output_bias=cfg.bias_init != "none",
                       mask_id=mask_id, special_ids=specials)


def padded_counts(counts: np.ndarray, vocab: int) -> np.ndarray:
    out = np.zeros(vocab, dtype=np.int64)
    out[:counts.size] = counts
    return out


def build_model(cfg: TrainConfig, mcfg: ModelConfig, counts: np.ndarray, tokenizer_rows: int | None = None,
                ) -> Transformer:
    """The model with paper 000's bias init (+ W rescale) and paper 002's embedding init applied."""
    torch.manual_seed(cfg.seed)
    model = Transformer(mcfg)
    with torch.no_grad():
        emb = init.input_embedding(cfg, model.tok_emb.weight, tokenizer_rows)
        model.tok_emb.weight.copy_(emb)
        if model.head_bias is not None and cfg.bias_init == "unigram":
            model.head_bias.copy_(init.output_bias(counts, mcfg.vocab_size, cfg.smoothing_k))
            if cfg.rescale_w is not None:
                model.head_weight.copy_(init.rescale_output_weight(model.head_weight, model.head_bias, cfg.rescale_w))
    return model


def make_optimizer(model: Transformer, cfg: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices only (never on biases, LayerNorms or the output bias)."""
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8, fused=device.type == "cuda")


def learning_rate(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up over --warmup steps, then cosine (GPT-2/nanoGPT) or linear (RoBERTa, paper 001's
    release: `get_linear_schedule_with_warmup`) decay to lr * min_lr_ratio at --steps."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = min(1.0, (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))
    floor = cfg.lr * cfg.min_lr_ratio
    if cfg.lr_schedule == "linear":
        return floor + (cfg.lr - floor) * (1.0 - progress)
    return floor + 0.5 * (cfg.lr - floor) * (1 + math.cos(math.pi * progress))


@torch.no_grad()
def step0_alpha(model: Transformer, batches: list[Batch], guidance: Guidance, cfg: TrainConfig,
                mcfg: ModelConfig, n_labels: torch.Tensor, rt: Runtime) -> float:
    """`--ag-alpha auto`: alpha_0 = L_LM / L_AG on the step-0 update's batches (all ranks and
    micro-steps; evaluation mode, no gradient), so alpha_0 L_AG = L_LM at step 0 (paper 001 sec. 4.5)."""
    was_training = model.training
    model.eval()
    ce_sum = torch.zeros((), dtype=torch.float64, device=rt.device)
    ag_sum = torch.zeros((), dtype=torch.float64, device=rt.device)
    for batch in batches:
        with _autocast(rt):
            logits, qks = model(batch.inputs, key_mask=_key_mask(batch), guided=guidance.guided)
        ce_sum += lm_loss(logits, batch.labels, cfg.label_smoothing, reduction="sum").double()
        ag_sum += guidance.loss(qks, batch.inputs, _lengths(batch), mcfg.causal).double() / len(batches)
    totals = _all_reduce_sum(torch.stack([ce_sum, ag_sum]), rt)
    if was_training:
        model.train()
    return auto_alpha(float(totals[0]) / max(1.0, float(n_labels)), float(totals[1]) / rt.world)


START_MARGIN = 0.5   # nats above log V before check_start warns


def check_start(loss: float, vocab_size: int, cfg: TrainConfig, warn: Callable[[str], None]) -> None:
    """Warn when the step-0 loss exceeds log V, the loss of a uniform guess, by more than START_MARGIN
    (an initialisation clearly worse than chance; paper 000's --rescale-w in nb's model is the known
    case, see the README). The margin: small random logits (std s) already cost about s^2 / 2 nats
    over log V, so an ordinary zero-bias start sits a few hundredths above log V (0.03 for the tiny
    preset, 0.19 for roberta-8 in BENCHMARKS.md) and should not warn."""
    log_v = math.log(vocab_size)
    if not loss > log_v + START_MARGIN:
        return
    cause = (f" --rescale-w {cfg.rescale_w} scaled W to ||b||_2: the logits' noise then has about the rms of b "
             "(several nats) because the final hidden state has unit-variance coordinates; see README "
             "'--rescale-w'" if cfg.rescale_w else "")
    warn(f"step-0 loss {loss:.2f} nats exceeds log V = {log_v:.2f} (a uniform guess) by more than {START_MARGIN} "
         f"nats: the initialisation starts worse than chance.{cause}")


# ---------------------------------------------------------------------------------------------
# Metrics


def generator_for(cfg: TrainConfig, *parts: int, device: torch.device | None = None) -> torch.Generator:
    g = torch.Generator(device=device or "cpu")
    g.manual_seed(hash((cfg.seed,) + parts) & 0x7FFF_FFFF_FFFF_FFFF)
    return g


def prepare_batch(batch: Batch, mcfg: ModelConfig, gen: torch.Generator | None, mask_rate: float) -> Batch:
    """MLM: mask the inputs (labels become the original ids at selected positions). CLM: as is."""
    if mcfg.objective != "mlm":
        return batch
    key_mask = _key_mask(batch)
    inputs, labels = mlm_mask(batch.inputs, mcfg, gen, key_mask, mask_rate)
    return Batch(inputs=inputs, labels=labels, lengths=batch.lengths)


def _key_mask(batch: Batch) -> torch.Tensor | None:
    if batch.lengths is None:
        return None
    T = batch.inputs.size(1)
    return torch.arange(T, device=batch.inputs.device)[None, :] < batch.lengths[:, None]


def _lengths(batch: Batch) -> torch.Tensor:
    if batch.lengths is not None:
        return batch.lengths
    return torch.full((batch.inputs.size(0),), batch.inputs.size(1), device=batch.inputs.device)


@torch.no_grad()
def evaluate(model: Transformer, stream: BlockStream, cfg: TrainConfig, mcfg: ModelConfig,
             log_u: torch.Tensor, rt: Runtime) -> dict[str, float]:
    """val_loss; kl_unigram / kl_uniform: mean over predicted tokens of KL(p_theta(.|ctx) || u) and
    KL(p_theta || uniform) (paper 000 fig. 1); bias_kl_unigram = KL(softmax(b) || u), bias_norm = ||b||
    (app. B.5, figs. 11-12)."""
    was_training = model.training
    model.eval()
    # The same blocks and masks whatever the world size / accumulation: eval_batches global batches,
    # each block masked by a generator seeded from its index.
    n_blocks = min(stream.n_blocks, cfg.eval_batches * cfg.batch_size)
    micro = max(1, cfg.batch_size // (cfg.grad_accum * rt.world))
    totals = torch.zeros(4, dtype=torch.float64, device=rt.device)  # ce, kl_u, kl_uniform, count
    V = mcfg.vocab_size
    for start in range(rt.rank * micro, n_blocks, micro * rt.world):
        blocks = list(range(start, min(start + micro, n_blocks)))
        batch = stream.batch(blocks, rt.device)
        if mcfg.objective == "mlm":
            rows = [prepare_batch(Batch(batch.inputs[i:i + 1], batch.labels[i:i + 1],
                                        None if batch.lengths is None else batch.lengths[i:i + 1]),
                                  mcfg, generator_for(cfg, 0xE7A1, b, device=rt.device), cfg.mask_rate)
                    for i, b in enumerate(blocks)]
            batch = Batch(torch.cat([r.inputs for r in rows]), torch.cat([r.labels for r in rows]), batch.lengths)
        with _autocast(rt):
            logits, _ = model(batch.inputs, key_mask=_key_mask(batch))
        sel = batch.labels != -100
        logp = F.log_softmax(logits[sel].float(), dim=-1)                       # [N, V]
        p = logp.exp()
        totals[0] += F.nll_loss(logp, batch.labels[sel], reduction="sum").double()
        totals[1] += (p * (logp - log_u)).sum().double()
        totals[2] += ((p * logp).sum(-1) + math.log(V)).sum().double()
        totals[3] += sel.sum()
    _all_reduce_sum(totals, rt)
    count = max(1.0, float(totals[3]))
    out = {"val_loss": float(totals[0]) / count, "kl_unigram": float(totals[1]) / count,
           "kl_uniform": float(totals[2]) / count}
    bias = model.head_bias
    if bias is not None:
        stats = bias_vs_unigram(bias.detach().float().cpu().numpy(), log_u.double().cpu().numpy())
        out["bias_kl_unigram"] = stats.kl_bias_to_unigram
        out["bias_norm"] = stats.norm
    if was_training:
        model.train()
    return out


def _autocast(rt: Runtime) -> contextlib.AbstractContextManager[Any]:
    if rt.amp_dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=rt.device.type, dtype=rt.amp_dtype)


# ---------------------------------------------------------------------------------------------
# Checkpoints and training state


def checkpoint_metadata(cfg: TrainConfig, mcfg: ModelConfig, step: int, tokenizer: Tokenizer,
                        data: TokenData) -> dict[str, str]:
    return {
        "nb.format": FORMAT, "nb.config": mcfg.to_json(), "nb.version": tool_version(),
        "nb.train_config": json.dumps(cfg.to_dict(), sort_keys=True), "nb.step": str(step),
        "nb.tokenizer_sha256": tokenizer.sha256, "nb.data_sha256": data.fingerprint,
        "nb.inputs": json.dumps(data.inputs), "nb.created": utc_now(),
        **hub_inputs_metadata([tokenizer.path, *([local_path(init.parse_pretrained(cfg.embedding_init)[0])]
                                                 if cfg.embedding_init.startswith("pretrained:") else [])]),
    }


def write_training_counts(path: Path, data: TokenData, tokenizer: Tokenizer, cfg: TrainConfig) -> None:
    """DIR/counts.safetensors: the training-token unigram counts (nb counts format), for
    `nb probe-bias -c` and `nb patch-checkpoint --counts`."""
    from nbcli.counts import UnigramCounts, write_counts

    write_counts(path, UnigramCounts(counts=data.counts, metadata={
        "nb.version": tool_version(), "nb.created": utc_now(), "nb.tokenizer": tokenizer.name,
        "nb.tokenizer_sha256": tokenizer.sha256, "nb.vocab_size": str(tokenizer.vocab_size),
        "nb.total_tokens": str(int(data.counts.sum())), "nb.documents": str(data.documents),
        "nb.inputs": json.dumps(data.inputs), "nb.method": "nb train (training split only)",
        "nb.options": json.dumps({"eos": tokenizer.eos_id is not None, "bos": False,
                                  "smoothing": f"add-k:{cfg.smoothing_k:g}", "val_fraction": cfg.val_fraction}),
    }))


def save_model(path: Path, model: Transformer, metadata: dict[str, str]) -> None:
    from nbcli.checkpoint.io import save_tensors

    tensors = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in model.nb_state_dict().items()}
    save_tensors(path, tensors, metadata)


def load_model_tensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    from nbcli.checkpoint.io import open_checkpoint

    with open_checkpoint(path) as ckpt:
        tensors = {name: ckpt.get(name).clone() for name in ckpt.names()}
        metadata = dict(ckpt.metadata)
    return tensors, metadata


def save_state(out: Path, step: int, sequences: int, optimizer: torch.optim.AdamW, model: Transformer,
               fingerprint: str, alpha0: float | None = None) -> None:
    """train-state.safetensors (AdamW moments by parameter name) + train-state.json (position)."""
    from nbcli.checkpoint.io import save_tensors

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
        "data_sha256": fingerprint, "rng": "per-step generators seeded from (seed, step, rank, micro-step)",
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


# ---------------------------------------------------------------------------------------------
# The run


@dataclass
class TrainResult:
    out: Path
    steps: int
    final_val_loss: float | None
    alc: float | None
    checkpoint: Path
    tokens: int
    seconds: float
    tokens_per_s: float
    parameters: int
    device: str
    unigram_entropy: float
    log_v: float
    resumed_from: int | None
    ag_alpha0: float | None = None
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["out"] = str(self.out)
        d["checkpoint"] = str(self.checkpoint)
        return d


def _check_finite(objective: torch.Tensor, step: int, cfg: TrainConfig) -> None:
    """Stop before an update from a non-finite loss (it would turn every weight into NaN)."""
    value = float(objective)
    if not math.isfinite(value):
        raise TrainingDiverged(
            f"training loss is {value} at step {step} (lr {cfg.lr:g}"
            + (f", ag-alpha {cfg.ag_alpha}" if cfg.ag_fraction else "")
            + (f", embedding {cfg.embedding_init}" if cfg.embedding_init.startswith("pretrained:") else "")
            + "); no update was applied, no checkpoint of this step written")


def _check_resume_config(out: Path, cfg: TrainConfig) -> None:
    path = out / "config.json"
    data = load_file(path, error=CheckpointError, what="run config", max_bytes=1 << 20)
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: run config is a JSON {type(data).__name__}, expected an object")
    try:
        saved = TrainConfig.from_dict(data).to_dict()
    except ConfigError as err:
        raise CheckpointError(f"{path}: not a valid run config ({err})") from None
    except (TypeError, ValueError, AttributeError):  # a value of the wrong type reached a check
        raise CheckpointError(f"{path}: not a valid run config (a value has the wrong type)") from None
    now = cfg.to_dict()
    diff = sorted(k for k in now if k not in RESUMABLE_CHANGES and now[k] != saved.get(k))
    if diff:
        details = ", ".join(f"{k}: {saved.get(k)!r} -> {now[k]!r}" for k in diff[:4])
        raise ConfigError(f"--resume: options differ from {out / 'config.json'} ({details}); "
                          "resume with the run's own options")


def _truncate_log(path: Path, before_step: int) -> None:
    if not path.exists():
        return
    kept = [json.dumps(record) for record in read_log_records(path) if record["step"] < before_step]
    write_text_atomic(path, "".join(line + "\n" for line in kept))


def _check_inputs_outside(out: Path, cfg: TrainConfig, corpus: list[str], tokenizer_path: Path | str) -> None:
    """OutputError if an input (corpus file, tokenizer, pretrained embedding) lies in the run
    directory, whose files nb train writes and replaces."""
    from nbcli.corpus import corpus_files
    from nbcli.outputs import inputs_inside
    from nbcli.tokenizers import tokenizer_files

    inputs: list[Path | str] = [*corpus_files(corpus), *tokenizer_files(tokenizer_path)]
    if cfg.embedding_init.startswith("pretrained:"):
        inputs.append(init.parse_pretrained(cfg.embedding_init)[0])
    inside = inputs_inside(out, inputs)
    if inside is not None:
        raise OutputError(f"--out {out}: the input {inside} lies in this run directory, whose files nb train "
                          "writes; choose another --out")


def train(cfg: TrainConfig, corpus: list[str], tokenizer_path: Path | str, out: Path | str, *,
          resume: bool = False, stop_at: int | None = None,
          on_step: Callable[[int, dict[str, Any]], None] | None = None,
          on_bytes: Callable[[int, int | None], None] | None = None,
          on_warning: Callable[[str], None] | None = None) -> TrainResult:
    """Run `nb train`. `stop_at` stops after that many updates (checkpoint + state saved) while the
    schedule still follows cfg.steps; `--resume` continues from the last saved state. Warnings go to
    `on_warning` when they arise and to TrainResult.warnings / summary.json.

    A new run that fails or is interrupted before its first saved state (train-state.json)
    removes what it created in `out` (and `out` itself if it made it), so the same command can
    simply be run again; once a state is saved, the run directory stays and `--resume` continues."""
    out = Path(out)
    before = set(os.listdir(out)) if out.is_dir() else None
    try:
        return _train(cfg, corpus, tokenizer_path, out, resume=resume, stop_at=stop_at, on_step=on_step,
                      on_bytes=on_bytes, on_warning=on_warning)
    except BaseException:
        if not resume and os.environ.get("RANK", "0") == "0" and not (out / "train-state.json").exists():
            _remove_new_entries(out, before)
        raise


def _remove_new_entries(out: Path, before: set[str] | None) -> None:
    """Remove the files a failed new run created in `out` (not those that were there before), and
    `out` itself if the run created it and it is now empty."""
    import shutil

    if not out.is_dir():
        return
    for name in set(os.listdir(out)) - (before or set()):
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    if before is None:
        with contextlib.suppress(OSError):
            out.rmdir()


def _train(cfg: TrainConfig, corpus: list[str], tokenizer_path: Path | str, out: Path, *, resume: bool,
           stop_at: int | None, on_step: Callable[[int, dict[str, Any]], None] | None,
           on_bytes: Callable[[int, int | None], None] | None,
           on_warning: Callable[[str], None] | None) -> TrainResult:
    warnings: list[str] = []

    def warn(message: str) -> None:
        warnings.append(message)
        if on_warning is not None and rt.is_main:
            on_warning(message)

    rt = setup_runtime(cfg)
    if rt.is_main:
        if out.exists() and not out.is_dir():
            raise OutputError(f"--out {out}: exists and is not a directory")
        _check_inputs_outside(out, cfg, corpus, tokenizer_path)
        if not resume and (out / "log.jsonl").exists():
            raise OutputError(f"--out {out}: already holds a run (log.jsonl); use --resume or another directory")
        if resume:  # everything the run directory holds is checked before anything is read or written
            if not (out / "config.json").exists():
                raise ConfigError(f"--resume: {out / 'config.json'} not found (no run to resume)")
            _check_resume_config(out, cfg)
            read_state(out)
            read_log_records(out / "log.jsonl")

    tokenizer = load_tokenizer(tokenizer_path)
    data = tokenize_corpus(corpus, tokenizer, cfg.objective, cfg.val_fraction, progress=on_bytes)
    mcfg = model_config(cfg, tokenizer)
    pad_id = tokenizer.pad_id if tokenizer.pad_id is not None else 0
    shown = ", ".join(data.inputs[:3]) + (f" and {len(data.inputs) - 3} more" if len(data.inputs) > 3 else "")
    prefix = block_prefix(tokenizer, cfg.objective)
    with naming(f"--corpus {shown or '(no input)'} ({data.documents} documents)"):
        train_stream = BlockStream(data.train, cfg.seq_len, cfg.objective, pad_id, "training", prefix=prefix)
        val_stream = BlockStream(data.val, cfg.seq_len, cfg.objective, pad_id, "validation", allow_partial=True,
                                 prefix=prefix)
    counts = padded_counts(data.counts, mcfg.vocab_size)
    log_u = torch.from_numpy(log_unigram(counts, cfg.smoothing_k)).float().to(rt.device)
    heads = assign_heads(cfg.n_head, cfg.ag_fraction, cfg.ag_patterns, mcfg.causal)
    pad_like = {i for i in (tokenizer.pad_id, tokenizer.unk_id) if i is not None}
    guidance = Guidance(heads=heads,
                        delim_ids=delimiter_ids(sorted(set(tokenizer.special_ids) - pad_like),
                                                tokenizer.bos_id, tokenizer.eos_id),
                        period_ids=period_piece_ids(tokenizer.pieces()),
                        reduction=cfg.ag_reduction) if heads else None

    model = build_model(cfg, mcfg, counts, tokenizer.vocab_size).to(rt.device)
    if rt.is_main:  # created only once the corpus and options have been accepted
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise OutputError(f"--out {out}: cannot create directory ({err.strerror})") from None
    optimizer = make_optimizer(model, cfg, rt.device)
    start_step, sequences, resumed_from = 0, 0, None
    alpha0: float | None = None if cfg.ag_alpha == "auto" else float(cfg.ag_alpha)
    if resume:
        state = load_state(out, optimizer, model)
        if alpha0 is None:
            alpha0 = state.get("ag_alpha0")
        if state["data_sha256"] != data.fingerprint:
            raise ConfigError("--resume: the tokenised corpus differs from the run's (data_sha256 mismatch); "
                              "pass the same --corpus and --tokenizer")
        tensors, _ = load_model_tensors(out / state["checkpoint"])
        model.load_nb_state_dict({k: v.to(rt.device) for k, v in tensors.items()})
        start_step, sequences, resumed_from = state["step"], state["sequences"], state["step"]
    if rt.is_main:
        write_text_atomic(out / "config.json", cfg.to_json() + "\n")
        write_training_counts(out / "counts.safetensors", data, tokenizer, cfg)
        if resume:
            _truncate_log(out / "log.jsonl", start_step)

    net: torch.nn.Module = model
    if cfg.compile:
        net = torch.compile(model)
    if rt.world > 1:
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(net, device_ids=[rt.local_rank] if rt.device.type == "cuda" else None)

    sampler = TrainSampler(train_stream.n_blocks, cfg.seed)
    micro = cfg.batch_size // (cfg.grad_accum * rt.world)
    tokens_per_step = cfg.batch_size * cfg.seq_len
    peak = peak_flops(rt.device)
    flops_per_token = model.flops_per_token()
    val_points: list[tuple[int, float]] = []
    if resume:
        val_points = [(r["step"], r["val_loss"]) for r in read_log_records(out / "log.jsonl") if "val_loss" in r]
    log_file = open(out / "log.jsonl", "a", encoding="utf-8") if rt.is_main else None
    last_step = min(cfg.steps, stop_at) if stop_at is not None else cfg.steps
    t_start = time.perf_counter()
    run_tokens = 0

    def write(record: dict[str, Any]) -> None:
        if log_file is not None:
            log_file.write(json.dumps(record) + "\n")
            log_file.flush()
        if on_step is not None and rt.is_main:
            on_step(record["step"], record)

    def checkpoint(step: int) -> Path:
        path = out / f"step-{step}.safetensors"
        if rt.is_main:
            save_model(path, model, checkpoint_metadata(cfg, mcfg, step, tokenizer, data))
            save_state(out, step, sequences, optimizer, model, data.fingerprint, alpha0)
        return path

    ckpt_path = out / f"step-{start_step}.safetensors"
    step = start_step
    try:
        model.train()
        for step in range(start_step, last_step):
            record: dict[str, Any] = {"step": step}
            if step % cfg.eval_every == 0:
                record.update(evaluate(model, val_stream, cfg, mcfg, log_u, rt))
                val_points.append((step, record["val_loss"]))
            t0 = time.perf_counter()
            lr = learning_rate(step, cfg)
            for group in optimizer.param_groups:
                group["lr"] = lr
            # All micro-batches of this step, so the loss can be normalised by the global label count.
            batches = []
            for m in range(cfg.grad_accum):
                first = sequences + (rt.rank * cfg.grad_accum + m) * micro
                gen = generator_for(cfg, step, rt.rank, m, device=rt.device)
                batches.append(prepare_batch(train_stream.batch(sampler.blocks(first, micro), rt.device),
                                             mcfg, gen, cfg.mask_rate))
            n_labels = _all_reduce_sum(torch.tensor(float(sum(int((b.labels != -100).sum()) for b in batches)),
                                                    device=rt.device), rt)
            if guidance is not None and alpha0 is None:
                alpha0 = step0_alpha(model, batches, guidance, cfg, mcfg, n_labels, rt)
            alpha = ag_alpha(step, alpha0, cfg.decay_steps, cfg.ag_hold_steps) if guidance else 0.0
            ce_sum = torch.zeros((), device=rt.device)
            ag_sum = torch.zeros((), device=rt.device)
            objective = torch.zeros((), device=rt.device)
            for m, batch in enumerate(batches):
                torch.manual_seed(hash((cfg.seed, step, rt.rank, m, 0xD409)) & 0x7FFF_FFFF_FFFF_FFFF)  # dropout
                sync = contextlib.nullcontext() if (rt.world == 1 or m == cfg.grad_accum - 1) else net.no_sync()
                with sync:
                    with _autocast(rt):
                        logits, qks = net(batch.inputs, key_mask=_key_mask(batch),
                                          guided=guidance.guided if guidance else None)
                    ce = lm_loss(logits, batch.labels, cfg.label_smoothing, reduction="sum")
                    # DDP averages gradients over ranks: scale so the total is the global token mean.
                    loss = ce * rt.world / n_labels.clamp(min=1)
                    if guidance is not None:
                        ag = guidance.loss(qks, batch.inputs, _lengths(batch), mcfg.causal)
                        loss = loss + alpha * ag / cfg.grad_accum
                        ag_sum += ag.detach() / cfg.grad_accum
                    loss.backward()
                ce_sum += ce.detach()
                objective += loss.detach()
            _check_finite(_all_reduce_sum(objective.double(), rt), step, cfg)  # before the update
            if cfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            sequences += cfg.batch_size
            stats = _all_reduce_sum(torch.stack([ce_sum, ag_sum]).double(), rt)
            if rt.device.type == "cuda":
                torch.cuda.synchronize(rt.device)
            dt = time.perf_counter() - t0
            run_tokens += tokens_per_step
            record.update({"loss": float(stats[0]) / max(1.0, float(n_labels)), "lr": lr,
                           "tokens_per_s": tokens_per_step / dt})
            if peak is not None:
                record["mfu"] = flops_per_token * tokens_per_step / dt / (peak * rt.world)
            if guidance is not None:
                record["ag_loss"] = float(stats[1]) / rt.world
                record["ag_alpha"] = alpha
                record["ag_weighted"] = alpha * record["ag_loss"]
            write(record)
            if step == 0:
                check_start(record["loss"], mcfg.vocab_size, cfg, warn)
            if cfg.save_every and (step + 1) % cfg.save_every == 0 and step + 1 < last_step:
                checkpoint(step + 1)
        step = last_step
        final = evaluate(model, val_stream, cfg, mcfg, log_u, rt)
        if not val_points or val_points[-1][0] != last_step:
            val_points.append((last_step, final["val_loss"]))
        write({"step": last_step, **final})
        ckpt_path = checkpoint(last_step)
    except KeyboardInterrupt:
        saved = (out / "train-state.json").exists()
        raise Interrupted(f"interrupted at step {step}; " + (f"{out} holds the last saved state (--resume continues "
                          "from it)" if saved else "no state was saved, so what this run wrote is removed (--save-every N saves a "
                          "resumable state)")) from None
    finally:
        if log_file is not None:
            log_file.close()
    seconds = time.perf_counter() - t_start
    from nbcli.counts import unigram_entropy

    result = TrainResult(
        out=out, steps=last_step, final_val_loss=val_points[-1][1] if val_points else None,
        alc=area_under_curve(val_points), checkpoint=ckpt_path, tokens=run_tokens, seconds=seconds,
        tokens_per_s=run_tokens / seconds if seconds > 0 else 0.0, parameters=model.num_parameters(),
        device=str(rt.device), unigram_entropy=unigram_entropy(data.counts), log_v=math.log(mcfg.vocab_size),
        resumed_from=resumed_from, ag_alpha0=alpha0 if guidance is not None else None, warnings=warnings)
    if rt.is_main:
        write_text_atomic(out / "summary.json", json.dumps(result.as_dict(), indent=2) + "\n")
    return result


def read_log(out: Path | str) -> list[dict[str, Any]]:
    """The records of DIR/log.jsonl."""
    return read_log_records(Path(out) / "log.jsonl")
