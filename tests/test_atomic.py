"""Atomic outputs: a failure leaves the old file (or nothing) and no temporary file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nbcli.atomic import atomic_write, write_bytes_atomic
from nbcli.errors import OutputError


def test_success_replaces(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    write_bytes_atomic(target, b"new")
    assert target.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_exception_keeps_old_file(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with atomic_write(target) as handle:
            handle.write(b"partial")
            raise RuntimeError("boom")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_missing_directory(tmp_path: Path) -> None:
    """The one output rule (nbcli.atomic.checks): missing folders are made when the output is written; a
    file where a folder must go is one error."""
    write_bytes_atomic(tmp_path / "nope" / "deeper" / "out.bin", b"x")
    assert (tmp_path / "nope" / "deeper" / "out.bin").read_bytes() == b"x"
    (tmp_path / "file").write_bytes(b"f")
    with pytest.raises(OutputError, match="file is not a directory"):
        write_bytes_atomic(tmp_path / "file" / "sub" / "out.bin", b"x")
    assert (tmp_path / "file").read_bytes() == b"f"


def test_full_disk_is_one_error_and_no_file(tmp_path: Path) -> None:
    """A file-size limit makes write() fail like a full disk (EFBIG); run in a child process."""
    code = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))\n"
        "from nbcli.atomic import write_bytes_atomic\n"
        "from nbcli.errors import OutputError\n"
        "try:\n"
        f"    write_bytes_atomic({str(tmp_path / 'big.bin')!r}, b'x' * 100000)\n"
        "except OutputError as err:\n"
        "    print(err)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "no space left" in out
    assert list(tmp_path.iterdir()) == []


def test_start_writeback_changes_nothing_and_never_raises(tmp_path: Path) -> None:
    """It only asks the kernel to begin writing (durability stays with the fsync); bad fds are ignored."""
    import os

    from nbcli.atomic import start_writeback

    with atomic_write(tmp_path / "f") as handle:
        handle.write(b"abc" * 1000)
        handle.flush()
        start_writeback(handle.fileno(), 0, 3000)
        start_writeback(handle.fileno(), 10**9, 10)  # beyond the end: nothing to do
    start_writeback(-1, 0, 10)
    assert (tmp_path / "f").read_bytes() == b"abc" * 1000
    assert os.listdir(tmp_path) == ["f"]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _temp_of(name: str, pid: int) -> str:
    from nbcli.atomic.temporaries import host_tag

    return f".{name}.{pid}-{host_tag()}ab12.nbtmp"


@pytest.mark.parametrize("size", [200, 240, 254, 255])
def test_long_output_names_fit(tmp_path: Path, size: int) -> None:
    """The temporary's name is cut to fit NAME_MAX, so every valid output name works."""
    from nbcli.atomic import temp_name

    name = ("é" * size)[: size // 2] + "x" * (size % 2)  # multi-byte characters, `size` bytes
    assert len(name.encode()) == size
    write_bytes_atomic(tmp_path / name, b"data")
    assert os.listdir(tmp_path) == [name]
    assert len(os.fsencode(temp_name(name))) <= 255


def test_name_longer_than_the_file_system_allows(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="256 bytes, longer than the file system allows"):
        write_bytes_atomic(tmp_path / ("a" * 256), b"x")
    assert os.listdir(tmp_path) == []


def test_several_outputs_commit_together_or_not_at_all(tmp_path: Path) -> None:
    from nbcli.atomic import write_all_atomic

    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    a.write_bytes(b"old a")
    with pytest.raises(OutputError, match="a.bin is not a directory"):
        write_all_atomic({a: b"new a", a / "b.bin": b"new b"})
    assert a.read_bytes() == b"old a" and sorted(os.listdir(tmp_path)) == ["a.bin"]
    write_all_atomic({a: b"new a", b: b"new b"})
    assert a.read_bytes() == b"new a" and b.read_bytes() == b"new b"
    assert sorted(os.listdir(tmp_path)) == ["a.bin", "b.bin"]  # journal and temporaries gone


def test_stale_temporaries_of_dead_processes_are_removed_and_reported(tmp_path: Path) -> None:
    from nbcli.atomic import recover_directory, take_notes

    dead, alive = _temp_of("out.bin", _dead_pid()), _temp_of("out.bin", os.getppid())
    foreign = ".out.bin.12-zzzz1234.nbtmp"  # not nb's pattern (host tag is hex): left alone
    for name in (dead, alive, foreign):
        (tmp_path / name).write_bytes(b"partial")
    take_notes()
    notes = recover_directory(tmp_path)
    assert sorted(os.listdir(tmp_path)) == sorted([alive, foreign])
    assert len(notes) == 1 and dead in notes[0] and take_notes() == notes


def test_an_interrupted_commit_is_completed_by_the_next_run(tmp_path: Path) -> None:
    import json

    from nbcli.atomic import recover_directory
    from nbcli.atomic.temporaries import host_tag

    pid = _dead_pid()
    (tmp_path / "a.bin").write_bytes(b"new a")  # renamed before the crash
    (tmp_path / "b.bin").write_bytes(b"old b")
    tmp_b = _temp_of("b.bin", pid)
    (tmp_path / tmp_b).write_bytes(b"new b")
    journal = tmp_path / f".nb-commit.{pid}-{host_tag()}cd34.json"
    journal.write_text(json.dumps({"nb_commit": 1, "renames": [[_temp_of("a.bin", pid), "a.bin"], [tmp_b, "b.bin"]]}))
    notes = recover_directory(tmp_path)
    assert (tmp_path / "b.bin").read_bytes() == b"new b" and (tmp_path / "a.bin").read_bytes() == b"new a"
    assert sorted(os.listdir(tmp_path)) == ["a.bin", "b.bin"]
    assert "completed an interrupted commit of 2 file(s) (1 renamed now)" in notes[0]


@pytest.mark.parametrize("renames", [[["../x", "a"]], [[".a.1-0000abcd.nbtmp", "../a"]], "nonsense", None])
def test_a_journal_that_is_not_nb_s_is_refused(tmp_path: Path, renames: object) -> None:
    import json

    from nbcli.atomic import recover_directory
    from nbcli.atomic.temporaries import host_tag

    journal = tmp_path / f".nb-commit.{_dead_pid()}-{host_tag()}cd34.json"
    journal.write_text(json.dumps({"renames": renames}) if renames is not None else "{[")
    with pytest.raises(OutputError, match="nb commit journal; remove it|not a valid nb commit journal"):
        recover_directory(tmp_path)
    assert journal.exists()


def test_temporaries_with_impossible_pids_are_left_alone(tmp_path: Path) -> None:
    from nbcli.atomic import recover_directory

    names = [_temp_of("x", 0), _temp_of("x", 99_999_999_999_999_999_999)]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    assert recover_directory(tmp_path) == []
    assert sorted(os.listdir(tmp_path)) == sorted(names)


def _commit_point_journal(tmp_path: Path, pid: int, index_bytes: bytes, retire: list[str]) -> Path:
    import hashlib
    import json

    from nbcli.atomic.temporaries import host_tag

    journal = tmp_path / f".nb-commit.{pid}-{host_tag()}cd34.json"
    journal.write_text(json.dumps({
        "nb_commit": 2, "pid": pid, "before": [[_temp_of("s.nb-00000001.safetensors", pid), "s.nb-00000001.safetensors"]],
        "point": [_temp_of("i.index.json", pid), "i.index.json"], "sha256": hashlib.sha256(index_bytes).hexdigest(),
        "after": [[_temp_of("config.json", pid), "config.json"]], "retire": retire}))
    return journal


@pytest.mark.parametrize("committed", [False, True])
def test_a_commit_point_journal_is_rolled_back_or_finished_by_the_index_on_disk(tmp_path: Path,
                                                                                committed: bool) -> None:
    """Before the index rename: the new shard and temporaries go, the old files stay; after it: the
    config is renamed and the replaced shard removed. Files the index names, or that are not
    shards, are never removed, whatever the journal lists."""
    import json

    from nbcli.atomic import recover_directory

    pid = _dead_pid()
    old_index = json.dumps({"weight_map": {"w": "s.safetensors", "v": "keep.safetensors"}}).encode()
    new_index = json.dumps({"weight_map": {"w": "s.nb-00000001.safetensors", "v": "keep.safetensors"}}).encode()
    for name, data in [("s.safetensors", b"old shard"), ("keep.safetensors", b"kept"), ("config.json", b"old"),
                       ("s.nb-00000001.safetensors", b"new shard"), (_temp_of("config.json", pid), b"new")]:
        (tmp_path / name).write_bytes(data)
    if committed:
        (tmp_path / "i.index.json").write_bytes(new_index)
    else:
        (tmp_path / "i.index.json").write_bytes(old_index)
        (tmp_path / _temp_of("i.index.json", pid)).write_bytes(new_index)
    _commit_point_journal(tmp_path, pid, new_index, ["s.safetensors", "keep.safetensors", "config.json"])
    notes = recover_directory(tmp_path)
    listing = sorted(os.listdir(tmp_path))
    if committed:
        assert "completed an interrupted commit" in notes[0]
        assert listing == ["config.json", "i.index.json", "keep.safetensors", "s.nb-00000001.safetensors"]
        assert (tmp_path / "config.json").read_bytes() == b"new"
    else:
        assert "rolled back an interrupted commit" in notes[0]
        assert listing == ["config.json", "i.index.json", "keep.safetensors", "s.safetensors"]
        assert (tmp_path / "i.index.json").read_bytes() == old_index
        assert (tmp_path / "config.json").read_bytes() == b"old"


def test_a_target_that_became_a_directory_fails_before_anything_is_renamed(tmp_path: Path) -> None:
    from nbcli.atomic import OutputSet

    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    a.write_bytes(b"old a")
    with pytest.raises(OutputError, match="b.bin: is a directory"):
        with OutputSet() as outputs:
            outputs.open(a).write(b"new a")
            outputs.open(b).write(b"new b")
            b.mkdir()  # after the checks at open: the commit checks again before the first rename
    assert a.read_bytes() == b"old a" and sorted(os.listdir(tmp_path)) == ["a.bin", "b.bin"]


@pytest.mark.parametrize("deliver", [True, False])
def test_sigint_held_delivers_or_drops_a_ctrl_c_after_the_block(deliver: bool) -> None:
    """A Ctrl-C inside `sigint_held` never interrupts the block; with deliver it is raised (through the
    handler in place before) right after it, without it is dropped; the handler is restored either way."""
    import signal

    from nbcli.atomic import sigint_held

    before = signal.getsignal(signal.SIGINT)
    done = []
    try:
        with sigint_held(deliver=deliver):
            signal.raise_signal(signal.SIGINT)
            done.append("rest of the block")
        done.append("after")
    except KeyboardInterrupt:
        done.append("interrupted")
    assert done == ["rest of the block", "interrupted" if deliver else "after"]
    assert signal.getsignal(signal.SIGINT) is before


def test_ctrl_c_while_a_temporary_is_made_removes_it(tmp_path: Path) -> None:
    """SIGINT the moment the temporary exists (NB_FAULT_INJECT temp-created, before OutputSet has
    recorded it): KeyboardInterrupt once it is recorded, and leaving the block removes it."""
    target = tmp_path / "out.bin"
    code = ("import os, sys\nfrom pathlib import Path\nfrom nbcli.atomic import atomic_write\n"
            "try:\n    with atomic_write(Path(sys.argv[1])) as out:\n        out.write(b'x')\n"
            "except KeyboardInterrupt:\n    print(sorted(os.listdir(Path(sys.argv[1]).parent)))\n")
    env = {**os.environ, "NB_FAULT_INJECT": "temp-created:1:INT"}
    result = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True, text=True, env=env,
                            timeout=300)  # a loaded machine: imports alone have taken over a minute
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_a_staged_folder_appears_whole_or_not_at_all(tmp_path: Path) -> None:
    """staged_folder: the files are written beside the target, which appears with all of them in one
    rename (an empty directory is replaced); an error removes the staging folder; a target that holds
    files is refused in one line, untouched."""
    from nbcli.atomic import staged_folder, write_bytes_atomic
    from nbcli.errors import OutputError

    target = tmp_path / "hf"
    with pytest.raises(RuntimeError):
        with staged_folder(target) as staging:
            write_bytes_atomic(staging / "a.json", b"{}")
            raise RuntimeError("failed after the first file")
    assert os.listdir(tmp_path) == []
    target.mkdir()
    with staged_folder(target) as staging:
        assert staging.parent == tmp_path and staging.name.endswith(".nbtmp")
        for name in ("a.json", "b.json"):
            write_bytes_atomic(staging / name, name.encode())
        assert os.listdir(target) == []  # nothing shows until the rename
    assert sorted(os.listdir(target)) == ["a.json", "b.json"] and os.listdir(tmp_path) == ["hf"]
    with pytest.raises(OutputError, match="not an empty directory"):
        with staged_folder(target):
            pass
    assert sorted(os.listdir(target)) == ["a.json", "b.json"] and os.listdir(tmp_path) == ["hf"]


def test_staged_folders_of_dead_processes_are_removed_and_old_leftovers_recovered(tmp_path: Path) -> None:
    """What a killed nb export or in-place swap leaves: its staged folder (removed by the next run there,
    with a note; sub-folders too, as a swapped-out model folder may hold them, and links removed, never
    followed), and from nb before staged folders, a target holding only a dead process's temporaries
    (removed: the folder is then empty and usable)."""
    from nbcli.atomic import staged_folder, take_notes

    pid = _dead_pid()
    staged = tmp_path / _temp_of("hf", pid)
    staged.mkdir()
    (staged / "model.safetensors").write_bytes(b"partial")
    (staged / _temp_of("config.json", pid)).write_bytes(b"{")
    odd = tmp_path / _temp_of("other", pid)
    (odd / "sub").mkdir(parents=True)
    outside = tmp_path / "keep"
    outside.mkdir()
    (outside / "weights").write_bytes(b"w")
    (odd / "sub" / "link").symlink_to(outside)
    (odd / "sub" / "file-link").symlink_to(outside / "weights")
    alive = tmp_path / _temp_of("mine", os.getppid())
    alive.mkdir()
    target = tmp_path / "hf"
    target.mkdir()
    (target / _temp_of("model.safetensors", pid)).write_bytes(b"partial")
    take_notes()
    with staged_folder(target) as staging:
        (staging / "x").write_bytes(b"x")
    notes = take_notes()
    assert sorted(os.listdir(tmp_path)) == sorted(["hf", "keep", alive.name])
    assert os.listdir(target) == ["x"] and (outside / "weights").read_bytes() == b"w"
    assert any("stale temporary folder" in note and staged.name in note for note in notes), notes
    assert any("stale temporary file" in note and str(target) in note for note in notes), notes


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("old config")
    (folder / "weights").write_bytes(b"old weights")
    return folder


def test_a_swapped_folder_commits_whole_or_not_at_all(tmp_path: Path) -> None:
    """swapped_folder: the new files appear together (the folder's inode changes in one step, the
    untouched file keeps its inode); an exception in the block leaves the folder as it was; nothing
    of nb's stays beside it."""
    from nbcli.atomic import OutputSet, swapped_folder

    folder = _folder(tmp_path)
    inode, weights = folder.stat().st_ino, (folder / "weights").stat().st_ino
    with pytest.raises(RuntimeError):
        with swapped_folder(folder) as copy:
            assert copy is not None and copy.parent == tmp_path
            with OutputSet() as outputs:
                outputs.open(copy / "config.json").write(b"new config")
            raise RuntimeError("the write failed")
    assert folder.stat().st_ino == inode and (folder / "config.json").read_text() == "old config"
    assert os.listdir(tmp_path) == ["model"]
    with swapped_folder(folder) as copy:
        assert copy is not None
        with OutputSet() as outputs:
            outputs.open(copy / "config.json").write(b"new config")
        assert (folder / "config.json").read_text() == "old config"  # not before the swap
    assert folder.stat().st_ino != inode and (folder / "config.json").read_text() == "new config"
    assert (folder / "weights").stat().st_ino == weights
    assert os.listdir(tmp_path) == ["model"]


@pytest.mark.parametrize("why", ["no exchange", "working folder", "a fifo"])
def test_a_folder_that_cannot_be_swapped_yields_none_and_leaves_nothing(tmp_path: Path, monkeypatch, why: str) -> None:  # noqa: ANN001
    """Where the system cannot exchange two folders, inside the process's working folder, or with an
    entry that is not a file, link or folder, swapped_folder yields None (the caller commits file by
    file) and leaves nothing beside the folder."""
    import nbcli.atomic.swap as swap
    from nbcli.atomic import swapped_folder

    folder = _folder(tmp_path)
    if why == "no exchange":
        def refuse(first: Path, second: Path) -> None:
            raise OSError(22, "Invalid argument", str(first))
        monkeypatch.setattr(swap, "exchange", refuse)
    elif why == "working folder":
        (folder / "sub").mkdir()
        monkeypatch.chdir(folder / "sub")
    else:
        os.mkfifo(folder / "pipe")
    with swapped_folder(folder) as copy:
        assert copy is None
    assert sorted(os.listdir(tmp_path)) == ["model"]


def test_an_in_place_patch_without_a_swap_commits_file_by_file(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """The fallback: where no exchange is possible, an in-place patch of a model folder gives the same
    folder as the swap (the journal's per-file commit)."""
    import torch
    from safetensors.torch import load_file, save_file

    import nbcli
    import nbcli.atomic.swap as swap

    results = []
    for allowed in (True, False):
        folder = tmp_path / f"model-{allowed}"
        folder.mkdir()
        torch.manual_seed(0)
        save_file({"model.embed_tokens.weight": torch.randn(12, 4), "lm_head.weight": torch.randn(12, 4),
                   "model.norm.weight": torch.ones(4)}, folder / "model.safetensors")
        (folder / "config.json").write_text('{"model_type": "llama", "vocab_size": 12, "hidden_size": 4}')
        if not allowed:
            monkeypatch.setattr(swap, "exchange", lambda first, second: (_ for _ in ()).throw(OSError(38, "no")))
        inode = folder.stat().st_ino
        nbcli.patch(folder, in_place=True, shuffle=True, seed=3, hash_inputs=False)
        assert (folder.stat().st_ino != inode) == allowed  # swapped in, or rewritten file by file
        results.append(load_file(folder / "model.safetensors"))
        assert sorted(os.listdir(folder)) == ["config.json", "model.safetensors"]
    assert results[0].keys() == results[1].keys()
    assert all(torch.equal(results[0][k], results[1][k]) for k in results[0])
