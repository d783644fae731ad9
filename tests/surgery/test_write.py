"""The streamed write of a surgery: the overlapped path (copy while the surgery runs) against the
sequential one, failures that leave no output."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from nbcli import surgery
from nbcli.checkpoint import open_checkpoint, resolve_roles
from nbcli.counts import UnigramCounts, write_counts
from nbcli.errors import CheckpointError, ConfigError
from nbcli.surgery import write
from tests.checkpoint.builders import gpt2_tensors, nb_tensors, save, save_sharded


ALL_OPS = dict(smoothing_k=0.5, rescale_w="fro", standardise=surgery.StandardiseSpec("xavier"), shuffle=True,
               seed=3, scale_ln_bias=0.25, remove_frequency_direction=True)


def _patch_both_ways(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: surgery.SurgeryOptions,
                     sharded: bool, tensors: dict[str, torch.Tensor], meta: dict[str, str]) -> list[bytes]:
    """Outputs of apply_surgery with overlap=False and overlap=True, same clock: [sequential..., overlapped...]."""
    import nbcli.provenance

    monkeypatch.setattr(nbcli.provenance, "utc_now", lambda: "2026-01-01T00:00:00+00:00")
    src = save_sharded(tmp_path / "in", tensors, metadata=meta) if sharded else save(tmp_path / "in.safetensors", tensors, meta)
    outputs = []
    for overlap in (False, True):
        ckpt = open_checkpoint(src)
        base = tmp_path / f"overlap-{overlap}"
        base.mkdir()
        result = surgery.apply_surgery(ckpt, resolve_roles(ckpt), options, base / ("out" if sharded else "o.safetensors"),
                                       overlap=overlap)
        outputs.append([Path(p).name for p in result.outputs])
        outputs.append([Path(p).read_bytes() for p in result.outputs])
    assert outputs[0] == outputs[2]
    return outputs[1] + outputs[3]


@pytest.mark.parametrize("sharded", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_overlapped_write_is_byte_identical(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sharded: bool,
                                            dtype: torch.dtype) -> None:
    tensors, meta = nb_tensors(tied=False, dtype=dtype)
    write_counts(tmp_path / "c.safetensors", UnigramCounts(counts=np.arange(40)))
    options = surgery.SurgeryOptions(output_bias_counts=tmp_path / "c.safetensors", **ALL_OPS)
    ckpt = open_checkpoint(save(tmp_path / "probe.safetensors", tensors, meta))
    assert surgery.held_tensors(ckpt, resolve_roles(ckpt), options) == {"head.bias", "head.weight", "tok_emb.weight",
                                                                         "ln_f.bias"}
    files = _patch_both_ways(tmp_path, monkeypatch, options, sharded, tensors, meta)
    half = len(files) // 2
    assert files[:half] == files[half:]
    assert json.loads(read_header_bytes(files[half])["__metadata__"]["nb.provenance"])["inputs_sha256"]


def read_header_bytes(raw: bytes) -> dict:
    n = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8:8 + n])


def test_layout_surprise_falls_back_to_sequential_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """If the surgery touches a tensor that was not held back, the copy is discarded and OUT is
    written again from the result: same bytes as the sequential path, no stray temporaries."""
    import nbcli.checkpoint.writer as ckio

    tensors, meta = nb_tensors(tied=True)
    monkeypatch.setattr(write, "held_tensors", lambda *args: frozenset({"ln_f.bias"}))  # misses head.bias
    calls: list[bool] = []
    real_write_like = ckio.write_like

    def counting(*args: object, **kwargs: object) -> list[Path]:
        calls.append(kwargs.get("deferred") is not None)
        return real_write_like(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ckio, "write_like", counting)
    write_counts(tmp_path / "c.safetensors", UnigramCounts(counts=np.arange(40)))
    options = surgery.SurgeryOptions(output_bias_counts=tmp_path / "c.safetensors", scale_ln_bias=0.5)
    files = _patch_both_ways(tmp_path, monkeypatch, options, False, tensors, meta)
    assert files[0] == files[1]
    assert calls == [False, True, False]  # sequential; then overlapped, abandoned, rewritten
    assert sorted(p.name for p in (tmp_path / "overlap-True").iterdir()) == ["o.safetensors"]


@pytest.mark.parametrize("sharded", [False, True])
def test_surgery_error_during_the_copy_leaves_no_output(tmp_path: Path, sharded: bool) -> None:
    tensors = gpt2_tensors()
    tensors["ln_f.bias"][2] = math.nan
    src = save_sharded(tmp_path / "in", tensors) if sharded else save(tmp_path / "in.safetensors", tensors)
    ckpt = open_checkpoint(src)
    out = tmp_path / ("out" if sharded else "out.safetensors")
    with pytest.raises(CheckpointError, match="'ln_f.bias' contains NaN"):
        surgery.apply_surgery(ckpt, resolve_roles(ckpt), surgery.SurgeryOptions(scale_ln_bias=0.5), out)
    assert sorted(p.name for p in tmp_path.iterdir()) == [src.name]


def test_patch_file_from_a_path_writes_and_reports_progress(tmp_path: Path) -> None:
    src = save(tmp_path / "m.safetensors", gpt2_tensors())
    seen: list[tuple[int, int]] = []
    options = surgery.SurgeryOptions(scale_ln_bias=0.5)
    result = surgery.patch_file(src, tmp_path / "o.safetensors", options, mapping={"final_ln_bias": "ln_f.bias"},
                                progress=lambda n, total: seen.append((n, total)))
    assert result.outputs == [str(tmp_path / "o.safetensors")] and not result.dry_run
    out = open_checkpoint(tmp_path / "o.safetensors")
    assert torch.equal(out.get("ln_f.bias"), gpt2_tensors()["ln_f.bias"] * 0.5)
    total = open_checkpoint(src).total_bytes
    assert seen and {t for _, t in seen} == {total}


def test_patch_file_in_place_without_output_and_dry_run(tmp_path: Path) -> None:
    src = save(tmp_path / "m.safetensors", gpt2_tensors())
    before = src.read_bytes()
    options = surgery.SurgeryOptions(scale_ln_bias=0.0)
    dry = surgery.patch_file(src, None, options, dry_run=True)
    assert dry.dry_run and dry.outputs == [] and src.read_bytes() == before
    with pytest.raises(ConfigError, match="--in-place"):
        surgery.patch_file(src, None, options)
    assert src.read_bytes() == before
    surgery.patch_file(src, None, options, in_place=True)
    assert not open_checkpoint(src).get("ln_f.bias").any()
