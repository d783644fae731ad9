"""What `transformers.from_pretrained` sees at every step of a sharded in-place commit made file by file.

A model folder is rewritten in place through a swapped-in copy where the system allows
(tests/fuzz/test_patch_folder_commit.py); here nb runs inside the folder (its working directory),
which the swap would pull from under it, so it commits file by file, the index's rename the commit
point. A tiny GPT-2 saved by transformers in several shards is patched in place by a real `nb` with a
surgery that touches two shards (`--shuffle-embeddings`: wte, first shard; `--scale-ln-bias`:
ln_f.bias, last shard). NB_FAULT_INJECT=POINT:N:STOP pauses nb at each step of the commit (every
temporary created, before the journal, after each rename, the index rename, each removal of a
replaced shard, before the journal's removal); at each pause the folder is loaded with transformers
(not nb) and its logits must be those of the old model before the index rename, of the new one
after it. nb is then killed there (a crash), the folder loaded again (what a reader sees before any
nb run), then `nb inspect` recovers it and the folder is loaded a third time: still the same model,
and nothing of nb's left in the folder.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests import forked_nb
from tests.fuzz.reruns import rerun
from tests.fuzz.test_faults import assert_no_process_left

pytestmark = pytest.mark.faults

SURGERY = ["--shuffle-embeddings", "--seed", "3", "--scale-ln-bias", "0.5", "--no-hash-inputs"]
# 2 shards rewritten + the index: 3 temporaries, 3 renames (the third is the index), 2 removals
BEFORE_INDEX = ["temp-created:1", "temp-created:2", "temp-created:3", "before-commit", "journal-written",
                "renamed:1", "renamed:2"]
AFTER_INDEX = ["index-renamed", "retired:1", "retired:2", "after-commit"]


def _logits(folder: Path) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder)
    model.eval()
    with torch.no_grad():
        return model(torch.arange(12).reshape(1, 12)).logits


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.Tensor, torch.Tensor]:
    """A GPT-2 folder saved in several shards, its logits, and the logits after the surgery."""
    transformers = pytest.importorskip("transformers")
    root = tmp_path_factory.mktemp("gpt2")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2)
    model = transformers.GPT2LMHeadModel(config)
    with torch.no_grad():
        model.transformer.ln_f.bias.normal_()  # a bias whose scaling shows in the logits
    model.save_pretrained(root / "model", max_shard_size="12KB", safe_serialization=True)
    index = json.loads((root / "model" / "model.safetensors.index.json").read_text())["weight_map"]
    assert len(set(index.values())) >= 3
    assert index["transformer.wte.weight"] != index["transformer.ln_f.bias"]
    new = root / "new"
    done = forked_nb.run(["nb", "patch-checkpoint", root / "model", "-o", new, *SURGERY],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    old_logits, new_logits = _logits(root / "model"), _logits(new)
    assert not torch.equal(old_logits, new_logits)
    return root / "model", old_logits, new_logits


def _wait_stopped(proc: subprocess.Popen[str], timeout: float = 120) -> bool:
    """True once `proc` is stopped (SIGSTOP sent to itself); False if it ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        with open(f"/proc/{proc.pid}/stat", "rb") as handle:
            if handle.read().rsplit(b")", 1)[1].split()[0] == b"T":
                return True
        time.sleep(0.05)
    raise AssertionError("nb neither paused nor ended")


def pause_then_kill(args: list, env: dict[str, str], point: str, check: Callable[[], bool], what: str,
                    cwd: Path | None = None) -> None:
    """Run `args` (nb with NB_FAULT_INJECT=...:STOP in `env`, in `cwd`) in its own session until it
    stops at `point`, assert `check()` there, then kill it (a crash right there); no process may be left."""
    proc = forked_nb.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, cwd=cwd)
    try:
        assert _wait_stopped(proc), f"nb ended without reaching {point}: {proc.communicate()[1]}"
        assert check(), f"paused at {point}: {what}"
        proc.kill()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
    assert_no_process_left(proc.pid)


def _nb_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".nbtmp") or p.name.startswith(".nb-commit."))


@pytest.mark.parametrize("point", BEFORE_INDEX + AFTER_INDEX)
def test_transformers_sees_the_old_or_the_new_model_at_every_step(tmp_path: Path, tiny_gpt2, point: str) -> None:  # noqa: ANN001
    source, old_logits, new_logits = tiny_gpt2
    folder = tmp_path / "model"
    shutil.copytree(source, folder)
    expected = old_logits if point in BEFORE_INDEX else new_logits
    weight_map = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    touched = {weight_map["transformer.wte.weight"], weight_map["transformer.ln_f.bias"]}
    untouched = {name: (folder / name).stat().st_ino for name in set(weight_map.values()) - touched}
    env = {**os.environ, "NB_FAULT_INJECT": f"{point}:STOP" if ":" in point else f"{point}:1:STOP"}
    pause_then_kill(["nb", "patch-checkpoint", folder, "--in-place", *SURGERY], env, point,
                    lambda: torch.equal(_logits(folder), expected), "a reader sees a mix", cwd=folder)
    assert torch.equal(_logits(folder), expected), f"killed at {point}, before any nb run"
    assert _nb_files(folder), "the kill left nothing to recover"
    inspected = rerun(["inspect", folder, "--json"], as_process=point == BEFORE_INDEX[0])
    assert inspected.returncode == 0, inspected.stderr
    assert json.loads(inspected.stdout)["recovered"]
    assert _nb_files(folder) == []
    assert torch.equal(_logits(folder), expected), f"killed at {point}, after recovery"
    live = set(json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"].values())
    on_disk = {p.name for p in folder.glob("*.safetensors")}
    assert on_disk == live, "recovery left a shard the index does not name, or lost one"
    assert {name: (folder / name).stat().st_ino for name in untouched} == untouched


def test_an_uninterrupted_in_place_edit_touches_only_two_shards(tmp_path: Path, tiny_gpt2) -> None:  # noqa: ANN001
    source, _old, new_logits = tiny_gpt2
    folder = tmp_path / "model"
    shutil.copytree(source, folder)
    before = {p.name: p.stat() for p in folder.iterdir()}
    done = forked_nb.run(["nb", "patch-checkpoint", folder, "--in-place", *SURGERY], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    after = {p.name: p.stat() for p in folder.iterdir()}
    kept = [n for n in before if n in after and before[n].st_ino == after[n].st_ino]
    shards = [n for n in before if n.endswith(".safetensors")]
    assert len(set(shards) - set(kept)) == 2  # the shards of wte and ln_f.bias; config.json etc. kept
    assert set(before) - set(kept) == (set(shards) - set(kept)) | {"model.safetensors.index.json"}
    for name in kept:
        assert after[name].st_mtime_ns == before[name].st_mtime_ns and after[name].st_size == before[name].st_size
    assert len(after) == len(before)
    assert torch.equal(_logits(folder), new_logits)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert "nb.provenance" in index["metadata"]
