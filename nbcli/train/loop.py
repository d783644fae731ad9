"""`nb train`, top to bottom: check the run directory, tokenise, build the model with the papers'
initialisations (saved as step-0.safetensors), then for each update evaluate when due, take one
optimizer step, log, and save the state every --save-every updates; evaluate, checkpoint and
summarise at the end. Under DDP, rank 0 alone checks and writes the run directory and every rank
shares the outcome (`runtime.on_main_rank`): a refusal there stops every rank at once.

The rooms it orchestrates: runtime.py (device, bf16, DDP, compile), rundir.py (the directory's checks
and files), init.py (the model at step 0), step.py (one update: accumulation, AG, no_sync; evaluate),
state.py (checkpoint + optimizer state for --resume).

The update loop itself is task-agnostic: `run_updates` over an `Updates` record (the task's batches,
forward, evaluation and checkpoint metadata) from a `Position` (`start_position`: step 0 or the saved
state). The LM's record is built here (`_set_up`, its forward `step.lm_forward`); translation's in
`nbcli.tasks.translation`; classification's and tagging's in `nbcli.tasks.finetune`.

Exactness of --resume: the data order is a function of (seed, sequence index), MLM masks and dropout
are drawn from generators seeded by (seed, step, micro-batch index in the global batch), the LR
schedule is a function of the step, and the AdamW moments are saved in float32; so a resumed run
repeats the uninterrupted one (and R ranks repeat one process with R times the --grad-accum).
"""
from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from nbcli.errors import Interrupted, naming
from nbcli.model import ModelConfig
from nbcli.ops import unigram_log_prior
from nbcli.tokenizers import Tokenizer, load_tokenizer
from nbcli.train.config import TrainConfig
from nbcli.train.data import (BlockStream, TokenData, TrainSampler, block_prefix, tokenize_corpus,
                              training_documents)
from nbcli.train.guidance import Guidance, ag_alpha, assign_heads, pattern_token_ids
from nbcli.train.init import build_model, check_pretrained_vocab, check_start, model_config
from nbcli.train.rundir import (check_run_directory, create_run_directory, removed_on_failure, write_run_files,
                                write_run_tokenizer, write_summary)
from nbcli.train.runs import area_under_curve, read_log_records
from nbcli.train.runtime import (Runtime, model_flops_utilisation, on_main_rank, peak_flops, process_group_closed,
                                 setup_runtime, synchronize, wrap_model)
from nbcli.train.state import checkpoint_metadata, resume_state, save_checkpoint, save_model
from nbcli.train.step import (Forward, count_labels, evaluate, learning_rate, lm_forward, make_optimizer,
                              micro_batches, optimizer_step, set_learning_rate, step0_alpha)
from nbcli.train.unigram_reg import regulariser_on

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
    # --embedding-init pretrained:VECTORS: per embedding (input; translation: source/target/shared) the
    # vectors' coverage of its vocabulary (nbcli.vectors.vocabulary.vector_embedding)
    embedding_coverage: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["out"] = str(self.out)
        d["checkpoint"] = str(self.checkpoint)
        return d


def attention_guidance(cfg: TrainConfig, mcfg: ModelConfig, tokenizer: Tokenizer) -> Guidance | None:
    """The AG loss of the run's guided heads (paper 001 sec. 3.2), None when no head is guided."""
    heads = assign_heads(cfg.n_head, cfg.ag_fraction, cfg.ag_patterns, mcfg.causal)
    if not heads:
        return None
    delim_ids, period_ids = pattern_token_ids(tokenizer)
    return Guidance(heads=heads, delim_ids=delim_ids, period_ids=period_ids, reduction=cfg.ag_reduction)


def train(cfg: TrainConfig, corpus: list[str], tokenizer_path: Path | str, out: Path | str, *,
          resume: bool = False, stop_at: int | None = None,
          on_step: Callable[[int, dict[str, Any]], None] | None = None,
          on_bytes: Callable[[int, int | None], None] | None = None,
          on_warning: Callable[[str], None] | None = None, allow_vocab_mismatch: bool = False) -> TrainResult:
    """Run `nb train`. `stop_at` stops after that many updates (checkpoint + state saved) while the
    schedule still follows cfg.steps; `--resume` continues from the last saved state. Warnings go to
    `on_warning` when they arise and to TrainResult.warnings / summary.json. `allow_vocab_mismatch`
    accepts --embedding-init pretrained rows recorded with another tokenizer (nbcli.checkpoint.vocab).

    A new run that fails or is interrupted before its first saved state (train-state.json)
    removes what it created in `out` (and `out` itself if it made it), so the same command can
    simply be run again; once a state is saved, the run directory stays and `--resume` continues."""
    out = Path(out)
    with process_group_closed(), removed_on_failure(out, resume):
        return _train(cfg, corpus, tokenizer_path, out, resume=resume, stop_at=stop_at, on_step=on_step,
                      on_bytes=on_bytes, on_warning=on_warning, allow_vocab_mismatch=allow_vocab_mismatch)


@dataclass
class Updates:
    """What the update loop needs from a task, fixed once its run is set up (the LM's from `_set_up`,
    translation's from `nbcli.tasks.translation`)."""

    cfg: TrainConfig
    rt: Runtime
    out: Path
    model: torch.nn.Module
    optimizer: torch.optim.AdamW
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


@dataclass
class _Run:
    """What an LM run trains with, fixed once it is set up: the update loop's record and the LM's data."""

    updates: Updates
    tokenizer: Tokenizer
    data: TokenData
    mcfg: ModelConfig
    embedding_coverage: dict[str, Any] | None = None


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


def _train(cfg: TrainConfig, corpus: list[str], tokenizer_path: Path | str, out: Path, *, resume: bool,
           stop_at: int | None, on_step: Callable[[int, dict[str, Any]], None] | None,
           on_bytes: Callable[[int, int | None], None] | None,
           on_warning: Callable[[str], None] | None, allow_vocab_mismatch: bool = False) -> TrainResult:
    rt = setup_runtime(cfg)
    warnings, warn = warning_sink(rt, on_warning)
    on_main_rank(rt, lambda: check_run_directory(out, cfg, corpus, tokenizer_path, resume))
    run = _set_up(cfg, rt, out, corpus, tokenizer_path, on_bytes, warn, allow_vocab_mismatch)
    position = start_position(run.updates, resume)
    on_main_rank(rt, lambda: write_run_files(out, cfg, run.data, run.tokenizer, position.step if resume else None))
    on_main_rank(rt, lambda: write_run_tokenizer(out, run.tokenizer))
    last_step = min(cfg.steps, stop_at) if stop_at is not None else cfg.steps
    t_start = time.perf_counter()
    checkpoint = run_updates(run.updates, position, last_step, on_step)
    seconds = time.perf_counter() - t_start
    result = _result(run, position, last_step, checkpoint, seconds, warnings)
    on_main_rank(rt, lambda: write_summary(out, result.as_dict()))
    return result


def warning_sink(rt: Runtime, on_warning: Callable[[str], None] | None,
                 ) -> tuple[list[str], Callable[[str], None]]:
    """A run's warnings: the list they collect in (TrainResult.warnings, summary.json) and the function
    that adds one, passing it to `on_warning` as it arises (rank 0 only)."""
    warnings: list[str] = []

    def warn(message: str) -> None:
        warnings.append(message)
        if on_warning is not None and rt.is_main:
            on_warning(message)

    return warnings, warn


def _set_up(cfg: TrainConfig, rt: Runtime, out: Path, corpus: list[str], tokenizer_path: Path | str,
            on_bytes: Callable[[int, int | None], None] | None, warn: Callable[[str], None],
            allow_vocab_mismatch: bool = False) -> _Run:
    """Tokenise the corpus into training and validation blocks, build the model with the papers'
    initialisations and its optimizer; the run directory is created once all of that is accepted."""
    tokenizer = load_tokenizer(tokenizer_path, texts=lambda: training_documents(corpus, cfg.val_fraction))
    vocab_warnings = check_pretrained_vocab(cfg, tokenizer, allow_mismatch=allow_vocab_mismatch)
    data = tokenize_corpus(corpus, tokenizer, cfg.objective, cfg.val_fraction, progress=on_bytes)
    mcfg = model_config(cfg, tokenizer)
    pad_id = tokenizer.pad_id if tokenizer.pad_id is not None else 0
    shown = ", ".join(data.inputs[:3]) + (f" and {len(data.inputs) - 3} more" if len(data.inputs) > 3 else "")
    prefix = block_prefix(tokenizer, cfg.objective)
    with naming(f"--corpus {shown or '(no input)'} ({data.documents} documents)"):
        train_stream = BlockStream(data.train, cfg.seq_len, cfg.objective, pad_id, "training", prefix=prefix)
        val_stream = BlockStream(data.val, cfg.seq_len, cfg.objective, pad_id, "validation", allow_partial=True,
                                 prefix=prefix)
    log_u = unigram_log_prior(data.counts, mcfg.vocab_size, cfg.smoothing_k).to(rt.device)
    guidance = attention_guidance(cfg, mcfg, tokenizer)
    coverage: dict[str, Any] = {}
    model = build_model(cfg, mcfg, data.counts, tokenizer.vocab_size, tokenizer, coverage).to(rt.device)
    for message in [*data.notes, *vocab_warnings]:  # said once the pretrained rows are accepted too, so a bad
        warn(message)                                # file is one line
    on_main_rank(rt, lambda: create_run_directory(out))  # only once the corpus and options are accepted
    optimizer = make_optimizer(model, cfg, rt.device)
    sampler = TrainSampler(train_stream.n_blocks, cfg.seed)
    updates = Updates(
        cfg=cfg, rt=rt, out=out, model=model, optimizer=optimizer,
        batches=lambda step, sequences: micro_batches(train_stream, sampler, cfg, mcfg, rt, step, sequences),
        forward=lm_forward(mcfg.causal, None if cfg.unigram_reg_lambda else cfg.label_smoothing),
        evaluate=lambda step: evaluate(model, val_stream, cfg, mcfg, log_u, rt),
        metadata=lambda step: checkpoint_metadata(cfg, mcfg, step, tokenizer, data), fingerprint=data.fingerprint,
        guidance=guidance, log_u=log_u, vocab_size=mcfg.vocab_size,
        tokens=lambda batches: cfg.batch_size * cfg.seq_len,
        flops_per_token=model.flops_per_token(len(guidance.guided) if guidance else 0), warn=warn)
    return _Run(updates, tokenizer, data, mcfg, {"input": coverage} if coverage else None)


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


def run_updates(u: Updates, position: Position, last_step: int,
                on_step: Callable[[int, dict[str, Any]], None] | None) -> Path:
    """The updates from position.step to last_step, each record appended to DIR/log.jsonl (rank 0)
    and passed to `on_step`; the path of the last checkpoint (`_train_steps`)."""
    with _log(u, on_step) as write:
        return _train_steps(u, position, last_step, write)


@contextlib.contextmanager
def _log(u: Updates, on_step: Callable[[int, dict[str, Any]], None] | None,
         ) -> Iterator[Callable[[dict[str, Any]], None]]:
    """A function that appends a record to DIR/log.jsonl (rank 0) and passes it to `on_step`."""
    log_file = open(u.out / "log.jsonl", "a", encoding="utf-8") if u.rt.is_main else None

    def write(record: dict[str, Any]) -> None:
        if log_file is not None:
            log_file.write(json.dumps(record) + "\n")
            log_file.flush()
        if on_step is not None and u.rt.is_main:
            on_step(record["step"], record)

    try:
        yield write
    finally:
        if log_file is not None:
            log_file.close()


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


def _train_steps(u: Updates, position: Position, last_step: int,
                 write: Callable[[dict[str, Any]], None]) -> Path:
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
            record = _update(u, net, position, meter, last_step)
            write(record)
            if step == 0:
                check_start(record["loss"], u.vocab_size, cfg, u.warn)
            if cfg.save_every and (step + 1) % cfg.save_every == 0 and step + 1 < last_step:
                _save(u, position, step + 1)
        position.step = last_step
        final = u.evaluate(last_step)
        if "val_loss" in final and (not position.val_points or position.val_points[-1][0] != last_step):
            position.val_points.append((last_step, final["val_loss"]))
        if final:   # a task without a validation set evaluates to nothing
            write({"step": last_step, **final})
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


def _update(u: Updates, net: torch.nn.Module, position: Position, meter: _Meter, last_step: int) -> dict[str, Any]:
    """One update at position.step: evaluate first when due, then one optimizer step over all its
    micro-batches; its log record. The next update's batches are built while the device runs this
    one's forward and backward passes (`optimizer_step`'s prefetch)."""
    cfg, rt, step = u.cfg, u.rt, position.step
    record: dict[str, Any] = {"step": step}
    if step % cfg.eval_every == 0:
        record.update(u.evaluate(step))
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


def _result(run: _Run, position: Position, last_step: int, checkpoint: Path, seconds: float,
            warnings: list[str]) -> TrainResult:
    from nbcli.counts import unigram_entropy

    u = run.updates
    val_points = position.val_points
    return TrainResult(
        out=u.out, steps=last_step, final_val_loss=val_points[-1][1] if val_points else None,
        alc=area_under_curve(val_points), checkpoint=checkpoint, tokens=position.tokens, seconds=seconds,
        tokens_per_s=position.tokens / seconds if seconds > 0 else 0.0,
        parameters=u.model.num_parameters(),  # type: ignore[operator]
        device=str(u.rt.device), unigram_entropy=unigram_entropy(run.data.counts),
        log_v=math.log(run.mcfg.vocab_size), resumed_from=position.resumed_from,
        ag_alpha0=position.alpha0 if u.guidance is not None else None, warnings=warnings,
        embedding_coverage=run.embedding_coverage)
