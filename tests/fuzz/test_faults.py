"""Fault injection: SIGKILL at every point of a write, Ctrl-C, a full disk (file-size limit).

Each case runs a real `nb` in its own session with NB_FAULT_INJECT (nbcli.atomic.commit's test hook) and
asserts: the inputs are byte-identical, there is no partial output (a target is absent, the old
file or a complete new one), no traceback, no process left behind, and the next nb run completes
the interrupted commit or removes the stale temporaries and says so.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import english_like_lines
from nbcli.checkpoint import open_checkpoint
from nbcli.counts import UnigramCounts, write_counts
from tests import forked_nb
from tests.checkpoint.builders import gpt2_tensors, save, save_sharded
from tests.fuzz.reruns import rerun

pytestmark = pytest.mark.faults  # real nb processes (about 2 s each): in the default run and CI

V = 40
NB_LEFTOVERS = ("*.nbtmp", ".nb-commit.*")


def run(*args: object, fault: str | None = None, fsize: int | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run `nb ARGS` in a new session; afterwards no process of that session may remain."""
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("NB_FAULT_INJECT", None)
    if fault:
        env["NB_FAULT_INJECT"] = fault
    limits = {} if fsize is None else {"RLIMIT_FSIZE": (fsize, fsize)}
    proc = forked_nb.Popen(["nb", *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=env, start_new_session=True, rlimits=limits)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_no_process_left(proc.pid)
    assert "Traceback" not in err, err
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def assert_no_process_left(sid: int) -> None:
    import time

    for _ in range(100):  # workers of a killed parent notice within a moment
        left = [p for p in os.listdir("/proc") if p.isdigit() and _session(int(p)) == sid]
        if not left:
            return
        time.sleep(0.05)
    raise AssertionError(f"processes left by nb: {left}")


def _session(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        return int(fields[3]) if fields[0] != b"Z" else None
    except (OSError, IndexError, ValueError):
        return None


def digests(root: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.iterdir()) if p.is_file()}


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for pattern in NB_LEFTOVERS for p in root.glob(pattern))


def tensor_digests(path: Path) -> dict[str, str]:
    with open_checkpoint(path) as ckpt:
        return {name: hashlib.sha256(ckpt.get(name).contiguous().view(-1).view(dtype=__import__("torch").uint8)
                                     .numpy().tobytes()).hexdigest() for name in ckpt.names()}


@pytest.fixture(scope="module")
def patched_reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Tensor digests of the 3-shard checkpoint below after an uninterrupted patch."""
    root = tmp_path_factory.mktemp("reference")
    src = save_sharded(root / "ckpt", gpt2_tensors(vocab=V), shards=3)
    done = run("patch-checkpoint", src, "-o", root / "ref", "--scale-ln-bias", "0.5", "--no-hash-inputs")
    assert done.returncode == 0, done.stderr
    return tensor_digests(root / "ref")


@pytest.fixture()
def sharded(tmp_path: Path, patched_reference: dict[str, str]) -> tuple[Path, dict[str, str], dict[str, str]]:
    """A 3-shard checkpoint, its file digests, and the tensor digests of its patched version."""
    src = save_sharded(tmp_path / "ckpt", gpt2_tensors(vocab=V), shards=3)
    return src, digests(src), patched_reference


SHARDED_BEFORE = ["temp-created:1", "temp-created:2", "before-commit", "journal-written", "mid-commit"]
SHARDED_AFTER = ["index-renamed", "retired", "after-commit"]


@pytest.mark.parametrize("fault", SHARDED_BEFORE + SHARDED_AFTER)
def test_sharded_in_place_killed_is_old_or_new_after_the_next_run(sharded, fault: str) -> None:  # noqa: ANN001
    """Killed before the index rename: the old files, untouched (the next run removes what the
    commit added); after it: the new set (the next run removes the replaced shard)."""
    src, before, patched = sharded
    killed = run("patch-checkpoint", src, "--in-place", "--scale-ln-bias", "0.5", "--no-hash-inputs", fault=fault)
    assert killed.returncode == -signal.SIGKILL
    assert leftovers(src), "the kill left nothing to recover: the fault point was not reached"
    now = digests(src)
    assert all(now[k] == v for k, v in before.items() if k in now and not k.endswith(".index.json")), \
        "an old shard was changed in place"
    if fault in SHARDED_BEFORE:  # not committed: the old index, the old model
        assert digests(src)["model.safetensors.index.json"] == before["model.safetensors.index.json"]
    inspected = rerun(["inspect", src, "--json"], as_process=fault == SHARDED_BEFORE[0])
    assert inspected.returncode == 0, inspected.stderr
    report = json.loads(inspected.stdout)
    assert report["recovered"], "nb inspect must report what it recovered"
    assert leftovers(src) == []
    if fault in SHARDED_BEFORE:
        assert digests(src) == before
        expected = "rolled back" if fault in ("journal-written", "mid-commit") else "stale temporary"
        assert expected in " ".join(report["recovered"])
    else:
        assert "completed an interrupted commit" in " ".join(report["recovered"])
        assert tensor_digests(src) == patched
        with open_checkpoint(src) as ckpt:  # one consistent set: the index names only live shards
            assert sorted(p.name for p in ckpt.files) == sorted(n for n in digests(src) if not n.endswith(".json"))
            assert ckpt.metadata.get("nb.provenance")
            rewritten = [h for h in ckpt.headers if h.path.name not in before]
        assert len(rewritten) == 1 and rewritten[0].metadata["nb.provenance"] == ckpt.metadata["nb.provenance"]


@pytest.mark.parametrize("fault", ["temp-created:1", "mid-commit"])
def test_inspect_table_reports_what_it_recovered(sharded, fault: str) -> None:  # noqa: ANN001
    """The rich (non --json) report of `nb inspect` names the recovery, as one line, no traceback."""
    src, _, _ = sharded
    killed = run("patch-checkpoint", src, "--in-place", "--scale-ln-bias", "0.5", "--no-hash-inputs", fault=fault)
    assert killed.returncode == -signal.SIGKILL and leftovers(src)
    inspected = run("inspect", src)
    assert inspected.returncode == 0, inspected.stderr
    assert "Traceback" not in inspected.stderr
    recovered = [line for line in inspected.stdout.splitlines() if line.startswith("recovered:")]
    expected = "stale temporary" if fault.startswith("temp-created") else "rolled back an interrupted commit"
    assert recovered and expected in " ".join(recovered)
    assert leftovers(src) == []


@pytest.mark.parametrize("fault", ["temp-created", "after-commit"])
@pytest.mark.parametrize("in_place", [False, True])
def test_single_file_patch_killed(tmp_path: Path, fault: str, in_place: bool) -> None:
    src = save(tmp_path / "m.safetensors", gpt2_tensors(vocab=V))
    original = src.read_bytes()
    out = src if in_place else tmp_path / "out.safetensors"
    args = ["patch-checkpoint", src, "--scale-ln-bias", "0.5", "--no-hash-inputs"]
    args += ["--in-place"] if in_place else ["-o", out]
    killed = run(*args, fault=fault)
    assert killed.returncode == -signal.SIGKILL
    if fault == "after-commit":  # renamed: the new file is complete
        assert tensor_digests(out)["ln_f.bias"] != hashlib.sha256(b"").hexdigest()
        assert open_checkpoint(out).metadata.get("nb.provenance")
    else:
        assert src.read_bytes() == original
        assert in_place or not out.exists()
        assert leftovers(tmp_path)
    if not in_place:
        assert src.read_bytes() == original
    again = rerun(args, as_process=(fault, in_place) == ("temp-created", False))
    assert again.returncode == 0, again.stderr
    assert leftovers(tmp_path) == []
    if fault != "after-commit":
        assert "stale temporary" in again.stderr


@pytest.fixture()
def count_inputs(tmp_path: Path, sp_model: Path) -> tuple[Path, Path]:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(english_like_lines(300, seed=9)) + "\n")
    tok = tmp_path / "spm.model"
    shutil.copy(sp_model, tok)
    return corpus, tok


@pytest.mark.parametrize("fault", ["temp-created:2", "before-commit", "journal-written", "mid-commit"])
def test_count_with_tsv_killed_commits_both_or_neither(tmp_path: Path, count_inputs, fault: str) -> None:  # noqa: ANN001
    corpus, tok = count_inputs
    inputs = digests(tmp_path)
    out, tsv = tmp_path / "c.safetensors", tmp_path / "c.tsv"
    args = ["count-unigrams", corpus, "-t", tok, "-o", out, "--tsv", tsv, "-j", "2"]
    killed = run(*args, fault=fault)
    assert killed.returncode == -signal.SIGKILL
    assert leftovers(tmp_path)
    if fault in ("journal-written", "mid-commit"):
        assert list(tmp_path.glob(".nb-commit.*"))
    else:
        assert not out.exists() and not tsv.exists()
    assert {k: v for k, v in digests(tmp_path).items() if k in inputs} == inputs
    again = rerun(args, as_process=fault == "temp-created:2")
    assert again.returncode == 0, again.stderr
    assert "nb: note:" in again.stderr
    assert leftovers(tmp_path) == []
    assert out.exists() and tsv.exists()
    assert {k: v for k, v in digests(tmp_path).items() if k in inputs} == inputs


@pytest.mark.parametrize("fault", ["temp-created:1:INT", "before-commit:1:INT", "journal-written:1:INT"])
def test_ctrl_c_is_exit_130_and_nothing_written(tmp_path: Path, count_inputs, fault: str) -> None:  # noqa: ANN001
    corpus, tok = count_inputs
    inputs = digests(tmp_path)
    out, tsv = tmp_path / "c.safetensors", tmp_path / "c.tsv"
    result = run("count-unigrams", corpus, "-t", tok, "-o", out, "--tsv", tsv, fault=fault)
    if fault.startswith("journal-written"):  # Ctrl-C after the commit was decided: it completes
        assert result.returncode == 0, result.stderr
        assert out.exists() and tsv.exists()
    else:
        assert result.returncode == 130, result.stderr
        assert result.stderr.strip().splitlines() == ["nb: interrupted; no output written"]
        assert not out.exists() and not tsv.exists()
    assert leftovers(tmp_path) == []
    assert digests(tmp_path) == {**inputs, **({} if not out.exists() else digests(tmp_path))}


@pytest.mark.parametrize("layout", ["single", "single-in-place", "sharded", "model-folder"])
def test_ctrl_c_at_the_first_temporary_leaves_nothing(tmp_path: Path, layout: str) -> None:
    """Ctrl-C the moment the first temporary exists (before nb has recorded it for removal): exit
    130, one line, no temporary, no output (nor the folder nb made for it), the input untouched."""
    (tmp_path / "in").mkdir()
    if layout.startswith("single"):
        src = save(tmp_path / "in" / "big.safetensors", gpt2_tensors(vocab=V))
    elif layout == "model-folder":  # OUT becomes a folder nb makes (tensors + config.json)
        src = save(tmp_path / "in" / "model.safetensors", gpt2_tensors(vocab=V))
        (tmp_path / "in" / "config.json").write_text(json.dumps({"model_type": "gpt2", "vocab_size": V}))
    else:
        src = save_sharded(tmp_path / "in", gpt2_tensors(vocab=V), shards=3)
    inputs = tmp_path / "in"
    before = digests(inputs)
    out = {"single": tmp_path / "out.safetensors", "single-in-place": None}.get(layout, tmp_path / "out")
    args = ["patch-checkpoint", src, "--scale-ln-bias", "0.5"]
    args += ["--in-place"] if out is None else ["-o", out]
    result = run(*args, fault="temp-created:1:INT")
    assert result.returncode == 130, result.stderr
    assert result.stderr.strip().splitlines() == ["nb: interrupted; no output written"]
    assert digests(inputs) == before
    assert leftovers(tmp_path) == [] and leftovers(inputs) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]  # no output, no folder made for it


def test_ctrl_c_in_place_sharded_leaves_the_originals(sharded) -> None:  # noqa: ANN001
    src, before, _ = sharded
    result = run("patch-checkpoint", src, "--in-place", "--scale-ln-bias", "0.5", fault="temp-created:2:INT")
    assert result.returncode == 130
    assert result.stderr.strip().splitlines() == ["nb: interrupted; no output written"]
    assert digests(src) == before and leftovers(src) == []


@pytest.mark.parametrize("command", ["patch-single", "patch-sharded-in-place", "count-tsv", "merge"])
def test_full_disk_is_one_line_and_no_output(tmp_path: Path, count_inputs, command: str) -> None:  # noqa: ANN001
    corpus, tok = count_inputs
    big = {"wte.weight": np.zeros((4000, 16), np.float32)}  # 256 kB: over the 100 kB limit below
    from safetensors.numpy import save_file

    single = tmp_path / "big.safetensors"
    save_file({**big, "ln_f.bias": np.ones(16, np.float32)}, str(single))
    counts = tmp_path / "counts.safetensors"
    write_counts(counts, UnigramCounts(counts=np.arange(30_000, dtype=np.int64), metadata={"nb.format": "unigram-counts/1"}))
    sharded = save_sharded(tmp_path / "sh", gpt2_tensors(vocab=3000), shards=2)
    before = {**digests(tmp_path), **{f"sh/{k}": v for k, v in digests(sharded).items()}}
    args = {"patch-single": ["patch-checkpoint", single, "-o", tmp_path / "o.safetensors", "--scale-ln-bias", "0.5",
                             "--map", "final_ln_bias=ln_f.bias"],
            "patch-sharded-in-place": ["patch-checkpoint", sharded, "--in-place", "--scale-ln-bias", "0.5",
                                           "--shuffle-embeddings", "--seed", "1"],  # wte's shard: 96 kB
            "count-tsv": ["count-unigrams", corpus, "-t", tok, "-o", tmp_path / "c.safetensors",
                          "--tsv", tmp_path / "c.tsv"],
            "merge": ["merge-counts", counts, counts, "-o", tmp_path / "m.safetensors"]}[command]
    fsize = 2_000 if command == "count-tsv" else 100_000
    result = run(*args, fsize=fsize)
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nb: error: ") and "no space left" in lines[0], result.stderr
    after = {**digests(tmp_path), **{f"sh/{k}": v for k, v in digests(sharded).items()}}
    assert after == before
    assert leftovers(tmp_path) == [] and leftovers(sharded) == []


TRAIN_FAST = ["--steps", "2", "--seq-len", "32", "--batch-size", "8", "--eval-every", "2", "--eval-batches", "2"]


@pytest.mark.parametrize(("fault", "existing_dir"), [("ctrl-c-first-write", False), ("ctrl-c-first-write", True),
                                                     ("ctrl-c-at-checkpoint", False), ("disk-full", True)])
def test_train_failing_before_its_first_state_leaves_no_dead_end(tmp_path: Path, count_inputs, fault: str,  # noqa: ANN001
                                                                 existing_dir: bool) -> None:
    corpus, tok = count_inputs
    inputs = digests(tmp_path)
    out = tmp_path / "run"
    if existing_dir:
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    args = ["train", "--corpus", corpus, "-t", tok, "--out", out, *TRAIN_FAST]
    # temporaries: config.json, counts.safetensors, step-0 (the initial model), step-2 (the last checkpoint)
    inject = {"ctrl-c-first-write": "temp-created:1:INT", "ctrl-c-at-checkpoint": "temp-created:4:INT"}.get(fault)
    result = run(*args, fault=inject, fsize=50_000 if fault == "disk-full" else None, timeout=300)
    assert result.returncode == (1 if fault == "disk-full" else 130), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert digests(tmp_path) == inputs
    if existing_dir:
        assert sorted(os.listdir(out)) == ["notes.txt"]
    else:
        assert not out.exists()
    again = run(*args, timeout=300)  # the same command simply runs again
    assert again.returncode == 0, again.stderr
    assert (out / "summary.json").exists() and (out / "train-state.json").exists()


def test_probe_bias_figures_are_written_together_or_not_at_all(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plot extra (installed in CI) draws the figures")
    ckpt = save(tmp_path / "m.safetensors", gpt2_tensors(vocab=V))
    counts = tmp_path / "c.safetensors"
    write_counts(counts, UnigramCounts(counts=np.arange(1, V + 1, dtype=np.int64), metadata={"nb.format": "unigram-counts/1"}))
    plots = tmp_path / "plots"
    result = run("probe-bias", ckpt, "-c", counts, "--plot", plots, "--no-partition", fault="temp-created:2:INT")
    assert result.returncode == 130, result.stderr
    assert not plots.exists()  # the first figure, complete, was not kept alone; nor the folder nb made
