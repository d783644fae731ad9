"""The trackers' shared logic without a client: which trackers `--track` names, the settings each
reads, what a config and a record become, and how a run's trackers behave together (a failure
mid-run warned once and the run going on, a start failure closing the others)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbcli.errors import ConfigError, OutputError
from nbcli.trackers import CLIENTS, TrackerSettings, TrackingSession, parse_names, previous_runs, run_config
from nbcli.trackers.base import check_settings, numbers, plain, texts, without_credentials

NAMES = list(CLIENTS)


@given(st.lists(st.lists(st.sampled_from([*NAMES, "none", "TensorBoard", " wandb "]), max_size=4), max_size=4))
def test_parse_names_is_the_ordered_union_of_comma_lists(given_lists: list[list[str]]) -> None:
    values = [",".join(parts) for parts in given_lists]
    expected: list[str] = []
    for parts in given_lists:
        for part in parts:
            name = part.strip().lower()
            if name != "none" and name not in expected:
                expected.append(name)
    assert parse_names(values) == expected


def test_an_unknown_tracker_is_refused_naming_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"--track comet: no such tracker; choose tensorboard, wandb, mlflow or none"):
        parse_names(["tensorboard,comet"])


@pytest.mark.parametrize(("setting", "flag", "reader"), [
    ({"uri": "http://localhost:5000"}, "--track-uri", "mlflow"),
    ({"tensorboard_dir": Path("tb")}, "--tensorboard-dir", "tensorboard"),
    ({"project": "p"}, "--track-project", "wandb"),
    ({"run_name": "r"}, "--track-run-name", "mlflow"),
])
def test_a_setting_needs_a_tracker_that_reads_it(setting: dict[str, Any], flag: str, reader: str) -> None:
    settings = TrackerSettings(**setting)
    others = [n for n in NAMES if n != reader and not (flag in ("--track-project", "--track-run-name")
                                                        and n in ("wandb", "mlflow"))]
    with pytest.raises(ConfigError, match=f"^{flag} applies to --track"):
        check_settings(others, settings)
    check_settings([reader], settings)


@given(st.sampled_from(["http", "https", "s3", "postgresql+psycopg2"]),
       st.text("abcXYZ019-_.~", min_size=1, max_size=12), st.text("abcXYZ019-_.~!$&'()*+,;=", min_size=1, max_size=16),
       st.sampled_from(["host", "host:5000", "10.0.0.1:443"]), st.sampled_from(["", "/", "/db?x=1", "/a/b#f"]))
def test_credentials_never_survive(scheme: str, user: str, password: str, host: str, rest: str) -> None:
    url = f"{scheme}://{user}:{password}@{host}{rest}"
    cleaned = without_credentials(url)
    assert cleaned == f"{scheme}://***@{host}{rest}"
    assert without_credentials(f"{scheme}://{host}{rest}") == f"{scheme}://{host}{rest}"


def test_plain_config_values() -> None:
    config = plain({"out": Path("runs/a"), "corpus": ("a.txt", Path("b.txt")), "lr": None, "k": 2.5, "on": True,
                    "uri": "https://me:pw@host/x", "nested": {"x": Path("y")}})
    assert config == {"out": "runs/a", "corpus": ["a.txt", "b.txt"], "lr": None, "k": 2.5, "on": True,
                      "uri": "https://***@host/x", "nested": {"x": "y"}}
    json.dumps(config)


def test_numbers_and_texts_of_a_record() -> None:
    record = {"step": 3, "loss": 1.5, "tokens": 7, "unigram_reg_on": True, "device": "cpu", "warnings": ["w"],
              "coverage": None, "nan": float("nan")}
    got = numbers(record)
    assert {k: v for k, v in got.items() if k != "nan"} == {"loss": 1.5, "tokens": 7.0, "unigram_reg_on": 1.0}
    assert got["nan"] != got["nan"]
    assert texts(record) == {"device": "cpu", "warnings": '["w"]'}


def test_run_config_holds_every_option_and_the_provenance(tmp_path: Path) -> None:
    config = run_config({"out": tmp_path / "run", "track": ["tensorboard,mlflow"], "steps": 5},
                        ["tensorboard", "mlflow"], task="lm", run_dir=tmp_path / "run")
    assert config["out"] == str(tmp_path / "run") and config["steps"] == 5
    assert config["track"] == ["tensorboard", "mlflow"]
    assert config["nb"]["task"] == "lm" and config["nb"]["run_dir"] == str((tmp_path / "run").resolve())
    assert config["nb"]["version"].startswith("nb ")


class Recorder:
    """A tracker that keeps what it is told (and fails where told to): the session's logic on its own."""

    def __init__(self, name: str, fail_at: str | None = None, fail_step: int = -1) -> None:
        self.name, self.fail_at, self.fail_step = name, fail_at, fail_step
        self.calls: list[tuple[Any, ...]] = []

    def start(self, config: Mapping[str, Any], run_dir: Path | None) -> None:
        self.calls.append(("start", dict(config), run_dir))
        if self.fail_at == "start":
            raise ConnectionError("connection refused\n(host down)")

    def log(self, step: int, record: Mapping[str, float]) -> None:
        if self.fail_at == "log" and step >= self.fail_step:
            raise TimeoutError(f"step {step}: timed out")
        self.calls.append(("log", step, dict(record)))

    def finish(self, summary: Mapping[str, Any] | None) -> None:
        self.calls.append(("finish", summary))

    def where(self) -> dict[str, str]:
        return {"id": self.name + "-1"}


class Refusing(Recorder):
    def start(self, config: Mapping[str, Any], run_dir: Path | None) -> None:
        raise OutputError("x: not writable")


def test_a_tracker_failing_mid_run_is_warned_once_and_the_others_go_on(tmp_path: Path) -> None:
    flaky, steady, warnings = Recorder("mlflow", "log", 2), Recorder("tensorboard"), []
    session = TrackingSession([flaky, steady], {"steps": 5}, tmp_path, warnings.append)
    with session:
        for step in range(5):
            session.log(step, {"step": step, "loss": 1.0 / (step + 1), "device": "cpu"})
        session.finish({"alc": 2.0})
    assert len(warnings) == 1 and warnings[0].startswith("--track mlflow: logging step 2 failed (TimeoutError")
    assert [c[1] for c in flaky.calls if c[0] == "log"] == [0, 1] and not any(c[0] == "finish" for c in flaky.calls)
    assert [c[1:] for c in steady.calls if c[0] == "log"] == [(s, {"loss": 1.0 / (s + 1)}) for s in range(5)]
    assert steady.calls[0][0] == "start" and steady.calls[-1] == ("finish", {"alc": 2.0})
    assert json.loads((tmp_path / "trackers.json").read_text()) == {"mlflow": {"id": "mlflow-1"},
                                                                   "tensorboard": {"id": "tensorboard-1"}}


def test_a_tracker_that_cannot_start_stops_the_run_and_closes_the_others(tmp_path: Path) -> None:
    first, second = Recorder("tensorboard"), Recorder("wandb", "start")
    session = TrackingSession([first, second], {}, tmp_path / "run", [].append)
    with pytest.raises(ConfigError) as err:
        session.start()
    assert str(err.value) == "--track wandb: cannot start its run (ConnectionError: connection refused (host down))"
    assert first.calls[-1] == ("finish", None)
    with pytest.raises(OutputError, match="^x: not writable$"):   # nb's own errors pass through as they are
        TrackingSession([Refusing("tensorboard")], {}, None, [].append).start()


def test_training_that_fails_closes_the_trackers_as_failed(tmp_path: Path) -> None:
    tracker = Recorder("wandb")
    with pytest.raises(KeyboardInterrupt):
        with TrackingSession([tracker], {}, tmp_path, [].append) as session:
            session.start()
            session.log(0, {"loss": 1.0})
            raise KeyboardInterrupt
    assert tracker.calls[-1] == ("finish", None)


def test_the_record_waits_for_the_run_directory_and_resume_reads_it(tmp_path: Path) -> None:
    session = TrackingSession([Recorder("wandb")], {}, tmp_path / "missing", [].append)
    session.log(0, {"loss": 1.0})
    assert not (tmp_path / "missing").exists()
    (tmp_path / "missing").mkdir()   # a task that makes its run directory at the end: the record then
    session.finish({})
    assert json.loads((tmp_path / "missing" / "trackers.json").read_text()) == {"wandb": {"id": "wandb-1"}}
    assert previous_runs(tmp_path / "nothing") == {} and previous_runs(None) == {}
    (tmp_path / "trackers.json").write_text('{"wandb": {"id": "abc"}, "odd": 3}')
    assert previous_runs(tmp_path) == {"wandb": {"id": "abc"}}
    (tmp_path / "trackers.json").write_text("{not json")
    assert previous_runs(tmp_path) == {}
