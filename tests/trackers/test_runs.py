"""Trackers on real runs, each client real: a missing client refused before any work, a tracker
that cannot start stopping the run before it trains, one that fails mid-run warned about once while
training goes on (on translation: every task's records reach the trackers), `--resume` continuing
the same tracker runs, and under torchrun rank 0 alone writing."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nbcli.errors import ConfigError
from nbcli.tasks.base import TrainHooks
from nbcli.tasks.runs import tracking_session, train_task
from tests.cli.helpers import assert_one_line_error, invoke, run_nb
from tests.trackers.readers import client, log_series, tensorboard_scalars, wandb_run
from tests.trackers.test_readback import tracker_env

MODULES = {"tensorboard": "torch.utils.tensorboard", "wandb": "wandb", "mlflow": "mlflow"}


def lm_args(corpus: Path, tokenizer: Path, out: Path) -> list[Any]:
    return ["train", "--corpus", corpus, "-t", tokenizer, "--out", out, "--steps", "6", "--eval-every", "3",
            "--batch-size", "4", "--seq-len", "16"]


@pytest.fixture()
def corpus(tmp_path: Path, sample_lines: list[str]) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(sample_lines[:300]) + "\n")
    return path


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, value in tracker_env(tmp_path).items():
        monkeypatch.setenv(name, value)
    return tmp_path


@pytest.mark.parametrize("name", list(MODULES))
def test_a_missing_client_is_one_line_naming_the_extra_before_any_work(
        name: str, tmp_path: Path, corpus: Path, sp_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, MODULES[name], None)   # what Python does for a module that is not there
    result = invoke(*lm_args(corpus, sp_model, tmp_path / "run"), "--track", f"{name},tensorboard")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, f"--track {name}: its client ({MODULES[name]}) is not installed; "
                                         f"pip install 'nbcli[{name}]'")
    assert not (tmp_path / "run").exists()


def test_report_to_is_track_by_transformers_name(tmp_path: Path, corpus: Path, sp_model: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, MODULES["wandb"], None)
    result = invoke(*lm_args(corpus, sp_model, tmp_path / "run"), "--report-to", "wandb")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "--track wandb: its client (wandb) is not installed")
    assert not (tmp_path / "run").exists()


def test_other_ranks_check_the_clients_but_track_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    values = {"out": tmp_path / "run", "resume": False, "track": ["tensorboard"], "track_project": None,
              "track_run_name": None, "track_uri": None, "tensorboard_dir": None, "threads": None}
    monkeypatch.setenv("RANK", "1")
    assert tracking_session("lm", dict(values), print) is None
    monkeypatch.setitem(sys.modules, MODULES["tensorboard"], None)
    with pytest.raises(ConfigError, match="tensorboard"):
        tracking_session("lm", dict(values), print)
    monkeypatch.setenv("RANK", "0")
    rest = dict(values, track=["none"])
    assert tracking_session("lm", rest, print) is None and "track" not in rest   # the task never sees them


@pytest.mark.slow
def test_a_tracker_that_cannot_start_stops_the_run_before_it_trains(
        tmp_path: Path, corpus: Path, sp_model: Path, env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    client("mlflow", "mlflow")
    with socket.socket() as probe:   # a local port nothing listens on: the server is down
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    result = run_nb(*lm_args(corpus, sp_model, tmp_path / "run"), "--track", "mlflow", "--track-uri",
                    f"http://127.0.0.1:{port}", timeout=600)
    assert result.returncode == 1
    assert_one_line_error(result.stderr.decode(), "--track mlflow: cannot start its run (")
    assert not (tmp_path / "run").exists()


def test_a_tracker_failing_mid_translation_is_warned_once_and_training_goes_on(
        tmp_path: Path, parallel_corpus: Path, env: Path) -> None:
    client("mlflow", "mlflow")
    store, run, warnings = tmp_path / "mlruns", tmp_path / "mt", []

    def on_step(step: int, record: dict[str, Any]) -> None:
        if step == 2:   # the store goes away: MLflow's next write fails
            shutil.rmtree(store)

    summary = train_task("translation", dict(
        corpus=[str(parallel_corpus / "train")], valid=[str(parallel_corpus / "valid")], src_lang="de", tgt_lang="en",
        tokenizer=str(parallel_corpus / "joint.model"), out=run, d_model=32, d_ff=64, steps=4, eval_every=2,
        eval_batches=1, batch_size=16, eval_sentences=8, track=["tensorboard", "mlflow"], track_uri=store.as_uri()),
        TrainHooks(on_step=on_step, on_warning=warnings.append))
    assert summary["steps"] == 4 and (run / "summary.json").exists()
    assert len(warnings) == 1, warnings   # once, though steps 3 and 4 were logged after it
    assert warnings[0].startswith("--track mlflow: logging step 2 failed (") and "mlruns" in warnings[0], warnings
    series = log_series(run)
    assert {"val_bleu", "val_chrf", "val_loss", "loss"} <= set(series)
    scalars, _ = tensorboard_scalars(run / "tensorboard")
    for key, points in series.items():
        assert scalars[key] == [(step, float(np.float32(value))) for step, value in points], key


@pytest.mark.slow
def test_resume_continues_the_same_tracker_runs(tmp_path: Path, corpus: Path, sp_model: Path, env: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Also: the trackers' own environment variables choose the store, project and experiment."""
    mlflow = client("mlflow", "mlflow")
    run, store = tmp_path / "run", tmp_path / "mlruns"
    for name, value in (("MLFLOW_TRACKING_URI", store.as_uri()), ("MLFLOW_EXPERIMENT_NAME", "exp-from-env"),
                        ("WANDB_PROJECT", "project-from-env")):
        monkeypatch.setenv(name, value)
    args = [*lm_args(corpus, sp_model, run), "--track", "tensorboard,wandb,mlflow"]
    first = run_nb(*args, "--stop-at", "3", timeout=600)
    assert first.returncode == 0, first.stderr.decode()
    started = json.loads((run / "trackers.json").read_text())
    second = run_nb(*args, "--resume", timeout=600)
    assert second.returncode == 0, second.stderr.decode()
    assert "WARNING" not in second.stderr.decode()
    where = json.loads((run / "trackers.json").read_text())
    assert where["mlflow"]["run_id"] == started["mlflow"]["run_id"] and where["wandb"]["id"] == started["wandb"]["id"]
    assert where["mlflow"]["tracking_uri"] == store.as_uri() and where["wandb"]["project"] == "project-from-env"
    series = log_series(run)
    assert max(step for step, _ in series["val_loss"]) == 6
    scalars, _ = tensorboard_scalars(run / "tensorboard")   # purge_step hid the first session's step 3
    for key, points in series.items():
        assert scalars[key] == [(step, float(np.float32(value))) for step, value in points], key
    records = mlflow.MlflowClient(store.as_uri())
    info = records.get_run(where["mlflow"]["run_id"]).info
    assert info.status == "FINISHED" and records.get_experiment(info.experiment_id).name == "exp-from-env"
    for key, points in series.items():   # the later value of a step logged twice
        history = {m.step: m.value for m in records.get_metric_history(where["mlflow"]["run_id"], key)}
        assert sorted(history.items()) == points, key
    held: dict[str, dict[int, float]] = {}
    for path in sorted(Path(env / "wandb").glob(f"offline-run-*-{where['wandb']['id']}/run-*.wandb")):
        for key, points in wandb_run(path)["history"].items():
            held.setdefault(key, {}).update(points)
    assert {k: sorted(v.items()) for k, v in held.items()} == series


def test_a_task_of_another_package_with_its_own_loop_is_tracked(site: Path, tmp_path: Path, sp_model: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    client("torch.utils.tensorboard", "tensorboard")
    rows = tmp_path / "pairs.tsv"
    sentences = ["the model", "a token bias", "word frequency", "of the corpus"] * 5
    rows.write_text("".join(f"{a}\t{' '.join(reversed(a.split()))}\t{i % 6}\n" for i, a in enumerate(sentences)))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])]))
    run = tmp_path / "sts"
    result = run_nb("train", "sts", "--corpus", rows, "-t", sp_model, "--out", run, "--steps", "12", "--track",
                    "tensorboard", "--json", timeout=600)
    assert result.returncode == 0, result.stderr.decode()
    summary = json.loads(result.stdout)
    scalars, texts = tensorboard_scalars(run / "tensorboard")   # its own loop's on_step records reached it
    assert [step for step, _ in scalars["loss"]] == list(range(1, 13))
    assert scalars["loss"][-1][1] == float(np.float32(summary["final_loss"]))
    assert json.loads(texts["config"].removeprefix("```json\n").removesuffix("\n```"))["nb"]["task"] == "sts"
    where = json.loads((run / "trackers.json").read_text())
    assert where == {"tensorboard": {"log_dir": str((run / "tensorboard").resolve())}}


@pytest.mark.slow
def test_under_torchrun_rank_0_alone_writes(tmp_path: Path, corpus: Path, sp_model: Path) -> None:
    from tests.train.ddp_helpers import nb_torchrun

    client("torch.utils.tensorboard", "tensorboard")
    run = tmp_path / "ddp"
    nb_torchrun([*lm_args(corpus, sp_model, run), "--track", "tensorboard"], timeout=900)
    assert len(list((run / "tensorboard").iterdir())) == 1   # one event file: rank 1 wrote none
    scalars, _ = tensorboard_scalars(run / "tensorboard")
    for key, points in log_series(run).items():
        assert scalars[key] == [(step, float(np.float32(value))) for step, value in points], key
