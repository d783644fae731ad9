"""nb train translation: the Vaswani encoder-decoder on sentence pairs (paper 000's experiment; paper
001 table 7; paper 002 tables 2-3), its options declared once. The run itself is
`nbcli.tasks.translation.train_translation` (imported when training: this module stays free of torch,
so `nb train --help` is fast)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Optional

from nbcli.errors import ConfigError

from nbcli.resolve_datasets import DATASET_ID_HELP
from nbcli.tasks.base import Formatter, SummaryView, Task, TrainHooks
from nbcli.tasks.options import MAX_SEQ_LEN, MAX_SEQUENCES, REQUIRED, option
from nbcli.tasks.presets import TRANSLATION_PRESETS

TranslationPreset = Literal[tuple(TRANSLATION_PRESETS)]  # type: ignore[valid-type]
from nbcli.tasks.common_options import (TOKENIZER_HELP, ArchitectureOptions, GuidanceOptions, OptimizerOptions, OutputLayerOptions,
                                        RunOptions, SelectionOptions)

if TYPE_CHECKING:
    from nbcli.train.config import TrainConfig


@dataclass
class TranslationRunOptions(RunOptions):
    """RunOptions as translation words them (sentence pairs, a joint tokenizer, a side's length)."""

    corpus: list[str] = option(REQUIRED, "--corpus", metavar="FILE", help=(
        "Training sentence pairs (repeatable): the PREFIX of aligned PREFIX.SRC + PREFIX.TGT files, a .tsv (source "
        "TAB target unless --columns or a header row says otherwise), a .jsonl with {\"translation\": {SRC: ..., TGT: ...}}, or parquet/Arrow. " + DATASET_ID_HELP))
    tokenizer: Optional[str] = option(None, "--tokenizer", "-t", metavar="TOK", help=(
        TOKENIZER_HELP + " The joint tokenizer of both sides (or give --src-tokenizer and --tgt-tokenizer)."))
    seq_len: Optional[int] = option(None, "--seq-len", "--max-len", min=2, max=MAX_SEQ_LEN, help=(
        "The most tokens a side may have, EOS included (default: preset's); longer pairs are skipped and counted "
        "(summary.json skipped_long_pairs)."))
    dropout: Optional[float] = option(None, "--dropout", metavar="P", help=(
        "Dropout probability. Default: the preset's (0.1; iwslt 0.3)."))


@dataclass
class TranslationOptions:
    """The encoder-decoder's own options (paper 000 app. A, paper 001 table 7, paper 002 app. A.1)."""

    preset: TranslationPreset = option("tiny", "--preset", metavar="NAME", help=(
        "tiny (2+2 layers, d 64; seconds on CPU), iwslt (fairseq transformer_iwslt_de_en: 6+6, d 512, FFN 1024, 4 "
        "heads), base (Vaswani base: 6+6, d 512, FFN 2048, 8 heads), kim-3 (paper 002: 3+3, 8 heads, its own output "
        "layer as the tutorial it cites), or a paper's setting exactly as its appendix states it: paper000-iwslt, "
        "paper000-afromt, paper000-wmt (paper 000 app. A: 6+6, 4/8/8 heads, FFN 256/256/512, dropout 0.1, Adam (0.9, "
        "0.997), an untied W, best by BLEU), paper001-mt-base and paper001-mt-ag (paper 001 sec. 5.5, table 7: "
        "Vaswani base for 100,000 steps; AG: one encoder head each on [Next] and [Prev]), "
        "paper002-{multi30k,iwslt2017}-{glove,mbert,mt5} (paper 002 app. A.2 and Table 5: 3+3 layers, D 300/768/768, "
        "8 heads (10 for GloVe), lr 2e-4, Adam (0.9, 0.98, 1e-9), Table 5's batch and 20 epochs, best by validation "
        "loss). What an appendix leaves open is nb's choice (docs/training.md 'Paper presets'). An option given with "
        "a preset wins; summary.json's preset_overridden names the preset values it replaced. Vocabulary size "
        "always comes from the tokenizers."))
    src_lang: Optional[str] = option(None, "--src-lang", metavar="LANG", help=(
        "Source language of a parallel corpus: PREFIX.LANG of aligned files, the JSONL/parquet key or column."))
    tgt_lang: Optional[str] = option(None, "--tgt-lang", metavar="LANG", help=(
        "Target language of a parallel corpus (its side holds the references)."))
    columns: Optional[Literal["src,tgt", "tgt,src"]] = option(None, "--columns", help=(
        "Which column of a .tsv/.csv is which, since a TSV has no language names: src,tgt (the default: source "
        "TAB target) or tgt,src. A first row naming both languages (e.g. de TAB en) is a header and says it "
        "instead; --columns must then agree with it, and is refused for inputs that name their sides (PREFIX "
        "files, JSONL, parquet/Arrow)."))
    src_tokenizer: Optional[Path] = option(None, "--src-tokenizer", metavar="TOK", help=(
        "The source side's tokenizer (with --tgt-tokenizer, instead of -t)."))
    tgt_tokenizer: Optional[Path] = option(None, "--tgt-tokenizer", metavar="TOK", help=(
        "The target side's tokenizer (its EOS ends sentences; its BOS, else EOS, starts the decoder)."))
    valid: Optional[list[str]] = option(None, "--valid", metavar="FILE", help=(
        "Validation pairs in --corpus's forms, Hub dataset ids too (repeatable; default: every round(1/--val-fraction)-th pair of "
        "--corpus is held out)."))
    share_embeddings: Optional[Literal["auto", "all", "decoder", "none"]] = option(None, "--share-embeddings", help=(
        "all = one matrix for source, target and output (fairseq --share-all-embeddings; needs -t), decoder = "
        "target embedding is the output W (--share-decoder-input-output-embed), none = three matrices. auto "
        "(default): all with a joint tokenizer, else decoder. --untie-embeddings means none."))
    freeze_embeddings: bool = option(False, "--freeze-embeddings", help=(
        "Keep the token embeddings (and a W tied to them) at their initial values (paper 002 table 3's 'Train: "
        "no')."))
    beam: Optional[int] = option(None, "--valid-beam", "--beam", min=1, max=1024, help=(
        "Beam size of the validation BLEU decoded during training, and only of it (--beam is the same option; "
        "1 = greedy, quicker on CPU). Default 5. nb translate, nb eval and nb export decode with the paper's beam 5 "
        "(paper 000 app. A) unless given their own --beam."))
    lenpen: Optional[float] = option(None, "--valid-lenpen", "--lenpen", help=(
        "Length penalty of the validation BLEU (--lenpen is the same option): hypotheses are scored logprob / "
        "length^lenpen (fairseq --lenpen, transformers length_penalty). Default 1; nb translate, nb eval and nb "
        "export use 1 unless given their own --lenpen."))
    eval_sentences: Optional[int] = option(None, "--eval-sentences", min=0, max=MAX_SEQUENCES, help=(
        "Validation pairs decoded for BLEU/chrF at each evaluation (0 = all; tiny: 64)."))
    ag_decoder_fraction: Optional[float] = option(None, "--ag-decoder-fraction", metavar="LAMBDA", help=(
        "Fraction of decoder self-attention heads guided (default 0, as paper 001 table 7's best model); "
        "--ag-fraction/--ag-patterns guide the encoder."))
    ag_decoder_patterns: Optional[str] = option(None, "--ag-decoder-patterns", metavar="LIST", help=(
        "Patterns of the guided decoder heads (prev,first,delim,period; default prev, then first)."))


class TranslationTask(Task):
    name = "translation"
    help = "the Vaswani encoder-decoder on sentence pairs, validated by BLEU (paper 000's experiment)."
    description = (
        "Train the Vaswani encoder-decoder (post-LN, sinusoidal positions) on sentence pairs (docs/training.md "
        "'Translation'): log.jsonl as nb train lm's, eval steps add val_bleu and val_chrf (sacreBLEU), "
        "DIR/best.safetensors is the best checkpoint by validation BLEU, and summary.json adds best_val_bleu, "
        "best_step and alc_val_bleu. Under torchrun it trains with DDP; --stop-at and --resume as nb train lm.")
    examples = """\
  nb train translation --corpus data/train --valid data/valid --src-lang de --tgt-lang en \\
      -t joint.model --preset iwslt --bias-init unigram --out runs/iwslt-unigram-s0 --seed 0
  nb train translation --corpus train.jsonl --src-lang de --tgt-lang en --src-tokenizer de.model \\
      --tgt-tokenizer en.model --preset kim-3 --positions none --freeze-embeddings --out runs/t3
  nb train --task translation --corpus train.tsv --src-lang de --tgt-lang en -t joint.model --preset base \\
      --ag-fraction 0.25 --ag-patterns next,prev --out runs/ag     # paper 001 table 7: encoder heads only
"""
    option_groups = (TranslationRunOptions, TranslationOptions, ArchitectureOptions, SelectionOptions, OutputLayerOptions,
                     OptimizerOptions, GuidanceOptions)

    def config(self, values: dict[str, Any]) -> TrainConfig:
        """The TrainConfig a run of `values` (every option's value) is made with: the preset, then the
        options given over it (its `preset_overridden` names what they replaced); nothing read."""
        from nbcli.tasks.translation import build_translation_config
        from nbcli.analysis.patterns import parse_patterns
        from nbcli.tasks.common_options import common_config

        v = values
        if v["untie"] and v["share_embeddings"] not in (None, "none"):
            raise ConfigError(f"--untie-embeddings contradicts --share-embeddings {v['share_embeddings']}")
        return build_translation_config(v["preset"], dict(
            src_lang=v["src_lang"], tgt_lang=v["tgt_lang"], columns=v["columns"], d_ff=v["d_ff"], norm=v["norm"],
            positions=v["positions"],
            scale_embedding=v["scale_embedding"], init_scheme=v["init_scheme"],
            share_embeddings="none" if v["untie"] else v["share_embeddings"],
            freeze_embeddings=v["freeze_embeddings"] or None, beam=v["beam"], lenpen=v["lenpen"],
            eval_sentences=v["eval_sentences"], ag_decoder_fraction=v["ag_decoder_fraction"],
            ag_decoder_patterns=parse_patterns(v["ag_decoder_patterns"]), select_by=v["select_by"]), **common_config(v))

    def train(self, values: dict[str, Any], hooks: TrainHooks) -> dict[str, Any]:
        from nbcli.tasks.translation import train_translation

        v = values
        if v["src_lang"] is None or v["tgt_lang"] is None:
            raise ConfigError("--task translation needs --src-lang and --tgt-lang (e.g. --src-lang de --tgt-lang en)")
        source_tok, target_tok = translation_tokenizers(v["tokenizer"], v["src_tokenizer"], v["tgt_tokenizer"])
        cfg = self.config(v)
        stop_at = v["stop_at"]
        hooks.on_start(min(cfg.steps, stop_at) if stop_at else cfg.steps)
        return train_translation(cfg, v["corpus"], source_tok, target_tok, v["out"], valid=v["valid"],
                                 resume=v["resume"], stop_at=stop_at, on_step=hooks.on_step,
                                 on_warning=hooks.on_warning, callbacks=hooks.callbacks,
                                 allow_vocab_mismatch=v["allow_vocab_mismatch"]).as_dict()

    eval_options = frozenset({"hyps", "src_lang", "tgt_lang", "beam", "lenpen", "columns", "batch_size", "device",
                              "by_frequency", "by_frequency_plot", "bins", "smoothing", "allow_vocab_mismatch", "dpi",
                              "figsize", "title"})
    eval_view = "translation"

    def evaluate(self, run: Path | None, corpus: list[str], **o: Any) -> dict[str, Any]:
        """Test BLEU and chrF (sacreBLEU) of the run's translations of `corpus` (its best checkpoint,
        beam 5: paper 000 app. A), or of a hypotheses file (`hyps`, no run); with `by_frequency` (the
        training targets' counts) paper 000 fig. 4 too (`nbcli.translation_frequency`)."""
        from nbcli.counts import parse_smoothing
        from nbcli.translate import eval_translation_model
        from nbcli.translation_eval import eval_translation

        if run is not None and o["hyps"] is not None:
            raise ConfigError(f"{run} and --hyps {o['hyps']}: score a model's translations or a hypotheses file, "
                              "not both")
        if run is None:
            if o["beam"] is not None or o["lenpen"] is not None:
                raise ConfigError("--beam and --lenpen decode with a model: give RUN_OR_CKPT (not with --hyps)")
            if o["by_frequency"] is not None:
                raise ConfigError("--by-frequency scores a model's log-probabilities: give RUN_OR_CKPT (not with --hyps)")
            return eval_translation(corpus, o["src_lang"], o["tgt_lang"], hyps=o["hyps"], columns=o["columns"])
        from nbcli.figure_style import figure_options
        from nbcli.lm.frequency_report import TokenFigures, draw_figures, guard_figures

        figures = TokenFigures(by_frequency=o["by_frequency"], bins=o["bins"], by_frequency_plot=o["by_frequency_plot"],
                               looks=figure_options(o["dpi"], o["figsize"], o["title"]))
        guard_figures(figures, run, corpus, None, None)
        report = eval_translation_model(run, corpus, o["src_lang"], o["tgt_lang"], beam=o["beam"], lenpen=o["lenpen"],
                                        batch_size=o["batch_size"], device=o["device"], columns=o["columns"],
                                        by_frequency=None if figures.by_frequency is None else dict(
                                            counts=figures.by_frequency, bins=figures.bins,
                                            smoothing_k=parse_smoothing(o["smoothing"]),
                                            allow_vocab_mismatch=o["allow_vocab_mismatch"]))
        draw_figures(figures, report, {})
        return report

    export_options = frozenset({"source_tokenizer", "target_tokenizer", "beam", "lenpen"})
    translate_options = frozenset({"beam", "lenpen", "batch_size", "max_len_a", "max_len_b", "source_tokenizer",
                                   "target_tokenizer", "device", "src_lang", "tgt_lang", "progress"})

    def translate(self, run: Path, input_path: Path, output: Path, **o: Any) -> dict[str, Any]:
        """Every line of `input_path` translated by the run's best checkpoint (or a checkpoint file), beam 5
        and lenpen 1 unless given (`nbcli.translate.translate_file`)."""
        from nbcli.translate import translate_file

        return translate_file(run, input_path, output, **o).as_dict()

    def export(self, run: Path, out: Path, **o: Any) -> dict[str, Any]:
        """The run's best checkpoint (or a checkpoint file) as a transformers Marian folder, its decoding
        in generation_config (`nbcli.export`)."""
        from nbcli.export import export_translation

        return export_translation(run, out, source_tokenizer=o["source_tokenizer"],
                                  target_tokenizer=o["target_tokenizer"], beam=o["beam"], lenpen=o["lenpen"]).as_dict()

    def summary_view(self, summary: dict[str, Any], num: Formatter = str) -> SummaryView:
        from nbcli.tasks.lm import closing_rows

        s = summary
        bleu, best = s.get("final_val_bleu"), s.get("best_val_bleu")
        rows = [("steps", num(s["steps"])), ("device", s["device"]), ("parameters", num(s["parameters"])),
                ("training / validation pairs used", f"{num(s.get('train_pairs'))} / {num(s.get('valid_pairs'))}"),
                ("pairs read (both), too long skipped", f"{num(s['pairs'])}, {num(s['skipped_long_pairs'])}"),
                ("final val loss", num(s["final_val_loss"])), ("ALC (val loss)", num(s["alc"])),
                ("final val BLEU / chrF", f"{num(bleu)} / {num(s['final_val_chrf'])}" if bleu is not None else "-"),
                ("best val BLEU (step)", f"{num(best)} ({num(s['best_step'])})" if best is not None else "-"),
                ("best checkpoint chosen by", s.get("select_by", "val_bleu")),
                ("ALC (val BLEU)", num(s["alc_val_bleu"])),
                ("target unigram entropy / log V", f"{num(s['unigram_entropy'])} / {num(s['log_v'])} nats"),
                ("target tokens/s", num(s["tokens_per_s"])), ("checkpoint", s["checkpoint"]),
                ("best checkpoint", s["best_checkpoint"]), ("BLEU signature", s["bleu_signature"])]
        if s.get("ag_alpha0") is not None:
            rows.insert(6, ("AG alpha_0", num(s["ag_alpha0"])))
        return SummaryView(f"nb train --task translation: {s['out']}", rows + closing_rows(s, num))


def translation_tokenizers(joint: str | Path | None, source: Path | None, target: Path | None) -> tuple[Path, Path]:
    """(source, target) tokenizer: -t for both, or --src-tokenizer and --tgt-tokenizer."""
    if joint is not None and (source is not None or target is not None):
        raise ConfigError("give either -t (one joint tokenizer) or --src-tokenizer and --tgt-tokenizer, not both")
    if joint is not None:
        return Path(joint), Path(joint)
    if source is None or target is None:
        raise ConfigError("--task translation needs -t (a joint tokenizer) or both --src-tokenizer and --tgt-tokenizer")
    return Path(source), Path(target)
