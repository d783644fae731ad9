"""DDP under torchrun (CPU, gloo): 2 ranks x 1 micro-step equal 1 process x 2 micro-steps, step for step."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nbcli.train.rundir import read_log

ARGS = ["--steps", "3", "--seq-len", "32", "--batch-size", "8", "--eval-every", "2", "--eval-batches", "2",
        "--bias-init", "unigram", "--device", "cpu"]


@pytest.mark.skipif(sys.platform != "linux", reason="torchrun/gloo test runs on Linux")
def test_ddp_two_ranks_equal_gradient_accumulation(tmp_path: Path, sp_model: Path, train_corpus: Path) -> None:
    common = ["train", "--corpus", str(train_corpus), "-t", str(sp_model), *ARGS]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
    single = subprocess.run([sys.executable, "-m", "nbcli", *common, "--out", str(tmp_path / "one"),
                             "--grad-accum", "2"], capture_output=True, env=env, timeout=300)
    assert single.returncode == 0, single.stderr.decode()
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    if shutil.which("torchrun") is None and not Path(sys.executable).exists():
        pytest.skip("torchrun not available")
    ddp = subprocess.run([*torchrun, "-m", "nbcli", *common, "--out", str(tmp_path / "two")],
                         capture_output=True, env=env, timeout=300)
    assert ddp.returncode == 0, ddp.stderr.decode()[-3000:]
    one, two = read_log(tmp_path / "one"), read_log(tmp_path / "two")
    assert [r["step"] for r in one] == [r["step"] for r in two]
    for a, b in zip(one, two):
        for key in ("loss", "val_loss", "kl_unigram"):
            if key in a:
                assert a[key] == pytest.approx(b[key], rel=1e-4), (a["step"], key)


@pytest.mark.skipif(sys.platform != "linux", reason="gloo test runs on Linux")
def test_a_refusal_on_rank_0_stops_every_rank_at_once(tmp_path: Path, sp_model: Path, train_corpus: Path) -> None:
    """Rank 0 alone checks the run directory; when it refuses (--out already holds a run), every rank
    prints the same one-line error and exits 1 at once, instead of waiting in a collective for rank 0
    until its timeout. Two plain ranks (no torchrun agent, which would kill the survivors itself)."""
    import socket

    out = tmp_path / "run"
    out.mkdir()
    (out / "log.jsonl").write_text('{"step": 0, "loss": 1.0}\n')
    before = sorted(p.name for p in out.iterdir())
    with socket.socket() as probe:  # a free port for the rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    procs = []
    for rank in (0, 1):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "COLUMNS": "200"}
        procs.append(subprocess.Popen([sys.executable, "-m", "nbcli", "train", "--corpus", str(train_corpus),
                                       "-t", str(sp_model), "--out", str(out), *ARGS],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    try:
        results = [proc.communicate(timeout=120) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for rank, (proc, (_stdout, stderr)) in enumerate(zip(procs, results)):
        assert proc.returncode == 1, (rank, stderr[-2000:])
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("nb: error: --out ") and "already holds a run" in lines[0], \
            (rank, stderr[-2000:])
    assert sorted(p.name for p in out.iterdir()) == before


def test_on_main_rank_shares_the_outcome_over_gloo(tmp_path: Path) -> None:
    """on_main_rank in two gloo processes: the action runs on rank 0 only; what it raises there is
    raised as it was on rank 0 and as a one-line NbError on rank 1: an NbError keeps its class and
    message, a bug becomes an NbError naming it, Ctrl-C an Interrupted."""
    import torch.multiprocessing as mp

    mp.start_processes(_on_main_rank_worker, args=(str(tmp_path),), nprocs=2, join=True, start_method="spawn")
    assert (tmp_path / "rank0.txt").read_text().splitlines() == [
        "ran:True", "ConfigError:bad option --x", "ZeroDivisionError:boom", "KeyboardInterrupt:"]
    assert (tmp_path / "rank1.txt").read_text().splitlines() == [
        "ran:False", "ConfigError:bad option --x", "NbError:rank 0 failed (ZeroDivisionError: boom); see its traceback",
        "Interrupted:rank 0 was interrupted; no output written"]


def _on_main_rank_worker(rank: int, folder: str) -> None:
    import torch
    import torch.distributed as dist

    from nbcli.errors import ConfigError
    from nbcli.train.runtime import Runtime, on_main_rank

    dist.init_process_group("gloo", init_method=f"file://{folder}/rendezvous", rank=rank, world_size=2)
    rt = Runtime(device=torch.device("cpu"), rank=rank, world=2)
    seen: list[int] = []
    on_main_rank(rt, lambda: seen.append(rank))
    lines = [f"ran:{bool(seen)}"]

    def config() -> None:
        raise ConfigError("bad option --x")

    def bug() -> None:
        raise ZeroDivisionError("boom")

    def ctrl_c() -> None:
        raise KeyboardInterrupt

    for action in (config, bug, ctrl_c):
        try:
            on_main_rank(rt, action)
            lines.append("no error")
        except (Exception, KeyboardInterrupt) as err:
            lines.append(f"{type(err).__name__}:{err}")
    dist.destroy_process_group()
    (Path(folder) / f"rank{rank}.txt").write_text("\n".join(lines) + "\n")
