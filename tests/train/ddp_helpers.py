"""Helpers for the DDP tests (CPU, gloo): `nb train` as one process (in-process), under torchrun, or as plain ranks
(RANK/WORLD_SIZE set by hand, no torchrun agent that would kill the survivors itself); and the check
that two runs logged the same records."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests import forked_nb

ENV = {"OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1", "COLUMNS": "200"}
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]


def nb_single(args: Sequence[str | Path]) -> None:
    """`nb ARGS` as one process, the reference the ranks are compared with: in this process (the same
    code as the console script's, one torch thread as each rank has; the ranks are the real processes
    under test); it must succeed."""
    from tests.cli.helpers import invoke

    done = invoke(*args, "--threads", "1")   # the ranks' OMP_NUM_THREADS: the same sums in the same order
    assert done.exit_code == 0, done.stderr[-3000:]


def nb_torchrun(args: Sequence[str | Path], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`torchrun --nproc-per-node 2 -m nbcli ARGS` (two ranks, gloo on CPU); it must succeed. Each rank is
    forked by the test worker's fork server through tests/fork_proxy.py, which execs `python -m nbcli`
    where there is none."""
    env = {**os.environ, **ENV, **forked_nb.launcher_env()}
    done = subprocess.run([*TORCHRUN, str(forked_nb.PROXY), *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def nb_plain_ranks(args: Sequence[str | Path], timeout: float = 120) -> list[tuple[int, str]]:
    """`nb ARGS` as two plain ranks of one job; (exit status, stderr) per rank."""
    with socket.socket() as probe:  # a free port for the rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    procs = []
    for rank in (0, 1):
        env = {**os.environ, **ENV, "MASTER_PORT": str(port), "RANK": str(rank), "LOCAL_RANK": str(rank),
               "WORLD_SIZE": "2"}
        procs.append(forked_nb.Popen([sys.executable, "-m", "nbcli", *map(str, args)], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env))
    try:
        results = [proc.communicate(timeout=timeout) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    return [(proc.returncode, stderr) for proc, (_stdout, stderr) in zip(procs, results)]


def assert_same_records(one: list[dict[str, Any]], two: list[dict[str, Any]], keys: Sequence[str],
                        rel: float = 1e-4) -> int:
    """The two logs have the same steps and, where the first has them, the same values of `keys`
    (numbers within `rel`); the number of values compared."""
    assert [r["step"] for r in one] == [r["step"] for r in two]
    compared = 0
    for a, b in zip(one, two):
        assert {k for k in keys if k in a} == {k for k in keys if k in b}, a["step"]
        for key in keys:
            if key in a:
                assert b[key] == pytest.approx(a[key], rel=rel), (a["step"], key)
                compared += 1
    return compared
