"""What transformers sees of `nb patch-checkpoint`'s new model folder at every step of its commit, and
what a plain rerun does after a kill there.

A tiny GPT-2 model folder with its tokenizer (one weights file, and one saved in shards) is patched
into a new folder with `--untie --scale-ln-bias 0.5` (config.json changes with the weights:
tie_word_embeddings false). A real `nb patch-checkpoint` is paused with NB_FAULT_INJECT=POINT:N:STOP at
each step of the commit (each temporary created, before the journal, after it, after each rename, after
the last, after the folder is in place); there and again after it is killed, the folder is loaded with
transformers' AutoModelForCausalLM AND AutoTokenizer: neither loads before the commit point (no folder),
both load after it, byte for byte the uninterrupted run's, never the weights without their config or
tokenizer. The same command then runs again: before the commit point it recovers (a note) and writes the
folder; after it, the folder is there and the rerun writes its files again, equal. No file of nb's
(temporary, journal, staged folder) is left.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import forked_nb
from tests.fuzz.test_export_commit import nb_leftovers, reader_view
from tests.fuzz.reruns import rerun
from tests.fuzz.test_shard_commit import pause_then_kill

pytestmark = pytest.mark.faults

transformers = pytest.importorskip("transformers")

SURGERY = ["--untie", "--scale-ln-bias", "0.5", "--no-hash-inputs"]
AUTO = "AutoModelForCausalLM"
# single file: model.safetensors, config.json, generation_config.json, tokenizer.json: 4 temporaries and renames
SINGLE_BEFORE = ["temp-created:1", "temp-created:4", "before-commit", "journal-written", "renamed:1", "renamed:2",
                 "renamed:4", "after-commit"]
SHARDED_BEFORE = ["temp-created:2", "journal-written", "index-renamed", "renamed:3"]   # a sample: the same commit
AFTER = ["folder-renamed"]


def contents(folder: Path) -> dict[str, object]:
    """What a folder holds for a reader: each tensor's bytes (whichever shard holds it), the weights'
    metadata but the provenance (which records its time of writing), and each other file's sha256 (an
    index by its tensor names: a rewrite of a sharded folder names its shards afresh)."""
    from safetensors import safe_open

    tensors: dict[str, str] = {}
    out: dict[str, object] = {"tensors": tensors, "metadata": []}
    for path in sorted(folder.iterdir()):
        if path.suffix == ".safetensors":
            with safe_open(str(path), "pt") as handle:
                out["metadata"].append({k: v for k, v in (handle.metadata() or {}).items()  # type: ignore[union-attr]
                                        if k != "nb.provenance"})
                tensors.update({k: hashlib.sha256(handle.get_tensor(k).numpy().tobytes()).hexdigest()
                                for k in handle.keys()})
        elif path.name.endswith(".index.json"):
            out[path.name] = sorted(json.loads(path.read_text())["weight_map"])
        else:
            out[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _env(fault: str | None) -> dict[str, str]:
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("NB_FAULT_INJECT", None)
    if fault:
        env["NB_FAULT_INJECT"] = f"{fault if ':' in fault else fault + ':1'}:STOP"
    return env


def _patch(model: Path, out: Path) -> subprocess.CompletedProcess[str]:
    done = forked_nb.run(["nb", "patch-checkpoint", str(model), "-o", str(out), *SURGERY], capture_output=True,
                          text=True, timeout=300, env=_env(None))
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory, hf_bytelevel_json: Path) -> dict[str, tuple[Path, dict[str, str]]]:
    """layout -> (a GPT-2 model folder with its tokenizer.json, the contents of its uninterrupted patch)."""
    import torch

    root = tmp_path_factory.mktemp("gpt2-folders")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=400, n_positions=16, n_embd=32, n_layer=2, n_head=2)
    model = transformers.GPT2LMHeadModel(config)
    out = {}
    for layout, shard in (("single", "10GB"), ("sharded", "40KB")):
        folder = root / layout
        model.save_pretrained(folder, max_shard_size=shard, safe_serialization=True)
        shutil.copy(hf_bytelevel_json, folder / "tokenizer.json")
        assert reader_view(folder, AUTO) == "complete"
        reference = root / f"{layout}-patched"
        done = _patch(folder, reference)
        assert done.returncode == 0, done.stderr
        assert reader_view(reference, AUTO) == "complete"
        out[layout] = (folder, contents(reference))
    assert (root / "sharded" / "model.safetensors.index.json").is_file()
    return out


CASES = ([("single", p, False) for p in SINGLE_BEFORE + AFTER] + [("sharded", p, False) for p in SHARDED_BEFORE + AFTER]
         + [("single", "renamed:2", True), ("sharded", "folder-renamed", True)])


@pytest.mark.parametrize(("layout", "point", "empty"), CASES)
def test_patch_into_a_new_folder_killed_at_every_step_is_absent_or_complete(
        tmp_path: Path, models, layout: str, point: str, empty: bool) -> None:  # noqa: ANN001
    model, expected = models[layout]
    out = tmp_path / "patched"
    if empty:
        out.mkdir()
    committed = point in AFTER
    want = "complete" if committed else "absent"
    before = contents(model)
    pause_then_kill(["nb", "patch-checkpoint", str(model), "-o", str(out), *SURGERY], _env(point), point,
                    lambda: reader_view(out, AUTO) == want, f"a reader should see the folder {want}")
    assert reader_view(out, AUTO) == want, f"killed at {point}, before any nb run"
    if committed:
        assert contents(out) == expected
    again = rerun(["patch-checkpoint", model, "-o", out, *SURGERY], as_process=(layout, point, empty) == CASES[0])
    assert again.returncode == 0, f"killed at {point}, the rerun: {again.stderr}"
    if not committed:
        assert "nb: note: " in again.stderr and "stale" in again.stderr, again.stderr   # it says what it removed
    assert contents(out) == expected and reader_view(out, AUTO) == "complete"
    assert contents(model) == before                                                    # the input untouched
    assert nb_leftovers(tmp_path, out, model) == []


# in place: the new files are committed in a staged copy of the folder (its 4 files and, sharded,
# its fresh shards and index), which one exchange swaps in; then the old folder is removed. Every
# point before the swap leaves the folder untouched: a kill inside the copy's own commit, and one with
# the copy complete, stand for them (the per-file points are test_patch_into_a_new_folder's)
IN_PLACE_BEFORE = ["renamed:2", "swap-staged"]
IN_PLACE_AFTER = ["folder-swapped"]


@pytest.mark.parametrize(("layout", "point"), [("single", "renamed:2"), ("single", "folder-swapped"),
                                               ("sharded", "swap-staged"), ("sharded", "folder-swapped")])
def test_patch_in_place_killed_at_every_step_is_the_old_folder_or_the_new(
        tmp_path: Path, models, layout: str, point: str) -> None:  # noqa: ANN001
    """The folder is rewritten in place: at each pause, and after the kill, transformers loads the old
    folder whole or the new one whole (never new weights beside the old config.json, tie_word_embeddings
    true); the next nb write beside it removes the staged copy (or the old folder, after the swap)."""
    model, expected = models[layout]
    folder = tmp_path / "model"
    shutil.copytree(model, folder)
    old = contents(folder)
    want = expected if point in IN_PLACE_AFTER else old
    pause_then_kill(["nb", "patch-checkpoint", str(folder), "--in-place", *SURGERY], _env(point), point,
                    lambda: contents(folder) == want and reader_view(folder, AUTO) == "complete",
                    "a reader should see the old folder or the new one, whole")
    assert contents(folder) == want and reader_view(folder, AUTO) == "complete", f"killed at {point}"
    assert nb_leftovers(tmp_path), "the kill left no staged folder to recover"
    if point in IN_PLACE_AFTER:  # done: any nb write beside the folder removes the old one
        again = rerun(["patch-checkpoint", folder, "-o", tmp_path / "other", "--scale-ln-bias", "1",
                       "--no-hash-inputs"], as_process=False)
    else:                        # not done: the plain rerun recovers and patches
        again = rerun(["patch-checkpoint", folder, "--in-place", *SURGERY], as_process=point == IN_PLACE_BEFORE[0])
    assert again.returncode == 0, again.stderr
    assert "nb: note: " in again.stderr and "stale temporary folder" in again.stderr, again.stderr
    assert contents(folder) == expected and reader_view(folder, AUTO) == "complete"
    assert nb_leftovers(tmp_path, folder) == []


def test_patch_in_place_keeps_the_folder_entries_it_does_not_rewrite(tmp_path: Path, models) -> None:  # noqa: ANN001
    """The swapped-in folder holds every entry of the old one: unchanged files as the same inodes (hard
    links), a sub-folder (hf download's .cache/) and a relative symbolic link, and the folder's mode."""
    model, expected = models["single"]
    folder = tmp_path / "model"
    shutil.copytree(model, folder)
    (folder / ".cache" / "huggingface").mkdir(parents=True)
    (folder / ".cache" / "huggingface" / "tokenizer.json.metadata").write_text("abc\n")
    (tmp_path / "notes.md").write_text("outside\n")
    (folder / "NOTES.md").symlink_to("../notes.md")
    folder.chmod(0o750)
    inode = (folder / "tokenizer.json").stat().st_ino
    done = forked_nb.run(["nb", "patch-checkpoint", str(folder), "--in-place", *SURGERY], capture_output=True,
                          text=True, timeout=300, env=_env(None))
    assert done.returncode == 0, done.stderr
    assert (folder / "tokenizer.json").stat().st_ino == inode
    assert (folder / ".cache" / "huggingface" / "tokenizer.json.metadata").read_text() == "abc\n"
    assert os.readlink(folder / "NOTES.md") == "../notes.md" and (folder / "NOTES.md").read_text() == "outside\n"
    assert folder.stat().st_mode & 0o777 == 0o750
    shutil.rmtree(folder / ".cache")
    (folder / "NOTES.md").unlink()
    assert contents(folder) == expected
    assert sorted(os.listdir(tmp_path)) == ["model", "notes.md"]
