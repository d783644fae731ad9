"""nbcli.outputs: the output-versus-inputs guard compares files by identity, not by name."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nbcli.errors import OutputError
from nbcli.outputs import check_outputs, device_inode, guard_outputs, inputs_inside


@pytest.fixture()
def data(tmp_path: Path) -> Path:
    path = tmp_path / "data.txt"
    path.write_text("x\n")
    return path


@pytest.mark.parametrize("alias", ["same", "dot", "hardlink", "symlink", "symlink-chain"])
def test_output_aliasing_an_input_is_refused(tmp_path: Path, data: Path, alias: str) -> None:
    out = {"same": data, "dot": tmp_path / "." / "data.txt", "hardlink": tmp_path / "hard.txt",
           "symlink": tmp_path / "soft.txt", "symlink-chain": tmp_path / "soft2.txt"}[alias]
    if alias == "hardlink":
        os.link(data, out)
    elif alias == "symlink":
        out.symlink_to(data)
    elif alias == "symlink-chain":
        (tmp_path / "soft.txt").symlink_to(data)
        out.symlink_to(tmp_path / "soft.txt")
    with pytest.raises(OutputError) as err:
        check_outputs([tmp_path / "other.out", out], [tmp_path / "missing.txt", data])
    message = str(err.value)
    assert message.startswith(f"{out}: output is the same file as the input")
    assert "\n" not in message
    if alias != "same":
        assert str(data) in message


def test_distinct_files_and_missing_outputs_pass(tmp_path: Path, data: Path) -> None:
    other = tmp_path / "other.txt"
    other.write_text("x\n")  # same content, another file
    check_outputs([other, tmp_path / "new.out", None], [data, None, tmp_path / "absent"])


def test_two_outputs_that_are_one_file(tmp_path: Path, data: Path) -> None:
    with pytest.raises(OutputError, match="same file as the output"):
        check_outputs([tmp_path / "a.out", tmp_path / "." / "a.out"], [data])  # neither exists yet
    (tmp_path / "b.out").write_text("old")
    os.link(tmp_path / "b.out", tmp_path / "c.out")
    with pytest.raises(OutputError, match="same file as the output"):
        check_outputs([tmp_path / "b.out", tmp_path / "c.out"], [data])


def test_replaceable_inputs_are_not_compared(tmp_path: Path, data: Path) -> None:
    check_outputs([data], [data], replaceable=[data])
    counts = tmp_path / "counts"
    counts.write_text("c")
    with pytest.raises(OutputError, match="counts"):
        check_outputs([data, counts], [data, counts], replaceable=[data])


def test_redirected_stdin_counts_as_an_input(tmp_path: Path, data: Path) -> None:
    saved = os.dup(0)
    try:
        with open(data, "rb") as handle:
            os.dup2(handle.fileno(), 0)
        with pytest.raises(OutputError, match="standard input"):
            check_outputs([data], ["-"])
    finally:
        os.dup2(saved, 0)
        os.close(saved)


def test_inputs_inside_a_directory(tmp_path: Path, data: Path) -> None:
    run = tmp_path / "run"
    (run / "sub").mkdir(parents=True)
    inner = run / "sub" / "c.txt"
    inner.write_text("y")
    assert inputs_inside(run, [data, inner]) == inner
    assert inputs_inside(run, [data, "-"]) is None
    assert inputs_inside(tmp_path / "absent", [inner]) is None
    assert device_inode(tmp_path / "absent") is None


def test_guard_outputs_checks_identity_folder_and_directory(tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("x")
    guard_outputs([tmp_path / "new.txt", None], [src])
    with pytest.raises(OutputError, match="same file as the input"):
        guard_outputs([tmp_path / "." / "in.txt"], [src])
    guard_outputs([tmp_path / "missing" / "out.txt"], [src])  # missing folders: made when it is written
    with pytest.raises(OutputError, match="in.txt is not a directory"):
        guard_outputs([src / "sub" / "out.txt"], [])
    with pytest.raises(OutputError, match="--plot .*exists and is not a directory"):
        guard_outputs([src / "a.png"], [], folder=src, option="--plot")
    guard_outputs([tmp_path / "figs" / "a.png"], [src], folder=tmp_path / "figs")  # made later, parent exists
    guard_outputs([tmp_path / "a" / "b" / "x.png"], [], folder=tmp_path / "a" / "b")  # made later, parents too
    assert not (tmp_path / "figs").exists() and not (tmp_path / "a").exists() and not (tmp_path / "missing").exists()
    with pytest.raises(OutputError, match="output -: standard output takes text"):
        guard_outputs(["-"], [src])
    guard_outputs(["-"], [src], stdout=True)
    assert not (tmp_path / "-").exists()
