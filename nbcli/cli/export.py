"""`nb export`: an nb translation checkpoint as a transformers model folder (Marian layout), or a classifier /
tagger run fine-tuned from a transformers encoder as that family's For{Sequence,Token}Classification folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from nbcli.cli.base import NbCommand
from nbcli.cli.options import JointTokenizerOption, JsonOption, SrcTokenizerOption, TgtTokenizerOption

EPILOG = """\
Writes DIR with model.safetensors, config.json (MarianConfig), generation_config.json and tokenizer files, so
that transformers' AutoModelForSeq2SeqLM.from_pretrained(DIR) computes the same logits (the output bias b is
final_logits_bias) and generate() the same translations (generation_config: decoder_start_token_id, eos/pad
ids, num_beams and length_penalty: nb's decoding, beam 5 and lenpen 1 (paper 000 app. A) unless --beam/--lenpen,
not the run's validation beam; early_stopping true for a beam; max_new_tokens the position table). nb also
stops each sentence after int(1.2 x S + 10) generated tokens (S source tokens, EOS included), a limit per
sentence that generation_config cannot hold: a sentence that nb ends with EOS before it translates the same;
one that nb cuts there goes on in generate until EOS or max_new_tokens; pass max_new_tokens=int(1.2 * S + 10)
per sentence to cut where nb does (docs/training.md 'nb export'). SentencePiece runs get MarianTokenizer's
files (source.spm, target.spm, vocab.json), which encode as nb does and append EOS. Post-LN models only (Marian
has no place for pre-LN's final LayerNorms). DIR must be new or empty; it is written in one commit.

Every export holds a model card, README.md: the Hub's metadata (library_name, pipeline_tag, language, tags
with the arXiv id of each paper whose method the run used, base_model for a run fine-tuned from a Hub model,
a model-index with the validation metrics nb logged at the exported step: BLEU/chrF with sacreBLEU's
signatures, or accuracy/F1 on each --valid set) and how to load and use the folder with transformers.

A classifier or tagger run (nb train --task classification|tagging from a transformers encoder: BERT, RoBERTa,
DistilBERT, ...) exports as that family's ForSequenceClassification / ForTokenClassification folder that
AutoModelForSequenceClassification / AutoModelForTokenClassification loads with the same logits: config.json
with id2label / label2id by the run's label names, model.safetensors, and the run's tokenizer.json with
tokenizer_config.json. A run directory stands for its best checkpoint by --select-by (best.safetensors, kept
when it had --valid), else its last. A run on nb's own encoder (from scratch or from an nb MLM run) is refused: nb's encoder is pre-LN, which no transformers encoder family is.

[bold]Examples[/bold]

  nb export runs/iwslt-unigram-s0 -o hf/mt       # the run's best checkpoint
  nb export runs/mnli -o hf/mnli                 # a classifier (AutoModelForSequenceClassification)
  nb export runs/iwslt-unigram-s0/step-20000.safetensors -o hf/step-20000 --json

Then in Python, as DIR/README.md (the model card) shows for each export: tokenizer =
AutoTokenizer.from_pretrained(DIR), model = AutoModelForSeq2SeqLM.from_pretrained(DIR),
tokenizer.batch_decode(model.generate(**tokenizer(["Hallo Welt"], return_tensors="pt")),
skip_special_tokens=True); a classifier: AutoModelForSequenceClassification (tagger:
AutoModelForTokenClassification) and the logits' argmax through config.id2label.
"""


def export(
    checkpoint: Annotated[Path, typer.Argument(
        metavar="RUN_OR_CKPT", show_default=False,
        help="An nb train --task translation run directory (its best checkpoint), a --task classification|tagging "
        "run directory (its best checkpoint with --valid, else its last), or a checkpoint file of either.")],
    out: Annotated[Path, typer.Option(
        "--out", "-o", metavar="DIR", show_default=False, help="The model folder to write (new or empty).")],
    tokenizer: JointTokenizerOption = None,
    src_tokenizer: SrcTokenizerOption = None,
    tgt_tokenizer: TgtTokenizerOption = None,
    beam: Annotated[Optional[int], typer.Option(
        "--beam", min=1, max=1024, show_default=False,
        help="generation_config num_beams (default 5, paper 000 app. A; not the run's validation beam).")] = None,
    lenpen: Annotated[Optional[float], typer.Option(
        "--lenpen", show_default=False, help="generation_config length_penalty (default 1; only with a beam).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Export a translation checkpoint to a transformers model folder (Marian layout, b as final_logits_bias), or a fine-tuned classifier or tagger to its family's transformers classification folder."""
    from nbcli.cli.console import print_report
    from nbcli.tasks.runs import export_run

    source, target = (tokenizer, tokenizer) if tokenizer is not None else (src_tokenizer, tgt_tokenizer)
    report = export_run(checkpoint, out, source_tokenizer=source, target_tokenizer=target, beam=beam,
                        lenpen=lenpen)   # the run's task's export
    print_report(report, as_json, _render)


def _render(report: dict[str, object]) -> None:
    from nbcli.cli.console import esc, stdout_console
    from nbcli.cli.render import num

    if "labels" in report:   # a classifier or tagger
        stdout_console().print(
            f"{esc(report['checkpoint'])} (step {report['step']}) -> {esc(report['out'])}: {report['layout']}, "
            f"{num(report['tensors'])} tensors, {num(report['parameters'])} parameters; labels "
            f"{esc(', '.join(report['labels']))}; files {', '.join(str(f) for f in report['files'])}",  # type: ignore[arg-type]
            highlight=False)
        return
    stdout_console().print(
        f"{esc(report['checkpoint'])} (step {report['step']}) -> {esc(report['out'])}: {report['layout']} layout, "
        f"{num(report['tensors'])} tensors, {num(report['parameters'])} parameters; decoder_start_token_id "
        f"{report['decoder_start_token_id']}, eos {report['eos_token_id']}, pad {report['pad_token_id']}; beam "
        f"{report['num_beams']}, lenpen {report['length_penalty']:g}, max_new_tokens {report['max_new_tokens']}; files "
        f"{', '.join(str(f) for f in report['files'])}", highlight=False)  # type: ignore[union-attr]


def register(app: typer.Typer) -> None:
    app.command("export", epilog=EPILOG, cls=NbCommand)(export)
