"""Paper 000 fig. 4 (sec. 4.2 'Analysis') as a sweep's evaluation (`[evaluate] kind =
"translation-by-frequency"`): the training targets' unigram counts, counted once per OUT (the
target side of the runs' --corpus with their target tokenizer, as `nb count-unigrams` counts it),
each run scored by `nb eval --task translation RUN --corpus TEST --by-frequency COUNTS` (its
`by_frequency` section: each reference token's average log-probability by log-unigram bin, with
and without b), and per arm the per-bin means: one seed's as it is (bars: the SE over the bin's
tokens, the paper's), several seeds' mean ± SE of the per-bin means.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nbcli.errors import ConfigError

KIND = "translation-by-frequency"
#: `nb eval --task translation` options a recipe's [evaluate] may set for this kind.
OPTIONS = ("beam", "lenpen", "batch_size", "device", "bins", "smoothing")
PANELS = (("mean_log_prob", "sem"), ("mean_log_prob_without_bias", "sem_without_bias"))
RECORD_KEY = "by_frequency"     # where a run's record keeps this evaluation (000-fig2's stays in "evaluation")


def counts_spec(recipe_path: Path, values: Mapping[str, Any]) -> dict[str, Any]:
    """What the training targets' counts of a run are made from: its --corpus, languages and target
    tokenizer (--tgt-tokenizer, else -t), and the file they go to under OUT/counts."""
    tokenizer = values.get("tgt_tokenizer") or values.get("tokenizer")
    if not tokenizer or not Path(str(tokenizer)).is_file():
        raise ConfigError(f"{recipe_path}: [evaluate] {KIND}: counts the training targets with the runs' target "
                          f"tokenizer file (tokenizer or tgt_tokenizer), got {tokenizer!r}")
    corpus = values.get("corpus")
    spec = {"corpus": [str(c) for c in (corpus if isinstance(corpus, list) else [corpus])],
            "src_lang": values.get("src_lang"), "tgt_lang": values.get("tgt_lang"), "tokenizer": str(tokenizer)}
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
    return {**spec, "file": f"counts/train-target-{digest}.safetensors"}


def target_files(spec: Mapping[str, Any]) -> list[str]:
    """The target side of each training input: PREFIX.TGT of aligned PREFIX.SRC / PREFIX.TGT files."""
    from nbcli.corpus.records import aligned_files

    files = []
    for item in spec["corpus"]:
        aligned = aligned_files(item, spec["src_lang"], spec["tgt_lang"])
        if aligned is None:
            raise ConfigError(f"--data train={item}: {KIND} counts the target side of aligned PREFIX.{spec['src_lang']} "
                              f"/ PREFIX.{spec['tgt_lang']} files; give their PREFIX (or count by hand: nb "
                              "count-unigrams TRAIN.TGT -t TOK, then nb eval --by-frequency)")
        files.append(aligned[1])
    return files


def prepare_counts(evaluations: Sequence[Mapping[str, Any] | None], out: Path) -> list[str]:
    """OUT/counts/...: each distinct training-target counts file the evaluations need, counted once
    (kept for later invocations) by nb's counter (`nbcli.counting.count_to_file`, nb count-unigrams'
    defaults); the files counted now."""
    from nbcli.counting import CountOptions, count_to_file

    specs = {json.dumps(e["counts"], sort_keys=True): e["counts"] for e in evaluations
             if e is not None and e["kind"] == KIND}.values()
    wanted = [(spec, target_files(spec)) for spec in specs if not (out / spec["file"]).is_file()]  # all checked first
    for spec, files in wanted:
        path = out / spec["file"]
        path.parent.mkdir(parents=True, exist_ok=True)
        count_to_file(files, Path(spec["tokenizer"]), path, None, CountOptions(), workers=1)
    return [spec["file"] for spec, _ in wanted]


def evaluate_by_frequency(spec: Mapping[str, Any], run: Path, out: Path) -> dict[str, Any]:
    """`nb eval --task translation RUN --corpus TEST --by-frequency OUT/counts/... --json` of the run
    (decoded with the spec's beam as nb eval does; the hypotheses left out)."""
    from nbcli.counts import parse_smoothing
    from nbcli.jsonsafe import json_ready
    from nbcli.translate import eval_translation_model

    o = dict(spec["options"])
    figure = {"counts": out / spec["counts"]["file"], "bins": o.pop("bins", 10),
              "smoothing_k": parse_smoothing(o.pop("smoothing", "add-k:1"))}
    report = eval_translation_model(run, list(spec["corpus"]), spec["src_lang"], spec["tgt_lang"], by_frequency=figure,
                                    **o)
    return {k: v for k, v in json_ready(report).items() if k != "hypotheses"}


def run_section(record: Mapping[str, Any], run: str) -> dict[str, Any]:
    """The `by_frequency` section of a finished run's evaluation."""
    result = (record.get(RECORD_KEY) or {}).get("result") or {}
    section = result.get("by_frequency")
    if not isinstance(section, dict):
        raise ConfigError(f"runs/{run} has no by-frequency evaluation; run the sweep again to make it")
    return section


def _edges(section: Mapping[str, Any]) -> list[tuple[float, float, int]]:
    return [(b["log_unigram_lo"], b["log_unigram_hi"], b["tokens"]) for b in section["bins"]]


def arm_bins(arm: str, runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One arm's per-bin values over its runs (each {run, seed, by_frequency}): one seed's bins as
    they are (± the SE over the bin's tokens), several seeds' mean ± SE (ddof 1) of the per-bin means."""
    from nbcli.analysis.curves import mean_standard_error

    sections = [r["by_frequency"] for r in runs]
    first = _edges(sections[0])
    for r in runs[1:]:
        if _edges(r["by_frequency"]) != first:
            raise ConfigError(f"{r['run']}: its log-unigram bins differ from {runs[0]['run']}'s (another test set, "
                              "counts or position table); the seeds of an arm cannot be averaged bin by bin")
    rows = []
    for i, (lo, hi, tokens) in enumerate(first):
        row: dict[str, Any] = {"log_unigram_lo": lo, "log_unigram_hi": hi, "tokens": tokens}
        for key, err in PANELS:
            values = [s["bins"][i].get(key) for s in sections]
            values = [v for v in values if v is not None]
            if len(sections) == 1:
                row[key], row[err] = (values[0], sections[0]["bins"][i].get(err)) if values else (None, None)
            else:
                row[key], row[err] = mean_standard_error(values)
        rows.append(row)
    dropped = all(s.get("output_bias_dropped") for s in sections)
    if not dropped:
        for row in rows:
            row.pop(PANELS[1][0]), row.pop(PANELS[1][1])
    return {"arm": arm, "seeds": [r["seed"] for r in runs], "output_bias_dropped": dropped,
            "tokens": sections[0]["tokens"],
            "error_bars": "SE over the bin's tokens (one seed)" if len(runs) == 1 else
            f"SE over {len(runs)} seeds of the per-bin means", "bins": rows}


def shown(value: float | None, spread: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.3f}" + ("" if spread is None else f" ± {spread:.3f}")


def markdown_section(arms: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per arm, a table of its bins: log-unigram interval, tokens, mean log-probability ± SE with
    all parameters and with b dropped, and the paper's (none printed)."""
    lines = []
    for arm in arms:
        lines += ["", f"## {arm['arm']} ({len(arm['seeds'])} seed{'s' * (len(arm['seeds']) != 1)}; "
                      f"bars: {arm['error_bars']})", "",
                  "| log-unigram (nats) | tokens | log-prob, all parameters: nb | log-prob, b dropped: nb | paper |",
                  "|---|---|---|---|---|"]
        for i, b in enumerate(arm["bins"]):
            close = "]" if i == len(arm["bins"]) - 1 else ")"    # the last bin holds its upper edge
            lines.append(f"| [{b['log_unigram_lo']:.2f}, {b['log_unigram_hi']:.2f}{close} | {b['tokens']} | "
                         f"{shown(b['mean_log_prob'], b['sem'])} | "
                         f"{shown(b.get('mean_log_prob_without_bias'), b.get('sem_without_bias'))} | – |")
    return lines


CSV_COLUMNS = ("arm", "bin", "log_unigram_lo", "log_unigram_hi", "tokens", "seeds", "mean_log_prob", "se",
               "mean_log_prob_without_bias", "se_without_bias", "paper")


def csv_section(arms: Sequence[Mapping[str, Any]]) -> str:
    """One line per arm and bin, full precision (repr of each float); the paper prints no numbers."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for arm in arms:
        for i, b in enumerate(arm["bins"]):
            values = [b.get(k) for k in ("mean_log_prob", "sem", "mean_log_prob_without_bias", "sem_without_bias")]
            writer.writerow([arm["arm"], i, repr(b["log_unigram_lo"]), repr(b["log_unigram_hi"]), b["tokens"],
                             len(arm["seeds"]), *("" if v is None else repr(v) for v in values), ""])
    return buffer.getvalue()


def draw_overlay(arms: Sequence[Mapping[str, Any]], path: Path, title: str, metadata: dict[str, str]) -> None:
    """The arms on one figure (`nb plot-by-frequency`'s drawing): upper panel all parameters, lower
    panel b dropped."""
    from nbcli import plots

    plots.plot_by_frequency(path, [(a["arm"], a) for a in arms], title=title, metadata=metadata)
