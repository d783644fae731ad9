"""The best checkpoint of a run by one logged validation metric (`--select-by`): the highest BLEU
(paper 000 app. A), the lowest validation loss (paper 002 secs. 5-6: "the model with the lowest
validation loss ... is chosen"), the highest accuracy. A metric named ...loss is minimised, any other
maximised; the earliest step wins a tie.

Several validation sets (`BestBySet`): the run's checkpoint is chosen by one metric, and every set's
best of the same metric is kept on its own, with its step (paper 002 sec. 4: "the highest validation
match and mismatch accuracy achieved during training" of MNLI, each maximised)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

class BestCheckpoint:
    """The best value of `key` so far and its step (the task saves that model as best.safetensors).
    Only the scheduled evaluations (every --eval-every, and at the last step) count, so a run stopped
    with --stop-at and resumed keeps the best checkpoint of the uninterrupted run; on --resume the
    logged evaluations before the resumed step are taken up again. `curves`: every numeric val_*
    field of every evaluation, (step, value), for the summary's areas under the curves."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.minimise = key.endswith("loss")
        self.value: float | None = None
        self.step: int | None = None
        self.curves: dict[str, list[tuple[int, float]]] = {}

    def _beats(self, value: float) -> bool:
        if self.value is None:
            return True
        return value < self.value if self.minimise else value > self.value

    def _note(self, step: int, record: dict[str, Any]) -> None:
        for name, value in record.items():
            if name.startswith("val_") and isinstance(value, (int, float)) and not isinstance(value, bool):
                self.curves.setdefault(name, []).append((step, float(value)))

    def take_up(self, records: list[dict[str, Any]]) -> None:
        """The logged evaluations of the run resumed (those before its resumed step)."""
        for record in records:
            if self.key in record:
                self._note(record["step"], record)
                if self._beats(record[self.key]):
                    self.value, self.step = record[self.key], record["step"]

    def better(self, step: int, record: dict[str, Any], scheduled: bool) -> bool:
        """Record an evaluation; True when it is the new best (to be saved as best.safetensors)."""
        self._note(step, record)
        if scheduled and self._beats(record[self.key]):
            self.value, self.step = record[self.key], step
            return True
        return False

    def curve(self, name: str) -> list[tuple[int, float]]:
        return self.curves.get(name, [])

    def at_best(self, name: str) -> float | None:
        """The logged `name` (another val_* metric) of the evaluation chosen (None: none chosen)."""
        return next((value for step, value in self.curve(name) if step == self.step), None)

    def report(self, per_epoch: int = 0) -> dict[str, Any]:
        """{metric, value, step[, epoch]} of the best so far (epoch = step / per_epoch when given)."""
        out: dict[str, Any] = {"metric": self.key, "value": self.value, "step": self.step}
        if per_epoch:
            out["epoch"] = None if self.step is None else self.step / per_epoch
        return out


class BestBySet(BestCheckpoint):
    """A `BestCheckpoint` by `key` (the run's choice) that also keeps one per validation set (`sets`:
    name -> that set's key of the same metric), fed the same evaluations."""

    def __init__(self, key: str, sets: Mapping[str, str]) -> None:
        super().__init__(key)
        self.sets = {name: BestCheckpoint(set_key) for name, set_key in sets.items()}

    def take_up(self, records: list[dict[str, Any]]) -> None:
        for best in self.sets.values():
            best.take_up(records)
        super().take_up(records)

    def better(self, step: int, record: dict[str, Any], scheduled: bool) -> bool:
        for best in self.sets.values():
            best.better(step, record, scheduled)
        return super().better(step, record, scheduled)

    def by_set(self, per_epoch: int = 0) -> dict[str, dict[str, Any]]:
        """{set name: `BestCheckpoint.report`} of every validation set."""
        return {name: best.report(per_epoch) for name, best in self.sets.items()}


def set_metric_keys(sets: Sequence[str], metrics: Sequence[str]) -> dict[str, tuple[str, str | None]]:
    """Every key a run with validation sets `sets` (in order) logs for `metrics`: val_NAME_METRIC, and
    val_METRIC for the first set -> (metric, set name; None for the first set's alias)."""
    keys: dict[str, tuple[str, str | None]] = {f"val_{m}": (m, None) for m in metrics} if sets else {}
    keys.update({f"val_{name}_{m}": (m, name) for name in sets for m in metrics})
    return keys


def select_by_sets(key: str | None, default: str, sets: Sequence[str], metrics: Sequence[str], task: str,
                   ) -> BestBySet:
    """The `BestBySet` of `--select-by key` (None: `default`) for a run logging `metrics` on the
    validation sets `sets`: each set tracked by the same metric. ConfigError in one line for a key the
    run does not log (naming what it logs), or any key without a validation set."""
    from nbcli.errors import ConfigError

    keys = set_metric_keys(sets, metrics)
    chosen = default if key is None else key
    if key is not None and not sets:
        raise ConfigError(f"--select-by {key}: nb train {task} evaluates nothing without --valid")
    if key is not None and key not in keys:
        per_set = "|".join(metrics)
        raise ConfigError(f"--select-by {key}: nb train {task} logs {', '.join(f'val_{m}' for m in metrics)} (the "
                          f"first --valid set) and val_NAME_{per_set} per set ({', '.join(sets)})")
    metric = keys[chosen][0] if chosen in keys else chosen.removeprefix("val_")
    return BestBySet(chosen, {name: f"val_{name}_{metric}" for name in sets})


def check_metric(key: str, offered: tuple[str, ...], task: str) -> str:
    """`key` if the task logs it; ConfigError naming the ones it does otherwise."""
    from nbcli.errors import ConfigError

    if key not in offered:
        raise ConfigError(f"--select-by {key}: nb train {task} logs {', '.join(offered)}")
    return key
