"""`nb translate`: decode a file of source sentences with an `nb train --task translation` model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from nbcli.cli.base import NbCommand
from nbcli.cli.options import (
    DeviceOption, JointTokenizerOption, JsonOption, SrcTokenizerOption, TgtTokenizerOption, ThreadsOption, on_threads,
)

EPILOG = """\
One sentence a line in, one detokenised translation a line out, in the same order (an empty line gives
an empty line). RUN_OR_CKPT: a run directory (its best checkpoint by validation BLEU, best.safetensors,
else its last step-N.safetensors) or a checkpoint file; the run's tokenizers are found beside it. Greedy
with --beam 1, else beam search scoring hypotheses logprob / length^lenpen (length = generated tokens,
EOS included: fairseq's --lenpen, transformers' length_penalty with early_stopping=True). Defaults:
beam 5 (paper 000 app. A), lenpen 1, length limit 1.2 x S + 10 generated tokens for S source tokens,
whatever beam the run validated with (nb train --valid-beam sets validation BLEU only). The report
states the beam, length penalty and limit used. A run translates the languages it was trained on (its
--src-lang -> --tgt-lang): --src-lang/--tgt-lang here are checked against them, and an input named for
the run's target language (test.en for a de->en run) is refused unless --src-lang says otherwise.

[bold]Examples[/bold]

  nb translate runs/iwslt-unigram-s0 --input test.de -o test.hyp.en
  nb translate runs/iwslt-unigram-s0/step-20000.safetensors --input test.de -o hyp.en --beam 1 --json
  sacrebleu test.en -i test.hyp.en -m bleu chrf
"""


@on_threads
def translate(
    checkpoint: Annotated[Path, typer.Argument(
        metavar="RUN_OR_CKPT", show_default=False,
        help="An nb train --task translation run directory or checkpoint (.safetensors).")],
    input_path: Annotated[Path, typer.Option(
        "--input", "-i", metavar="FILE", show_default=False,
        help="Source sentences, one a line (compressed files and - for stdin too).")],
    output: Annotated[Path, typer.Option(
        "--output", "-o", metavar="FILE", show_default=False,
        help="Translations, one a line (written only when every line is translated); - for stdout (then "
        "nothing else is printed there).")],
    beam: Annotated[Optional[int], typer.Option(
        "--beam", min=1, max=1024, show_default=False, help="Beam size (1 = greedy). Default 5 (paper 000 app. A), not the run's validation beam.")] = None,
    lenpen: Annotated[Optional[float], typer.Option(
        "--lenpen", show_default=False, help="Length penalty (score = logprob / length^lenpen). Default 1.")] = None,
    batch_size: Annotated[int, typer.Option(
        "--batch-size", min=1, max=1 << 16, help="Sentences decoded together (grouped by source length).")] = 64,
    max_len_a: Annotated[Optional[float], typer.Option(
        "--max-len-a", show_default=False, help="Length limit a x S + b generated tokens for S source tokens "
        "(fairseq's; default 1.2).")] = None,
    max_len_b: Annotated[Optional[int], typer.Option(
        "--max-len-b", min=0, show_default=False, help="The limit's b (default 10).")] = None,
    src_lang: Annotated[Optional[str], typer.Option(
        "--src-lang", metavar="LANG", show_default=False, help="The input's language: must be the run's source "
        "language (checked; also lets an input named for the target language, e.g. test.en, through).")] = None,
    tgt_lang: Annotated[Optional[str], typer.Option(
        "--tgt-lang", metavar="LANG", show_default=False,
        help="The language wanted: must be the run's target language (checked).")] = None,
    tokenizer: JointTokenizerOption = None,
    src_tokenizer: SrcTokenizerOption = None,
    tgt_tokenizer: TgtTokenizerOption = None,
    device: DeviceOption = "auto",
    threads: ThreadsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Translate a file with a translation model trained by nb (greedy or length-normalised beam search)."""
    from nbcli.cli.console import one_stdout, print_report, step_progress
    from nbcli.tasks.runs import translate_run

    one_stdout(as_json, {"-o": output})
    source, target = (tokenizer, tokenizer) if tokenizer is not None else (src_tokenizer, tgt_tokenizer)
    with step_progress("translating", None) as progress:
        report = translate_run(checkpoint, input_path, output, beam=beam, lenpen=lenpen, batch_size=batch_size,
                               max_len_a=max_len_a, max_len_b=max_len_b, source_tokenizer=source,
                               target_tokenizer=target, device=device, progress=lambda n: progress(n),
                               src_lang=src_lang, tgt_lang=tgt_lang)   # the run's task's translation
    if str(output) != "-":  # with -o -, stdout holds the translations alone
        print_report(report, as_json, _render)


def _render(report: dict[str, object]) -> None:
    from nbcli.cli.console import esc, stdout_console
    from nbcli.cli.render import num

    stdout_console().print(
        f"{num(report['sentences'])} sentences -> {esc(report['output'])} ({esc(report['checkpoint'])}, step "
        f"{num(report['step'])}, beam {num(report['beam'])}, lenpen {report['lenpen']:g}, length limit "
        f"{report['max_len_a']:g} x S + {num(report['max_len_b'])}; {num(report['seconds'])} s, "
        f"{num(report['sentences_per_s'])} sentences/s on {esc(report['device'])})", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("translate", epilog=EPILOG, cls=NbCommand)(translate)
