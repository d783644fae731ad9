"""DDP under torchrun (CPU, gloo): 2 ranks x 1 micro-step equal 1 process x 2 micro-steps, step for step."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nbcli.train.rundir import read_log
from tests.train.ddp_helpers import assert_same_records, nb_plain_ranks, nb_single, nb_torchrun

# slow: every test starts two ranks (torchrun, plain nb ranks or spawned gloo processes), the first also nb as
# one process; --quick leaves them out.
pytestmark = pytest.mark.slow

ARGS = ["--steps", "3", "--seq-len", "32", "--batch-size", "8", "--eval-every", "2", "--eval-batches", "2",
        "--bias-init", "unigram", "--device", "cpu"]


@pytest.mark.skipif(sys.platform != "linux", reason="torchrun/gloo test runs on Linux")
def test_ddp_two_ranks_equal_gradient_accumulation(tmp_path: Path, sp_model: Path, train_corpus: Path) -> None:
    common = ["train", "--corpus", str(train_corpus), "-t", str(sp_model), *ARGS]
    nb_single([*common, "--out", tmp_path / "one", "--grad-accum", "2"])
    nb_torchrun([*common, "--out", tmp_path / "two"])
    assert assert_same_records(read_log(tmp_path / "one"), read_log(tmp_path / "two"),
                               ("loss", "val_loss", "kl_unigram")) > 0


@pytest.mark.skipif(sys.platform != "linux", reason="gloo test runs on Linux")
def test_a_refusal_on_rank_0_stops_every_rank_at_once(tmp_path: Path, sp_model: Path, train_corpus: Path) -> None:
    """Rank 0 alone checks the run directory; when it refuses (--out already holds a run), every rank
    prints the same one-line error and exits 1 at once, instead of waiting in a collective for rank 0
    until its timeout. Two plain ranks (no torchrun agent, which would kill the survivors itself)."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "log.jsonl").write_text('{"step": 0, "loss": 1.0}\n')
    before = sorted(p.name for p in out.iterdir())
    results = nb_plain_ranks(["train", "--corpus", train_corpus, "-t", sp_model, "--out", out, *ARGS])
    for rank, (returncode, stderr) in enumerate(results):
        assert returncode == 1, (rank, stderr[-2000:])
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
