#!/usr/bin/env python3
"""Every GPU measurement of issue 34 in one run, each step in its own process under a hard time limit.

    python3 benchmarks/gpu.py --out "$OUT"          # on the device (benchmarks/gpu.sh does this)
    python3 benchmarks/gpu.py --dry-run --out DIR   # tiny shapes on CPU: every step's code path, seconds

Steps, in order of value, each with its budget (seconds; the sum, TOTAL_BUDGET_S = 530, stays under 9
minutes of device time with the set-up). A step runs as `gpu.py --step NAME` in a new process group,
killed with its children when its budget runs out; it writes its figures part by part, so a step cut
short still reports the parts it finished and is recorded as `timed out`, and the next step runs. A
step that fails is recorded with its exit status and the end of its output. Nothing is skipped
silently: a step left out for lack of time says so. The steps are `Step`'s methods in
benchmarks/gpu_steps.py; the checks step's measurements are in gpu_checks.py, the baselines in
gpu_baselines.py.

1. train_lm (230 s): `nb train --preset gpt2-124m` (12 x 768, T = 1024, batch 16, bf16, --compile) on
   a random-word corpus over a 50,257-word WordLevel tokenizer.json (no download), through
   `nbcli.tasks.language_model.train`, the function `nb train lm` calls: tokens/s and MFU of its own log records
   (median over the updates after the first WARM ones: compilation excluded), peak CUDA memory; then,
   in the same process, a nanoGPT-equivalent loop (`NanoGPT`: nanoGPT's model.py layout, vocab
   padded to 50,304, loss inside the compiled forward, fused AdamW, bf16 autocast, grad clip 1, one
   `loss.item()` per step as nanoGPT logs) on the same token stream, same shapes; then nb again with
   attention guidance on half the heads (--ag-fraction 0.5, alpha 1): the AG overhead. Targets (issue
   34): nb >= 1.0x the loop, >= 400K tokens/s on an H100, AG <= 10 % slower.
2. checks (55 s): issue 34's fixes confirmed where only a GPU shows them: the host-device syncs of one
   training update counted with torch.cuda.set_sync_debug_mode (expected: 1, the copy of the update's
   sums; each with its Python file:line), for the LM (CLM with [Prev]/[First] guidance; MLM masking
   with [Delim]/[Period] guidance), translation (encoder [Delim]/[Prev], decoder [Period]) and
   classification (nb's encoder, a transformers BERT), each with its batches built and copied, labels
   and tokens counted; peak memory and time of the loss summed in the forward (chunked output layer)
   against logits + lm_loss at gpt2-124m shapes (bf16 autocast), and their loss values, its time in
   one chunk (no recomputation) and with the output matmul unpadded (vocab_multiple 1) against padded
   to 50,304 rows; the dense AG pattern ([Delim]) blockwise against the explicit [B, G, T, T] map at
   T = 1024: peak memory, values.
3. probe_bias (40 s): benchmarks/probe_bias.py's Llama-size case, 128,256 x 4,096 bf16 generated on the
   device's disk, `nb probe-bias --device cuda` full report (target < 5 s).
4. generate (65 s): a GPT-2-size `GPT2LMHeadModel` built from its config (random weights, no hub),
   `nbcli.generate` (greedy, fixed length) and `nbcli.evaluate` against transformers' `generate` and a
   plain forward-loss loop over the same tokens (target: nb's time <= transformers').
5. train_translation (65 s): benchmarks/train_translation.py --device cuda --preset base (bf16) against
   torch.nn.Transformer in the same loop.
6. translate (45 s): benchmarks/translate.py --device cuda: beam 5 (and greedy) against transformers'
   generate(num_beams=5) on the exported model.
7. finetune (30 s): benchmarks/finetune.py --device cuda --dtype bfloat16: `nb train --task
   classification`'s function fine-tuning a BERT-base-shaped transformers encoder (random weights, built
   there; sentence pairs up to ~125 tokens, batch 32, 40 updates) against a plain PyTorch loop over the
   same model and batches (fused AdamW, bf16 autocast): tokens/s, the median over updates 10-39
   (target: nb >= 1.0x the loop).

Before the steps: the device, driver, CUDA, cuDNN, torch and transformers versions (nvidia-smi and
torch), the Python packages the steps import (a missing one is installed with pip from the package
registry, or from wheels under .whl/ when benchmarks/gpu.sh finds them there), and nb itself installed
with `pip install --no-deps --no-build-isolation -e .` from this tree (the steps also run with
PYTHONPATH set to it, so the tree measured is this one either way).

Results: OUT/gpu.json (every figure, per step: status, seconds, its parts) and OUT/gpu.log (each
step's output); the summary table on stdout. The device returns at most 8 files, so there are two.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
from gpu_steps import Step  # noqa: E402 (benchmarks/ on sys.path first; it imports no torch at module level)

# (name, budget seconds on the device, budget seconds in a dry run)
STEPS: list[tuple[str, int, int]] = [
    ("train_lm", 230, 120), ("checks", 55, 90), ("probe_bias", 40, 60), ("generate", 65, 90),
    ("train_translation", 65, 90), ("translate", 45, 90), ("finetune", 30, 90)]
TOTAL_BUDGET_S = 530          # device time for the steps (9 minutes less the set-up)
NEEDED = ("numpy", "safetensors", "sentencepiece", "tokenizers", "transformers", "typer", "rich", "nltk")


# ---------------------------------------------------------------------------------------------
# The parent: environment, install, the steps under their limits, the table


def sh(cmd: list[str], timeout: float = 60) -> str:
    """A command's stdout (stderr on failure), never raising: what the environment record holds."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return (done.stdout if done.returncode == 0 else f"rc {done.returncode}: {done.stderr}").strip()
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"unavailable: {err}"


def environment() -> dict[str, Any]:
    """Device name, driver / CUDA / cuDNN / torch / transformers versions, CPU and Python."""
    import torch

    env: dict[str, Any] = {
        "python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
        "torch": torch.__version__, "torch_cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
        "nvidia_smi": sh(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                          "--format=csv,noheader"]),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env.update(device=torch.cuda.get_device_name(0), capability=list(torch.cuda.get_device_capability(0)),
                   multiprocessors=props.multi_processor_count, memory_bytes=props.total_memory,
                   cudnn=torch.backends.cudnn.version())
    else:
        env["device"] = "cpu"
    for name in ("transformers", "tokenizers", "triton"):
        try:
            env[name] = __import__(name).__version__
        except Exception as err:  # a version is a record, never a reason to stop
            env[name] = f"unavailable: {type(err).__name__}"
    return env


def install(dry_run: bool) -> dict[str, Any]:
    """Missing packages from the registry (pip), then nb itself editable from this tree (--no-deps:
    the device's torch stays). A dry run installs nothing and says so."""
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    record: dict[str, Any] = {"missing_before": missing}
    if dry_run:
        record["pip"] = "not run (dry run)"
        return record
    if missing:
        # the device may reach no registry: a bounded try (gpu.sh installs carried wheels first)
        record["pip_missing"] = sh([sys.executable, "-m", "pip", "install", "-q", "--retries", "1", "--timeout", "10",
                                    *missing], timeout=60)
    record["pip_nb"] = sh([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "-e", str(ROOT)], timeout=90)
    record["missing_after"] = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    return record


def run_step(name: str, budget: float, dry_run: bool, work: Path, log_file: Any) -> dict[str, Any]:
    """One step in its own process group under `budget` seconds; its status and the parts it wrote."""
    result_path = work / f"{name}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--step", name, "--result", str(result_path),
           "--work", str(work)] + (["--dry-run"] if dry_run else [])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               PYTHONUNBUFFERED="1")
    log_file.write(f"\n===== {name} (budget {budget:.0f} s): {' '.join(cmd)}\n")
    log_file.flush()
    offset = os.path.getsize(log_file.name)          # where this step's output starts in the log
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                            start_new_session=True)
    try:
        rc: int | None = proc.wait(timeout=budget)
        status = "ok" if rc == 0 else f"failed (exit {rc})"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)        # the step and every process it started
        proc.wait()
        rc, status = None, f"timed out after {budget:.0f} s"
    seconds = time.perf_counter() - started
    parts = json.loads(result_path.read_text()) if result_path.is_file() else {}
    record = {"status": status, "exit": rc, "seconds": seconds, "budget_s": budget, "parts": parts}
    if rc != 0:                                      # the end of what it printed, for the JSON alone to tell why
        with open(log_file.name, "rb") as log:
            log.seek(offset)
            record["output_tail"] = log.read()[-3000:].decode("utf-8", "replace")
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or ROOT / "benchmarks" / "out"))
    parser.add_argument("--dry-run", action="store_true", help="tiny shapes on CPU: every step's code path")
    parser.add_argument("--only", action="append", choices=[s[0] for s in STEPS], help="run only this step")
    parser.add_argument("--step", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:                                   # a child: one step
        Step(args.result, args.work, args.dry_run).run(args.step)
        return

    t0 = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "dry_run": args.dry_run,
                               "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                               "install": install(args.dry_run), "environment": environment(), "steps": {}}
    log_path = args.out / "gpu.log"
    with tempfile.TemporaryDirectory(prefix="nb-gpu-") as tmp, log_path.open("w") as log_file:
        spent = 0.0
        for name, budget, dry_budget in STEPS:
            if args.only and name not in args.only:
                results["steps"][name] = {"status": "not selected (--only)"}
                continue
            limit = dry_budget if args.dry_run else budget
            if not args.dry_run and spent + limit > TOTAL_BUDGET_S:
                results["steps"][name] = {"status": f"not run: {spent:.0f} s spent, its {limit} s would pass "
                                                    f"the {TOTAL_BUDGET_S} s total"}
                continue
            print(f"[{time.strftime('%H:%M:%S')}] {name} (limit {limit} s) ...", file=sys.stderr, flush=True)
            step_dir = Path(tmp) / name
            step_dir.mkdir()
            results["steps"][name] = run_step(name, limit, args.dry_run, step_dir, log_file)
            spent += results["steps"][name]["seconds"]
            (args.out / "gpu.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    results["seconds"] = time.perf_counter() - t0
    (args.out / "gpu.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    print_table(results)
    print(f"JSON: {args.out / 'gpu.json'}  log: {log_path}")


def print_table(results: dict[str, Any]) -> None:
    env = results["environment"]
    print(f"device {env.get('device')} | {env.get('nvidia_smi')} | torch {env.get('torch')} CUDA {env.get('torch_cuda')} "
          f"cuDNN {env.get('cudnn')} | transformers {env.get('transformers')}")
    print(f"{'step':18} {'status':28} {'s':>6}  figures")
    for name, step in results["steps"].items():
        figures = "; ".join(f"{k} {v}" for k, v in (step.get("parts") or {}).get("summary", {}).items())
        print(f"{name:18} {step['status'][:28]:28} {step.get('seconds', 0):6.1f}  {figures}")


if __name__ == "__main__":
    main()
