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
