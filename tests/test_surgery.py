"""Surgery functions against independent numpy computations on random inputs of every float dtype."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nbcli import surgery
from nbcli.checkpoint import open_checkpoint, resolve_roles
from nbcli.counts import UnigramCounts, write_counts
from nbcli.errors import CheckpointError, ConfigError, CountsError, Interrupted
from tests.checkpoint.builders import gpt2_tensors, nb_tensors, save, save_sharded

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
# relative tolerance of one rounding to each dtype, with headroom for the fp32 compute
RTOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float64: 1e-10}
FAST = settings(max_examples=25, deadline=None)


def matrix_from(seed: int, rows: int, cols: int, dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.normal(0.3, scale, size=(rows, cols))).to(dtype)


def np64(x: torch.Tensor) -> np.ndarray:
    return x.to(torch.float64).numpy()


def assert_close_in(dtype: torch.dtype, got: torch.Tensor, expected: np.ndarray) -> None:
    """`got` (in `dtype`) equals numpy's float64 answer rounded to `dtype`, up to one rounding."""
    assert got.dtype == dtype
    reference = torch.from_numpy(expected).to(dtype).to(torch.float64).numpy()
    scale = max(np.abs(expected).max(), 1e-30)
    np.testing.assert_allclose(np64(got), reference, rtol=RTOL[dtype], atol=RTOL[dtype] * scale)


shapes = st.tuples(st.integers(2, 30), st.integers(2, 12))


@FAST
@given(st.lists(st.integers(0, 1000), min_size=1, max_size=50), st.integers(0, 20),
       st.sampled_from([0.5, 1.0, 2.0]))
def test_unigram_log_prior_matches_hand_formula(counts: list[int], pad: int, k: float) -> None:
    vocab = len(counts) + pad
    got = surgery.unigram_log_prior(np.array(counts), vocab, k)
    c = np.array(counts + [0] * pad, dtype=np.float64)
    expected = np.log((c + k) / (c.sum() + k * vocab))
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6, atol=1e-6)
    assert got.dtype == torch.float32 and got.shape == (vocab,)
    if pad:
        floor = math.log(k / (sum(counts) + k * vocab))
        np.testing.assert_allclose(got.numpy()[len(counts):], floor, rtol=1e-6)


def test_unigram_log_prior_rejects_longer_counts() -> None:
    with pytest.raises(CountsError, match="another tokenizer"):
        surgery.unigram_log_prior(np.ones(11, dtype=np.int64), 10)


@FAST
@given(st.integers(0, 10_000), shapes, st.sampled_from(DTYPES), st.sampled_from(["fro", "spectral"]))
def test_rescale_w_matches_numpy_norms(seed: int, shape: tuple[int, int], dtype: torch.dtype, norm: str) -> None:
    w = matrix_from(seed, *shape, dtype)
    bias = matrix_from(seed + 1, 1, shape[0], dtype, scale=5.0)[0]
    got = surgery.rescale_w(w, bias, norm)  # type: ignore[arg-type]
    w64, b64 = np64(w), np64(bias)
    ord_ = "fro" if norm == "fro" else 2
    expected = w64 * (np.linalg.norm(b64) / np.linalg.norm(w64, ord_))
    assert_close_in(dtype, got, expected)
    assert surgery.matrix_norm(w, norm) == pytest.approx(np.linalg.norm(w64, ord_), rel=1e-9)  # type: ignore[arg-type]


@FAST
@given(st.integers(0, 10_000), shapes, st.sampled_from(DTYPES), st.floats(-1, 1), st.floats(0.01, 3))
def test_standardise_matches_paper_002_eq1_and_eq4(seed: int, shape: tuple[int, int], dtype: torch.dtype,
                                                     mean: float, std: float) -> None:
    x = matrix_from(seed, *shape, dtype, scale=4.0)
    x64 = np64(x)
    if x64.std() == 0:
        return
    explicit = surgery.standardise_embeddings(x, mean, std)
    assert_close_in(dtype, explicit, (x64 - x64.mean()) * std / x64.std(ddof=1) + mean)
    xavier = surgery.standardise_embeddings(x)  # eq. 1 with sigma_x = sqrt(2/(N+D))
    sigma = math.sqrt(2 / (shape[0] + shape[1]))
    assert_close_in(dtype, xavier, (x64 - x64.mean()) * sigma / x64.std(ddof=1))


def test_xavier_std_is_the_uniform_xavier_std() -> None:
    n, d = 300, 100
    bound = math.sqrt(6 / (n + d))
    samples = np.random.default_rng(0).uniform(-bound, bound, size=(200, n * d // 200))
    assert surgery.xavier_std(n, d) == pytest.approx(samples.std(), rel=5e-3)


@FAST
@given(st.integers(0, 10_000), shapes, st.sampled_from(DTYPES), st.integers(0, 2**31 - 1))
def test_shuffles_are_seeded_permutations(seed: int, shape: tuple[int, int], dtype: torch.dtype, s: int) -> None:
    x = matrix_from(seed, *shape, dtype)
    rows = surgery.shuffle_embeddings(x, s, "rows")
    assert torch.equal(rows, surgery.shuffle_embeddings(x, s, "rows"))
    assert sorted(map(tuple, np64(rows).tolist())) == sorted(map(tuple, np64(x).tolist()))
    both = surgery.shuffle_embeddings(x, s, "rows-columns")
    assert sorted(np64(both).ravel().tolist()) == sorted(np64(x).ravel().tolist())
    # column permutation keeps each row's multiset: rows-columns rows are permuted rows of x
    assert sorted(tuple(sorted(r)) for r in np64(both).tolist()) == sorted(tuple(sorted(r)) for r in np64(x).tolist())
    elements = surgery.shuffle_embeddings(x, s, "elements")
    assert sorted(np64(elements).ravel().tolist()) == sorted(np64(x).ravel().tolist())
    assert rows.dtype == both.dtype == elements.dtype == dtype


def test_shuffle_seeds_differ_and_mode_checked() -> None:
    x = torch.arange(200.0).reshape(50, 4)
    assert not torch.equal(surgery.shuffle_embeddings(x, 1), surgery.shuffle_embeddings(x, 2))
    with pytest.raises(ConfigError):
        surgery.shuffle_embeddings(x, 1, "columns")  # type: ignore[arg-type]


@FAST
@given(st.integers(0, 10_000), st.integers(1, 40), st.sampled_from(DTYPES), st.floats(-2, 2))
def test_scale_ln_bias(seed: int, d: int, dtype: torch.dtype, lam: float) -> None:
    b = matrix_from(seed, 1, d, dtype)[0]
    assert_close_in(dtype, surgery.scale_ln_bias(b, lam), np64(b) * lam)


@pytest.mark.parametrize("lam", [math.nan, math.inf, -math.inf])
def test_scale_ln_bias_refuses_nonfinite(lam: float) -> None:
    with pytest.raises(ConfigError, match="finite"):
        surgery.scale_ln_bias(torch.ones(3), lam)


@FAST
@given(st.integers(0, 10_000), shapes, st.sampled_from(DTYPES))
def test_remove_direction_matches_numpy(seed: int, shape: tuple[int, int], dtype: torch.dtype) -> None:
    w = matrix_from(seed, *shape, dtype)
    b = matrix_from(seed + 7, 1, shape[1], torch.float64)[0]
    got = surgery.remove_direction(w, b)
    w64, u = np64(w), np64(b) / np.linalg.norm(np64(b))
    expected = w64 - np.outer(w64 @ u, u)
    assert_close_in(dtype, got, expected)
    if dtype in (torch.float32, torch.float64):
        assert np.abs(np64(got) @ u).max() < 1e-4 * max(1.0, np.abs(w64).max())


def test_remove_zero_direction_is_an_error() -> None:
    with pytest.raises(ConfigError, match="norm 0"):
        surgery.remove_direction(torch.ones(3, 2), torch.zeros(2))


def test_inputs_are_not_modified() -> None:
    w = torch.randn(6, 3)
    copy = w.clone()
    surgery.rescale_w(w, torch.ones(6))
    surgery.standardise_embeddings(w)
    surgery.remove_direction(w, torch.ones(3))
    surgery.shuffle_embeddings(w, 0)
    assert torch.equal(w, copy)


@pytest.mark.parametrize(("spec", "expected"), [
    ("xavier", surgery.StandardiseSpec("xavier")),
    ("match:/a/b:c.safetensors:emb.weight", surgery.StandardiseSpec("match", match_file="/a/b:c.safetensors",
                                                                    match_tensor="emb.weight")),
    ("mean=0.1,std=0.02", surgery.StandardiseSpec("explicit", mean=0.1, std=0.02)),
])
def test_parse_standardise(spec: str, expected: surgery.StandardiseSpec) -> None:
    assert surgery.parse_standardise(spec) == expected


@pytest.mark.parametrize("bad", ["gauss", "match:file", "mean=1", "mean=x,std=1", "mean=0,std=-1", "std=nan,mean=0"])
def test_parse_standardise_errors(bad: str) -> None:
    with pytest.raises(ConfigError):
        surgery.parse_standardise(bad)


@pytest.mark.parametrize("dtype", DTYPES)
def test_composed_operations_equal_their_sequence(tmp_path: Path, dtype: torch.dtype) -> None:
    """run_surgery = the pure functions applied one after another in the documented order, in fp32."""
    tensors, meta = nb_tensors(tied=False, dtype=dtype)
    meta["nb.tokenizer_sha256"] = "ab" * 32  # the counts' tokenizer: 37 < 40 rows is then padding
    ckpt = open_checkpoint(save(tmp_path / "m.safetensors", tensors, meta))
    counts = np.random.default_rng(1).integers(0, 100, size=37)
    write_counts(tmp_path / "c.safetensors", UnigramCounts(counts=counts, metadata={"nb.tokenizer_sha256": "ab" * 32}))
    options = surgery.SurgeryOptions(
        output_bias_counts=tmp_path / "c.safetensors", smoothing_k=0.5, rescale_w="spectral",
        standardise=surgery.StandardiseSpec("explicit", mean=0.0, std=0.05), shuffle=True, seed=3,
        scale_ln_bias=0.25, remove_frequency_direction=True)
    new, _ws, warnings = surgery.run_surgery(ckpt, resolve_roles(ckpt), options)
    assert len(warnings) == 1 and "vocabulary padding (the tokenizer hash matched)" in warnings[0]

    work = torch.float64 if dtype == torch.float64 else torch.float32
    bias = surgery.unigram_log_prior(counts, 40, 0.5).to(work)
    w = surgery.rescale_w(tensors["head.weight"].to(work), bias, "spectral")
    emb = surgery.shuffle_embeddings(surgery.standardise_embeddings(tensors["tok_emb.weight"].to(work), 0.0, 0.05), 3)
    ln = surgery.scale_ln_bias(tensors["ln_f.bias"].to(work), 0.25)
    w = surgery.remove_direction(w, tensors["ln_f.bias"].to(work))
    expected = {"head.bias": bias, "head.weight": w, "tok_emb.weight": emb, "ln_f.bias": ln}
    assert set(new) == set(expected)
    for name, value in expected.items():
        assert new[name].dtype == dtype, name
        assert torch.equal(new[name], value.to(dtype)), name


def test_tied_output_side_warns_and_untie_separates(tmp_path: Path) -> None:
    ckpt = open_checkpoint(save(tmp_path / "g.safetensors", gpt2_tensors()))
    roles = resolve_roles(ckpt)
    opts = surgery.SurgeryOptions(remove_frequency_direction=True)
    new, _ws, warnings = surgery.run_surgery(ckpt, roles, opts)
    assert set(new) == {"wte.weight"} and any("tied" in w for w in warnings)
    opts = surgery.SurgeryOptions(remove_frequency_direction=True, untie=True)
    new, ws, warnings = surgery.run_surgery(ckpt, roles, opts)
    assert set(new) == {"lm_head.weight"} and ws.touched["lm_head.weight"].created
    expected = surgery.remove_direction(ckpt.get("wte.weight"), ckpt.get("ln_f.bias"))
    assert torch.allclose(new["lm_head.weight"], expected, atol=1e-6)


def test_gpt2_bias_needs_a_name(tmp_path: Path) -> None:
    ckpt = open_checkpoint(save(tmp_path / "g.safetensors", gpt2_tensors()))
    write_counts(tmp_path / "c.safetensors", UnigramCounts(counts=np.ones(40, dtype=np.int64)))
    opts = surgery.SurgeryOptions(output_bias_counts=tmp_path / "c.safetensors")
    with pytest.raises(CheckpointError, match="--bias-name"):
        surgery.run_surgery(ckpt, resolve_roles(ckpt), opts)
    opts.bias_name = "lm_head.bias"
    new, ws, _ = surgery.run_surgery(ckpt, resolve_roles(ckpt), opts)
    assert ws.touched["lm_head.bias"].created and new["lm_head.bias"].shape == (40,)
    assert torch.allclose(new["lm_head.bias"].double(), torch.full((40,), -math.log(40), dtype=torch.float64))


def test_nonfinite_input_is_refused_unless_allowed(tmp_path: Path) -> None:
    tensors = gpt2_tensors()
    tensors["ln_f.bias"][2] = math.nan
    ckpt = open_checkpoint(save(tmp_path / "g.safetensors", tensors))
    opts = surgery.SurgeryOptions(scale_ln_bias=0.5)
    with pytest.raises(CheckpointError, match="'ln_f.bias' contains NaN"):
        surgery.run_surgery(ckpt, resolve_roles(ckpt), opts)
    opts.allow_nonfinite = True
    new, _, _ = surgery.run_surgery(ckpt, resolve_roles(ckpt), opts)
    assert math.isnan(float(new["ln_f.bias"][2]))


def test_overflow_on_cast_back_is_refused(tmp_path: Path) -> None:
    tensors = {"tok_emb.weight": torch.randn(40, 8).half(), "head.bias": torch.zeros(40).half(),
               "ln_f.bias": torch.ones(8).half()}
    ckpt = open_checkpoint(save(tmp_path / "m.safetensors", tensors, nb_tensors()[1]))
    opts = surgery.SurgeryOptions(scale_ln_bias=1e6)  # 1e6 does not fit in float16
    with pytest.raises(CheckpointError, match="would contain NaN or Inf"):
        surgery.run_surgery(ckpt, resolve_roles(ckpt), opts)


def test_operations_record_order_and_arguments() -> None:
    opts = surgery.SurgeryOptions(output_bias_counts=Path("c.safetensors"), rescale_w="fro", scale_ln_bias=0.5,
                                  shuffle=True, seed=7)
    ops = [op["op"] for op in opts.operations()]
    assert ops == ["set-output-bias", "rescale-w", "shuffle-embeddings", "scale-ln-bias"]
    assert [o for o in surgery.OPERATION_ORDER if o in ops] == ops
    doc = json.loads(surgery.provenance_entry(opts, {"checkpoint:m": "ab" * 32}, previous='{"tool": "x"}'))
    assert doc["operations"][2] == {"op": "shuffle-embeddings", "seed": 7, "mode": "rows"}
    assert doc["previous"] == {"tool": "x"} and doc["inputs_sha256"] == {"checkpoint:m": "ab" * 32}


# ---------------------------------------------------------------------------------------------
# Writing: the overlapped path (copy while the surgery runs) against the sequential one

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
    import nbcli.checkpoint.writer as ckwriter

    tensors, meta = nb_tensors(tied=True)
    monkeypatch.setattr(surgery, "held_tensors", lambda *args: frozenset({"ln_f.bias"}))  # misses head.bias
    calls: list[bool] = []
    real_write_like = ckwriter.write_like

    def counting(*args: object, **kwargs: object) -> list[Path]:
        calls.append(kwargs.get("deferred") is not None)
        return real_write_like(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ckwriter, "write_like", counting)
    write_counts(tmp_path / "c.safetensors", UnigramCounts(counts=np.arange(40)))
    options = surgery.SurgeryOptions(output_bias_counts=tmp_path / "c.safetensors", scale_ln_bias=0.5)
    files = _patch_both_ways(tmp_path, monkeypatch, options, False, tensors, meta)
    assert files[0] == files[1]
    assert calls == [False, True, False]  # sequential; then overlapped, abandoned, rewritten
    assert sorted(p.name for p in (tmp_path / "overlap-True").iterdir()) == ["o.safetensors"]


def test_held_tensors_none_when_the_layout_changes(tmp_path: Path) -> None:
    ckpt = open_checkpoint(save(tmp_path / "g.safetensors", gpt2_tensors()))
    roles = resolve_roles(ckpt)
    counts = tmp_path / "c.safetensors"
    assert surgery.held_tensors(ckpt, roles, surgery.SurgeryOptions(scale_ln_bias=0.5)) == {"ln_f.bias"}
    assert surgery.held_tensors(ckpt, roles, surgery.SurgeryOptions(untie=True, scale_ln_bias=0.5)) is None
    created = surgery.SurgeryOptions(output_bias_counts=counts, bias_name="lm_head.bias")
    assert surgery.held_tensors(ckpt, roles, created) is None
    existing = surgery.SurgeryOptions(output_bias_counts=counts, bias_name="ln_f.bias")
    assert surgery.held_tensors(ckpt, roles, existing) == {"ln_f.bias"}


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


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 3 * 4096 + 5])
def test_sha256_until_is_sha256(tmp_path: Path, size: int) -> None:
    """Block by block through mmaps (block 64 is rounded up to the 4 KiB mmap granularity)."""
    import hashlib
    import threading

    data = np.random.default_rng(size).integers(0, 256, size=size, dtype=np.uint8).tobytes()
    (tmp_path / "f").write_bytes(data)
    assert surgery._sha256_until(tmp_path / "f", threading.Event(), block=64) == hashlib.sha256(data).hexdigest()
    stop = threading.Event()
    stop.set()
    if size:
        with pytest.raises(Interrupted):
            surgery._sha256_until(tmp_path / "f", stop, block=64)
