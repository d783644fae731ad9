"""`nb train`, top to bottom: check the run directory, tokenise, build the model with the papers'
initialisations, then for each update evaluate when due, take one optimizer step, log, and save the
state every --save-every updates; evaluate, checkpoint and summarise at the end.

The rooms it orchestrates: runtime.py (device, bf16, DDP, compile), rundir.py (the directory's checks
and files), init.py (the model at step 0), step.py (one update: accumulation, AG, no_sync; evaluate),
state.py (checkpoint + optimizer state for --resume).

Exactness of --resume: the data order is a function of (seed, sequence index), MLM masks and dropout
are drawn from generators seeded by (seed, step, rank, micro-step), the LR schedule is a function of
the step, and the AdamW moments are saved in float32; so a resumed run repeats the uninterrupted one.
"""
from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nbcli.errors import Interrupted, naming
from nbcli.model import ModelConfig
from nbcli.ops import unigram_log_prior
from nbcli.tokenizers import Tokenizer, load_tokenizer
from nbcli.train.config import TrainConfig
from nbcli.train.data import BlockStream, TrainSampler, block_prefix, tokenize_corpus
from nbcli.train.guidance import Guidance, ag_alpha, assign_heads, pattern_token_ids
from nbcli.train.init import build_model, check_pretrained_vocab, check_start, model_config
from nbcli.train.rundir import (check_run_directory, create_run_directory, removed_on_failure, write_run_files,
                                write_summary)
from nbcli.train.runs import area_under_curve, read_log_records
from nbcli.train.runtime import model_flops_utilisation, peak_flops, setup_runtime, synchronize, wrap_model
from nbcli.train.state import checkpoint_metadata, resume_state, save_checkpoint
from nbcli.train.step import (count_labels, evaluate, learning_rate, make_optimizer, micro_batches, optimizer_step,
                              set_learning_rate, step0_alpha)
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
    with removed_on_failure(out, resume):
        return _train(cfg, corpus, tokenizer_path, out, resume=resume, stop_at=stop_at, on_step=on_step,
                      on_bytes=on_bytes, on_warning=on_warning, allow_vocab_mismatch=allow_vocab_mismatch)


def _train(cfg: TrainConfig, corpus: list[str], tokenizer_path: Path | str, out: Path, *, resume: bool,
           stop_at: int | None, on_step: Callable[[int, dict[str, Any]], None] | None,
           on_bytes: Callable[[int, int | None], None] | None,
           on_warning: Callable[[str], None] | None, allow_vocab_mismatch: bool = False) -> TrainResult:
    warnings: list[str] = []

    def warn(message: str) -> None:
        warnings.append(message)
        if on_warning is not None and rt.is_main:
            on_warning(message)

    rt = setup_runtime(cfg)
    if rt.is_main:
        check_run_directory(out, cfg, corpus, tokenizer_path, resume)

    tokenizer = load_tokenizer(tokenizer_path)
    for message in check_pretrained_vocab(cfg, tokenizer, allow_mismatch=allow_vocab_mismatch):
        warn(message)
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

    model = build_model(cfg, mcfg, data.counts, tokenizer.vocab_size).to(rt.device)
    if rt.is_main:  # created only once the corpus and options have been accepted
        create_run_directory(out)
    optimizer = make_optimizer(model, cfg, rt.device)
    start_step, sequences, resumed_from = 0, 0, None
    alpha0: float | None = None if cfg.ag_alpha == "auto" else float(cfg.ag_alpha)
    if resume:
        state = resume_state(out, model, optimizer, data.fingerprint, rt.device)
        if alpha0 is None:
            alpha0 = state.get("ag_alpha0")
        start_step, sequences, resumed_from = state["step"], state["sequences"], state["step"]
    if rt.is_main:
        write_run_files(out, cfg, data, tokenizer, start_step if resume else None)

    net = wrap_model(model, cfg, rt)

    sampler = TrainSampler(train_stream.n_blocks, cfg.seed)
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
        if rt.is_main:
            return save_checkpoint(out, step, sequences, model, optimizer,
                                   checkpoint_metadata(cfg, mcfg, step, tokenizer, data), data.fingerprint, alpha0)
        return out / f"step-{step}.safetensors"

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
            set_learning_rate(optimizer, lr)
            # All micro-batches of this step, so the loss can be normalised by the global label count.
            batches = micro_batches(train_stream, sampler, cfg, mcfg, rt, step, sequences)
            n_labels = count_labels(batches, rt)
            if guidance is not None and alpha0 is None:
                alpha0 = step0_alpha(model, batches, guidance, cfg, mcfg, n_labels, rt)
            alpha = ag_alpha(step, alpha0, cfg.decay_steps, cfg.ag_hold_steps) if guidance else 0.0
            reg_on = regulariser_on(step, cfg.unigram_reg_lambda, cfg.unigram_reg_steps)
            losses = optimizer_step(net, model, optimizer, batches, n_labels, guidance, alpha, step, cfg, mcfg, rt,
                                    unigram_reg=(cfg.unigram_reg_lambda, log_u) if reg_on else None)
            sequences += cfg.batch_size
            synchronize(rt)
            dt = time.perf_counter() - t0
            run_tokens += tokens_per_step
            record.update({"loss": losses.loss, "lr": lr,
                           "tokens_per_s": tokens_per_step / dt})
            if peak is not None:
                record["mfu"] = model_flops_utilisation(flops_per_token, tokens_per_step, dt, peak, rt.world)
            if guidance is not None:
                record["ag_loss"] = losses.ag_loss
                record["ag_alpha"] = alpha
                record["ag_weighted"] = alpha * record["ag_loss"]
            if cfg.unigram_reg_lambda:   # paper 000 app. B.3: on for updates < S, then off
                record["unigram_reg_on"] = reg_on
                if losses.unigram_kl is not None:
                    record["unigram_kl"] = losses.unigram_kl
                    record["unigram_reg_weighted"] = -cfg.unigram_reg_lambda * losses.unigram_kl
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
        write_summary(out, result.as_dict())
    return result


