"""One optimizer step of `nb train` and the evaluation between steps.

One update (`optimizer_step`) sums the gradients of --grad-accum micro-batches per rank, normalised
by the global count of labelled tokens so the update is that of one batch of --batch-size sequences:

    L = sum_tokens CE / N_labels  +  alpha_t * mean_micro L_AG       (paper 001 eq. 4)

and, while --unigram-reg-lambda is on (updates < --unigram-reg-steps; paper 000 app. B.3),
minus lambda * sum_tokens KL(omega || p_theta) / N_labels (`unigram_reg.unigram_kl`).

DDP all-reduces gradients only in the last micro-batch's backward (`no_sync` on the others), and no
update is applied from a non-finite loss. The data order, MLM masks and dropout are functions of
(seed, step, micro-batch index in the global batch: `global_micro`), so a resumed run repeats the
uninterrupted one and R ranks x N micro-steps draw what one process with --grad-accum R x N draws.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from nbcli.errors import TrainingDiverged
from nbcli.models.lm import ModelConfig, Transformer
from nbcli.models.masking import mlm_mask
from nbcli.models.output import lm_loss
from nbcli.array_ops import kl_divergence
from nbcli.padding import padding_mask
from nbcli.precision import autocast
from nbcli.probes import bias_vs_unigram
from nbcli.train.config import TrainConfig
from nbcli.train.data import BlockBatch, BlockStream, TrainSampler
from nbcli.train.guidance import Guidance, auto_alpha
from nbcli.train.runtime import Runtime, all_reduce_sum, device_ids
from nbcli.train.unigram_reg import unigram_kl


@dataclass(frozen=True)
class SummedCE:
    """What a forward returns instead of logits when it sums the cross-entropy of batch.labels itself
    (the LM's chunked output layer, `nbcli.models.output.chunked_lm_loss`): that sum, a scalar tensor."""

    value: torch.Tensor


# One micro-batch through the model: (net, batch, guidance, runtime) -> (logits [..., V] whose labels are
# batch.labels, or their SummedCE; the AG loss or None). `lm_forward` is the LM's; a task brings its own
# (nbcli.tasks).
Forward = Callable[[torch.nn.Module, Any, "Guidance | None", Runtime],
                   tuple["torch.Tensor | SummedCE", "torch.Tensor | None"]]


def lm_forward(causal: bool, label_smoothing: float | None = None) -> Forward:
    """The decoder-only / MLM forward: logits of batch.inputs (under autocast), AG loss of its guided heads.
    With `label_smoothing` (a number) the model sums the cross-entropy of batch.labels in its forward
    instead (SummedCE: inside the compiled graph under --compile, no [B, T, V] float32 logits);
    None: the logits (what the unigram regulariser needs)."""
    def forward(net: torch.nn.Module, batch: BlockBatch, guidance: Guidance | None, rt: Runtime,
                ) -> tuple[torch.Tensor | SummedCE, torch.Tensor | None]:
        guided = guidance.guided if guidance else None
        with autocast(rt.device, rt.amp_dtype):
            if label_smoothing is None:
                out, qks = net(batch.inputs, key_mask=_key_mask(batch), guided=guided)
            else:
                ce, qks = net(batch.inputs, key_mask=_key_mask(batch), guided=guided, labels=batch.labels,
                              label_smoothing=label_smoothing)
                out = SummedCE(ce)
        ag = guidance.loss(qks, batch.inputs, _lengths(batch), causal) if guidance is not None else None
        return out, ag
    return forward


def summed_ce(out: torch.Tensor | SummedCE, labels: torch.Tensor, label_smoothing: float) -> torch.Tensor:
    """The summed cross-entropy of a forward's result: its SummedCE, or `lm_loss` of its logits."""
    if isinstance(out, SummedCE):
        return out.value
    return lm_loss(out, labels, label_smoothing, reduction="sum")


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW (betas (--adam-beta1, --adam-beta2), eps --adam-eps); weight decay on matrices only (never on biases,
    LayerNorms or the output bias); frozen parameters (--freeze-embeddings) are left out."""
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    decay = [p for n, p in params if p.dim() >= 2]
    no_decay = [p for n, p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps,
                             fused=device.type == "cuda")


def learning_rate(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up over --warmup steps, then cosine (GPT-2/nanoGPT) or linear (RoBERTa, paper 001's
    release: `get_linear_schedule_with_warmup`) decay to lr * min_lr_ratio at --steps, fairseq's
    inverse square root lr * sqrt(warmup / (step + 1)) after the warm-up (Vaswani et al. 2017 eq. 3's
    shape; no floor, no end), or constant (paper 002's translation runs name no schedule)."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    if cfg.lr_schedule == "inverse-sqrt":
        return cfg.lr * math.sqrt(max(1, cfg.warmup) / (step + 1))
    if cfg.lr_schedule == "constant":
        return cfg.lr
    progress = min(1.0, (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))
    floor = cfg.lr * cfg.min_lr_ratio
    if cfg.lr_schedule == "linear":
        return floor + (cfg.lr - floor) * (1.0 - progress)
    return floor + 0.5 * (cfg.lr - floor) * (1 + math.cos(math.pi * progress))


@dataclass(frozen=True)
class StepLosses:
    """One update's losses over all ranks: cross-entropy per labelled token, the AG loss
    (mean over micro-batches and ranks; 0.0 without guidance) before alpha weighs it, and the mean
    KL(omega || p_theta) per labelled token (None when the unigram regulariser is off)."""

    loss: float
    ag_loss: float
    unigram_kl: float | None = None


def micro_batches(stream: BlockStream, sampler: TrainSampler, cfg: TrainConfig, mcfg: ModelConfig, rt: Runtime,
                  step: int, sequences: int) -> list[BlockBatch]:
    """This rank's --grad-accum micro-batches of update `step`, the global batch starting at sequence
    `sequences` of the sampler's order (MLM-masked by generators seeded from (seed, step, `global_micro`))."""
    micro = cfg.batch_size // (cfg.grad_accum * rt.world)
    batches = []
    for m in range(cfg.grad_accum):
        first = sequences + global_micro(cfg, rt, m) * micro
        gen = generator_for(cfg, step, 0, global_micro(cfg, rt, m), device=rt.device)
        batches.append(prepare_batch(stream.batch(sampler.blocks(first, micro), rt.device), mcfg, gen, cfg.mask_rate))
    return batches


def global_micro(cfg: TrainConfig, rt: Runtime, m: int) -> int:
    """The place of this rank's micro-batch `m` in the update's global batch: rank r's micro-steps are
    r x --grad-accum ... r x --grad-accum + N - 1, so what a micro-batch holds and the generators of its
    MLM mask and dropout depend on that place alone, not on how the batch is split over ranks (one
    process with --grad-accum R x N computes what R ranks x N micro-steps compute)."""
    return rt.rank * cfg.grad_accum + m


def count_labels(batches: list[BlockBatch], rt: Runtime) -> torch.Tensor:
    """The number of labelled tokens in the whole update (all micro-batches, all ranks), a float32 scalar
    tensor on the device, summed there: no host round trip per micro-batch."""
    counts = torch.stack([(b.labels != -100).sum() for b in batches]).sum()
    return all_reduce_sum(counts.to(device=rt.device, dtype=torch.float32), rt)


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def gradient_sync(net: torch.nn.Module, rt: Runtime, last: bool) -> contextlib.AbstractContextManager[Any]:
    """DDP all-reduces gradients during backward; with accumulation only the last micro-batch needs
    to (`no_sync` on the others: the gradients sum locally, the result is the same)."""
    if rt.world == 1 or last:
        return contextlib.nullcontext()
    return net.no_sync()  # type: ignore[operator]


def optimizer_step(net: torch.nn.Module, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                   batches: list[Any], n_labels: torch.Tensor, guidance: Guidance | None, alpha: float,
                   step: int, cfg: TrainConfig, mcfg: ModelConfig | None, rt: Runtime, *,
                   unigram_reg: tuple[float, torch.Tensor] | None = None, forward: Forward | None = None,
                   prefetch: Callable[[], None] | None = None) -> StepLosses:
    """Forward and backward every micro-batch through `net` (the model, compiled and/or in DDP),
    check the loss is finite, clip, update `model`'s parameters and clear the gradients.
    `unigram_reg` = (lambda, log omega [V]): subtract lambda KL(omega || p_theta) per labelled token
    (paper 000 app. B.3); None: the standard objective. `forward`: the task's (default: the LM's).
    `prefetch` runs once every backward is queued and before the update waits for them (the loop
    builds the next update's batches there, on the host, while the device computes)."""
    if forward is None:
        assert mcfg is not None
        forward = lm_forward(mcfg.causal)
    ce_sum = torch.zeros((), device=rt.device)
    ag_sum = torch.zeros((), device=rt.device)
    kl_sum = torch.zeros((), device=rt.device)
    objective = torch.zeros((), device=rt.device)
    for m, batch in enumerate(batches):
        # dropout: seeded by the micro-batch's place in the global batch (the rank slot stays 0, so a
        # single process draws what it drew before `global_micro`)
        torch.manual_seed(hash((cfg.seed, step, 0, global_micro(cfg, rt, m), 0xD409)) & 0x7FFF_FFFF_FFFF_FFFF)
        with gradient_sync(net, rt, last=m == cfg.grad_accum - 1):
            logits, ag = forward(net, batch, guidance, rt)
            ce = summed_ce(logits, batch.labels, cfg.label_smoothing)
            lm = ce
            if unigram_reg is not None:   # paper 000 app. B.3: CE - lambda KL(omega || p_theta)
                assert not isinstance(logits, SummedCE), "the unigram regulariser needs the logits"
                reg_lambda, log_omega = unigram_reg
                # summed over the labelled positions by a mask, not an index (no device sync per micro-batch)
                kl = torch.where(batch.labels != -100, unigram_kl(logits, log_omega), 0.0).sum()
                lm = ce - reg_lambda * kl
                kl_sum += kl.detach()
            # DDP averages gradients over ranks: scale so the total is the global token mean.
            loss = lm * rt.world / n_labels.clamp(min=1)
            if ag is not None:
                loss = loss + alpha * ag / cfg.grad_accum
                ag_sum += ag.detach() / cfg.grad_accum
            loss.backward()
        ce_sum += ce.detach()
        objective += loss.detach()
    if prefetch is not None:
        prefetch()
    # The update's one device-to-host copy: the objective (checked finite before the update) and the
    # logged sums, summed over ranks, with the label count (already global).
    sums = all_reduce_sum(torch.stack([objective, ce_sum, ag_sum, kl_sum]).double(), rt)
    objective_total, ce_total, ag_total, kl_total, labels = torch.cat([sums, n_labels.double().reshape(1)]).tolist()
    check_finite(objective_total, step, cfg)  # before the update
    if cfg.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    n = max(1.0, labels)
    return StepLosses(loss=ce_total / n, ag_loss=ag_total / rt.world,
                      unigram_kl=kl_total / n if unigram_reg is not None else None)


def check_finite(value: float, step: int, cfg: TrainConfig) -> None:
    """Stop before an update from a non-finite loss (it would turn every weight into NaN)."""
    if not math.isfinite(value):
        raise TrainingDiverged(
            f"training loss is {value} at step {step} (lr {cfg.lr:g}"
            + (f", ag-alpha {cfg.ag_alpha}" if cfg.ag_fraction else "")
            + (f", embedding {cfg.embedding_init}" if cfg.embedding_init.startswith("pretrained:") else "")
            + (f", unigram-reg-lambda {cfg.unigram_reg_lambda:g}" if step < cfg.unigram_reg_steps else "")
            + "); no update was applied, no checkpoint of this step written")


@torch.no_grad()
def step0_alpha(model: torch.nn.Module, batches: list[Any], guidance: Guidance, cfg: TrainConfig,
                mcfg: ModelConfig | None, n_labels: torch.Tensor, rt: Runtime, forward: Forward | None = None) -> float:
    """`--ag-alpha auto`: alpha_0 = L_LM / L_AG on the step-0 update's batches (all ranks and
    micro-steps; evaluation mode, no gradient), so alpha_0 L_AG = L_LM at step 0 (paper 001 sec. 4.5)."""
    if forward is None:
        assert mcfg is not None
        forward = lm_forward(mcfg.causal)
    was_training = model.training
    model.eval()
    ce_sum = torch.zeros((), dtype=torch.float64, device=rt.device)
    ag_sum = torch.zeros((), dtype=torch.float64, device=rt.device)
    for batch in batches:
        logits, ag = forward(model, batch, guidance, rt)
        assert ag is not None
        ce_sum += summed_ce(logits, batch.labels, cfg.label_smoothing).double()
        ag_sum += ag.double() / len(batches)
    totals = all_reduce_sum(torch.stack([ce_sum, ag_sum]), rt)
    if was_training:
        model.train()
    return auto_alpha(float(totals[0]) / max(1.0, float(n_labels)), float(totals[1]) / rt.world)


def generator_for(cfg: TrainConfig, *parts: int, device: torch.device | None = None) -> torch.Generator:
    g = torch.Generator(device=device or "cpu")
    g.manual_seed(hash((cfg.seed,) + parts) & 0x7FFF_FFFF_FFFF_FFFF)
    return g


def prepare_batch(batch: BlockBatch, mcfg: ModelConfig, gen: torch.Generator | None, mask_rate: float) -> BlockBatch:
    """MLM: mask the inputs (labels become the original ids at selected positions). CLM: as is."""
    if mcfg.objective != "mlm":
        return batch
    key_mask = _key_mask(batch)
    special = device_ids(mcfg.special_ids, batch.inputs.device)   # built once per device, not per batch
    inputs, labels = mlm_mask(batch.inputs, mcfg, gen, key_mask, mask_rate, special)
    return BlockBatch(inputs=inputs, labels=labels, lengths=batch.lengths)


def _key_mask(batch: BlockBatch) -> torch.Tensor | None:
    return None if batch.lengths is None else padding_mask(batch.lengths, batch.inputs.size(1))


def _lengths(batch: BlockBatch) -> torch.Tensor:
    if batch.lengths is not None:
        return batch.lengths
    return torch.full((batch.inputs.size(0),), batch.inputs.size(1), device=batch.inputs.device)


def eval_sums(logits: torch.Tensor, labels: torch.Tensor, log_u: torch.Tensor) -> torch.Tensor:
    """[4] float64 sums over N predicted positions (logits [N, V], labels [N]) of the evaluation's
    metrics (paper 000 fig. 1): -log p(label), KL(p || u), KL(p || uniform) and the count N. Outside
    autocast and in float32 per position (each position's sum over V), then summed in float64."""
    with torch.autocast(device_type=logits.device.type, enabled=False):
        logp = F.log_softmax(logits.float(), dim=-1)                             # [N, V]
        p = logp.exp()
        nll = -logp.gather(1, labels[:, None])[:, 0]
        kl_u = kl_divergence(log_p=logp, log_q=log_u.float())
        kl_uniform = (p * logp).sum(-1) + math.log(logits.shape[-1])
        rows = torch.stack([nll, kl_u, kl_uniform]).double().sum(-1)
    return torch.cat([rows, rows.new_tensor([labels.numel()])])


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
    for start in range(rt.rank * micro, n_blocks, micro * rt.world):
        blocks = list(range(start, min(start + micro, n_blocks)))
        batch = stream.batch(blocks, rt.device)
        if mcfg.objective == "mlm":
            rows = [prepare_batch(BlockBatch(batch.inputs[i:i + 1], batch.labels[i:i + 1],
                                        None if batch.lengths is None else batch.lengths[i:i + 1]),
                                  mcfg, generator_for(cfg, 0xE7A1, b, device=rt.device), cfg.mask_rate)
                    for i, b in enumerate(blocks)]
            batch = BlockBatch(torch.cat([r.inputs for r in rows]), torch.cat([r.labels for r in rows]), batch.lengths)
        with autocast(rt.device, rt.amp_dtype):
            logits, _ = model(batch.inputs, key_mask=_key_mask(batch))      # float32 (model.output_logits)
        sel = batch.labels != -100
        totals += eval_sums(logits[sel], batch.labels[sel], log_u)
    out = prediction_fields(all_reduce_sum(totals, rt), model.head_bias, log_u)
    if was_training:
        model.train()
    return out


def prediction_fields(totals: torch.Tensor, bias: torch.Tensor | None, log_u: torch.Tensor) -> dict[str, float]:
    """The eval fields of `eval_sums` totals summed over batches and ranks: val_loss, kl_unigram =
    mean KL(p_theta(.|ctx) || u), kl_uniform = mean KL(p_theta || uniform) (paper 000 fig. 1); with an
    output bias b, bias_kl_unigram = KL(softmax(b) || u) and bias_norm = ||b|| (app. B.5, figs. 11-12)."""
    count = max(1.0, float(totals[3]))
    out = {"val_loss": float(totals[0]) / count, "kl_unigram": float(totals[1]) / count,
           "kl_uniform": float(totals[2]) / count}
    if bias is not None:
        stats = bias_vs_unigram(bias.detach().float().cpu().numpy(), log_u.double().cpu().numpy())
        out["bias_kl_unigram"] = stats.kl_bias_to_unigram
        out["bias_norm"] = stats.norm
    return out
