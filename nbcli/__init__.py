"""nb: a toolkit for studying and exploiting how Transformers handle word frequency.

The Python API (docs/python.md) is `nbcli.api`, re-exported here on first use (PEP 562), so
`import nbcli` and `nb --help` import neither torch nor numpy:

    import nbcli
    report = nbcli.probe("gpt2/", counts="counts.safetensors")
    report.to_dict()          # what `nb probe-bias gpt2/ -c counts.safetensors --json` prints
"""

from __future__ import annotations

from typing import Any

from nbcli import version

__version__ = version.__version__  # defined in nbcli.version (imported by modules below nbcli.api)

#: The public API: functions of `nbcli.api` and the report classes they return.
__all__ = [
    "CheckpointReport", "CountReport", "EvalReport", "GenerateReport", "PatchReport", "ProbeReport", "Report",
    "TrainReport", "TransplantReport", "attention_maps", "count_unigrams", "evaluate",
    "generate", "inspect", "open_checkpoint", "plot_by_frequency",
    "patch", "probe", "train_model", "transplant_embeddings", "evaluate_translation", "plot_runs",
]


def __getattr__(name: str) -> Any:
    """`nbcli.probe` and the rest of `__all__`: imported from nbcli.api on first use."""
    if name in __all__:
        from nbcli import api

        value = getattr(api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})
