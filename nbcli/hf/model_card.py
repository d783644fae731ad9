"""The model card `nb export` writes as README.md: the Hub's metadata block (huggingface_hub's
`ModelCardData`: library_name, pipeline_tag, tags with the arXiv id of each paper whose method the run
used, base_model for a run fine-tuned from a Hub model, datasets when an input is a Hub dataset,
language for translation, and a model-index with the validation metrics nb computed at the exported
step) and a short body: how to load and use the folder with transformers, the decoding defaults, the
run's settings and data, its metrics, and the papers.

A run's metrics are the ones nb train logged for the exported checkpoint's step: a translation run's
validation BLEU and chrF with sacreBLEU's signatures (summary.json's best_val_bleu when the export is
the best checkpoint), a classifier's or tagger's metrics on each --valid set (summary.json's `final` for
its last checkpoint). nb computes no test-set metric during training, so none is claimed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The papers nb implements, by the method a run can use: (arXiv id, citation).
PAPERS = {
    "000": ("2212.09686", "Meister et al. (2023), A Natural Bias for Language Generation Models, ACL 2023"),
    "001": ("2010.02399", "Deshpande & Narasimhan (2020), Guiding Attention for Self-Supervised Learning with "
                          "Transformers, Findings of EMNLP 2020"),
    "002": ("2407.12514", "Kim, Balasubramanian & Kang (2024), On Initializing Transformers with Pre-trained "
                          "Embeddings"),
}


@dataclass(frozen=True)
class Metric:
    """One validation result: the set (and its file), the metric's Hub type, its name and value."""

    dataset: str
    source: str
    type: str
    name: str
    value: float
    config: str | None = None


@dataclass
class CardFacts:
    """What a card says of one export (`model_card` writes it)."""

    name: str
    task: str                                   # translation | classification | tagging
    summary: str                                # the first sentence: what the model is
    usage: str                                  # Python that loads and runs the folder
    languages: list[str] = field(default_factory=list)
    base_model: str | None = None
    datasets: list[str] = field(default_factory=list)
    papers: dict[str, str] = field(default_factory=dict)      # paper -> what the run used from it
    settings: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    metrics: list[Metric] = field(default_factory=list)


PIPELINE_TAGS = {"translation": "translation", "classification": "text-classification",
                 "tagging": "token-classification"}


def model_card(facts: CardFacts) -> bytes:
    """README.md of the export: the Hub's metadata (YAML, `ModelCardData`) and the body (module doc)."""
    from huggingface_hub import EvalResult, ModelCard, ModelCardData

    results = [EvalResult(task_type=PIPELINE_TAGS[facts.task], dataset_type=m.source, dataset_name=m.dataset,
                          dataset_split="validation", metric_type=m.type, metric_name=m.name, metric_value=m.value,
                          metric_config=m.config) for m in facts.metrics]
    data = ModelCardData(language=facts.languages or None, library_name="transformers",
                         pipeline_tag=PIPELINE_TAGS[facts.task],
                         tags=["nb", facts.task, *(f"arxiv:{PAPERS[p][0]}" for p in facts.papers)],
                         base_model=facts.base_model, datasets=facts.datasets or None, model_name=facts.name,
                         eval_results=results or None)
    return str(ModelCard(f"---\n{data.to_yaml()}\n---\n\n{_body(facts)}")).encode("utf-8")


def _body(facts: CardFacts) -> str:
    from nbcli.provenance import tool_version

    lines = [f"# {facts.name}", "", f"{facts.summary} Trained and exported with {tool_version()} (`nb train`, "
             "`nb export`).", "", "## Use", "", "```python", facts.usage.rstrip(), "```", ""]
    lines += [f"- {note}" for note in facts.notes] + ([""] if facts.notes else [])
    lines += ["## Training", "", *(f"- {key}: {value}" for key, value in facts.settings), "",
              "The run directory's config.json holds every setting.", "", "## Evaluation", ""]
    if facts.metrics:
        lines += ["| set | metric | value |", "|---|---|---|",
                  *(f"| {m.dataset} | {m.name} | {m.value:.6g} |" for m in facts.metrics), "",
                  "Validation metrics nb computed during training at the exported step; no test-set metric."]
    else:
        lines.append("nb computed no metric at the exported step (it evaluates at the steps --eval-every sets).")
    if facts.papers:
        lines += ["", "## Method", ""]
        lines += [f"- {PAPERS[p][1]} ([arXiv:{PAPERS[p][0]}](https://arxiv.org/abs/{PAPERS[p][0]})): {used}"
                  for p, used in facts.papers.items()]
    return "\n".join(lines) + "\n"


def papers_used(config: Mapping[str, Any]) -> dict[str, str]:
    """paper -> what a run with this training config (config.json, a TrainConfig's or a fine-tuning
    run's with its encoder options) used from it."""
    options = config.get("task_options") or {}
    encoder = config.get("encoder_options") or {}
    out: dict[str, str] = {}
    ours = [what for what, on in (("the output bias initialised to the log-unigram distribution (sec. 3)",
                                   config.get("bias_init") == "unigram"),
                                  ("||W|| rescaled to the bias norm (sec. 4.1)", config.get("rescale_w")),
                                  ("the unigram regulariser (app. B.3)", config.get("unigram_reg_lambda"))) if on]
    if ours:
        out["000"] = "; ".join(ours)
    if config.get("ag_fraction") or options.get("ag_decoder_fraction"):
        out["001"] = "attention guidance (eq. 3-4) on a fraction of the heads"
    init = str(config.get("embedding_init") or "normal")
    standardise = config.get("embedding_standardise") or encoder.get("embedding_standardise")
    shuffle = config.get("embedding_shuffle") or encoder.get("embedding_shuffle")
    if init != "normal" or standardise or shuffle:
        out["002"] = "; ".join([f"--embedding-init {init}"] + ([f"standardised ({standardise})"] if standardise else [])
                               + (["shuffled"] if shuffle else []))
    return out


_CACHE_REPO = re.compile(r"^models--(?P<org>[^/]+?)--(?P<name>[^/]+)$")
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?$")


def hub_model(init: str | None) -> str | None:
    """The Hub repo id a run started from: `--init` as a repo id, or a snapshot folder of the Hub cache
    (`models--ORG--NAME/snapshots/REV`); None for a local folder or none."""
    if not init:
        return None
    path = Path(init)
    for part in path.parts:
        if match := _CACHE_REPO.match(part):
            return f"{match['org']}/{match['name']}"
    if not path.exists() and _REPO_ID.match(init):
        return init.split("@", 1)[0]
    return None


def hub_datasets(inputs: Sequence[str]) -> list[str]:
    """The Hub dataset ids among a run's inputs: `hf://datasets/ORG/NAME/...` URLs, dataset ids
    (`ORG/NAME:CONFIG:SPLIT`) and files of a cached dataset snapshot (`nbcli.resolve_datasets`)."""
    from nbcli.resolve_datasets import dataset_repo_ids

    found = [m.group(1) for m in (re.match(r"^hf://datasets/([^/@]+/[^/@]+)", str(i)) for i in inputs) if m]
    return list(dict.fromkeys([*found, *dataset_repo_ids([str(i) for i in inputs if not str(i).startswith("hf://")])]))


def run_files(checkpoint: Path) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """(config.json, summary.json, log.jsonl's records) of the run a checkpoint lies in ({} and [] when
    absent: a checkpoint copied out of its run)."""
    from nbcli.errors import CheckpointError
    from nbcli.jsonsafe import load_file
    from nbcli.checkpoint.runs import read_log_records

    def read(name: str) -> dict[str, Any]:
        path = checkpoint.parent / name
        value = load_file(path, error=CheckpointError, what="run file", max_bytes=1 << 22,
                          allow_nan=True) if path.is_file() else {}
        return value if isinstance(value, dict) else {}

    return read("config.json"), read("summary.json"), read_log_records(checkpoint.parent / "log.jsonl")


def logged_at(records: Sequence[Mapping[str, Any]], step: int | None, key: str) -> Mapping[str, Any] | None:
    """The last log record of `step` that holds `key` (an evaluation), None when there is none."""
    found = [r for r in records if r.get("step") == step and isinstance(r.get(key), (int, float))]
    return found[-1] if found else None


def file_names(paths: Sequence[str]) -> str:
    return ", ".join(Path(str(p)).name for p in paths) or "-"


def metadata_inputs(metadata: Mapping[str, str]) -> list[str]:
    """A checkpoint's `nb.inputs` (the files it was trained on), [] when absent or not a list."""
    try:
        value = json.loads(metadata.get("nb.inputs", "[]"))
    except json.JSONDecodeError:
        return []
    return [str(v) for v in value] if isinstance(value, list) else []
