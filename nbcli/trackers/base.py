"""What every tracker adapter is (`Tracker`), the settings they read (`TrackerSettings`), the table
of the clients nb knows (`CLIENTS`) and the conversions they share: a run's options as plain JSON
values with credentials taken out of URLs, and the numbers of a log record.

Nothing here imports a client; `load_trackers` imports each asked-for client once, so a missing one
is refused in one line naming the extra to install before any training starts.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from nbcli.errors import ConfigError


class Tracker(Protocol):
    """One experiment tracker seen through its own client library."""

    name: str

    def start(self, config: Mapping[str, Any], run_dir: Path | None) -> None:
        """Open the tracker's run and record `config` (every option, plain JSON values, and the run
        directory's provenance under `nb`). Errors here stop the run before it trains."""

    def log(self, step: int, record: Mapping[str, float]) -> None:
        """The numbers of one log.jsonl record at update `step`."""

    def finish(self, summary: Mapping[str, Any] | None) -> None:
        """Close the run: `summary` is summary.json's content, None when training failed or was
        interrupted (the tracker marks its run failed)."""

    def where(self) -> dict[str, str]:
        """Where the run went (an id, a directory, a URI without credentials), recorded in the run
        directory's trackers.json; `--resume` gives it back as `TrackerSettings.previous`."""


@dataclass(frozen=True)
class TrackerSettings:
    """The settings of `nb train --track ...` (None: the tracker's own environment variables, then
    its own default)."""

    project: str | None = None          # W&B project, MLflow experiment
    run_name: str | None = None         # default: the run directory's name
    uri: str | None = None              # MLflow tracking URI
    tensorboard_dir: Path | None = None  # default: RUN_DIR/tensorboard
    previous: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # tracker -> its `where()`, --resume


@dataclass(frozen=True)
class Client:
    """A tracker nb knows: its adapter ("module:Class"), the module its client is imported as, and
    the pyproject extra that installs it."""

    adapter: str
    module: str
    extra: str


CLIENTS: dict[str, Client] = {
    "tensorboard": Client("nbcli.trackers.tensorboard_tracker:TensorBoardTracker", "torch.utils.tensorboard",
                          "tensorboard"),
    "wandb": Client("nbcli.trackers.wandb_tracker:WandbTracker", "wandb", "wandb"),
    "mlflow": Client("nbcli.trackers.mlflow_tracker:MlflowTracker", "mlflow", "mlflow"),
}
NONE = "none"  # --track none: no tracker (as transformers' report_to="none")


def parse_names(given: Sequence[str]) -> list[str]:
    """The trackers of `--track` values (repeatable, each a comma list), in order, once each; `none`
    names none. ConfigError naming an unknown one."""
    names: list[str] = []
    for value in given:
        for name in (part.strip().lower() for part in str(value).split(",")):
            if name and name != NONE and name not in CLIENTS:
                raise ConfigError(f"--track {name}: no such tracker; choose {', '.join(CLIENTS)} or {NONE}")
            if name and name != NONE and name not in names:
                names.append(name)
    return names


def check_settings(names: Sequence[str], settings: TrackerSettings) -> None:
    """ConfigError for a tracker setting that no asked-for tracker reads (`--track-uri` without
    `--track mlflow`, ...)."""
    readers = {"--track-uri": ("mlflow",), "--tensorboard-dir": ("tensorboard",),
               "--track-project": ("wandb", "mlflow"), "--track-run-name": ("wandb", "mlflow")}
    given = {"--track-uri": settings.uri, "--tensorboard-dir": settings.tensorboard_dir,
             "--track-project": settings.project, "--track-run-name": settings.run_name}
    for flag, value in given.items():
        if value is not None and not set(readers[flag]) & set(names):
            raise ConfigError(f"{flag} applies to --track {' or '.join(readers[flag])}, which this run does not use")


def load_trackers(names: Sequence[str], settings: TrackerSettings) -> list[Tracker]:
    """An adapter per name, its client imported now; ConfigError when a client is not installed (or
    does not import), naming the extra that installs it."""
    trackers = []
    for name in names:
        client = CLIENTS[name]
        try:
            importlib.import_module(client.module)
        except Exception as err:  # noqa: BLE001 - ImportError, or a broken install failing at import
            problem = "is not installed" if isinstance(err, ModuleNotFoundError) else (
                f"does not import ({type(err).__name__}: {err})")
            raise ConfigError(f"--track {name}: its client ({client.module}) {problem}; "
                              f"pip install 'nbcli[{client.extra}]'") from None
        module, _, cls = client.adapter.partition(":")
        trackers.append(getattr(importlib.import_module(module), cls)(settings))
    return trackers


def without_credentials(text: str) -> str:
    """`text` with a URL's user:password@ replaced by ***@ (a tracking URI, an https:// corpus)."""
    if "://" not in text or "@" not in text:
        return text
    try:
        parts = urlsplit(text)
    except ValueError:
        return text
    if parts.username is None and parts.password is None:
        return text
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, f"***@{host}", parts.path, parts.query, parts.fragment))


def plain(value: Any) -> Any:
    """`value` as a JSON value a tracker's config takes: paths and other objects as text (URLs
    without credentials), sequences as lists, mappings as objects."""
    if isinstance(value, str):
        return without_credentials(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return without_credentials(str(value))


def numbers(record: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of a log record or summary, `step` left out: ints, floats (NaN and inf too) and
    booleans (as 0 / 1); text, lists, objects and None are not numbers."""
    out = {}
    for key, value in record.items():
        if key != "step" and isinstance(value, (bool, int, float)):
            out[key] = float(value)
    return out


def texts(summary: Mapping[str, Any]) -> dict[str, str]:
    """The summary's values that are not numbers, as text (JSON for lists and objects; None left out)."""
    out = {}
    for key, value in summary.items():
        if value is None or isinstance(value, (bool, int, float)):
            continue
        out[key] = value if isinstance(value, str) else json.dumps(plain(value), ensure_ascii=False)
    return out
