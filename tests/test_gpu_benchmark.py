"""benchmarks/gpu.py (issue 34): its dry run (tiny shapes, CPU) goes through every step's code path
end to end (gpu_steps.py's, with gpu_checks.py's and gpu_baselines.py's pieces), the step budgets fit the
total, and a step past its time limit is recorded as timed out, its process group killed."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_gpu() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nb_bench_gpu", ROOT / "benchmarks" / "gpu.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_dry_run_goes_through_every_step(tmp_path: Path) -> None:
    """Each step in this process (the parent would start one process per step): every figure it
    promises comes back, finite (MFU and peak memory are None off CUDA: no peak, no allocator)."""
    gpu = load_gpu()
    promised = {"train_lm": {"nb_tokens_per_s", "nanogpt_tokens_per_s", "nb_over_nanogpt", "ag_tokens_per_s",
                             "ag_slowdown"},
                "checks": {"loss_rel_diff", "dense_ag_rel_diff"},
                "probe_bias": {"probe_bias_s"}, "generate": {"generate_nb_over_hf_time", "eval_nb_over_plain_time"},
                "train_translation": {"nb_tokens_per_s", "nb_over_torch_transformer"},
                "translate": {"beam5_nb_over_hf_time", "greedy_nb_over_hf_time"},
                "finetune": {"finetune_nb_tokens_per_s", "finetune_nb_over_plain", "finetune_nb_over_plain_all_updates"}}
    # counted on CUDA alone (None on a CPU), but every update they count ran
    syncs = {"syncs_per_update", "syncs_per_mlm_dense_ag_update", "syncs_per_translation_update",
             "syncs_per_classification_update_nb", "syncs_per_classification_update_bert"}
    assert set(promised) == {name for name, _, _ in gpu.STEPS}
    for name in promised:
        work = tmp_path / name
        work.mkdir()
        gpu.Step(work / "result.json", work, dry_run=True).run(name)
        summary = json.loads((work / "result.json").read_text())["summary"]
        assert promised[name] <= set(summary), name
        assert not [key for key in summary if key.endswith("_error")], summary
        for key in promised[name]:
            assert math.isfinite(summary[key]), (name, key, summary[key])
            assert summary[key] >= 0 or key.endswith("slowdown"), (name, key, summary[key])  # a CPU may even speed up
        if name == "checks":   # float32 on CPU: the chunked loss and the blockwise map equal the full ones
            assert summary["loss_rel_diff"] < 1e-5 and summary["dense_ag_rel_diff"] < 1e-5
            assert syncs <= set(summary) and all(summary[key] is None for key in syncs), summary


def test_the_budgets_fit_the_device_time() -> None:
    """The steps' device budgets sum to the total the script allows them (9 minutes less the set-up),
    and benchmarks/gpu.sh's outer limit leaves the set-up time above it."""
    gpu = load_gpu()
    assert sum(budget for _, budget, _ in gpu.STEPS) <= gpu.TOTAL_BUDGET_S == 530
    limit = int(re.search(r"timeout (\d+) python3 benchmarks/gpu.py", (ROOT / "benchmarks" / "gpu.sh").read_text())[1])
    assert gpu.TOTAL_BUDGET_S + 30 <= limit <= 9.5 * 60
    documented = dict(re.findall(r"^\d\. (\w+) \((\d+) s\)", gpu.__doc__, re.M))
    assert documented == {name: str(budget) for name, budget, _ in gpu.STEPS}


def test_a_step_past_its_limit_is_recorded_as_timed_out(tmp_path: Path) -> None:
    gpu = load_gpu()
    with (tmp_path / "log").open("w") as log:
        step = gpu.run_step("train_lm", 0.5, True, tmp_path, log)
    assert step["status"].startswith("timed out")
    assert step["exit"] is None and step["seconds"] < 30
    assert "output_tail" in step          # what it printed before the kill, in the JSON
