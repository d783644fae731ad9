"""`nb train --task translation`: the papers' own experiment, an encoder-decoder (`nbcli.models.seq2seq`)
trained on sentence pairs with label-smoothed cross-entropy and validated by BLEU / chrF of its
beam-search translations (paper 000 sec. 4.1 and app. A; paper 001 table 7; paper 002 tables 1, 3).

Its options and presets: `nbcli.tasks.translation_config`. What the task brings to the shared
orchestration (`nbcli.train.loop.run_training`): its batches (`translation_data`), its forward (encoder
+ teacher-forced decoder, attention guidance on encoder and decoder self-attention), its evaluation (validation loss and paper 000 fig. 1's divergences on the
target tokens; BLEU and chrF by sacreBLEU of the decoded validation sources; the best checkpoint by
validation BLEU kept as DIR/best.safetensors, paper 000 app. A's early stopping) and its checkpoints.

Presets (docs/training.md): tiny (seconds on CPU); iwslt (fairseq transformer_iwslt_de_en: 6+6 layers,
d 512, FFN 1024, 4 heads, dropout 0.3, lr 5e-4, inverse-sqrt warm-up 4000, Adam (0.9, 0.98), weight
decay 1e-4); base (Vaswani et al. 2017 base: 6+6, d 512, FFN 2048, 8 heads, dropout 0.1, lr 7e-4 =
512^-0.5 4000^-0.5, warm-up 4000); kim-3 (paper 002 app. A.2: 3+3 layers, 8 heads, Adam (0.9, 0.98,
1e-9), dropout 0.1, lr 2e-4; d 512 and FFN 512 from the PyTorch translation tutorial its setup follows).
All: post-LN, sinusoidal positions with embeddings scaled by sqrt(d), ReLU, label smoothing 0.1,
no gradient clipping (fairseq's defaults).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nbcli.analysis.curves import ALC_UPDATES, area_under_curve
from nbcli.analysis.patterns import assign_heads, pattern_token_ids
from nbcli.checkpoint.runs import BEST
from nbcli.errors import ConfigError, naming
from nbcli.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
from nbcli.ops import unigram_log_prior
from nbcli.precision import autocast
from nbcli.tasks.translation_config import (
    PRESETS, SELECT_BY, TASK, TranslationOptions, build_translation_config,
)
from nbcli.tasks.translation_data import (Conventions, PairData, TranslationBatch, collate, conventions, input_files,
                                          tokenize_pairs, training_sentences)
from nbcli.tokenizers import Tokenizer, load_tokenizer
from nbcli.tokenizers.identity import identity_metadata
from nbcli.train.config import TrainConfig
from nbcli.train.data import TrainSampler
from nbcli.train.guidance import Guidance
from nbcli.train.init import check_pretrained_vocab, input_embedding, output_bias, rescale_output_weight
from nbcli.train.callbacks import Callback
from nbcli.train.best import BestCheckpoint
from nbcli.train.loop import Finished, TaskRun, TrainResult, Warn, run_training
from nbcli.train.rundir import check_inputs_outside, check_run_directory, write_run_files
from nbcli.train.runtime import Runtime, all_gather_texts, all_reduce_sum, host_sum
from nbcli.train.state import FORMAT
from nbcli.train.step import eval_sums, global_micro, prediction_fields
from nbcli.train.updates import Updates

# the options and presets live in tasks.translation_config; named here too, with the run
__all__ = [
    "PRESETS", "SELECT_BY", "TASK", "Seq2SeqGuidance", "TranslationOptions", "TranslationResult", "attention_guidance",
    "best_bleu", "bleu_chrf", "build_model", "build_translation_config", "checkpoint_metadata", "copy_tokenizers",
    "evaluate", "model_config", "pair_tokenizers", "prepare_run", "pretrained_vocab_warnings", "train_translation",
    "translation_forward",
]

# ---------------------------------------------------------------------------------------------
# The model


def model_config(cfg: TrainConfig, opts: TranslationOptions, source: Tokenizer, target: Tokenizer,
                 conv: Conventions) -> Seq2SeqConfig:
    joint = source.sha256 == target.sha256
    share = ("all" if joint else "decoder") if opts.share_embeddings == "auto" else opts.share_embeddings
    if share == "all" and not joint:
        raise ConfigError("--share-embeddings all needs one joint tokenizer (-t), not two")
    return Seq2SeqConfig(
        src_vocab_size=source.vocab_size, tgt_vocab_size=target.vocab_size, eos_id=conv.eos_id,
        decoder_start_id=conv.decoder_start_id, pad_id=conv.pad_id, src_eos_id=conv.src_eos_id,
        max_positions=opts.max_positions, encoder_layers=cfg.n_layer, decoder_layers=cfg.n_layer, n_head=cfg.n_head,
        d_model=cfg.d_model, d_ff=opts.d_ff, dropout=cfg.dropout, activation=opts.activation,  # type: ignore[arg-type]
        norm=opts.norm, positions=opts.positions, scale_embedding=opts.scale_embedding,  # type: ignore[arg-type]
        init=opts.init_scheme,  # type: ignore[arg-type]
        share_embeddings=share, output_bias=cfg.bias_init != "none")  # type: ignore[arg-type]


def build_model(cfg: TrainConfig, opts: TranslationOptions, mcfg: Seq2SeqConfig, data: PairData,
                tokenizers: tuple[Tokenizer, Tokenizer] | None = None,
                coverage: dict[str, Any] | None = None) -> Seq2SeqTransformer:
    """fairseq's init (the model's), then the papers': b = log-unigram of the target side's training
    tokens (paper 000 sec. 3) with W rescaled to ||b|| (sec. 4.1) when asked (a W shared with the target
    embedding, or with both, rescales that embedding: `nbcli.train.init`'s module doc); the source and target
    embeddings initialised by --embedding-init and its transforms (paper 002; the LM's function, each
    side with its own counts for --embedding-whiten; word vectors matched to each side's `tokenizers`, their
    coverage per side in `coverage`; each side's random draws its own, `nbcli.seeds`); frozen with
    --freeze-embeddings (table 3)."""
    torch.manual_seed(cfg.seed)
    model = Seq2SeqTransformer(mcfg)
    shared = mcfg.share_embeddings == "all"
    sides = [("shared", data.counts, 0)] if shared else [("source", data.src_counts, 0), ("target", data.counts, 1)]
    with torch.no_grad():
        for emb, (side, counts, k) in zip(model.embeddings(), sides):
            report: dict[str, Any] = {}
            emb.weight.copy_(input_embedding(cfg, emb.weight, None, counts, tokenizers[k] if tokenizers else None,
                                             report, role=f"{side}_embedding"))   # own random streams
            if report and coverage is not None:
                coverage[side] = report
        if model.final_logits_bias is not None and cfg.bias_init == "unigram":
            model.final_logits_bias.copy_(output_bias(data.counts, mcfg.tgt_vocab_size, cfg.smoothing_k))
            if cfg.rescale_w is not None:   # shared: W is the target (or shared) embedding, rescaled with it
                model.output_weight.copy_(rescale_output_weight(model.output_weight, model.final_logits_bias,
                                                                cfg.rescale_w))
    if opts.freeze_embeddings:
        for emb in model.embeddings():
            emb.weight.requires_grad_(False)
    return model


@dataclass(frozen=True)
class Seq2SeqGuidance:
    """Attention guidance of the encoder's and the decoder's self-attention (paper 001 table 7: the
    cross-attention is never guided). L_AG = encoder's (bidirectional) + decoder's (causal) terms."""

    encoder: Guidance | None
    decoder: Guidance | None

    def loss(self, enc_qks: list[Any], dec_qks: list[Any], batch: TranslationBatch) -> torch.Tensor:
        total = torch.zeros((), device=batch.src.device)
        if self.encoder is not None:
            total = total + self.encoder.loss(enc_qks, batch.src, batch.src_lengths, False)
        if self.decoder is not None:
            total = total + self.decoder.loss(dec_qks, batch.tgt_in, batch.tgt_lengths, True)
        return total


def attention_guidance(cfg: TrainConfig, opts: TranslationOptions, source: Tokenizer,
                       target: Tokenizer) -> Seq2SeqGuidance | None:
    """--ag-fraction/--ag-patterns guide encoder heads; --ag-decoder-fraction/-patterns decoder heads."""
    def side(fraction: float, patterns: Sequence[str] | None, causal: bool, tokenizer: Tokenizer) -> Guidance | None:
        heads = assign_heads(cfg.n_head, fraction, patterns, causal)
        if not heads:
            return None
        delim_ids, period_ids = pattern_token_ids(tokenizer)
        return Guidance(heads=heads, delim_ids=delim_ids, period_ids=period_ids, reduction=cfg.ag_reduction)

    encoder = side(cfg.ag_fraction, cfg.ag_patterns, False, source)
    decoder = side(opts.ag_decoder_fraction, opts.ag_decoder_patterns, True, target)
    return None if encoder is None and decoder is None else Seq2SeqGuidance(encoder, decoder)


def translation_forward(net: torch.nn.Module, batch: TranslationBatch, guidance: Seq2SeqGuidance | None,
                        rt: Runtime) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Teacher-forced logits of the decoder inputs (labels: batch.labels) and the AG loss (the task's
    `nbcli.train.step.Forward`)."""
    enc = guidance.encoder.guided if guidance is not None and guidance.encoder is not None else None
    dec = guidance.decoder.guided if guidance is not None and guidance.decoder is not None else None
    with autocast(rt.device, rt.amp_dtype):
        logits, (enc_qks, dec_qks) = net(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask, enc, dec)
    return logits, (guidance.loss(enc_qks, dec_qks, batch) if guidance is not None else None)


# ---------------------------------------------------------------------------------------------
# Evaluation


def bleu_chrf(hypotheses: list[str], references: list[str]) -> tuple[float, float, str, str]:
    """Corpus BLEU and chrF of detokenised hypotheses against one reference each and their signatures:
    `nbcli.analysis.translation.score_translations` (sacreBLEU's defaults; paper 000 app. A)."""
    from nbcli.analysis.translation import score_translations

    scores = score_translations(hypotheses, references)
    return scores["bleu"], scores["chrf"], scores["bleu_signature"], scores["chrf_signature"]


@torch.no_grad()
def evaluate(model: Seq2SeqTransformer, data: PairData, conv: Conventions, cfg: TrainConfig,
             opts: TranslationOptions, log_u: torch.Tensor, rt: Runtime, target: Tokenizer,
             ) -> tuple[dict[str, float], tuple[str, str]]:
    """val_loss (teacher-forced, the first --eval-batches x --batch-size validation pairs) with the
    LM's divergence fields over target tokens, then val_bleu / val_chrf of the decoded validation
    sources (--eval-sentences, 0: all) with --beam / --lenpen; and the BLEU and chrF signatures."""
    from nbcli.decoding.seq2seq import translate_ids

    was_training = model.training
    model.eval()
    n_loss = min(len(data.val_src), cfg.eval_batches * cfg.batch_size)
    order = sorted(range(n_loss), key=lambda i: len(data.val_src[i]))
    micro = max(1, cfg.batch_size // (cfg.grad_accum * rt.world))
    totals = torch.zeros(4, dtype=torch.float64, device=rt.device)
    for start in range(rt.rank * micro, n_loss, micro * rt.world):
        batch = collate(data.val_src, data.val_tgt, order[start:start + micro], conv, rt.device)
        with autocast(rt.device, rt.amp_dtype):
            logits, _ = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        sel = batch.labels != -100
        totals += eval_sums(logits[sel], batch.labels[sel], log_u)             # float32 logits (output_logits)
    out = prediction_fields(all_reduce_sum(totals, rt), model.final_logits_bias, log_u)
    n_bleu = len(data.val_src) if not opts.eval_sentences else min(len(data.val_src), opts.eval_sentences)
    mine = sorted(range(rt.rank, n_bleu, rt.world), key=lambda i: len(data.val_src[i]))
    hyps: list[tuple[int, str]] = []
    for start in range(0, len(mine), 64):
        chunk = mine[start:start + 64]
        with autocast(rt.device, rt.amp_dtype):
            found = translate_ids(model, [data.val_src[i].tolist() for i in chunk], beam=opts.beam,
                                  lenpen=opts.lenpen, max_len_a=opts.max_len_a, max_len_b=opts.max_len_b)
        hyps.extend((i, target.decode(h.tokens)) for i, h in zip(chunk, found))
    ordered = [text for _, text in sorted(all_gather_texts(hyps, rt))]
    out["val_bleu"], out["val_chrf"], bleu_signature, chrf_signature = bleu_chrf(ordered, data.val_refs[:n_bleu])
    if was_training:
        model.train()
    return out, (bleu_signature, chrf_signature)


# ---------------------------------------------------------------------------------------------
# The run


@dataclass
class TranslationResult(TrainResult):
    """The LM's summary fields (`alc`: over the validation-loss curve; tokens: target tokens) and
    translation's: BLEU/chrF, the best checkpoint by validation BLEU, the pairs read and skipped."""

    best_val_bleu: float | None = None
    best_step: int | None = None
    select_by: str = "val_bleu"         # the metric best.safetensors was chosen by (--select-by)
    alc_val_bleu: float | None = None   # ALC of validation BLEU over the first 20k updates (paper 000 sec. 4.2, fig. 3)
    final_val_bleu: float | None = None
    final_val_chrf: float | None = None
    bleu_signature: str | None = None
    chrf_signature: str | None = None
    best_checkpoint: Path | None = None
    pairs: int = 0                      # pairs read: training + validation, the skipped included
    skipped_long_pairs: int = 0
    train_pairs: int = 0                # training pairs trained on (after the long ones were skipped)
    valid_pairs: int = 0                # validation pairs evaluated on (--valid's or the held-out ones, likewise)

    def as_dict(self) -> dict[str, Any]:
        d = super().as_dict()
        d["best_checkpoint"] = None if self.best_checkpoint is None else str(self.best_checkpoint)
        return d


def checkpoint_metadata(cfg: TrainConfig, mcfg: Seq2SeqConfig, step: int, source: Tokenizer, target: Tokenizer,
                        data: PairData) -> dict[str, str]:
    """The LM's checkpoint metadata for an encoder-decoder: the tokenizer identity (`nb.tokenizer*`,
    the one vocabulary policy's) is the target side's, whose vocabulary the output layer predicts;
    both sides' sha256 and fingerprints are recorded too (nb translate checks them)."""
    from nbcli.provenance import tool_version, utc_now
    from nbcli.resolve import hub_inputs_metadata

    return {"nb.format": FORMAT, "nb.config": mcfg.to_json(), "nb.version": tool_version(),
            "nb.train_config": json.dumps(cfg.to_dict(), sort_keys=True), "nb.step": str(step),
            **identity_metadata(target), "nb.src_tokenizer_sha256": source.sha256,
            "nb.tgt_tokenizer_sha256": target.sha256, "nb.src_tokenizer_fingerprint": source.fingerprint,
            "nb.tgt_tokenizer_fingerprint": target.fingerprint, "nb.data_sha256": data.fingerprint,
            "nb.inputs": json.dumps(data.inputs), "nb.created": utc_now(),
            **hub_inputs_metadata([source.path, target.path])}


def copy_tokenizers(out: Path, source: Tokenizer, target: Tokenizer) -> None:
    """DIR/source-tokenizer.* and DIR/target-tokenizer.*: the run carries what decodes it (nb translate, export)."""
    from nbcli.atomic import write_bytes_atomic
    from nbcli.translate import run_tokenizer_name

    for side, tok in (("source", source), ("target", target)):
        write_bytes_atomic(out / run_tokenizer_name(side, tok), tok.serialized())


def pair_tokenizers(source_path: Path | str, target_path: Path | str, corpus: Sequence[str], src_lang: str,
                    tgt_lang: str, val_fraction: float, held_out_pairs: bool,
                    columns: str | None = None) -> tuple[Tokenizer, Tokenizer]:
    """(source, target) tokenizers; a `words:min-freq=K` one is built from its side's training sentences,
    from both sides' when -t gives one joint spec (nbcli.tokenizers.words)."""
    def sides(*names: str) -> Callable[[], Iterable[str]]:
        return lambda: training_sentences(corpus, src_lang, tgt_lang, val_fraction, held_out_pairs, names, columns)

    if str(source_path) == str(target_path):
        joint = load_tokenizer(source_path, texts=sides("source", "target"))
        return joint, joint
    return load_tokenizer(source_path, texts=sides("source")), load_tokenizer(target_path, texts=sides("target"))


def pretrained_vocab_warnings(cfg: TrainConfig, source: Tokenizer, target: Tokenizer, allow_mismatch: bool,
                              ) -> list[str]:
    """--embedding-init pretrained:FILE initialises every token embedding (source and target): FILE's
    rows must be those of each side's tokenizer, by the LM's one policy (`init.check_pretrained_vocab`)."""
    sides = [source] if source.sha256 == target.sha256 else [source, target]
    warnings: list[str] = []
    for tok in sides:
        warnings += [w for w in check_pretrained_vocab(cfg, tok, allow_mismatch=allow_mismatch) if w not in warnings]
    return warnings


def best_bleu(best: BestCheckpoint) -> float | None:
    """The validation BLEU of the checkpoint kept (whatever --select-by chose it by)."""
    return best.at_best("val_bleu")


def train_translation(cfg: TrainConfig, corpus: list[str], source_tokenizer: Path | str, target_tokenizer: Path | str,
                      out: Path | str, *, valid: list[str] | None = None, resume: bool = False,
                      stop_at: int | None = None, on_step: Callable[[int, dict[str, Any]], None] | None = None,
                      on_bytes: Callable[[int], None] | None = None,
                      on_warning: Callable[[str], None] | None = None,
                      allow_vocab_mismatch: bool = False, callbacks: Sequence[Callback] = ()) -> TranslationResult:
    """Run `nb train translation` on the shared orchestration (`nbcli.train.loop.run_training`: a new
    run that fails before its first saved state leaves nothing behind; --resume continues exactly);
    `callbacks` hear every evaluation and log record."""
    if cfg.task != TASK:
        raise ConfigError(f"train_translation needs a --task translation config, got task {cfg.task!r}")
    out = Path(out)
    opts = TranslationOptions.of(cfg)
    files = input_files([*corpus, *(valid or [])], opts.src_lang, opts.tgt_lang)

    def check_directory() -> None:
        check_run_directory(out, cfg, files, source_tokenizer, resume)
        check_inputs_outside(out, cfg, [], target_tokenizer)

    def prepare(rt: Runtime, warn: Warn) -> TaskRun:
        source, target = pair_tokenizers(source_tokenizer, target_tokenizer, corpus, opts.src_lang, opts.tgt_lang,
                                         cfg.val_fraction, held_out_pairs=valid is None, columns=opts.columns)
        vocab_warnings = pretrained_vocab_warnings(cfg, source, target, allow_vocab_mismatch)
        data = tokenize_pairs(corpus, valid, source, target, opts.src_lang, opts.tgt_lang, cfg.seq_len,
                              cfg.val_fraction, progress=on_bytes, columns=opts.columns)
        if data.skipped_long:
            warn(f"{data.skipped_long} of {data.documents} pairs have a side longer than --max-len {cfg.seq_len} "
                 "tokens (EOS included) and were skipped")
        return prepare_run(cfg, opts, rt, out, (source, target), data, [*data.notes, *vocab_warnings], warn)

    return run_training(cfg, out, resume=resume, stop_at=stop_at, check_directory=check_directory, prepare=prepare,
                        on_step=on_step, on_warning=on_warning, callbacks=callbacks, inputs=[*corpus, *(valid or [])])


def prepare_run(cfg: TrainConfig, opts: TranslationOptions, rt: Runtime, out: Path, tokenizers: tuple[Tokenizer, Tokenizer],
                data: PairData, notes: list[str], warn: Warn) -> TaskRun:
    """The model (the papers' initialisations), its batches, evaluation and summary: what the shared
    run needs of translation."""
    source, target = tokenizers
    conv = conventions(source, target)
    mcfg = model_config(cfg, opts, source, target, conv)
    log_u = unigram_log_prior(data.counts, mcfg.tgt_vocab_size, cfg.smoothing_k).to(rt.device)
    guidance = attention_guidance(cfg, opts, source, target)
    with naming("--embedding-init"):
        coverage: dict[str, Any] = {}
        model = build_model(cfg, opts, mcfg, data, (source, target), coverage).to(rt.device)
    for message in notes:  # said once the pretrained rows are accepted too, as for the LM
        warn(message)
    best = BestCheckpoint(opts.select_by or "val_bleu")
    signatures: list[str | None] = [None, None]
    latest: dict[str, Any] = {}     # the last evaluation's fields

    def evaluate_at(step: int) -> dict[str, Any]:
        record, (signatures[0], signatures[1]) = evaluate(model, data, conv, cfg, opts, log_u, rt, target)
        latest.clear()
        latest.update(record)
        return record

    sampler = TrainSampler(len(data.train_src), cfg.seed)
    micro = cfg.batch_size // (cfg.grad_accum * rt.world)

    def batches(step: int, seqs: int) -> list[TranslationBatch]:
        return [collate(data.train_src, data.train_tgt,
                        sampler.blocks(seqs + global_micro(cfg, rt, m) * micro, micro), conv, rt.device)
                for m in range(cfg.grad_accum)]

    def tokens(step_batches: list[TranslationBatch]) -> int:   # counted on the host: no device round trip
        return int(host_sum(sum(b.tokens for b in step_batches), rt))

    mean_src, mean_tgt = float(data.train_src.lengths().mean()), float(data.train_tgt.lengths().mean()) + 1
    updates = Updates(cfg=cfg, rt=rt, out=out, model=model, batches=batches,
                      forward=translation_forward, evaluate=evaluate_at,  # type: ignore[arg-type]
                      metadata=lambda step: checkpoint_metadata(cfg, mcfg, step, source, target, data),
                      fingerprint=data.fingerprint, guidance=guidance, log_u=log_u,
                      vocab_size=mcfg.tgt_vocab_size, tokens=tokens,
                      flops_per_token=model.flops_per_token(round(mean_src), round(mean_tgt)), warn=warn)

    def write_files(resumed_step: int | None) -> None:
        write_run_files(out, cfg, data, target, resumed_step)  # type: ignore[arg-type]
        copy_tokenizers(out, source, target)

    def finish(end: Finished) -> TranslationResult:
        from nbcli.counts import unigram_entropy

        position = end.position
        return TranslationResult(
            out=out, steps=end.last_step, final_val_loss=position.val_points[-1][1] if position.val_points else None,
            alc=area_under_curve(position.val_points), best_val_bleu=best_bleu(best), best_step=best.step,
            select_by=best.key, alc_val_bleu=area_under_curve(best.curve("val_bleu"), until=ALC_UPDATES),
            final_val_bleu=latest.get("val_bleu"), final_val_chrf=latest.get("val_chrf"),
            bleu_signature=signatures[0], chrf_signature=signatures[1], checkpoint=end.checkpoint,
            best_checkpoint=out / BEST if best.step is not None else None, pairs=data.documents,
            skipped_long_pairs=data.skipped_long, train_pairs=len(data.train_src), valid_pairs=len(data.val_src),
            tokens=position.tokens, seconds=end.seconds,
            tokens_per_s=position.tokens / end.seconds if end.seconds > 0 else 0.0, parameters=model.num_parameters(),
            device=str(rt.device), unigram_entropy=unigram_entropy(data.counts), log_v=math.log(mcfg.tgt_vocab_size),
            resumed_from=position.resumed_from, ag_alpha0=position.alpha0 if guidance is not None else None,
            warnings=end.warnings, embedding_coverage=coverage or None, preset_overridden=cfg.preset_overridden)

    return TaskRun(updates, write_files, finish, best=best, keep_best_model=True)
