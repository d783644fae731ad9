#!/usr/bin/env python3
"""Every GPU measurement of issue 34 in one run, each step in its own process under a hard time limit.

    python3 benchmarks/gpu.py --out "$OUT"          # on the device (benchmarks/gpu.sh does this)
    python3 benchmarks/gpu.py --dry-run --out DIR   # tiny shapes on CPU: every step's code path, seconds

Steps, in order of value, each with its budget (seconds; the sum stays under 9 minutes of device time).
A step runs as `gpu.py --step NAME` in a new process group, killed with its children when its budget
runs out; it writes its figures part by part, so a step cut short still reports the parts it finished
and is recorded as `timed out`, and the next step runs. A step that fails is recorded with its exit
status and the end of its stderr. Nothing is skipped silently: a step left out for lack of time says so.

1. train_lm (230 s): `nb train --preset gpt2-124m` (12 x 768, T = 1024, batch 16, bf16, --compile) on
   a random-word corpus over a 50,257-word WordLevel tokenizer.json (no download), through
   `nbcli.train.loop.train`, the function `nb train` calls: tokens/s and MFU of its own log records
   (median over the updates after the first WARM ones: compilation excluded), peak CUDA memory; then,
   in the same process, a nanoGPT-equivalent loop (`NanoGPT` below: nanoGPT's model.py layout, vocab
   padded to 50,304, loss inside the compiled forward, fused AdamW, bf16 autocast, grad clip 1, one
   `loss.item()` per step as nanoGPT logs) on the same token stream, same shapes; then nb again with
   attention guidance on half the heads (--ag-fraction 0.5, alpha 1): the AG overhead. Targets (issue
   34): nb >= 1.0x the loop, >= 400K tokens/s on an H100, AG <= 10 % slower.
2. checks (45 s): issue 34's fixes confirmed where only a GPU shows them: the host-device syncs of one
   nb update (count_labels + optimizer_step, AG on, batches through BlockStream) counted with
   torch.cuda.set_sync_debug_mode (expected: the one copy of the update's sums); peak memory and time
   of the loss summed in the forward (chunked output layer) against logits + lm_loss at gpt2-124m
   shapes (bf16 autocast), and their loss values, its time in one chunk (no recomputation) and with
   the output matmul unpadded (vocab_multiple 1) against padded to 50,304 rows; the dense AG pattern ([Delim]) blockwise against the
   explicit [B, G, T, T] map at T = 1024: peak memory, values.
3. probe_bias (50 s): benchmarks/probe_bias.py's Llama-size case, 128,256 x 4,096 bf16 generated on the
   device's disk, `nb probe-bias --device cuda` full report (target < 5 s).
4. generate (75 s): a GPT-2-size `GPT2LMHeadModel` built from its config (random weights, no hub),
   `nbcli.generate` (greedy, fixed length) and `nbcli.evaluate` against transformers' `generate` and a
   plain forward-loss loop over the same tokens (target: nb's time <= transformers').
5. train_translation (75 s): benchmarks/train_translation.py --device cuda --preset base (bf16) against
   torch.nn.Transformer in the same loop.
6. translate (55 s): benchmarks/translate.py --device cuda: beam 5 (and greedy) against transformers'
   generate(num_beams=5) on the exported model.

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
import dataclasses
import importlib.util
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

# (name, budget seconds on the device, budget seconds in a dry run)
STEPS: list[tuple[str, int, int]] = [
    ("train_lm", 230, 120), ("checks", 45, 60), ("probe_bias", 50, 60), ("generate", 75, 90),
    ("train_translation", 75, 90), ("translate", 55, 90)]
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
        record["pip_missing"] = sh([sys.executable, "-m", "pip", "install", "-q", *missing], timeout=90)
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
    return {"status": status, "exit": rc, "seconds": seconds, "budget_s": budget, "parts": parts}


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


# ---------------------------------------------------------------------------------------------
# A step (in its own process): parts written to the result file as each completes


class Step:
    def __init__(self, result: Path, work: Path, dry_run: bool) -> None:
        self.result, self.work, self.dry = result, work, dry_run
        self.parts: dict[str, Any] = {"summary": {}}

    def record(self, key: str, value: Any, **summary: Any) -> None:
        """Keep a part (and its headline figures) and rewrite the result file at once."""
        self.parts[key] = value
        self.parts["summary"].update(summary)
        self.result.write_text(json.dumps(self.parts, indent=1, default=str) + "\n")

    def run(self, name: str) -> None:
        steps: dict[str, Callable[[], None]] = {
            "train_lm": self.train_lm, "checks": self.checks, "probe_bias": self.probe_bias, "generate": self.generate,
            "train_translation": self.train_translation, "translate": self.translate}
        import torch

        self.device = "cpu" if self.dry else "cuda"
        if not self.dry and not torch.cuda.is_available():
            raise SystemExit("gpu.py: no CUDA device visible (use --dry-run for the CPU path)")
        steps[name]()

    # -- 1. training ------------------------------------------------------------------------------
    def train_lm(self) -> None:
        from nbcli.train.config import build_config

        if self.dry:
            shape = dict(n_layer=2, n_head=2, d_model=64, seq_len=32, batch_size=4)
            vocab, steps, warm, compile_ = 300, 4, 1, False
        else:
            shape = {}
            vocab, steps, warm, compile_ = 50_257, 30, 8, True
        cfg = build_config("gpt2-124m", steps=steps, eval_every=steps + 1, eval_batches=1, save_every=0, seed=0,
                           device=self.device, compile=compile_, dtype="bfloat16" if not self.dry else "float32",
                           warmup=2, **shape)
        tokenizer, corpus, stream = word_corpus(self.work, vocab, cfg.seq_len * cfg.batch_size * (steps + 2),
                                                 words_per_doc=2 * cfg.seq_len)
        nb = self.part("nb", lambda: nb_train_run(cfg, corpus, tokenizer, self.work / "nb", warm),
                       lambda r: dict(nb_tokens_per_s=round(r["tokens_per_s"]), nb_mfu=r.get("mfu"),
                                      nb_peak_gib=r["peak_memory_gib"]))
        self.part("nanogpt", lambda: nanogpt_run(cfg, stream, vocab, steps, warm, compile_, self.device),
                  lambda r: dict(nanogpt_tokens_per_s=round(r["tokens_per_s"]), nanogpt_mfu=r.get("mfu"),
                                 nanogpt_peak_gib=r["peak_memory_gib"],
                                 **({"nb_over_nanogpt": round(nb["tokens_per_s"] / r["tokens_per_s"], 3)} if nb else {})))
        ag_cfg = dataclasses.replace(cfg, ag_fraction=0.5, ag_alpha=1.0)
        self.part("nb_ag", lambda: nb_train_run(ag_cfg, corpus, tokenizer, self.work / "nb-ag", warm),
                  lambda r: dict(ag_tokens_per_s=round(r["tokens_per_s"]), ag_mfu=r.get("mfu"),
                                 ag_peak_gib=r["peak_memory_gib"],
                                 **({"ag_slowdown": round(1 - r["tokens_per_s"] / nb["tokens_per_s"], 3)} if nb else {})))

    def part(self, key: str, run: Callable[[], dict[str, Any]],
             headline: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any] | None:
        """One part of a step: its figures, or its error recorded (the step's other parts still run)."""
        import traceback

        import torch

        try:
            result = run()
        except Exception as err:  # recorded, not fatal: the next part measures something else
            traceback.print_exc()
            self.record(key, {"error": f"{type(err).__name__}: {err}"[:2000]}, **{f"{key}_error": type(err).__name__})
            return None
        finally:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        self.record(key, result, **headline(result))
        return result

    # -- 2. the fixes only a GPU shows ---------------------------------------------------------------
    def checks(self) -> None:
        self.part("syncs", lambda: sync_count(self.device, self.dry),
                  lambda r: {"syncs_per_update": r["syncs"]})
        self.part("loss_paths", lambda: loss_paths(self.device, self.dry),
                  lambda r: {"loss_peak_gib_summed_vs_logits": [r["summed"]["peak_gib"], r["logits"]["peak_gib"]],
                             "loss_rel_diff": r["rel_diff"], "vocab_padding_speedup": round(r["padding_speedup"], 3),
                             "loss_chunking_slowdown": round(r["chunking_slowdown"], 3)})
        self.part("dense_ag", lambda: dense_ag(self.device, self.dry),
                  lambda r: {"dense_ag_peak_gib_blockwise_vs_explicit": [r["blockwise"]["peak_gib"],
                                                                         r["explicit"]["peak_gib"]],
                             "dense_ag_rel_diff": r["rel_diff"]})

    # -- 2. probe-bias ----------------------------------------------------------------------------
    def probe_bias(self) -> None:
        """`nb probe-bias` through benchmarks/probe_bias.py (the command, start-up included); should the
        command not run there (the CLI's typer range, say), the same report through `nbcli.probe`."""
        case = "tiny" if self.dry else "llama"

        def command() -> dict[str, Any]:
            out = self.work / "probe.json"
            run_script(["probe_bias.py", "--only", case, "--repeat", "1" if self.dry else "2", "--report", "full",
                        "--device", self.device, "--dir", str(self.work), "--out", str(out)], in_process=self.dry)
            return json.loads(out.read_text())

        cli = self.part("probe_bias", command, lambda d: {
            "probe_bias_s": round(d["cases"][case]["full"]["this"]["best_seconds"], 2), "target_s": 5.0})
        if cli is None:
            self.part("probe_bias_api", lambda: probe_api(self.work, case, self.device),
                      lambda d: {"probe_bias_api_s": round(d["best_seconds"], 2), "target_s": 5.0})

    # -- 3. eval / generate -------------------------------------------------------------------------
    def generate(self) -> None:
        import torch

        import nbcli

        if self.dry:
            vocab, layers, d, heads, positions, rows, new, prompt_words = 300, 1, 32, 2, 64, 2, 4, 6
        else:
            vocab, layers, d, heads, positions, rows, new, prompt_words = 50_257, 12, 768, 12, 1024, 16, 128, 10
        tokenizer, corpus, _stream = word_corpus(self.work, vocab, rows * 3 * positions, words_per_doc=positions)
        hf_dir = gpt2_folder(self.work / "gpt2", vocab, layers, d, heads, positions)
        prompts = self.work / "prompts.txt"
        lines = corpus.read_text().splitlines()
        prompts.write_text("\n".join(lines[:rows]) + "\n")
        nbcli.generate(hf_dir, prompts, tokenizer, decoding="greedy", max_new_tokens=2, batch_size=rows,
                       prompt_words=prompt_words, max_prompts=rows, device=self.device)          # warm-up
        sync()
        t0 = time.perf_counter()
        report = nbcli.generate(hf_dir, prompts, tokenizer, decoding="greedy", max_new_tokens=new, batch_size=rows,
                                prompt_words=prompt_words, max_prompts=rows, device=self.device)
        sync()
        nb_s = time.perf_counter() - t0
        samples = report.samples
        nb_tokens = sum(len(s["tokens"]) if isinstance(s, dict) and "tokens" in s else new for s in samples)
        hf_s, hf_tokens = hf_generate(hf_dir, tokenizer, lines[:rows], prompt_words, new, self.device)
        self.record("generate", {"rows": rows, "new_tokens": new, "nb_s": nb_s, "transformers_s": hf_s,
                                 "nb_tokens": nb_tokens, "transformers_tokens": hf_tokens,
                                 "note": "nb's time includes its report (distinct-n, lengths); greedy both ways"},
                    generate_nb_over_hf_time=round(nb_s / hf_s, 3))
        eval_corpus = self.work / "eval.txt"
        eval_corpus.write_text("\n".join(lines[rows:rows * 3]) + "\n")
        nbcli.evaluate(hf_dir, eval_corpus, tokenizer, batch_size=8, device=self.device)          # warm-up
        sync()
        t0 = time.perf_counter()
        ev = nbcli.evaluate(hf_dir, eval_corpus, tokenizer, batch_size=8, device=self.device)
        sync()
        nb_eval_s = time.perf_counter() - t0
        plain_s, plain_tokens = hf_eval(hf_dir, tokenizer, eval_corpus, positions, 8, self.device)
        self.record("evaluate", {"nb_s": nb_eval_s, "plain_forward_s": plain_s, "tokens": plain_tokens,
                                 "nb_report": {k: v for k, v in ev.to_dict().items() if isinstance(v, (int, float, str))}},
                    eval_nb_over_plain_time=round(nb_eval_s / plain_s, 3))
        del torch

    # -- 4, 5. translation --------------------------------------------------------------------------
    def train_translation(self) -> None:
        out = self.work / "tt.json"
        size = (["--steps", "4", "--pairs", "200", "--repeats", "1"] if self.dry else
                ["--steps", "30", "--pairs", "4000", "--repeats", "2", "--preset", "base", "--dtype", "bfloat16",
                 "--ffn", "2048", "--threads", "0"])
        run_script(["train_translation.py", *size, "--device", self.device, "--out", str(out)], in_process=self.dry)
        data = json.loads(out.read_text())
        self.record("train_translation", data, nb_tokens_per_s=round(data["best"]["nb_tokens_per_s"]),
                    nb_over_torch_transformer=round(data["best"]["ratio"], 3))

    def translate(self) -> None:
        out = self.work / "tr.json"
        size = (["--sentences", "8", "--batch-size", "4", "--new-tokens", "6", "--layers", "1", "--d-model", "64",
                 "--ffn", "128"] if self.dry else ["--sentences", "128", "--batch-size", "32", "--new-tokens", "48"])
        run_script(["translate.py", *size, "--device", self.device, "--out", str(out)], in_process=self.dry)
        data = json.loads(out.read_text())
        self.record("translate", data, beam5_nb_over_hf_time=round(data["beam5"]["ratio"], 3),
                    greedy_nb_over_hf_time=round(data["beam1"]["ratio"], 3))


# ---------------------------------------------------------------------------------------------
# The steps' pieces


def peak_run(fn: Callable[[], Any], device: str) -> tuple[Any, dict[str, Any]]:
    """fn() with its seconds and peak CUDA memory above what was allocated before (GiB; None on CPU)."""
    import torch

    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    t0 = time.perf_counter()
    out = fn()
    sync()
    seconds = time.perf_counter() - t0
    peak = (torch.cuda.max_memory_allocated() - base) / 2**30 if cuda else None
    return out, {"seconds": seconds, "peak_gib": peak}


def probe_api(work: Path, case: str, device: str) -> dict[str, Any]:
    """`nbcli.probe` (what `nb probe-bias` calls) on probe_bias.py's generated checkpoint of `case`:
    seconds of two runs in this process (the command's start-up not included)."""
    import nbcli

    sys.path.insert(0, str(HERE))
    from probe_bias import CASES

    spec = CASES[case]
    subprocess.run([sys.executable, str(HERE / "probe_bias.py"), "--generate", str(work), str(spec["vocab"]),
                    str(spec["d"]), str(spec["dtype"])], check=True, cwd=ROOT)
    ckpt = work / f"probe-{spec['vocab']}x{spec['d']}-{spec['dtype']}.safetensors"
    counts = work / f"counts-{spec['vocab']}.safetensors"
    seconds = []
    for _ in range(2):
        t0 = time.perf_counter()
        nbcli.probe(ckpt, counts, device=device)
        sync()
        seconds.append(time.perf_counter() - t0)
    return {"case": spec, "seconds": seconds, "best_seconds": min(seconds)}


def sync_count(device: str, dry: bool) -> dict[str, Any]:
    """Host-device synchronisations of one nb update (labels counted, micro-batches forward/backward
    with AG, the update), eager, counted by torch.cuda.set_sync_debug_mode("warn")."""
    import warnings

    import numpy as np
    import torch

    from nbcli.model import ModelConfig, Transformer
    from nbcli.train.config import build_config
    from nbcli.train.data import BlockStream, TrainSampler
    from nbcli.train.guidance import Guidance
    from nbcli.train.runtime import Runtime
    from nbcli.train.step import count_labels, lm_forward, make_optimizer, micro_batches, optimizer_step

    V, T = (300, 32) if dry else (50_257, 512)
    cfg = build_config("tiny", n_layer=2, n_head=4, d_model=64 if dry else 256, seq_len=T, batch_size=4,
                       grad_accum=2, device=device, dtype="float32" if dry else "bfloat16")
    mcfg = ModelConfig(vocab_size=V, seq_len=T, n_layer=2, n_head=4, d_model=cfg.d_model)
    rt = Runtime(torch.device(device), amp_dtype=None if dry else torch.bfloat16)
    model = Transformer(mcfg).to(rt.device)
    opt = make_optimizer(model, cfg, rt.device)
    stream = BlockStream(np.random.default_rng(0).integers(0, V, 40 * (T + 1)).astype(np.int32), T, "clm", 0, "sync")
    sampler = TrainSampler(stream.n_blocks, 0)
    guidance = Guidance(heads={0: "prev", 1: "first"})

    def update(step: int) -> None:
        batches = micro_batches(stream, sampler, cfg, mcfg, rt, step, step * cfg.batch_size)
        optimizer_step(model, model, opt, batches, count_labels(batches, rt), guidance, 1.0, step, cfg, mcfg, rt,
                       forward=lm_forward(True, 0.0))

    update(0)                                                            # warm-up (allocations, kernels)
    sync()
    caught: list[str] = []
    if device == "cuda":
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                update(1)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        caught = [str(w.message).splitlines()[0][:200] for w in seen if "synchron" in str(w.message).lower()]
    else:
        update(1)
    return {"syncs": len(caught) if device == "cuda" else None, "messages": caught[:20],
            "note": "expected 1 (the update's sums, before the finiteness check); None: CPU has no sync mode"}


def loss_paths(device: str, dry: bool) -> dict[str, Any]:
    """Forward + backward of the gpt2-124m model (eager, bf16 autocast) with the loss summed in the
    forward (chunked output layer) vs logits + lm_loss: peak memory, seconds, the two losses."""
    import torch

    from nbcli.model import ModelConfig, Transformer, lm_loss

    V, T, B, L, d, H = (300, 32, 2, 1, 32, 2) if dry else (50_257, 1024, 16, 12, 768, 12)
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=V, seq_len=T, n_layer=L, n_head=H, d_model=d)).to(device)
    idx = torch.randint(0, V, (B, T), device=device)
    labels = torch.randint(0, V, (B, T), device=device)
    amp = torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda")

    def summed() -> float:
        with amp:
            loss, _ = model(idx, labels=labels)
        loss.backward()
        model.zero_grad(set_to_none=True)
        return float(loss)

    def logits() -> float:
        with amp:
            out, _ = model(idx)
        loss = lm_loss(out, labels, reduction="sum")
        loss.backward()
        model.zero_grad(set_to_none=True)
        return float(loss)

    summed()
    logits()                                                             # warm-up both
    a, summed_run = peak_run(summed, device)
    b, logits_run = peak_run(logits, device)
    model.loss_chunk_elements = 1 << 40                                  # one chunk: no recomputation
    summed()
    _, one_chunk_run = peak_run(summed, device)
    model.loss_chunk_elements = 1 << 25
    model.vocab_multiple = 1                                             # the output matmul over V rows, unpadded
    summed()
    c, unpadded_run = peak_run(summed, device)
    return {"shape": [B, T, V], "summed": summed_run, "logits": logits_run, "summed_one_chunk": one_chunk_run,
            "summed_unpadded": unpadded_run, "summed_loss": a, "logits_loss": b, "unpadded_loss": c,
            "rel_diff": abs(a - b) / abs(b), "padding_speedup": unpadded_run["seconds"] / summed_run["seconds"],
            "chunking_slowdown": summed_run["seconds"] / one_chunk_run["seconds"]}


def dense_ag(device: str, dry: bool) -> dict[str, Any]:
    """[Delim] row errors + backward, blockwise (guidance.dense_row_errors) vs the explicit map."""
    import torch

    from nbcli.train.guidance import dense_row_errors, explicit_row_errors, guided_maps, pattern_matrix

    B, G, T, dh = (2, 2, 40, 8) if dry else (16, 6, 1024, 64)
    g = torch.Generator(device="cpu").manual_seed(0)
    q = torch.randn(B, G, T, dh, generator=g).to(device).requires_grad_(True)
    k = torch.randn(B, G, T, dh, generator=g).to(device).requires_grad_(True)
    ids = torch.randint(0, 50, (B, T), generator=g).to(device)
    lengths = torch.full((B,), T, device=device)
    P = pattern_matrix("delim", ids, lengths, True, delim_ids=(0, 1))

    def run(rows: Callable[[], Any]) -> float:
        value = rows().sum()
        value.backward()
        q.grad = k.grad = None
        return float(value)

    block = 16 if dry else 256                                          # several blocks either way
    blockwise, b_run = peak_run(lambda: run(lambda: dense_row_errors(q, k, P, lengths, True, block)), device)
    explicit, e_run = peak_run(lambda: run(lambda: explicit_row_errors(guided_maps(q, k, lengths, True), P, lengths)),
                               device)
    return {"shape": [B, G, T, dh], "blockwise": b_run, "explicit": e_run,
            "rel_diff": abs(blockwise - explicit) / abs(explicit)}


def sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def run_script(argv: list[str], in_process: bool = False) -> None:
    """A sibling benchmark script in a child process (its output goes to the step's log), or, for the
    dry run, in this process (`runpy`, sys.argv set for it): one torch import less per script."""
    if not in_process:
        subprocess.run([sys.executable, str(HERE / argv[0]), *argv[1:]], check=True, cwd=ROOT)
        return
    import runpy

    saved = sys.argv
    sys.argv = [str(HERE / argv[0]), *argv[1:]]
    try:
        runpy.run_path(str(HERE / argv[0]), run_name="__main__")
    finally:
        sys.argv = saved


def word_corpus(work: Path, vocab: int, tokens: int, words_per_doc: int = 1000) -> tuple[Path, Path, Any]:
    """A WordLevel tokenizer.json of `vocab` ids ("w0" .. and <|endoftext|> last) and a corpus of random
    words (one document a line, ~`tokens` tokens plus a validation share); also the training token
    stream as nb builds it (ids, EOS after each document) for the baseline loop."""
    import numpy as np
    from tokenizers import Tokenizer, models, pre_tokenizers

    work.mkdir(parents=True, exist_ok=True)
    path = work / "tokenizer.json"
    if not path.is_file():
        table = {f"w{i}": i for i in range(vocab - 1)}
        table["<|endoftext|>"] = vocab - 1
        tok = Tokenizer(models.WordLevel(table, unk_token="<|endoftext|>"))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tok.add_special_tokens(["<|endoftext|>"])
        tok.save(str(path))
    rng = np.random.default_rng(0)
    docs = max(40, int(tokens * 1.1) // words_per_doc + 2)   # every 20th: validation
    ids = rng.integers(0, vocab - 1, size=(docs, words_per_doc))
    corpus = work / "corpus.txt"
    corpus.write_text("\n".join(" ".join(f"w{i}" for i in row) for row in ids) + "\n")
    stream = np.concatenate([np.append(row, vocab - 1) for row in ids]).astype(np.int64)
    return path, corpus, stream


def nb_train_run(cfg: Any, corpus: Path, tokenizer: Path, out: Path, warm: int) -> dict[str, Any]:
    """`nb train`'s function on `cfg`: tokens/s and MFU (medians of its log records after `warm`
    updates), peak CUDA memory, wall seconds."""
    import statistics

    import torch

    from nbcli.train.loop import train

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    records: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    result = train(cfg, [str(corpus)], tokenizer, out, on_step=lambda step, r: records.append(dict(r)))
    wall = time.perf_counter() - t0
    timed = [r for r in records if "tokens_per_s" in r and r["step"] >= warm]
    out_: dict[str, Any] = {
        "config": {k: cfg.to_dict()[k] for k in ("preset", "n_layer", "n_head", "d_model", "seq_len", "batch_size",
                                                 "steps", "compile", "dtype", "ag_fraction", "ag_alpha")},
        "parameters": result.parameters, "wall_s": wall, "timed_updates": len(timed),
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in timed),
        "tokens_per_s_all": [round(r["tokens_per_s"]) for r in records if "tokens_per_s" in r],
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None,
        "loss_first_last": [records[0].get("loss"), [r for r in records if "loss" in r][-1]["loss"]]}
    if timed and "mfu" in timed[0]:
        out_["mfu"] = round(statistics.median(r["mfu"] for r in timed), 4)
    return out_


def nanogpt_run(cfg: Any, stream: Any, vocab: int, steps: int, warm: int, compile_: bool, device: str) -> dict[str, Any]:
    """The nanoGPT-equivalent loop (module docstring) on the same token stream and shapes."""
    import statistics

    import numpy as np
    import torch

    from nbcli.train.runtime import model_flops_utilisation, peak_flops

    torch.manual_seed(0)
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.cuda.reset_peak_memory_stats()
    padded = (vocab + 63) // 64 * 64
    model = NanoGPT(padded, cfg.seq_len, cfg.n_layer, cfg.n_head, cfg.d_model).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, cfg.adam_beta2),
                            fused=dev.type == "cuda")
    net = torch.compile(model) if compile_ else model
    B, T = cfg.batch_size, cfg.seq_len
    n_blocks = (len(stream) - 1) // T
    order = np.random.default_rng(0).permutation(n_blocks)
    amp = torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda")
    times = []
    for step in range(steps):
        t0 = time.perf_counter()
        rows = [order[(step * B + i) % n_blocks] for i in range(B)]
        chunk = torch.from_numpy(np.stack([stream[r * T:r * T + T + 1] for r in rows]))
        if dev.type == "cuda":
            chunk = chunk.pin_memory().to(dev, non_blocking=True)
        x, y = chunk[:, :-1], chunk[:, 1:]
        with amp:
            loss = net(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()                                     # nanoGPT logs the loss every step (a sync)
        times.append(time.perf_counter() - t0)
    tokens_per_s = statistics.median(B * T / t for t in times[warm:])
    flops = flops_per_token_like_nb(cfg, vocab)
    peak = peak_flops(dev)
    return {"vocab_padded": padded, "parameters": sum(p.numel() for p in model.parameters()),
            "tokens_per_s": tokens_per_s, "step_s": [round(t, 4) for t in times],
            "mfu": model_flops_utilisation(flops, B * T, B * T / tokens_per_s, peak, 1) if peak else None,
            "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else None}


def flops_per_token_like_nb(cfg: Any, vocab: int) -> float:
    """The same FLOP count nb's meter uses, for the baseline's MFU (so the two MFUs compare)."""
    from nbcli.model import ModelConfig, Transformer

    mcfg = ModelConfig(vocab_size=vocab, seq_len=cfg.seq_len, n_layer=cfg.n_layer, n_head=cfg.n_head,
                       d_model=cfg.d_model)
    with __import__("torch").device("meta"):
        return Transformer(mcfg).flops_per_token()


def _nanogpt_class() -> Any:
    import torch
    import torch.nn.functional as F
    from torch import nn

    class CausalSelfAttention(nn.Module):
        def __init__(self, d: int, heads: int) -> None:
            super().__init__()
            self.c_attn, self.c_proj, self.n_head = nn.Linear(d, 3 * d), nn.Linear(d, d), heads

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(C, dim=2)
            q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    class Block(nn.Module):
        def __init__(self, d: int, heads: int) -> None:
            super().__init__()
            self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(d), CausalSelfAttention(d, heads), nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class NanoGPT(nn.Module):
        """nanoGPT's GPT (model.py): learned positions, pre-LN blocks, tied lm_head, loss in forward."""

        def __init__(self, vocab: int, block: int, layers: int, heads: int, d: int) -> None:
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block, d)
            self.h = nn.ModuleList(Block(d, heads) for _ in range(layers))
            self.ln_f = nn.LayerNorm(d)
            self.lm_head = nn.Linear(d, vocab, bias=False)
            self.wte.weight = self.lm_head.weight
            for name, p in self.named_parameters():
                if p.dim() >= 2:
                    std = 0.02 / (2 * layers) ** 0.5 if name.endswith(("c_proj.weight", "mlp.2.weight")) else 0.02
                    nn.init.normal_(p, 0.0, std)
                else:
                    nn.init.zeros_(p) if name.endswith("bias") else nn.init.ones_(p)

        def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            pos = torch.arange(idx.size(1), device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))

    return NanoGPT


def NanoGPT(*args: Any) -> Any:  # noqa: N802 (a class made on first use: torch stays out of the parent)
    return _nanogpt_class()(*args)


def gpt2_folder(folder: Path, vocab: int, layers: int, d: int, heads: int, positions: int) -> Path:
    """A GPT2LMHeadModel of this shape with random weights (seed 0), saved as a model folder."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    eos = vocab - 1
    GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=positions, n_embd=d, n_layer=layers, n_head=heads,
                               bos_token_id=eos, eos_token_id=eos, pad_token_id=eos)).save_pretrained(str(folder))
    return folder


def hf_generate(hf_dir: Path, tokenizer: Path, lines: list[str], words: int, new: int, device: str) -> tuple[float, int]:
    """transformers' greedy generate of `new` tokens after each line's first `words` words (EOS first,
    as nb's prompts start), one batch; seconds (after a warm-up) and tokens made."""
    import torch
    from transformers import GPT2LMHeadModel

    from nbcli.tokenizers import load_tokenizer

    tok = load_tokenizer(tokenizer)
    model = GPT2LMHeadModel.from_pretrained(str(hf_dir)).to(device).eval()
    eos = tok.eos_id
    ids = torch.tensor([[eos] + tok.encode(" ".join(line.split()[:words])) for line in lines], device=device)
    with torch.inference_mode():
        model.generate(ids[:, :4], attention_mask=torch.ones_like(ids[:, :4]), do_sample=False, max_new_tokens=2,
                       min_new_tokens=2, pad_token_id=eos)
        sync()
        t0 = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new,
                             min_new_tokens=new, pad_token_id=eos)
        sync()
    return time.perf_counter() - t0, int(out.shape[0] * (out.shape[1] - ids.shape[1]))


def hf_eval(hf_dir: Path, tokenizer: Path, corpus: Path, positions: int, batch: int, device: str) -> tuple[float, int]:
    """A plain loss loop over the corpus's tokens in windows of `positions` (transformers forward,
    labels = inputs): seconds and tokens scored."""
    import torch
    from transformers import GPT2LMHeadModel

    from nbcli.tokenizers import load_tokenizer

    tok = load_tokenizer(tokenizer)
    model = GPT2LMHeadModel.from_pretrained(str(hf_dir)).to(device).eval()
    ids = [i for line in corpus.read_text().splitlines() for i in [tok.eos_id, *tok.encode(line)]]
    windows = [ids[s:s + positions] for s in range(0, len(ids) - positions + 1, positions)]
    sync()
    t0 = time.perf_counter()
    with torch.inference_mode():
        for s in range(0, len(windows), batch):
            x = torch.tensor(windows[s:s + batch], device=device)
            float(model(x, labels=x).loss)
    sync()
    return time.perf_counter() - t0, len(windows) * positions


if __name__ == "__main__":
    main()
