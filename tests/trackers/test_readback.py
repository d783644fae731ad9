"""One tiny `nb train` run tracked by TensorBoard, W&B (offline) and MLflow (a local file store) at
once, each read back with its own reader: every number of log.jsonl, step for step, the config
(every option) and the summary; no credential of the environment in anything they wrote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nbcli.tasks.registry import get_task
from nbcli.trackers.base import numbers, plain
from tests.cli.helpers import run_nb
from tests.trackers.readers import client, log_series, tensorboard_scalars, wandb_run

SECRETS = {"WANDB_API_KEY": "wandb-key-0123456789abcdef0123456789abcdef01234567",
           "MLFLOW_TRACKING_PASSWORD": "mlflow-password-5eb7c0de"}


def tracker_env(root: Path) -> dict[str, str]:
    """W&B offline with every folder of its own under `root`; MLflow's file store allowed (MLflow 3
    refuses it otherwise); two credentials no tracker may record."""
    return {"WANDB_MODE": "offline", "WANDB_DIR": str(root), "WANDB_CONFIG_DIR": str(root / "wandb-config"),
            "WANDB_CACHE_DIR": str(root / "wandb-cache"), "WANDB_DATA_DIR": str(root / "wandb-data"),
            "MLFLOW_ALLOW_FILE_STORE": "true", **SECRETS}


@pytest.fixture(scope="module")
def tracked(tmp_path_factory: pytest.TempPathFactory, sp_model: Path, sample_lines: list[str]) -> dict[str, Any]:
    for module, extra in (("torch.utils.tensorboard", "tensorboard"), ("wandb", "wandb"), ("mlflow", "mlflow")):
        client(module, extra)
    root = tmp_path_factory.mktemp("tracked")
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(sample_lines[:300]) + "\n")
    run, store = root / "runs" / "tiny-u", root / "mlruns"
    with pytest.MonkeyPatch.context() as env:
        for name, value in tracker_env(root).items():
            env.setenv(name, value)
        result = run_nb("train", "--corpus", corpus, "-t", sp_model, "--out", run, "--steps", "6", "--eval-every", "3",
                        "--batch-size", "4", "--seq-len", "16", "--bias-init", "unigram", "--json",
                        "--track", "tensorboard,wandb", "--track", "mlflow", "--track-uri", store.as_uri(),
                        "--track-project", "nb-tests", timeout=900)
    assert result.returncode == 0, result.stderr.decode()
    summary = json.loads(result.stdout)   # stdout is the report alone, whatever the trackers print
    return {"root": root, "run": run, "store": store, "summary": summary,
            "where": json.loads((run / "trackers.json").read_text())}


def options_of_lm() -> set[str]:
    return {o.name for o in get_task("lm").options()}


@pytest.mark.slow
def test_tensorboard_scalars_equal_log_jsonl(tracked: dict[str, Any]) -> None:
    run = tracked["run"]
    assert tracked["where"]["tensorboard"] == {"log_dir": str((run / "tensorboard").resolve())}
    scalars, texts = tensorboard_scalars(run / "tensorboard")
    series = log_series(run)
    assert {"loss", "lr", "tokens_per_s", "val_loss", "kl_unigram"} <= set(series)
    for key, points in series.items():   # TensorBoard keeps float32
        assert scalars[key] == [(step, float(np.float32(value))) for step, value in points], key
    last = max(step for points in series.values() for step, _ in points)
    for key, value in numbers(tracked["summary"]).items():
        assert scalars[f"summary/{key}"] == [(last, float(np.float32(value)))], key
    assert set(scalars) == set(series) | {f"summary/{k}" for k in numbers(tracked["summary"])}
    config = json.loads(texts["config"].removeprefix("```json\n").removesuffix("\n```"))
    assert set(config) == options_of_lm() | {"nb"} and config["track"] == ["tensorboard", "wandb", "mlflow"]
    assert config["nb"]["run_dir"] == str(run.resolve()) and config["nb"]["task"] == "lm"
    assert json.loads(texts["summary"].removeprefix("```json\n").removesuffix("\n```")) == tracked["summary"]


def test_mlflow_metrics_and_params_equal_the_run(tracked: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    mlflow = client("mlflow", "mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    run, where = tracked["run"], tracked["where"]["mlflow"]
    assert where["tracking_uri"] == tracked["store"].as_uri()
    store = mlflow.MlflowClient(tracked["store"].as_uri())
    record = store.get_run(where["run_id"])
    assert record.info.status == "FINISHED" and record.info.run_name == "tiny-u"
    assert store.get_experiment(record.info.experiment_id).name == "nb-tests"
    for key, points in log_series(run).items():   # float64, exactly
        assert [(m.step, m.value) for m in store.get_metric_history(where["run_id"], key)] == points, key
    for key, value in numbers(tracked["summary"]).items():
        assert record.data.metrics[f"summary/{key}"] == value
    assert record.data.tags["nb.summary.checkpoint"] == tracked["summary"]["checkpoint"]
    params = record.data.params
    assert {k for k in params if not k.startswith("nb.")} == options_of_lm()
    assert params["steps"] == "6" and params["bias_init"] == "unigram" and params["tokenizer"].endswith(".model")
    assert json.loads(params["corpus"]) == [str(tracked["root"] / "corpus.txt")]
    assert params["nb.run_dir"] == str(run.resolve()) == record.data.tags["nb.run_dir"]


def test_wandb_offline_run_holds_the_metrics(tracked: dict[str, Any]) -> None:
    run, where = tracked["run"], tracked["where"]["wandb"]
    files = list(Path(where["dir"]).glob("run-*.wandb"))
    assert len(files) == 1 and Path(where["dir"]).is_relative_to(tracked["root"]), where
    held = wandb_run(files[0])
    assert (held["id"], held["name"], held["project"], held["exit_code"]) == (where["id"], "tiny-u", "nb-tests", 0)
    assert {k: v for k, v in held["history"].items()} == log_series(run)
    options = {k: v for k, v in held["config"].items() if not k.startswith("_")}
    assert set(options) == options_of_lm() | {"nb"}
    assert options["steps"] == 6 and options["out"] == str(run) and options["nb"]["run_dir"] == str(run.resolve())
    for key, value in tracked["summary"].items():
        assert held["summary"][key] == plain(value), key


def test_no_credential_of_the_environment_is_recorded(tracked: dict[str, Any]) -> None:
    for path in tracked["root"].rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for name, secret in SECRETS.items():
                assert secret.encode() not in data, (name, path)
