"""What would make a CUDA device wait, counted on a CPU (issue 34): reads of a tensor's value on the host
(`.item()`, `.tolist()`, `float()`, `int()`, `bool()`, `.cpu()`, `.numpy()`) and tensors built from host
data on a device (`torch.tensor(data, device=...)`, `torch.as_tensor(not a tensor, device=...)`,
`t.new_tensor(data)`). On CUDA each is a synchronous copy; a CPU has no device to wait for, so counting
the calls is how a test sees them. Only calls made by nb's own code count (the calling frame's file lies
under nbcli/): torch's internals (the optimizer's) are not nb's to change.

`update_copies(monkeypatch)` counts them per training update of any task, through the update loop's
seams: while `optimizer_step` runs (the micro-batches' forward and backward, the update: reads and
builds; the next update's batches that it builds meanwhile: builds only, since those are host tensors
on a CPU), while the task builds an update's batches (builds only) and while it counts the update's
tokens (reads and builds). The LM's update makes one read, the `.tolist()` of its sums.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

NBCLI = str(Path(__file__).resolve().parents[1] / "nbcli")
READS = ("item", "tolist", "__float__", "__int__", "__bool__", "__index__", "cpu", "numpy")


class HostCopies:
    """The counted calls, (kind, file:line of nb's calling code) per update (`updates`: update i's list
    holds what its step and its token count made, and the next update's batches it built ahead; update
    0's also the building of its own), while on."""

    def __init__(self) -> None:
        self.updates: list[list[tuple[str, str]]] = []
        self.reads = False
        self.builds = False
        self.started = False   # the run's first update has begun its step

    def record(self, kind: str, depth: int = 2) -> None:
        if not (self.reads if kind in READS else self.builds) or not self.updates:
            return
        frame = sys._getframe(depth)
        if frame.f_code.co_filename.startswith(NBCLI):
            self.updates[-1].append((kind, f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}"))

    @contextlib.contextmanager
    def counting(self, reads: bool, builds: bool = True) -> Iterator[None]:
        saved = self.reads, self.builds
        self.reads, self.builds = reads, builds
        try:
            yield
        finally:
            self.reads, self.builds = saved

    def wrap(self, fn: Callable[..., Any], reads: bool) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            with self.counting(reads):
                return fn(*args, **kwargs)
        return counted


def patch_torch(monkeypatch: pytest.MonkeyPatch, counter: HostCopies) -> None:
    """Route the counted torch calls through `counter.record`."""
    for name in READS:
        def read(self: torch.Tensor, *args: Any, _original: Any = getattr(torch.Tensor, name), _name: str = name,
                 **kwargs: Any) -> Any:
            counter.record(_name)
            return _original(self, *args, **kwargs)
        monkeypatch.setattr(torch.Tensor, name, read)

    tensor, as_tensor, new_tensor = torch.tensor, torch.as_tensor, torch.Tensor.new_tensor

    def built_tensor(data: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        if kwargs.get("device") is not None:
            counter.record("torch.tensor")
        return tensor(data, *args, **kwargs)

    def built_as_tensor(data: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        if kwargs.get("device") is not None and not isinstance(data, torch.Tensor):
            counter.record("torch.as_tensor")
        return as_tensor(data, *args, **kwargs)

    def built_new_tensor(self: torch.Tensor, data: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        counter.record("new_tensor")
        return new_tensor(self, data, *args, **kwargs)

    monkeypatch.setattr(torch, "tensor", built_tensor)
    monkeypatch.setattr(torch, "as_tensor", built_as_tensor)
    monkeypatch.setattr(torch.Tensor, "new_tensor", built_new_tensor)


def update_copies(monkeypatch: pytest.MonkeyPatch) -> HostCopies:
    """Count per update (module docstring) in every training run started after this call; torch's
    calls are patched from the first run's first update on."""
    import nbcli.train.loop as loop
    import nbcli.train.updates as updates

    counter = HostCopies()
    step = updates.optimizer_step

    def optimizer_step(*args: Any, prefetch: Callable[[], None] | None = None, **kwargs: Any) -> Any:
        if counter.started:           # update 0's group holds its batches, built before its step
            counter.updates.append([])
        counter.started = True
        ahead = None if prefetch is None else counter.wrap(prefetch, reads=False)
        with counter.counting(reads=True):
            return step(*args, prefetch=ahead, **kwargs)

    def start(run_updates: Callable[..., Any]) -> Callable[..., Any]:
        def counted(u: Any, *args: Any, **kwargs: Any) -> Any:
            if not counter.updates:   # patched once the model is built (transformers' loading trips on it)
                patch_torch(monkeypatch, counter)
            counter.updates.append([])
            counter.started = False
            return run_updates(dataclasses.replace(u, batches=counter.wrap(u.batches, reads=False),
                                                   tokens=counter.wrap(u.tokens, reads=True)), *args, **kwargs)
        return counted

    monkeypatch.setattr(updates, "optimizer_step", optimizer_step)
    monkeypatch.setattr(loop, "run_updates", start(loop.run_updates))
    return counter
