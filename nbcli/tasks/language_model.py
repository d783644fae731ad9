"""The LM's run (`nb train lm`, clm and mlm): documents tokenised into blocks, nb's Transformer
(`nbcli.models.lm`) with the papers' initialisations (saved as step-0.safetensors), validation loss and
paper 000 fig. 1's divergences at every evaluation; the orchestration is the shared one
(`nbcli.train.loop.run_training`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from nbcli.analysis.curves import area_under_curve
from nbcli.analysis.patterns import assign_heads, pattern_token_ids
from nbcli.errors import naming
from nbcli.models.lm import ModelConfig
from nbcli.ops import unigram_log_prior
from nbcli.tokenizers import Tokenizer, load_tokenizer
from nbcli.train.config import TrainConfig
from nbcli.train.data import BlockStream, TrainSampler, block_prefix, tokenize_corpus, training_documents
from nbcli.train.guidance import Guidance
from nbcli.train.callbacks import Callback
from nbcli.train.init import build_model, check_pretrained_vocab, model_config
from nbcli.train.loop import Finished, TaskRun, TrainResult, Warn, run_training
from nbcli.train.rundir import check_run_directory, write_run_files, write_run_tokenizer
from nbcli.train.runtime import Runtime
from nbcli.train.state import checkpoint_metadata
from nbcli.train.step import evaluate, lm_forward, micro_batches
from nbcli.train.updates import Updates


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
          on_warning: Callable[[str], None] | None = None, allow_vocab_mismatch: bool = False,
          callbacks: Sequence[Callback] = (), valid: Sequence[str] = ()) -> TrainResult:
    """Run `nb train lm`. `stop_at` stops after that many updates (checkpoint + state saved) while the
    schedule still follows cfg.steps; `--resume` continues from the last saved state. Warnings go to
    `on_warning` when they arise and to TrainResult.warnings / summary.json. `allow_vocab_mismatch`
    accepts --embedding-init pretrained rows recorded with another tokenizer (nbcli.checkpoint.vocab).
    `callbacks` (`nbcli.train.callbacks.Callback`) hear every evaluation and log record. With `valid`
    files, the whole corpus trains and their documents validate (else --val-fraction holds out
    documents of the corpus); the files are recorded in config.json's task_options. A new run that fails before its first saved state leaves nothing behind (`run_training`)."""
    out = Path(out)
    valid = list(valid)
    if valid:
        cfg = replace(cfg, task_options={**cfg.task_options, "valid": valid})

    def prepare(rt: Runtime, warn: Warn) -> TaskRun:
        return prepare_run(cfg, rt, out, corpus, tokenizer_path, on_bytes, warn, allow_vocab_mismatch, valid)

    return run_training(cfg, out, resume=resume, stop_at=stop_at, prepare=prepare, on_step=on_step,
                        on_warning=on_warning, callbacks=callbacks, inputs=[*corpus, *valid],
                        check_directory=lambda: check_run_directory(out, cfg, [*corpus, *valid], tokenizer_path,
                                                                    resume))


def prepare_run(cfg: TrainConfig, rt: Runtime, out: Path, corpus: list[str], tokenizer_path: Path | str,
                on_bytes: Callable[[int, int | None], None] | None, warn: Warn,
                allow_vocab_mismatch: bool = False, valid: Sequence[str] = ()) -> TaskRun:
    """Tokenise the corpus (and `valid`) into training and validation blocks and build the model with
    the papers' initialisations; what the shared run needs of the LM."""
    tokenizer = load_tokenizer(tokenizer_path, texts=lambda: training_documents(corpus, cfg.val_fraction,
                                                                                hold_out=not valid))
    vocab_warnings = check_pretrained_vocab(cfg, tokenizer, allow_mismatch=allow_vocab_mismatch)
    data = tokenize_corpus(corpus, tokenizer, cfg.objective, cfg.val_fraction, progress=on_bytes, valid=valid)
    mcfg = model_config(cfg, tokenizer)
    pad_id = tokenizer.pad_id if tokenizer.pad_id is not None else 0
    shown = ", ".join(data.inputs[:3]) + (f" and {len(data.inputs) - 3} more" if len(data.inputs) > 3 else "")
    prefix = block_prefix(tokenizer, cfg.objective)
    named = f"--corpus {shown or '(no input)'} ({data.documents} documents)"
    with naming(named):
        train_stream = BlockStream(data.train, cfg.seq_len, cfg.objective, pad_id, "training", prefix=prefix)
    with naming(f"--valid {', '.join(valid)}" if valid else named):
        val_stream = BlockStream(data.val, cfg.seq_len, cfg.objective, pad_id, "validation", allow_partial=True,
                                 prefix=prefix)
    log_u = unigram_log_prior(data.counts, mcfg.vocab_size, cfg.smoothing_k).to(rt.device)
    guidance = attention_guidance(cfg, mcfg, tokenizer)
    coverage: dict[str, Any] = {}
    model = build_model(cfg, mcfg, data.counts, tokenizer.vocab_size, tokenizer, coverage).to(rt.device)
    for message in [*data.notes, *vocab_warnings]:  # said once the pretrained rows are accepted too, so a bad
        warn(message)                                # file is one line
    sampler = TrainSampler(train_stream.n_blocks, cfg.seed)
    updates = Updates(
        cfg=cfg, rt=rt, out=out, model=model,
        batches=lambda step, sequences: micro_batches(train_stream, sampler, cfg, mcfg, rt, step, sequences),
        forward=lm_forward(mcfg.causal, None if cfg.unigram_reg_lambda else cfg.label_smoothing),
        evaluate=lambda step: evaluate(model, val_stream, cfg, mcfg, log_u, rt),
        metadata=lambda step: checkpoint_metadata(cfg, mcfg, step, tokenizer, data), fingerprint=data.fingerprint,
        guidance=guidance, log_u=log_u, vocab_size=mcfg.vocab_size,
        tokens=lambda batches: cfg.batch_size * cfg.seq_len,
        flops_per_token=model.flops_per_token(len(guidance.guided) if guidance else 0), warn=warn)

    def write_files(resumed_step: int | None) -> None:
        write_run_files(out, cfg, data, tokenizer, resumed_step)
        write_run_tokenizer(out, tokenizer)

    def finish(end: Finished) -> TrainResult:
        from nbcli.counts import unigram_entropy

        val_points = end.position.val_points
        return TrainResult(
            out=out, steps=end.last_step, final_val_loss=val_points[-1][1] if val_points else None,
            alc=area_under_curve(val_points), checkpoint=end.checkpoint, tokens=end.position.tokens,
            seconds=end.seconds, tokens_per_s=end.position.tokens / end.seconds if end.seconds > 0 else 0.0,
            parameters=model.num_parameters(), device=str(rt.device), unigram_entropy=unigram_entropy(data.counts),
            log_v=math.log(mcfg.vocab_size), resumed_from=end.position.resumed_from,
            ag_alpha0=end.position.alpha0 if guidance is not None else None, warnings=end.warnings,
            embedding_coverage={"input": coverage} if coverage else None, preset_overridden=cfg.preset_overridden)

    return TaskRun(updates, write_files, finish)
