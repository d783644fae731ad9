"""The best checkpoint of a run by one logged validation metric (`--select-by`): the highest BLEU
(paper 000 app. A), the lowest validation loss (paper 002 secs. 5-6: "the model with the lowest
validation loss ... is chosen"), the highest accuracy. A metric named ...loss is minimised, any other
maximised; the earliest step wins a tie."""

from __future__ import annotations

from typing import Any

BEST = "best.safetensors"   # the best checkpoint's name in a run directory


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


def check_metric(key: str, offered: tuple[str, ...], task: str) -> str:
    """`key` if the task logs it; ConfigError naming the ones it does otherwise."""
    from nbcli.errors import ConfigError

    if key not in offered:
        raise ConfigError(f"--select-by {key}: nb train {task} logs {', '.join(offered)}")
    return key
