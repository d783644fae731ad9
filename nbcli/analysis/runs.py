"""Many `nb train` runs side by side, without torch: each run's curves, config and summary (`read_run`);
runs grouped into arms (the seeds of one configuration, `group_runs`) and each arm's mean ±
standard error of its best and ALC scores (`arm_table`, paper 000 figs. 2-3).

Used by `nb plot-run`. The ALC formula (paper 000 sec. 4.2) is `nbcli.analysis.curves.area_under_curve`,
also used by the training loop; a run directory's files are read by `nbcli.checkpoint.runs`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nbcli.analysis.curves import area_under_curve, mean_standard_error
from nbcli.checkpoint.runs import read_log_records
from nbcli.errors import CheckpointError, ConfigError
from nbcli.jsonsafe import load_file


@dataclass
class RunLog:
    """One run's curves: `series[key]` = (steps, values) for every numeric key of log.jsonl."""

    path: Path
    name: str
    group: str                        # its arm's label (one colour, one legend entry; see group_runs)
    config: dict[str, Any]
    summary: dict[str, Any]
    series: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    data: dict[str, Any] | None = None
    """The training data's identity from DIR/counts.safetensors (tokenizer, tokens, documents), when present."""

    def has(self, key: str) -> bool:
        return key in self.series and self.series[key][0].size > 0

    @property
    def seed(self) -> int | None:
        seed = self.config.get("seed")
        return seed if isinstance(seed, int) and not isinstance(seed, bool) else None

    def alc(self, key: str = "val_loss", until: int | None = None) -> float | None:
        """ALC of the `key` curve over its first `until` updates (None: the whole curve), paper 000
        sec. 4.2 (`nbcli.analysis.curves.area_under_curve`)."""
        if not self.has(key):
            return None
        steps, values = self.series[key]
        return area_under_curve(list(zip(steps.tolist(), values.tolist())), until=until)

    def best_val_bleu(self) -> float | None:
        """summary.json's best_val_bleu (the checkpoint kept, paper 000 app. A), else the highest logged."""
        best = self.summary.get("best_val_bleu")
        if isinstance(best, (int, float)) and not isinstance(best, bool) and math.isfinite(best):
            return float(best)
        return float(self.series["val_bleu"][1].max()) if self.has("val_bleu") else None

    def best_val_accuracy(self) -> tuple[float, float | None] | None:
        """(best validation accuracy, its epoch) of a classifier run: summary.json's best_val_accuracy and
        best_epoch (the first --valid set's), else the highest logged val_accuracy (its epoch unknown)."""
        best = self.summary.get("best_val_accuracy")
        if isinstance(best, (int, float)) and not isinstance(best, bool) and math.isfinite(best):
            epoch = self.summary.get("best_epoch")
            return float(best), float(epoch) if isinstance(epoch, (int, float)) and not isinstance(epoch, bool) else None
        return (float(self.series["val_accuracy"][1].max()), None) if self.has("val_accuracy") else None

    def best_val_loss(self) -> float | None:
        return float(self.series["val_loss"][1].min()) if self.has("val_loss") else None

    def unigram_reg_switch(self) -> tuple[float, int] | None:
        """(lambda, S) when the run regularised away from the unigram for updates < S (config.json's
        unigram_reg_lambda / unigram_reg_steps, paper 000 app. B.3), else None."""
        lam, steps = self.config.get("unigram_reg_lambda"), self.config.get("unigram_reg_steps")
        if (isinstance(lam, (int, float)) and not isinstance(lam, bool) and math.isfinite(lam) and lam > 0
                and isinstance(steps, int) and not isinstance(steps, bool) and 0 < steps < 2**53):
            return float(lam), steps
        return None

    def as_dict(self, until: int | None = None) -> dict[str, Any]:
        """The run as `nb plot-run --json` lists it: directory, arm (group), seed, last validated
        step, ALC of validation loss and of validation BLEU over the first `until` updates (paper
        000 sec. 4.2), final and best validation loss, best validation BLEU (None where not logged),
        and the step at which the unigram regulariser switched off with its lambda (None without one)."""
        logged = self.has("val_loss")
        steps, values = self.series["val_loss"] if logged else (None, None)
        switch = self.unigram_reg_switch()
        return {"dir": str(self.path), "group": self.group, "seed": self.seed,
                "steps": int(steps.max()) if logged else None, "alc": self.alc(until=until),
                "final_val_loss": float(values[-1]) if logged else None, "best_val_loss": self.best_val_loss(),
                "alc_val_bleu": self.alc("val_bleu", until), "best_val_bleu": self.best_val_bleu(),
                "best_val_accuracy": (self.best_val_accuracy() or (None, None))[0],
                "best_epoch": (self.best_val_accuracy() or (None, None))[1],
                "unigram_reg_switch": switch[1] if switch else None,
                "unigram_reg_lambda": switch[0] if switch else None}


SEED_SUFFIX = re.compile(r"[-_](s|seed)\d+$")


def read_run(directory: Path | str) -> RunLog:
    """A run directory's log.jsonl (required), config.json and summary.json (optional)."""
    directory = Path(directory)
    log = directory / "log.jsonl"
    if not log.is_file():
        raise ConfigError(f"{directory}: no log.jsonl (not an nb train run directory)")
    records = read_log_records(log)
    keys = sorted({k for r in records for k, v in r.items()
                   if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)})
    series = {}
    for key in keys:  # a non-finite value (NaN loss of a diverged step) is no point of a curve
        pts = [(r["step"], float(r[key])) for r in records
               if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
        series[key] = (np.array([p[0] for p in pts], dtype=np.int64), np.array([p[1] for p in pts]))
    name = directory.resolve().name
    return RunLog(path=directory, name=name, group=SEED_SUFFIX.sub("", name),
                  config=_json_or_empty(directory / "config.json"), summary=_json_or_empty(directory / "summary.json"),
                  series=series, data=_training_data(directory / "counts.safetensors"))


def _training_data(path: Path) -> dict[str, Any] | None:
    """What identifies a run's training data: the tokenizer and the token and document totals that
    DIR/counts.safetensors records (two corpora with the same options are two arms, not seeds)."""
    from nbcli.checkpoint.format import read_header

    if not path.is_file():
        return None
    try:
        metadata = read_header(path).metadata
    except CheckpointError:
        return None  # a damaged counts file says nothing about the data; the config still groups
    return {key: metadata.get(f"nb.{key}") for key in ("tokenizer_sha256", "vocab_size", "total_tokens", "documents")}


#: config.json keys that cannot change what a run learns or logs: runs whose configs differ only in
#: these and the seed are seeds of one arm (paper 000 figs. 2-3: 5 seeds per arm).
NOT_AN_ARM = frozenset({"seed", "device", "compile", "save_every"})


def read_runs(directories: Sequence[Path | str], group_seeds: bool = True) -> list[RunLog]:
    """`read_run` of each directory, grouped into arms by `group_runs`."""
    return group_runs([read_run(d) for d in directories], group_seeds)


def group_runs(runs: Sequence[RunLog], group_seeds: bool = True) -> list[RunLog]:
    """The runs with `group` set to their arm's label. With `group_seeds`, runs are one arm when
    their config.json values are equal but for the seed (and NOT_AN_ARM) and their training data is
    the same (a classifier's data files by their content, `examples`, not by their paths as typed);
    a run without a config.json is grouped by its directory name less a seed suffix
    (-s0, _seed1). Without, every run is its own arm. The label is the members' common directory
    name less the seed suffix (else their common prefix); arms with the same label are told apart by the
    config.json values that differ (else #2, #3)."""
    keys = []
    for r in runs:
        if not group_seeds:
            keys.append(f"dir:{r.path.resolve()}")
        elif r.config:
            paths = ("train", "valid") if "examples" in r.config else ()  # a classifier's files: by content
            settings = {k: v for k, v in r.config.items() if k not in NOT_AN_ARM and k not in paths}
            keys.append(json.dumps({"config": settings, "data": r.data}, sort_keys=True, default=str))
        else:
            keys.append(f"name:{SEED_SUFFIX.sub('', r.name)}")
    members = {key: [r for r, k in zip(runs, keys) if k == key] for key in dict.fromkeys(keys)}
    labels = {key: _arm_label(m) if group_seeds else m[0].name for key, m in members.items()}
    told = _told_apart(labels, members)
    return [dataclasses.replace(r, group=told[k]) for r, k in zip(runs, keys)]


def _told_apart(labels: dict[str, str], members: dict[str, list[RunLog]]) -> dict[str, str]:
    """Arms that share a label get the config.json values that tell them apart (`unigram (rescale_w=fro)`,
    `unigram (rescale_w=None)`: at most two keys), else #2, #3 (their data differs, or a run has no config)."""
    out = dict(labels)
    for label in set(labels.values()):
        same = [key for key, value in labels.items() if value == label]
        if len(same) < 2:
            continue
        configs = [members[key][0].config for key in same]
        differing = sorted({k for c in configs for k in c if k not in NOT_AN_ARM
                            and len({json.dumps(o.get(k), sort_keys=True, default=str) for o in configs}) > 1})
        if all(configs) and differing:
            for key, config in zip(same, configs):
                out[key] = f"{label} ({', '.join(f'{k}={config.get(k)}' for k in differing[:2])})"
        else:
            for n, key in enumerate(same[1:], start=2):
                out[key] = f"{label} #{n}"
    return out


def _arm_label(members: Sequence[RunLog]) -> str:
    stems = {SEED_SUFFIX.sub("", r.name) for r in members}
    if len(stems) == 1:
        return stems.pop()
    prefix = os.path.commonprefix([r.name for r in members]).rstrip("-_. ")
    return prefix or f"{members[0].name} (+{len(members) - 1})"


#: The per-run numbers `arm_table` summarises (what figs. 2-3 plot per arm).
ARM_METRICS = ("best_val_bleu", "alc_val_bleu", "best_val_loss", "alc_val_loss", "best_val_accuracy", "best_epoch")


def arm_table(runs: Sequence[RunLog], until: int | None = None) -> list[dict[str, Any]]:
    """One row per arm (group), in first-seen order: its run directories, seeds, and for each of
    ARM_METRICS the mean ± standard error (ddof 1) over the runs that logged it, with their number
    (paper 000 figs. 2-3: mean and standard error over 5 seeds), and `sd`, the standard deviation σ
    (ddof 1; paper 002 table 1 reports best validation accuracy and its epoch as mean ± σ over seeds).
    ALCs over the first `until` updates. A metric no run logged (accuracy of translation runs, BLEU of
    classifiers) is left out of every row, so no table carries a column that cannot apply."""
    rows = []
    for group in dict.fromkeys(r.group for r in runs):
        members = [r for r in runs if r.group == group]
        values = {"best_val_bleu": [r.best_val_bleu() for r in members],
                  "alc_val_bleu": [r.alc("val_bleu", until) for r in members],
                  "best_val_loss": [r.best_val_loss() for r in members],
                  "alc_val_loss": [r.alc("val_loss", until) for r in members],
                  "best_val_accuracy": [(r.best_val_accuracy() or (None, None))[0] for r in members],
                  "best_epoch": [(r.best_val_accuracy() or (None, None))[1] for r in members]}
        row: dict[str, Any] = {"group": group, "runs": [str(r.path) for r in members], "seeds": [r.seed for r in members]}
        for metric in ARM_METRICS:
            present = [v for v in values[metric] if v is not None]
            mean, se = mean_standard_error(present)
            row[metric] = {"mean": mean, "se": se, "sd": mean_standard_error(present, "sd")[1], "n": len(present)}
        rows.append(row)
    unlogged = [m for m in ARM_METRICS if not any(row[m]["n"] for row in rows)]
    for row in rows:
        for metric in unlogged:
            del row[metric]
    return rows


def _json_or_empty(path: Path) -> dict[str, Any]:
    """A run's config.json or summary.json: {} when absent or not an object; ConfigError naming
    the file when it is not UTF-8 JSON (nb writes NaN for a NaN loss, so NaN is read)."""
    if not path.is_file():
        return {}
    value = load_file(path, error=ConfigError, allow_nan=True)
    return value if isinstance(value, dict) else {}
