"""MLflow through its own tracking client (`mlflow.MlflowClient`, no global active run): every
option is a param (lists as JSON; the provenance as `nb.*`), every log record's numbers are metrics
at their step (`log_batch`), summary.json's numbers are metrics `summary/KEY` at the last step and
its text values tags `nb.summary.KEY`; the run ends FINISHED, or FAILED when training did not.

The store is `--track-uri`, else MLFLOW_TRACKING_URI, else MLflow's own default (MLflow 3:
sqlite:///mlflow.db in the working directory, which needs the full `mlflow` package; a file store
`file:DIR` needs MLFLOW_ALLOW_FILE_STORE=true there). The experiment is `--track-project`, else
MLFLOW_EXPERIMENT_NAME, else MLFLOW_EXPERIMENT_ID, else MLflow's Default (id 0). `--resume`
continues the same MLflow run (its id in RUN_DIR/trackers.json) when the store is the same; a step
trained in both sessions (the resumed step's evaluation, or the updates after the last saved state
of a run that crashed) then has two values in MLflow's history, the later one the resumed session's.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nbcli.errors import ConfigError
from nbcli.trackers.base import TrackerSettings, numbers, texts, without_credentials

BATCH = 100   # MLflow's log_batch takes at most 100 params (and 1000 metrics) per call
TAG_LENGTH = 5000
DATABASES = ("sqlite", "postgresql", "mysql", "mssql")   # MLflow's SQLAlchemy stores (scheme[+driver]://)


def params(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """`config` flattened into MLflow params: nested objects as `a.b`, lists as JSON, the rest as text."""
    out: dict[str, str] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            out.update(params(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = json.dumps(value, ensure_ascii=False) if isinstance(value, list) else str(value)
    return out


def check_database_client(uri: str) -> None:
    """ConfigError when `uri` is a database store (MLflow 3's default sqlite:///mlflow.db) and
    SQLAlchemy, which the full mlflow package brings and mlflow-skinny does not, is missing."""
    import importlib.util

    if uri.split(":", 1)[0].split("+", 1)[0] in DATABASES and importlib.util.find_spec("sqlalchemy") is None:
        raise ConfigError(f"--track mlflow: the store {without_credentials(uri)} is a database, which needs the full "
                          "mlflow package (mlflow-skinny lacks SQLAlchemy): pip install 'nbcli[mlflow]', or give "
                          "--track-uri / MLFLOW_TRACKING_URI a tracking server (http://...)")


class MlflowTracker:
    name = "mlflow"

    def __init__(self, settings: TrackerSettings) -> None:
        self.settings = settings
        self.client: Any = None
        self.run_id = ""
        self.uri = ""
        self.last_step = 0

    def start(self, config: Mapping[str, Any], run_dir: Path | None) -> None:
        import mlflow

        self.uri = self.settings.uri or mlflow.get_tracking_uri()
        check_database_client(self.uri)
        self.client = mlflow.MlflowClient(self.uri)
        previous = self.settings.previous.get(self.name, {})
        if previous.get("run_id") and previous.get("tracking_uri") == without_credentials(self.uri):
            self.run_id = previous["run_id"]
            self.client.update_run(self.run_id, status="RUNNING")
            return
        nb = config.get("nb", {})
        name = self.settings.run_name or (Path(run_dir).name if run_dir is not None else None)
        run = self.client.create_run(self.experiment_id(), run_name=name, tags={
            "nb.task": str(nb.get("task")), "nb.run_dir": str(nb.get("run_dir")), "nb.version": str(nb.get("version"))})
        self.run_id = run.info.run_id
        self.log_params(params(config))

    def experiment_id(self) -> str:
        name = self.settings.project or os.environ.get("MLFLOW_EXPERIMENT_NAME")
        if not name:
            return os.environ.get("MLFLOW_EXPERIMENT_ID") or "0"
        found = self.client.get_experiment_by_name(name)
        return found.experiment_id if found is not None else self.client.create_experiment(name)

    def log_params(self, values: Mapping[str, str]) -> None:
        from mlflow.entities import Param

        try:
            from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH as limit
        except ImportError:   # older MLflow: its documented limit then
            limit = 500
        items = [Param(k, v if len(v) <= limit else v[:limit - 3] + "...") for k, v in values.items()]
        for i in range(0, len(items), BATCH):
            self.client.log_batch(self.run_id, params=items[i:i + BATCH])

    def log(self, step: int, record: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in record.items()])
        self.last_step = step

    def finish(self, summary: Mapping[str, Any] | None) -> None:
        if summary is not None:
            self.log(self.last_step, {f"summary/{k}": v for k, v in numbers(summary).items()})
            for key, text in texts(summary).items():
                self.client.set_tag(self.run_id, f"nb.summary.{key}", text[:TAG_LENGTH])
        self.client.set_terminated(self.run_id, status="FINISHED" if summary is not None else "FAILED")

    def where(self) -> dict[str, str]:
        return {"run_id": self.run_id, "tracking_uri": without_credentials(self.uri)}
