"""nb: a toolkit for studying and exploiting how Transformers handle word frequency.

The Python API (docs/python.md) is `nbcli.api` (one function per command) and `nbcli.api.models`
(models in memory and in training), re-exported here on first use (PEP 562), so `import nbcli` and
`nb --help` import neither torch nor numpy:

    import nbcli
    report = nbcli.probe("gpt2/", counts="counts.safetensors")
    report.to_dict()          # what `nb probe-bias gpt2/ -c counts.safetensors --json` prints
"""

from __future__ import annotations

from typing import Any

from nbcli import version

__version__ = version.__version__  # defined in nbcli.version (imported by modules below nbcli.api)

#: The public API: functions of `nbcli.api` (one per command) and the report classes they return,
#: then `nbcli.api.models` (models in memory and in training).
API = [
    "CheckpointReport", "CountReport", "EvalReport", "GenerateReport", "PatchReport", "ProbeReport", "Report",
    "TrainReport", "TransplantReport", "attention_maps", "count_unigrams", "evaluate",
    "generate", "inspect", "open_checkpoint", "plot_by_frequency",
    "patch", "probe", "train_model", "train_translation", "translate_file", "export_checkpoint",
    "transplant_embeddings", "evaluate_translation", "plot_runs",
    "finetune_classifier", "predict_labels", "evaluate_classifier",
    "analogy", "read_vectors", "reproduce", "sweep", "reproduce_items",
]
API_MODELS = [
    "AttentionGuidanceTrainer", "attention_guidance_loss", "capture_qk", "init_output_bias", "load_model",
    "pattern_ids", "remove_frequency_direction", "scale_ln_bias", "shuffle_embeddings", "standardise_embeddings",
    "zipfian_whiten_embeddings",
]
__all__ = [*API, *API_MODELS]


def __getattr__(name: str) -> Any:
    """`nbcli.probe` and the rest of `__all__`: imported from nbcli.api or nbcli.api.models on first use."""
    if name in API:
        from nbcli import api as module
    elif name in API_MODELS:
        from nbcli.api import models as module
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})
