"""The shared update loop of every task: from a `Position` (step 0, or the saved state with
--resume) to the last step, each update evaluating first when due, taking one optimizer step over
its micro-batches (`step.optimizer_step`: accumulation, attention guidance, the unigram regulariser,
no_sync), logging, and saving the state every --save-every updates; then the final evaluation and
checkpoint. What a task brings is an `Updates` record (its batches, forward, evaluation, checkpoint
metadata); what happens after an evaluation or a log record is a list of callbacks
(`nbcli.train.callbacks`).

Exactness of --resume: the data order is a function of (seed, sequence index), MLM masks and dropout
are drawn from generators seeded by (seed, step, micro-batch index in the global batch), the LR
schedule is a function of the step, and the AdamW moments are saved in float32; so a resumed run
repeats the uninterrupted one (and R ranks repeat one process with R times the --grad-accum).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from nbcli.checkpoint.runs import read_log_records
from nbcli.errors import Interrupted
from nbcli.train.callbacks import Callback, Events
from nbcli.train.config import TrainConfig
from nbcli.train.guidance import ag_alpha
from nbcli.train.init import check_start
from nbcli.train.runtime import Runtime, model_flops_utilisation, on_main_rank, peak_flops, synchronize, wrap_model
from nbcli.train.state import resume_state, save_checkpoint, save_model
from nbcli.train.step import (Forward, count_labels, learning_rate, optimizer_step, set_learning_rate,
                              step0_alpha)
from nbcli.train.unigram_reg import regulariser_on


@dataclass
class Updates:
    """What the update loop needs from a task, fixed once its run is set up (`nbcli.train.loop`)."""

    cfg: TrainConfig
    rt: Runtime
    out: Path
    model: torch.nn.Module
    batches: Callable[[int, int], list[Any]]    # (step, sequences consumed) -> this rank's micro-batches
    forward: Forward                            # one micro-batch through the model (`step.lm_forward`)
    evaluate: Callable[[int], dict[str, Any]]   # the eval fields at a step, val_loss among them (every rank;
                                                # {} for a run without a validation set)
    metadata: Callable[[int], dict[str, str]]   # the checkpoint metadata of step N
    fingerprint: str                            # of the training data, saved with the state (--resume checks it)
    guidance: Any | None                        # the AG loss's heads (None: no AG); `forward` computes the loss
    log_u: torch.Tensor                         # log omega [V]: the unigram regulariser's reference
    vocab_size: int                             # of the predicted tokens (the step-0 loss check against log V)
    tokens: Callable[[list[Any]], int]          # tokens of one update over all ranks (tokens_per_s)
    flops_per_token: float                      # training FLOPs per token (MFU)
    warn: Callable[[str], None]
    save_initial: bool = True                   # the initial model as step-0.safetensors (the LM's figures)
    optimizer: torch.optim.AdamW | None = None  # made by the orchestration (`loop.run_training`)


@dataclass
class Position:
    """Where a run is: the next update, sequences consumed, AG's alpha_0 once known, the validation
    points so far (for the ALC), the step the run resumed from, the tokens the job trained on (all
    ranks) and the seconds its updates took in this process (evaluation and saving excluded)."""

    step: int = 0
    sequences: int = 0
    alpha0: float | None = None
    val_points: list[tuple[int, float]] = field(default_factory=list)
    resumed_from: int | None = None
    tokens: int = 0
    seconds: float = 0.0
    prefetched: tuple[int, int, list[Any]] | None = None   # (step, sequences, its batches) built ahead



def start_position(u: Updates, resume: bool) -> Position:
    """Step 0, or with --resume the saved state: model, AdamW moments, data position, alpha_0 and
    the validation points logged before its step."""
    alpha0 = None if u.cfg.ag_alpha == "auto" else float(u.cfg.ag_alpha)
    if not resume:
        return Position(alpha0=alpha0)
    state = resume_state(u.out, u.model, u.optimizer, u.fingerprint, u.rt.device)  # type: ignore[arg-type]
    if alpha0 is None:
        alpha0 = state.get("ag_alpha0")
    # the records from the resumed step on are written again (write_run_files truncates the log): the
    # final evaluation of a run stopped with --stop-at is no point of the uninterrupted run's curve
    val_points = [(r["step"], r["val_loss"]) for r in read_log_records(u.out / "log.jsonl")
                  if "val_loss" in r and r["step"] < state["step"]]
    return Position(step=state["step"], sequences=state["sequences"], alpha0=alpha0, val_points=val_points,
                    resumed_from=state["step"])


def run_updates(u: Updates, position: Position, last_step: int, callbacks: Sequence[Callback] = ()) -> Path:
    """The updates from position.step to last_step, each record passed to the callbacks' `on_log`
    (rank 0: DIR/log.jsonl, the face's progress), each evaluation to their `on_evaluate`; the path
    of the last checkpoint (`_train_steps`). Every callback's `on_train_end` runs however it ends."""
    events = Events(callbacks, u.rt.is_main)
    try:
        return _train_steps(u, position, last_step, events)
    finally:
        events.ended()


def _evaluate(u: Updates, step: int, events: Events) -> dict[str, Any]:
    """The task's evaluation at `step`, handed to the callbacks (a scheduled one: at an --eval-every
    step or the run's last)."""
    return events.evaluated(step, u.evaluate(step), scheduled=step % u.cfg.eval_every == 0 or step == u.cfg.steps)


def _save(u: Updates, position: Position, step: int, *, state: bool = True) -> Path:
    """DIR/step-N.safetensors (rank 0; every rank shares the outcome), with the training state that
    resumes from it unless `state` is False (step 0: the initial model, for the figures that start there)."""
    path = u.out / f"step-{step}.safetensors"
    metadata = u.metadata(step)
    if state:
        on_main_rank(u.rt, lambda: save_checkpoint(u.out, step, position.sequences, u.model,  # type: ignore[arg-type]
                                                   u.optimizer, metadata, u.fingerprint, position.alpha0))
    else:
        on_main_rank(u.rt, lambda: save_model(path, u.model, metadata))  # type: ignore[arg-type]
    return path


def _train_steps(u: Updates, position: Position, last_step: int, events: Events) -> Path:
    """The updates from position.step to last_step (the initial model saved as step 0 first, the
    state every --save-every updates), then the final evaluation and checkpoint; its path."""
    cfg = u.cfg
    net = wrap_model(u.model, cfg, u.rt)
    meter = _Meter(u)
    try:
        u.model.train()
        if position.step == 0 and last_step > 0 and u.save_initial:
            _save(u, position, 0, state=False)
        for step in range(position.step, last_step):
            position.step = step
            record = _update(u, net, position, meter, last_step, events)
            events.logged(record)
            if step == 0:
                check_start(record["loss"], u.vocab_size, cfg, u.warn)
            if cfg.save_every and (step + 1) % cfg.save_every == 0 and step + 1 < last_step:
                _save(u, position, step + 1)
        position.step = last_step
        final = _evaluate(u, last_step, events)
        if "val_loss" in final and (not position.val_points or position.val_points[-1][0] != last_step):
            position.val_points.append((last_step, final["val_loss"]))
        if final:   # a task without a validation set evaluates to nothing
            events.logged({"step": last_step, **final})
        return _save(u, position, last_step)
    except KeyboardInterrupt:
        out = u.out
        saved = (out / "train-state.json").exists()
        raise Interrupted(f"interrupted at step {position.step}; " + (
            f"{out} holds the last saved state (--resume continues from it)" if saved else
            "no state was saved, so what this run wrote is removed (--save-every N saves a resumable state)")) from None


class _Meter:
    """Throughput and MFU of each update: FLOPs per token and the device's peak."""

    def __init__(self, u: Updates) -> None:
        self.peak = peak_flops(u.rt.device)
        self.flops_per_token = u.flops_per_token
        self.world = u.rt.world

    def fields(self, tokens: int, seconds: float) -> dict[str, float]:
        """tokens_per_s of an update of `tokens` tokens, and mfu on a GPU whose peak is known."""
        record = {"tokens_per_s": tokens / seconds}
        if self.peak is not None:
            record["mfu"] = model_flops_utilisation(self.flops_per_token, tokens, seconds, self.peak, self.world)
        return record


def _next_batches(u: Updates, position: Position) -> list[Any]:
    """This update's micro-batches: those the previous update built ahead (`_update`'s prefetch), or
    built now; the same either way (a function of step and sequences consumed)."""
    ahead, position.prefetched = position.prefetched, None
    if ahead is not None and ahead[:2] == (position.step, position.sequences):
        return ahead[2]
    return u.batches(position.step, position.sequences)


def _update(u: Updates, net: torch.nn.Module, position: Position, meter: _Meter, last_step: int,
            events: Events) -> dict[str, Any]:
    """One update at position.step: evaluate first when due, then one optimizer step over all its
    micro-batches; its log record. The next update's batches are built while the device runs this
    one's forward and backward passes (`optimizer_step`'s prefetch)."""
    cfg, rt, step = u.cfg, u.rt, position.step
    record: dict[str, Any] = {"step": step}
    if step % cfg.eval_every == 0:
        record.update(_evaluate(u, step, events))
        if "val_loss" in record:
            position.val_points.append((step, record["val_loss"]))
    t0 = time.perf_counter()
    lr = learning_rate(step, cfg)
    set_learning_rate(u.optimizer, lr)
    # All micro-batches of this step, so the loss can be normalised by the global label count.
    batches = _next_batches(u, position)

    def prefetch() -> None:
        if step + 1 < last_step:
            sequences = position.sequences + cfg.batch_size
            position.prefetched = (step + 1, sequences, u.batches(step + 1, sequences))

    n_labels = count_labels(batches, rt)
    guidance = u.guidance
    if guidance is not None and position.alpha0 is None:
        position.alpha0 = step0_alpha(u.model, batches, guidance, cfg, None, n_labels, rt, forward=u.forward)
    alpha = ag_alpha(step, position.alpha0, cfg.decay_steps, cfg.ag_hold_steps) if guidance else 0.0
    reg_on = regulariser_on(step, cfg.unigram_reg_lambda, cfg.unigram_reg_steps)
    losses = optimizer_step(net, u.model, u.optimizer, batches, n_labels, guidance, alpha, step, cfg, None, rt,
                            unigram_reg=(cfg.unigram_reg_lambda, u.log_u) if reg_on else None, forward=u.forward,
                            prefetch=prefetch)
    position.sequences += cfg.batch_size
    synchronize(rt)
    dt = time.perf_counter() - t0
    tokens = u.tokens(batches)
    position.tokens += tokens
    position.seconds += dt
    record.update({"loss": losses.loss, "lr": lr})
    record.update(meter.fields(tokens, dt))
    if guidance is not None:
        record["ag_loss"] = losses.ag_loss
        record["ag_alpha"] = alpha
        record["ag_weighted"] = alpha * record["ag_loss"]
    if cfg.unigram_reg_lambda:   # paper 000 app. B.3: on for updates < S, then off
        record["unigram_reg_on"] = reg_on
        if losses.unigram_kl is not None:
            record["unigram_kl"] = losses.unigram_kl
            record["unigram_reg_weighted"] = -cfg.unigram_reg_lambda * losses.unigram_kl
    return record
