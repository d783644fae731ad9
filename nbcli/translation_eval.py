"""`nb eval --task translation`: test BLEU and chrF (sacreBLEU, signatures recorded) of translations of
a parallel corpus's source side against its target side (paper 000 sec. 4.1, fig. 2).

The hypotheses come from a file (`--hyps FILE`, one a line, in the corpus's pair order: scoring
without a model) or from a `translate` function the caller passes (a model's decoder: source
sentences in, detokenised hypotheses out, same order). The corpus is read by
`nbcli.corpus.records.iter_pairs` (aligned PREFIX.{src,tgt} files, TSV/CSV, JSONL translation
objects, parquet/Arrow), the hypotheses file by the same line rule (`nbcli.corpus.rows.numbered_lines`);
scoring is `nbcli.analysis.translation.score_translations`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nbcli.errors import ConfigError, CorpusError, InputError, naming

Translate = Callable[[list[str]], list[str]]
"""Source sentences -> detokenised hypotheses, one each, in order (e.g. nb's beam-search decoder)."""


def read_hypotheses(path: Path | str, *, what: str = "--hyps", strict: bool = False) -> tuple[list[str], int]:
    """(lines, lines that held invalid UTF-8) of a hypotheses file, one sentence a line: every line in
    order, empty ones included (a model may output nothing for a sentence), by the corpus line rule
    (a line ends at LF or CR LF; invalid UTF-8 replaced by U+FFFD and counted, as for the corpus);
    plain, compressed or `-` for stdin. CorpusError when `path` is not one text file (a folder).
    `strict` (`nb translate --input`, where `what` names the option): invalid UTF-8 is a CorpusError
    naming FILE:LINE instead, so no sentence is silently changed."""
    from nbcli.corpus.records import ReadStats
    from nbcli.corpus.rows import numbered_lines
    from nbcli.corpus.sources import discover_inputs

    sources = [] if Path(path).is_dir() else discover_inputs([str(path)], "text")
    if len(sources) != 1 or sources[0].columnar:
        raise CorpusError(f"{what} {path}: expected one text file, one sentence a line")
    stats = ReadStats()
    lines = [line for _number, line in numbered_lines(sources[0], strict, stats, None)]
    return lines, stats.bad_utf8_lines


def eval_translation(corpus: Sequence[str], src_lang: str | None, tgt_lang: str | None, *,
                     hyps: Path | str | None = None, translate: Translate | None = None,
                     model: dict[str, Any] | None = None, tokenize: str = "13a",
                     columns: str | None = None,
                     sections: Callable[[list[Any]], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Score translations of the pairs of `corpus` (`src_lang` -> `tgt_lang`) against their
    references: the lines of `hyps` when given (exactly one per pair), else `translate` applied to
    the source sentences. `model`: what the report says about the model behind `translate`.
    `columns`: which column of a .tsv/.csv without a header naming the languages is the source
    ("src,tgt", the default, or "tgt,src"; `nbcli.corpus.records.iter_pairs`). `sections(pairs)`: more
    report sections computed on the same pairs (their `warnings` join the report's).

    Returns {"task", "corpus", "src_lang", "tgt_lang", "pairs", "hypotheses", "model", "bleu",
    "chrf", "bleu_signature", "chrf_signature", "bleu_details", "warnings"}. Errors, before any
    scoring: no languages, no pairs, both or neither of `hyps` and `translate`, a hypotheses file
    whose line count is not the number of pairs (naming both)."""
    from nbcli.analysis.translation import score_translations
    from nbcli.corpus.records import ReadStats, iter_pairs

    if (hyps is None) == (translate is None):
        raise ConfigError("translation scores need either a hypotheses file (--hyps FILE) or a model to decode "
                          "with, not both" if hyps is not None else
                          "translation scores need a model (CHECKPOINT) or a hypotheses file (--hyps FILE)")
    if not src_lang or not tgt_lang:
        raise ConfigError("--src-lang and --tgt-lang name the test corpus's sides (e.g. --src-lang de --tgt-lang en)")
    if src_lang == tgt_lang:
        raise ConfigError(f"--src-lang and --tgt-lang are both {src_lang!r}")
    stats = ReadStats()
    pairs = list(iter_pairs(list(corpus), src_lang, tgt_lang, stats=stats, columns=columns))
    where = ", ".join(corpus)
    if not pairs:
        raise CorpusError(f"{where}: no {src_lang}-{tgt_lang} pairs")
    warnings: list[str] = stats.notes(where)
    if hyps is not None:
        hypotheses, bad_lines = read_hypotheses(hyps)
        warnings += ReadStats(bad_utf8_lines=bad_lines).notes(f"--hyps {hyps}")
        if len(hypotheses) != len(pairs):
            raise InputError(f"--hyps {hyps}: {len(hypotheses)} lines for the {len(pairs)} pairs of {where} "
                             "(one hypothesis a pair, in order; a line blank on both sides of the corpus is no pair)")
    else:
        assert translate is not None
        hypotheses = translate([p.source for p in pairs])
        if len(hypotheses) != len(pairs):
            raise InputError(f"the model gave {len(hypotheses)} translations for {len(pairs)} pairs")
    with naming(f"--hyps {hyps}" if hyps is not None else where):
        scores = score_translations(hypotheses, [p.target for p in pairs], tokenize=tokenize)
    extra = sections(pairs) if sections is not None else {}
    warnings += extra.pop("warnings", [])
    return {"task": "translation", "corpus": list(corpus), "src_lang": src_lang, "tgt_lang": tgt_lang,
            "pairs": len(pairs), "hypotheses": str(hyps) if hyps is not None else None, "model": model,
            **{k: v for k, v in scores.items() if k != "sentences"}, "warnings": warnings, **extra}
