"""Benchmark `nb patch-checkpoint --in-place --scale-ln-bias` on an 8-shard folder against one file (issue 21).

Generates the >= 4 GB bf16 checkpoint of benchmarks/patch_checkpoint.py (streamed), once as one
file and once as an 8-shard Hugging Face folder with an index, and patches each in place:

    nb patch-checkpoint IN --in-place --scale-ln-bias 0.5

An in-place edit of a sharded folder rewrites only the shards holding a changed tensor (here the
last one, which holds ln_f.bias) and the index; a single file is rewritten whole. Reported per
layout: median wall time over --repeat runs, the bytes the nb process wrote (`write_bytes` of
/proc/self/io read at its exit: bytes it caused to be sent to storage; `wchar` as well), and the
bytes of files that are new or changed (by inode, size and mtime before and after). Runs use the
default input hashing with a warm hash cache (one untimed run first: a sweep over LAMBDA) and,
separately, --no-hash-inputs. Everything generated is deleted at the end.

    python3 benchmarks/patch_in_place.py [--dir DIR] [--repeat 3] [--shards 8] [--out benchmarks/out/patch_in_place.json]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT, machine, scratch_dir, write_json  # noqa: E402
from patch_checkpoint import BLOCK, layout, write_checkpoint, write_sharded  # noqa: E402

IO_WRAPPER = (
    "import atexit, sys\n"
    "def _io(path=sys.argv[1]):\n"
    "    open(path, 'w').write(open('/proc/self/io').read())\n"
    "atexit.register(_io)\n"
    "sys.argv = ['nb'] + sys.argv[2:]\n"
    "from nbcli.cli import main\n"
    "main()\n")


def snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    files = [root] if root.is_file() else sorted(root.iterdir())
    return {p.name: (p.stat().st_ino, p.stat().st_size, p.stat().st_mtime_ns) for p in files}


def run_in_place(target: Path, work: Path, env: dict[str, str], extra: list[str]) -> dict[str, float]:
    io_file = work / "io.txt"
    before = snapshot(target)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", IO_WRAPPER, str(io_file), "patch-checkpoint", str(target), "--in-place",
                    "--scale-ln-bias", "0.5", *extra], check=True, stdout=subprocess.DEVNULL, env=env)
    seconds = time.perf_counter() - start
    io = dict(line.split(": ") for line in io_file.read_text().splitlines())
    after = snapshot(target)
    changed = sum(size for name, (ino, size, mtime) in after.items() if before.get(name) != (ino, size, mtime))
    kept = sum(1 for name, stat in after.items() if before.get(name) == stat)
    return {"s": seconds, "write_bytes": int(io["write_bytes"]), "wchar": int(io["wchar"]),
            "changed_file_bytes": changed, "files_kept": kept, "files": len(after)}


def measure(target: Path, work: Path, repeat: int, env: dict[str, str]) -> dict[str, object]:
    size = sum(p.stat().st_size for p in ([target] if target.is_file() else target.iterdir()))
    run_in_place(target, work, env, [])  # fills the hash cache (a sweep's later steps)
    hashed = [run_in_place(target, work, env, []) for _ in range(repeat)]
    unhashed = [run_in_place(target, work, env, ["--no-hash-inputs"]) for _ in range(repeat)]

    def summary(runs: list[dict[str, float]]) -> dict[str, float]:
        return {key: statistics.median(r[key] for r in runs) for key in runs[0]}

    return {"input_bytes": size, "hash_cached": summary(hashed), "no_hash": summary(unhashed), "runs": hashed + unhashed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=None, help="Where to generate (default: bench-data/).")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--out", type=Path, default=OUT / "patch_in_place.json")
    args = parser.parse_args()
    work = scratch_dir("patch-in-place-", 14, args.dir)
    env = {**os.environ, "NB_CACHE_DIR": str(work / "cache")}
    results: dict[str, object] = {
        "machine": machine(torch=torch.__version__),
        "command": "nb patch-checkpoint IN --in-place --scale-ln-bias 0.5 [--no-hash-inputs]",
        "load_before": os.getloadavg(),
    }
    try:
        filler = torch.randn(BLOCK // 2, generator=torch.Generator().manual_seed(0)).bfloat16().view(torch.uint8).numpy().tobytes()
        single = work / "model.safetensors"
        write_checkpoint(single, layout(), filler)
        sharded = work / "sharded"
        write_sharded(sharded, args.shards, filler)
        results["single"] = measure(single, work, args.repeat, env)
        results["sharded"] = measure(sharded, work, args.repeat, env)
        results["shards"] = args.shards
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["load_after"] = os.getloadavg()
    write_json(args.out, results)
    print("| input | size GB | hashing | wall s (median) | nb write_bytes MB | changed files MB | files kept |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
    for key in ("single", "sharded"):
        r = results[key]
        assert isinstance(r, dict)
        label = "one file" if key == "single" else f"{args.shards} shards + index"
        for mode, name in (("hash_cached", "sha256 (cache warm)"), ("no_hash", "--no-hash-inputs")):
            m = r[mode]
            print(f"| {label} | {r['input_bytes'] / 1e9:.2f} | {name} | {m['s']:.2f} | {m['write_bytes'] / 1e6:.1f} | "
                  f"{m['changed_file_bytes'] / 1e6:.1f} | {m['files_kept']:.0f} of {m['files']:.0f} |")
    print(f"load average before {results['load_before']}, after {results['load_after']}; JSON: {args.out}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
