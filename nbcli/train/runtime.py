"""Where `nb train` runs: the device, the precision (bf16 autocast), one process or one rank of a
`torchrun` DDP job (and what rank 0 alone does, its outcome shared: `on_main_rank`), torch.compile,
and the peak FLOP/s that MFU is measured against."""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from nbcli.errors import ConfigError
from nbcli.precision import autocast_dtype, set_tf32
from nbcli.train.config import TrainConfig

# bf16 dense peak FLOP/s by device name (for MFU); unknown devices get no MFU.
BF16_PEAK = {"H100 SXM": 989e12, "H100 NVL": 835e12, "H100 PCIe": 756e12, "H100": 989e12, "H200": 989e12,
             "A100": 312e12, "L40S": 362e12, "A10G": 70e12, "4090": 165e12}


@dataclass
class Runtime:
    device: torch.device
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    amp_dtype: torch.dtype | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def main_process() -> bool:
    """Whether this process is rank 0 of a `torchrun` job, or a single process (RANK unset): the one
    that cleans up a failed new run's directory and prints the command's report, read before (or
    without) a Runtime."""
    return os.environ.get("RANK", "0") == "0"


def resolve_device(choice: str) -> torch.device:
    """auto: CUDA when present, else CPU. cuda without CUDA is a one-line error."""
    if choice == "cuda" and not torch.cuda.is_available():
        reason = "this torch build has no CUDA" if torch.version.cuda is None else "no CUDA device is visible"
        raise ConfigError(f"--device cuda: CUDA is not available ({reason}); use --device cpu or --device auto")
    if choice == "auto":
        choice = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        return torch.device(choice)
    except (RuntimeError, TypeError):
        raise ConfigError(f"device {choice!r}: expected auto, cpu, cuda or cuda:N") from None


def setup_runtime(cfg: TrainConfig) -> Runtime:
    """Single process, or one rank of a `torchrun` job (RANK/WORLD_SIZE/LOCAL_RANK set): DDP."""
    device = resolve_device(cfg.device)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if world > 1:
        import torch.distributed as dist

        if device.type == "cuda":
            device = torch.device("cuda", local_rank)
            torch.cuda.set_device(device)
        if not dist.is_initialized():
            dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
            atexit.register(_close_process_group)  # joined before interpreter teardown (else gloo may abort)
        if cfg.batch_size % (world * cfg.grad_accum):
            raise ConfigError(f"--batch-size {cfg.batch_size} is not divisible by world size {world} x "
                              f"--grad-accum {cfg.grad_accum}")
    amp = autocast_dtype(cfg.dtype, device)  # the one --dtype rule (nbcli.precision), as eval and generate
    set_tf32(device, True)
    return Runtime(device=device, rank=rank, world=world, local_rank=local_rank, amp_dtype=amp)


def wrap_model(model: torch.nn.Module, cfg: TrainConfig, rt: Runtime) -> torch.nn.Module:
    """The module the step runs forward/backward through: `model`, compiled with --compile, inside
    DistributedDataParallel on a multi-rank job. Parameters stay shared with `model`."""
    net: torch.nn.Module = model
    if cfg.compile:
        net = torch.compile(model)  # type: ignore[assignment]
    if rt.world > 1:
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(net, device_ids=[rt.local_rank] if rt.device.type == "cuda" else None)
    return net


def _close_process_group() -> None:
    """Destroy the process group setup_runtime made: a gloo group left to the interpreter's teardown
    can end the process with SIGABRT ("terminate called without an active exception") instead of its
    exit status, e.g. after a one-line refusal on every rank. Called when a run ends
    (`process_group_closed`) and, for any path that does not use it, at exit; a second call, or a
    group that cannot be destroyed cleanly (a peer already gone), changes nothing."""
    import gc

    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        gc.collect()   # DDP modules the run dropped hold the group: free them (and their hooks) first
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


@contextlib.contextmanager
def process_group_closed() -> Any:
    """Around a run that calls `setup_runtime`: its process group is destroyed when the run ends, on
    success, an error or Ctrl-C alike (not left to the interpreter's exit)."""
    try:
        yield
    finally:
        _close_process_group()


def to_device(tensor: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """A batch tensor built on the host, on `device`. On CUDA it is copied from page-locked memory
    without blocking the host (the copy overlaps the work already queued, and the next batch is built
    meanwhile; PyTorch's caching host allocator keeps the pinned buffer until the copy is done)."""
    device = torch.device(device)
    if device.type != "cuda" or tensor.device.type != "cpu":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def all_reduce_sum(values: torch.Tensor, rt: Runtime) -> torch.Tensor:
    """Sum `values` over ranks in place (no-op on one process); returns it."""
    if rt.world > 1:
        import torch.distributed as dist

        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def host_sum(value: float, rt: Runtime) -> float:
    """A number known on the host (a count of tokens), summed over ranks: the number itself on one
    process (no device round trip), else one all-reduce of it in float64."""
    if rt.world == 1:
        return value
    return float(all_reduce_sum(torch.tensor(float(value), dtype=torch.float64, device=rt.device), rt))


@functools.lru_cache(maxsize=64)
def device_ids(ids: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """Token ids as a long tensor on `device`, built once per (ids, device) and then reused (it is
    shared: never modify it). On CUDA building it is a synchronous copy from pageable host memory,
    which a training step must not pay per micro-batch: the MLM's special ids
    (`nbcli.models.masking.mlm_mask`), the [Delim]/[Period] targets (`nbcli.analysis.patterns.pattern_matrix`)."""
    return torch.tensor(ids, dtype=torch.long, device=device)


def on_main_rank(rt: Runtime, action: Callable[[], None]) -> None:
    """Run `action` on rank 0 only (the run directory's checks and files) and make every rank share
    its outcome: when it fails there, every other rank raises the same one-line NbError at once
    instead of waiting in its next all_reduce until the collective's timeout. The outcome travels
    as two broadcast tensors (a flag and length, then the UTF-8 class name and message): no pickle."""
    if rt.world == 1:
        action()
        return
    import torch.distributed as dist

    failure: BaseException | None = None
    if rt.is_main:
        try:
            action()
        except BaseException as err:  # shared with the other ranks, then raised here as it was
            failure = err
    payload = _failure_bytes(failure) if failure is not None else b""
    header = torch.tensor([failure is not None, len(payload)], dtype=torch.int64, device=rt.device)
    dist.broadcast(header, src=0)
    if int(header[0]):
        data = torch.zeros(int(header[1]), dtype=torch.uint8, device=rt.device)
        if rt.is_main:
            data.copy_(torch.frombuffer(bytearray(payload), dtype=torch.uint8))
        dist.broadcast(data, src=0)
        if failure is not None:
            raise failure
        raise _failure_from_bytes(bytes(data.cpu().tolist()))


def all_gather_texts(items: list[tuple[int, str]], rt: Runtime) -> list[tuple[int, str]]:
    """Every rank's (index, text) items, concatenated in rank order (the list itself on one process):
    translation's validation hypotheses, decoded a share per rank. They travel as UTF-8 JSON in uint8
    tensors (the lengths, then the bytes padded to the longest): no pickle."""
    if rt.world == 1:
        return items
    import json

    import torch.distributed as dist

    payload = json.dumps(items).encode("utf-8")
    size = torch.tensor([len(payload)], dtype=torch.int64, device=rt.device)
    sizes = [torch.zeros_like(size) for _ in range(rt.world)]
    dist.all_gather(sizes, size)
    data = torch.zeros(max(int(n) for n in sizes), dtype=torch.uint8, device=rt.device)
    data[:len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8).to(rt.device)
    parts = [torch.zeros_like(data) for _ in range(rt.world)]
    dist.all_gather(parts, data)
    out: list[tuple[int, str]] = []
    for part, n in zip(parts, sizes):
        out += [(int(i), str(text)) for i, text in json.loads(part[:int(n)].cpu().numpy().tobytes().decode("utf-8"))]
    return out


def _failure_bytes(err: BaseException) -> bytes:
    """`Class\0message` of rank 0's failure: an NbError keeps its class and message; Ctrl-C is an
    Interrupted; anything else (a bug, with its traceback on rank 0) is an NbError saying so."""
    from nbcli.errors import Interrupted, NbError

    if isinstance(err, NbError):
        name, message = type(err).__name__, str(err)
    elif isinstance(err, KeyboardInterrupt):
        name, message = Interrupted.__name__, "rank 0 was interrupted; no output written"
    else:
        name, message = NbError.__name__, f"rank 0 failed ({type(err).__name__}: {err}); see its traceback"
    return f"{name}\0{message}".encode("utf-8", "replace")


def _failure_from_bytes(data: bytes) -> Exception:
    """The NbError (of rank 0's class when nbcli.errors defines it) that `_failure_bytes` encoded."""
    from nbcli import errors

    name, _, message = data.decode("utf-8", "replace").partition("\0")
    cls = getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, errors.NbError)):
        cls = errors.NbError
    return cls(message)


def synchronize(rt: Runtime) -> None:
    """Wait for queued CUDA work, so a wall-clock interval measures it."""
    if rt.device.type == "cuda":
        torch.cuda.synchronize(rt.device)


def peak_flops(device: torch.device) -> float | None:
    """The device's bf16 dense peak FLOP/s (BF16_PEAK), None on CPU or an unknown GPU."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, value in BF16_PEAK.items():
        if key in name:
            return value
    return None


def model_flops_utilisation(flops_per_token: float, tokens: int, seconds: float, peak: float, world: int) -> float:
    """MFU: achieved training FLOP/s over the job's peak (PaLM appendix B; nanoGPT's estimate_mfu)."""
    return flops_per_token * tokens / seconds / (peak * world)
