"""Translation as functions (paper 000's experiment): train the encoder-decoder, translate a file,
score BLEU/chrF with sacreBLEU."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nbcli.api.inputs import check_train_config, input_paths, local_path, optional_path, trained
from nbcli.api.reports import PathLike, Report, TrainReport
from nbcli.arguments import public


@public
def train_translation(corpus: PathLike | Sequence[PathLike], src_lang: str, tgt_lang: str, out: PathLike, *,
                      tokenizer: PathLike | None = None, src_tokenizer: PathLike | None = None,
                      tgt_tokenizer: PathLike | None = None, valid: PathLike | Sequence[PathLike] | None = None,
                      preset: str = "tiny", task_options: Mapping[str, Any] | None = None, resume: bool = False,
                      stop_at: int | None = None, on_step: Callable[[int, dict[str, Any]], None] | None = None,
                      allow_vocab_mismatch: bool = False, threads: int | None = None, **config: Any) -> TrainReport:
    """Train nb's encoder-decoder (`nb train --task translation`) on sentence pairs into `out`: one joint
    `tokenizer`, or `src_tokenizer` and `tgt_tokenizer`; `valid` pairs, else every k-th pair held out.
    `task_options`: `nbcli.tasks.translation_config.TranslationOptions` fields (norm="pre", positions="none",
    beam=5, ...); `config`: TrainConfig fields over the preset's (tiny, iwslt, base, kim-3). The summary
    adds best_val_bleu, best_step, alc_val_bleu, train_pairs, valid_pairs (used) and skipped_long_pairs; `threads`:
    CPU threads (`--threads`)."""
    from nbcli.errors import ConfigError
    from nbcli.tasks.translation import build_translation_config
    from nbcli.tasks.translation import train_translation as run_translation

    if tokenizer is not None:
        if src_tokenizer is not None or tgt_tokenizer is not None:
            raise ConfigError("give either tokenizer= (one joint tokenizer) or src_tokenizer= and tgt_tokenizer=")
        src_tokenizer = tgt_tokenizer = tokenizer
    if src_tokenizer is None or tgt_tokenizer is None:
        raise ConfigError("train_translation needs tokenizer= (joint) or src_tokenizer= and tgt_tokenizer=")
    check_train_config("train_translation", config)
    cfg = build_translation_config(preset, {**(task_options or {}), "src_lang": src_lang, "tgt_lang": tgt_lang},
                                   **config)
    return trained(lambda: run_translation(
        cfg, input_paths(corpus), local_path(src_tokenizer), local_path(tgt_tokenizer), local_path(out),
        valid=input_paths(valid) if valid is not None else None, resume=resume, stop_at=stop_at,
        on_step=on_step, allow_vocab_mismatch=allow_vocab_mismatch).as_dict(), threads)


@public
def translate_file(checkpoint: PathLike, input: PathLike, output: PathLike, *, beam: int | None = None,
                   lenpen: float | None = None, batch_size: int = 64, device: str = "auto") -> Report:
    """Translate a file, one sentence a line, with a translation run or checkpoint (`nb translate`;
    beam/lenpen default to the run's; the run's task's translation, `nbcli.tasks.runs.translate_run`)."""
    from nbcli.tasks.runs import translate_run

    return Report(translate_run(local_path(checkpoint), local_path(input), local_path(output), beam=beam, lenpen=lenpen,
                                batch_size=batch_size, device=device))


@public
def evaluate_translation(corpus: PathLike | Sequence[PathLike], src_lang: str, tgt_lang: str, *,
                         hyps: PathLike | None = None, checkpoint: PathLike | None = None, beam: int | None = None,
                         lenpen: float | None = None, batch_size: int = 64, device: str = "auto") -> Report:
    """Corpus BLEU and chrF (sacreBLEU, with their signatures) of translations of a parallel test
    corpus's source side against its target side (`nb eval --task translation`; paper 000 fig. 2):
    aligned PREFIX.{src,tgt} files, TSV, JSONL translation objects or parquet. The translations are
    a hypotheses file (`hyps`, one line per pair) or decoded by an `nb train --task translation` run
    or checkpoint (`checkpoint`: a run means its best checkpoint by validation BLEU; `beam`/`lenpen`
    default to the run's). The report's `datasets`: the Hub datasets among `corpus`
    (`nbcli.tasks.runs.eval_run`, as nb eval)."""
    from nbcli.tasks.registry import get_task
    from nbcli.tasks.runs import eval_run

    return Report(eval_run(
        get_task("translation"), optional_path(checkpoint), input_paths(corpus), hyps=optional_path(hyps),
        src_lang=src_lang, tgt_lang=tgt_lang, beam=beam, lenpen=lenpen, columns=None, batch_size=batch_size,
        device=device, by_frequency=None, by_frequency_plot=None, bins=10, smoothing="add-k:1",
        allow_vocab_mismatch=False, dpi=None, figsize=None, title=None))
