"""What a finished run scores: its evaluation after training (`[evaluate]`: test BLEU of the best
checkpoint, paper 000 fig. 2) and the value of each metric, read from the run directory (summary.json,
log.jsonl, result.json) or the evaluation, the same numbers `nb plot-run` and `nb eval` report.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nbcli.errors import ConfigError
from nbcli.sweeps.recipe import Metric, Recipe, Scale

#: `evaluate_translation` parameters a recipe's [evaluate] options may set.
TRANSLATION_TEST_OPTIONS = ("beam", "lenpen", "batch_size", "device")


def evaluation_spec(recipe: Recipe, scale: Scale, values: Mapping[str, Any], corpus: str | None,
                    settings: str) -> dict[str, Any] | None:
    """What a run is scored on after training (`[evaluate]`, its options over by the scale's), hashed
    with the run's own settings (a changed test set or beam scores the run again, not trains it)."""
    from nbcli.sweeps import by_frequency

    ev = recipe.evaluation
    if ev is None:
        return None
    options = {**ev.options, **scale.evaluate}
    known = by_frequency.OPTIONS if ev.kind == by_frequency.KIND else TRANSLATION_TEST_OPTIONS
    for key in options:
        if key not in known:
            where = "[evaluate]" if key in ev.options else f"[scales.{scale.name}] evaluate"
            raise ConfigError(f"{recipe.path}: {where}: options.{key}: {ev.kind} takes {', '.join(known)}")
    spec = {"kind": ev.kind, "corpus": [corpus], "src_lang": values.get("src_lang"),
            "tgt_lang": values.get("tgt_lang"), "options": options}
    if ev.kind == by_frequency.KIND:
        spec["counts"] = by_frequency.counts_spec(recipe.path, values)   # the training targets' counts
    blob = json.dumps({"run": settings, **spec}, sort_keys=True, default=str)
    return {**spec, "hash": hashlib.sha256(blob.encode()).hexdigest()}


def record_key(kind: str) -> str:
    """Where a run's record keeps an evaluation of `kind`: each kind its own, so two items scoring
    the same runs (000-fig2's BLEU, 000-fig4's by-frequency) never evaluate each other's away."""
    from nbcli.sweeps import by_frequency

    return by_frequency.RECORD_KEY if kind == by_frequency.KIND else "evaluation"


def evaluate(spec: Mapping[str, Any], run: Path, out: Path) -> dict[str, Any]:
    """The evaluation `spec` of the run in `run` (of OUT `out`): BLEU and chrF (sacreBLEU) of its best
    checkpoint's translations of the test pairs (`nb eval RUN --task translation`), or with paper 000
    fig. 4's by-frequency section (`by_frequency.evaluate_by_frequency`)."""
    from nbcli.api.translation import evaluate_translation
    from nbcli.jsonsafe import json_ready
    from nbcli.sweeps import by_frequency

    if spec["kind"] == by_frequency.KIND:
        return by_frequency.evaluate_by_frequency(spec, run, out)

    report = evaluate_translation(spec["corpus"], spec["src_lang"], spec["tgt_lang"], checkpoint=run,
                                  **spec["options"])
    result = json_ready(report.to_dict())
    return {k: v for k, v in result.items() if k not in ("hypotheses", "model")}


def lookup(data: Any, key: str) -> Any:
    """`data[a][b][0]...` for the dotted key 'a.b.0' (None where a part is missing)."""
    for part in key.split("."):
        if isinstance(data, dict):
            data = data.get(part)
        elif isinstance(data, list) and part.lstrip("-").isdigit() and -len(data) <= int(part) < len(data):
            data = data[int(part)]
        else:
            return None
    return data


def _json(path: Path) -> dict[str, Any]:
    from nbcli.jsonsafe import load_file

    value = load_file(path, error=ConfigError, allow_nan=True) if path.is_file() else {}
    return value if isinstance(value, dict) else {}


def _log(run: Path, key: str) -> list[tuple[int, float]]:
    from nbcli.checkpoint.runs import read_log_records

    return [(r["step"], float(r[key])) for r in read_log_records(run / "log.jsonl")
            if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool) and math.isfinite(r[key])]


def epoch_of(step: int, run: Path) -> float | None:
    """The epoch a step ends: step / updates per epoch (a classifier's summary), else step x batch /
    training pairs (a translation run's summary and config)."""
    summary = _json(run / "summary.json")
    if summary.get("steps_per_epoch"):
        return step / summary["steps_per_epoch"]
    batch = _json(run / "config.json").get("batch_size")
    pairs = summary.get("train_pairs") or summary.get("pairs")   # runs made before train_pairs: all pairs read
    if pairs and batch:
        return step * batch / pairs
    return None


def run_value(metric: Metric, run: Path, record: Mapping[str, Any], alc_steps: int | None) -> float | None:
    """`metric`'s value for one run (times metric.scale), None when the run did not log it."""
    source, key = metric.source, metric.key
    if source == "evaluation":
        value = lookup((record.get("evaluation") or {}).get("result"), key)
    elif source == "result":
        value = lookup(_json(run / "result.json"), key)
    elif source == "summary":
        value = lookup(_json(run / "summary.json"), key)
    elif source == "alc":
        from nbcli.analysis.runs import read_run

        value = read_run(run).alc(key, alc_steps)     # nb plot-run's ALC (paper 000 sec. 4.2)
    else:
        points = _log(run, key)
        if not points:
            return None
        values = [v for _, v in points]
        if source == "log-max":
            value = max(values)
        elif source == "log-min":
            value = min(values)
        elif source == "log-last":
            value = values[-1]
        elif source == "log-mean":
            value = math.fsum(values) / len(values)
        else:  # epoch-at-max | epoch-at-min: the first step reaching the best
            best = max(values) if source == "epoch-at-max" else min(values)
            value = epoch_of(next(s for s, v in points if v == best), run)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) * metric.scale
