"""The one safetensors writer: byte-for-byte copies, held tensors, late metadata, shards, atomicity."""

from __future__ import annotations

import errno
import hashlib
import json
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from nbcli.checkpoint import writer
from nbcli.checkpoint import open_checkpoint, read_header, save_tensors, write_like, write_safetensors
from nbcli.checkpoint.format import DTYPE_SIZES
from nbcli.errors import CheckpointError, ConfigError, OutputError
from tests.checkpoint.builders import gpt2_tensors, save, save_sharded


def byte_digest(path: Path, name: str) -> str:
    """sha256 of one tensor's bytes, located with the safetensors library's own header parse."""
    with open(path, "rb") as handle:
        n = int.from_bytes(handle.read(8), "little")
        header = json.loads(handle.read(n))
        begin, end = header[name]["data_offsets"]
        handle.seek(8 + n + begin)
        return hashlib.sha256(handle.read(end - begin)).hexdigest()


def test_write_like_copies_untouched_bytes_and_keeps_metadata(tmp_path: Path) -> None:
    tensors = gpt2_tensors(dtype=torch.bfloat16)
    src = save(tmp_path / "in.safetensors", tensors, {"format": "pt", "keep": "me"})
    ckpt = open_checkpoint(src)
    new_bias = torch.full((8,), 0.25, dtype=torch.bfloat16)
    created = torch.arange(40, dtype=torch.float32)
    out = tmp_path / "out.safetensors"
    written = write_like(ckpt, out, replace={"ln_f.bias": new_bias}, add={"lm_head.bias": (created, "wte.weight")},
                         update_metadata={"extra": "1"})
    assert written == [out]
    loaded = load_file(str(out))
    assert torch.equal(loaded["ln_f.bias"], new_bias) and torch.equal(loaded["lm_head.bias"], created)
    for name in tensors:
        if name != "ln_f.bias":
            assert byte_digest(out, name) == byte_digest(src, name), name
    assert read_header(out).metadata == {"format": "pt", "keep": "me", "extra": "1"}
    names = open_checkpoint(out).names()
    assert names.index("lm_head.bias") == names.index("wte.weight") + 1


def test_late_metadata_fills_reserved_header(tmp_path: Path) -> None:
    src = save(tmp_path / "in.safetensors", gpt2_tensors())
    out = tmp_path / "out.safetensors"
    calls = []

    def late() -> dict[str, str]:
        calls.append(1)
        return {"nb.provenance": "x" * 300}

    write_like(open_checkpoint(src), out, update_metadata={"nb.provenance": "pending"}, late_metadata=late,
               late_reserve=512)
    assert calls == [1]
    from safetensors import safe_open
    with safe_open(str(out), "pt") as handle:  # the reference reader accepts the padded header
        assert handle.metadata()["nb.provenance"] == "x" * 300
    assert torch.equal(load_file(str(out))["wte.weight"], load_file(str(src))["wte.weight"])


def test_late_metadata_too_large_is_an_error_and_no_output(tmp_path: Path) -> None:
    src = save(tmp_path / "in.safetensors", gpt2_tensors())
    with pytest.raises(OutputError, match="more header bytes"):
        write_like(open_checkpoint(src), tmp_path / "o.safetensors", late_metadata=lambda: {"k": "y" * 5000},
                   late_reserve=64)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.safetensors"]


def test_failure_mid_write_leaves_nothing_and_input_intact(tmp_path: Path) -> None:
    src = save(tmp_path / "m.safetensors", gpt2_tensors())
    before = src.read_bytes()

    def explode(_n: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_like(open_checkpoint(src), src, replace={"ln_f.bias": torch.zeros(8)}, in_place=True, progress=explode)
    assert src.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["m.safetensors"]


@pytest.mark.parametrize("unsupported", [("copy_file_range",), ("copy_file_range", "sendfile")])
def test_copy_fallbacks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unsupported: tuple[str, ...]) -> None:
    def refuse(*_a: object, **_k: object) -> int:
        raise OSError(errno.EXDEV, "cross-device")

    for name in unsupported:
        monkeypatch.setattr(os, name, refuse)
    src = save(tmp_path / "in.safetensors", gpt2_tensors())
    out = tmp_path / "out.safetensors"
    write_like(open_checkpoint(src), out)
    assert out.read_bytes() == src.read_bytes()


def test_full_disk_during_copy_is_output_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(*_a: object, **_k: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "copy_file_range", full)
    src = save(tmp_path / "in.safetensors", gpt2_tensors())
    with pytest.raises(OutputError, match="no space left"):
        write_like(open_checkpoint(src), tmp_path / "out.safetensors")
    assert [p.name for p in tmp_path.iterdir()] == ["in.safetensors"]


def test_sharded_roundtrip_same_layout_rewritten_index(tmp_path: Path) -> None:
    tensors = gpt2_tensors(dtype=torch.float16)
    src = save_sharded(tmp_path / "in", tensors)
    for opener in (src, src / "model.safetensors.index.json"):
        ckpt = open_checkpoint(opener)
        assert ckpt.sharded and len(ckpt.files) == 3 and sorted(ckpt.names()) == sorted(tensors)
    ckpt = open_checkpoint(src)
    anchor_shard = ckpt.shard_of("wte.weight").name
    written = write_like(ckpt, tmp_path / "out", replace={"ln_f.bias": torch.ones(8, dtype=torch.float16)},
                         add={"lm_head.bias": (torch.zeros(40), "wte.weight")})
    assert sorted(p.name for p in written) == sorted([p.name for p in ckpt.files] + ["model.safetensors.index.json"])
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    assert index["weight_map"]["lm_head.bias"] == anchor_shard
    out = open_checkpoint(tmp_path / "out")
    assert index["metadata"]["total_size"] == out.total_bytes
    for name in tensors:
        assert out.shard_of(name).name == ckpt.shard_of(name).name
        if name != "ln_f.bias":
            assert byte_digest(out.shard_of(name), name) == byte_digest(ckpt.shard_of(name), name)
    assert torch.equal(out.get("ln_f.bias"), torch.ones(8, dtype=torch.float16))


def test_sharded_failure_removes_created_directory(tmp_path: Path) -> None:
    src = save_sharded(tmp_path / "in", gpt2_tensors())
    calls = []

    def explode(n: int) -> None:
        calls.append(n)
        if len(calls) > 1:  # after the first shard (each shard's tensors are one copied range)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        write_like(open_checkpoint(src), tmp_path / "out", progress=explode)
    assert not (tmp_path / "out").exists()


def test_save_tensors_roundtrip(tmp_path: Path) -> None:
    tensors = {"a": torch.randn(3, 4).bfloat16(), "b": torch.arange(5), "c": torch.randn(2).half().t()}
    path = tmp_path / "s.safetensors"
    save_tensors(path, tensors, {"nb.format": "nb-model/1"})
    loaded = load_file(str(path))
    assert all(torch.equal(loaded[k], v) for k, v in tensors.items())
    assert read_header(path).metadata == {"nb.format": "nb-model/1"}
    with pytest.raises(ConfigError):
        write_safetensors(tmp_path / "x.safetensors", [("a", torch.zeros(1)), ("a", torch.zeros(1))])
    save_tensors(tmp_path / "missing" / "x.safetensors", tensors)  # one output rule: missing folders are made
    assert set(load_file(str(tmp_path / "missing" / "x.safetensors"))) == set(tensors)
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError):
        save_tensors(tmp_path / "file" / "x.safetensors", tensors)


def test_save_tensors_output_readable_by_reference_writer_format(tmp_path: Path) -> None:
    """Our writer and safetensors' writer produce files each other reads identically."""
    tensors = gpt2_tensors(dtype=torch.bfloat16)
    ours, theirs = tmp_path / "ours.safetensors", tmp_path / "theirs.safetensors"
    save_tensors(ours, tensors)
    save_file(tensors, str(theirs))
    a, b = load_file(str(ours)), open_checkpoint(theirs)
    assert all(torch.equal(a[n], b.get(n)) for n in tensors)
    assert DTYPE_SIZES["BF16"] == 2


# ---------------------------------------------------------------------------------------------
# Deferred tensors: held back from the copy, written last into the byte ranges kept for them

def _deferred_values(source: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {"ln_f.bias": source["ln_f.bias"] * 3, "h.0.ln_1.bias": -source["h.0.ln_1.bias"]}


@pytest.mark.parametrize("sharded", [False, True])
def test_deferred_output_is_byte_identical_to_replace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      sharded: bool) -> None:
    monkeypatch.setattr(writer, "_COPY_BLOCK", 64)  # many blocks per tensor: offsets must still line up
    tensors = gpt2_tensors(dtype=torch.bfloat16)
    src = save_sharded(tmp_path / "in", tensors) if sharded else save(tmp_path / "in.safetensors", tensors)
    new = _deferred_values(tensors)
    late = {"late_metadata": lambda: {"nb.provenance": "p" * 200}, "late_reserve": 512,
            "update_metadata": {"nb.provenance": "pending"}}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    target = "out" if sharded else "out.safetensors"
    ckpt = open_checkpoint(src)
    expected = write_like(ckpt, tmp_path / "a" / target, replace=new, **late)
    copied: list[int] = []
    non_held = sum(ckpt.info(n).nbytes for n in ckpt.names() if n not in new and n != "wte.weight")

    def compute() -> dict[str, torch.Tensor]:
        assert sum(copied) == non_held  # every other tensor is already in place
        return new

    deferred = writer.Deferred(frozenset({*new, "wte.weight"}), compute)  # wte.weight held, not recomputed
    got = write_like(ckpt, tmp_path / "b" / target, deferred=deferred, progress=copied.append, **late)
    assert sum(copied) == ckpt.total_bytes
    assert [p.name for p in got] == [p.name for p in expected]
    for a, b in zip(expected, got):
        assert a.read_bytes() == b.read_bytes(), b.name
    for name, value in new.items():
        assert torch.equal(open_checkpoint(got[0].parent if sharded else got[0]).get(name), value)


def _only(directory: Path, *names: str) -> None:
    assert sorted(p.name for p in directory.iterdir()) == sorted(names)


def test_deferred_poll_error_abandons_the_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer, "_COPY_BLOCK", 64)
    src = save(tmp_path / "in.safetensors", gpt2_tensors())
    calls: list[int] = []

    def poll() -> None:
        calls.append(1)
        if len(calls) == 5:
            raise CheckpointError("surgery failed")

    def compute() -> dict[str, torch.Tensor]:
        raise AssertionError("compute must not run after poll failed")

    with pytest.raises(CheckpointError, match="surgery failed"):
        write_like(open_checkpoint(src), tmp_path / "out.safetensors",
                   deferred=writer.Deferred(frozenset({"ln_f.bias"}), compute, poll))
    _only(tmp_path, "in.safetensors")


def test_deferred_compute_error_leaves_no_output(tmp_path: Path) -> None:
    src = save_sharded(tmp_path / "in", gpt2_tensors())

    def compute() -> dict[str, torch.Tensor]:
        raise CheckpointError("tensor 'ln_f.bias' contains NaN")

    with pytest.raises(CheckpointError, match="NaN"):
        write_like(open_checkpoint(src), tmp_path / "out", deferred=writer.Deferred(frozenset({"ln_f.bias"}), compute))
    _only(tmp_path, "in")


@pytest.mark.parametrize("value", [torch.zeros(9), torch.zeros(8, dtype=torch.float16)])
def test_deferred_value_must_fit_its_range(tmp_path: Path, value: torch.Tensor) -> None:
    src = save(tmp_path / "in.safetensors", gpt2_tensors())
    with pytest.raises(ConfigError, match="reserved bytes hold F32"):
        write_like(open_checkpoint(src), tmp_path / "out.safetensors",
                   deferred=writer.Deferred(frozenset({"ln_f.bias"}), lambda: {"ln_f.bias": value}))
    with pytest.raises(ConfigError, match="not held back"):
        write_like(open_checkpoint(src), tmp_path / "out.safetensors",
                   deferred=writer.Deferred(frozenset({"ln_f.bias"}), lambda: {"wte.weight": torch.zeros(40, 8)}))
    with pytest.raises(ConfigError, match="both replaced and deferred"):
        write_like(open_checkpoint(src), tmp_path / "out.safetensors", replace={"ln_f.bias": torch.zeros(8)},
                   deferred=writer.Deferred(frozenset({"ln_f.bias"}), dict))
    _only(tmp_path, "in.safetensors")


def test_copies_start_writeback_of_what_they_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer, "_COPY_BLOCK", 64)
    ranges: list[tuple[int, int]] = []
    monkeypatch.setattr(writer, "start_writeback", lambda fd, offset, n: ranges.append((offset, n)))
    src = save(tmp_path / "in.safetensors", gpt2_tensors())
    out = tmp_path / "out.safetensors"
    write_like(open_checkpoint(src), out, replace={"ln_f.bias": torch.zeros(8)})
    covered = bytearray(out.stat().st_size)
    for offset, n in ranges:
        covered[offset:offset + n] = b"\x01" * n
    copied = open_checkpoint(out)
    for name in copied.names():
        info = copied.info(name)
        expected = b"\x00" if name == "ln_f.bias" else b"\x01"  # written from memory, not copied
        assert covered[info.start:info.end] == expected * info.nbytes, name


def test_adjacent_source_tensors_are_copied_as_one_range(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One copy per run of back-to-back untouched tensors (not one per tensor), same bytes."""
    sizes: list[int] = []
    monkeypatch.setattr(writer, "start_writeback", lambda fd, offset, n: sizes.append(n))
    tensors = gpt2_tensors()
    src = save(tmp_path / "in.safetensors", tensors)
    ckpt = open_checkpoint(src)
    names = ckpt.names()
    middle = names[len(names) // 2]
    out = tmp_path / "out.safetensors"
    write_like(ckpt, out, replace={middle: torch.zeros_like(tensors[middle])})
    before = sum(ckpt.info(n).nbytes for n in names[:len(names) // 2])
    after = sum(ckpt.info(n).nbytes for n in names[len(names) // 2 + 1:])
    assert sizes == [before, after]
    for name in names:
        if name != middle:
            assert byte_digest(out, name) == byte_digest(src, name), name
