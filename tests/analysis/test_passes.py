"""nbcli.analysis.passes: a pass on several worker threads gives the statistics of a pass on one
(the same blocks, merged in block order: the same sums up to the last bits of BLAS's own order),
reproducibly; a worker's error reaches the caller; numpy's error state is the caller's in every worker."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest
import torch

from nbcli.analysis import passes
from nbcli.analysis.geometry import ProjectedRows, RowMoments
from nbcli.analysis.kernels import on_device, to_numpy
from nbcli.probes import LogPartition, MeanCosine, Projections

DEVICES = ["cpu", torch.device("cpu")]  # numpy's path, and torch's (an accelerator's code) on the CPU


def matrix(seed: int = 0, v: int = 3000, d: int = 24) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = (rng.normal(size=(v, d)) + rng.normal(size=d)).astype(np.float32)
    w[7] = 0.0  # a zero row: no cosine
    counts = rng.zipf(1.3, size=v).astype(np.float64)
    counts[::11] = 0
    return w, counts / counts.sum()


def statistics(w: np.ndarray, p: np.ndarray, device: object = "cpu") -> list[object]:
    v, d = w.shape
    direction = np.linspace(-1, 1, d)
    root = on_device(np.eye(d) * 0.5, device)
    basis = on_device(np.linalg.qr(np.random.default_rng(1).normal(size=(d, d)))[0], device)
    return [MeanCosine(d), MeanCosine(d, remove=direction, weights=p), Projections(direction, v),
            RowMoments(d, device), RowMoments(d, device, weights=p),
            ProjectedRows((v, d), device, basis=basis, weights=p, direction=direction, partition=True),
            ProjectedRows((v, d), device, basis=basis, centre=on_device(np.full(d, 0.1), device), root=root,
                          weights=p, direction=direction, partition=True)]


def results(stats: list[object]) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    for s in stats:
        if isinstance(s, MeanCosine):
            out += [np.array([s.result()]), s.total]
        elif isinstance(s, Projections):
            out.append(s.values)
        elif isinstance(s, RowMoments):
            m = s.moments()
            out += [to_numpy(m.gram()), to_numpy(m.uniform_mean()), np.array([m.norm_sum, m.weighted_norm_sum])]
            if s.weights is not None:
                out += [to_numpy(m.weighted_covariance())]
        else:
            assert isinstance(s, ProjectedRows)
            out += [*s.log_partition(), np.array([s.mean_cosine(False), s.mean_cosine(True), s.frequency_share(),
                                                   s.norm_sum, s.weighted_norm_sum]), to_numpy(s.weighted_sum)]
            assert s.projections is not None
            out.append(s.projections)
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("workers", [2, 3])
def test_workers_give_the_statistics_of_one_thread_reproducibly(workers: int, device: object) -> None:
    w, p = matrix()
    one, many, again = statistics(w, p, device), statistics(w, p, device), statistics(w, p, device)
    passes.run_pass(w, one, block_rows=97)
    passes.run_pass(w, many, block_rows=97, workers=workers)
    passes.run_pass(w, again, block_rows=97, workers=workers)
    for a, b, c in zip(results(one), results(many), results(again)):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-9)
        np.testing.assert_array_equal(b, c)  # the same thread count: the same bits


def test_numpy_and_torch_give_the_same_statistics() -> None:
    """The CPU's numpy path and the torch path an accelerator runs are one code (the array API): on
    the same blocks they agree to float32 rounding."""
    w, p = matrix(5)
    by_numpy, by_torch = statistics(w, p, "cpu"), statistics(w, p, torch.device("cpu"))
    passes.run_pass(w, by_numpy, block_rows=211)
    passes.run_pass(w, by_torch, block_rows=211)
    for a, b in zip(results(by_numpy), results(by_torch)):
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=1e-6)  # float32 products of O(1) rows


def test_blocks_get_smaller_for_workers_within_bounds() -> None:
    assert passes.block_rows_for(768) == passes.BLOCK_FLOATS // 768
    assert passes.block_rows_for(768, 50_257, 2) == -(-50_257 // 16)  # 8 blocks per worker
    assert passes.block_rows_for(4096, 128_256, 2) == passes.BLOCK_FLOATS // 4096  # already small enough
    assert passes.block_rows_for(768, 2_000, 4) == passes.MIN_BLOCK_FLOATS // 768  # not under MIN_BLOCK_FLOATS


def test_blocks_in_flight_stay_within_the_partial_sums_budget() -> None:
    assert passes.blocks_in_flight(768, 2) == 3  # one ahead of each worker
    assert passes.blocks_in_flight(4096, 64) == 8 == passes.PARTIAL_BYTES // (2 * 4096 * 4096 * 8)  # not 65
    assert passes.blocks_in_flight(65_536, 8) == 2  # at least one computing and one merging


class Failing:
    def update(self, start: int, block: np.ndarray) -> None:
        pass

    def partial(self, start: int, block: np.ndarray) -> None:
        if start >= 500:
            raise ValueError(f"block at {start}")

    def merge(self, start: int, part: object) -> None:
        pass


def test_a_worker_s_error_reaches_the_caller_and_no_worker_outlives_the_pass() -> None:
    w, _ = matrix()
    with pytest.raises(ValueError, match="block at"):
        passes.run_pass(w, [Failing()], block_rows=100, workers=2)
    assert not [t for t in threading.enumerate() if t.name.startswith("nb-pass")]


def test_numpy_s_error_state_is_the_caller_s_in_every_worker() -> None:
    w, _ = matrix()
    w[2500] = np.inf  # a later block: read on a worker thread
    stat = MeanCosine(w.shape[1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(over="ignore", invalid="ignore"):
            passes.run_pass(w, [stat], block_rows=100, workers=2)
    assert not np.isfinite(stat.total).all()


@pytest.mark.parametrize("scale", [3.0, 20.0])  # -c's exponentials as c's reciprocals; spans over 80: exponentials
@pytest.mark.parametrize("device", ["cpu", torch.device("cpu")])
def test_log_partition_merged_block_by_block_equals_one_block(device: object, scale: float) -> None:
    rng = np.random.default_rng(3)
    values = (rng.normal(size=(300, 5)) * scale).astype(np.float32)
    logits = on_device(values, device)
    whole, pieces = LogPartition(5, [None], device), LogPartition(5, [None], device)
    whole.add(0, logits)
    for start in range(0, 300, 64):
        pieces.merge(pieces.partial(start, logits[start:start + 64]))
    np.testing.assert_allclose(pieces.result()[0], whole.result()[0], rtol=1e-6)
    for sign, got in ((1, whole.result()[0][:5]), (-1, whole.result()[0][5:])):  # independent: float64
        x = sign * values.astype(np.float64)
        top = x.max(axis=0)
        np.testing.assert_allclose(got, np.log(np.exp(x - top).sum(axis=0)) + top, rtol=1e-6)


@pytest.mark.parametrize("bad", [np.inf, np.nan, 3e38])
def test_non_finite_rows_in_a_worker_s_block_are_the_report_s_one_error(bad: float,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A non-finite (or float32-overflowing) row read on a worker thread: the report's CheckpointError
    naming the tensor, no warning on the way (numpy's error state reaches the workers)."""
    from nbcli.errors import CheckpointError
    from nbcli.reports.probe_bias import ProbeInputs, build_report

    monkeypatch.setattr(passes, "MIN_BLOCK_FLOATS", 1 << 10)
    w, p = matrix()
    w[2900] = bad
    counts = (p * 1e6).astype(np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(CheckpointError, match="non-finite"):
            build_report(ProbeInputs(counts=counts, output_weight=w, final_ln_bias=np.ones(w.shape[1], np.float32)),
                         device="cpu", threads=2)
