"""`--dask ADDRESS`: each run one task on a Dask distributed cluster (a 2-worker LocalCluster whose
workers each hold one GPU=1 resource, asked for with --resources), the per-seed results equal a local
--jobs 2 sweep's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.helpers import invoke

RECIPE = """\
task = "lm"
seeds = [0, 1]
[data.corpus]
help = "documents"
[data.tokenizer]
help = "a SentencePiece model"
[options]
corpus = ["{corpus}"]
tokenizer = "{tokenizer}"
steps = 4
eval_every = 2
batch_size = 4
seq_len = 32
d_model = 32
n_head = 2
n_layer = 1
device = "cpu"
[[axes]]
name = "bias"
values = [{ name = "unigram", options = { bias_init = "unigram" } }, { name = "zero", options = { bias_init = "zero" } }]
[[metrics]]
name = "alc"
from = "alc"
key = "val_loss"
[[metrics]]
name = "final"
from = "summary"
key = "final_val_loss"
"""


@pytest.mark.slow
def test_dask_runs_equal_local_jobs(tmp_path: Path, sp_model: Path, sample_lines: list[str]) -> None:
    distributed = pytest.importorskip("distributed")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(sample_lines[:400]) + "\n")
    recipe = tmp_path / "bias.toml"
    recipe.write_text(RECIPE)
    data = ["--data", f"corpus={corpus}", "--data", f"tokenizer={sp_model}"]
    local = invoke("sweep", recipe, *data, "--out", tmp_path / "local", "--jobs", "2", "--json", "--no-figures")
    assert local.exit_code == 0, local.stderr
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  resources={"GPU": 1}) as cluster:
        remote = invoke("sweep", recipe, *data, "--out", tmp_path / "dask", "--dask", cluster.scheduler_address,
                        "--resources", "GPU=1", "--json", "--no-figures")
        assert remote.exit_code == 0, remote.stderr
        worker_pids = {w.process.pid for w in cluster.workers.values()}
    a, b = json.loads(local.stdout), json.loads(remote.stdout)
    assert len(a["runs"]) == 4 and {o["action"] for o in b["outcomes"]} == {"trained"}
    assert a["runs"] == b["runs"]           # per seed: the same numbers, to the last bit
    assert a["rows"] == b["rows"]
    for run in a["runs"]:
        logs = [[json.loads(line) for line in (tmp_path / side / run["run"] / "log.jsonl").read_text().splitlines()]
                for side in ("local", "dask")]
        assert [(r["step"], r.get("loss"), r.get("val_loss")) for r in logs[0]] == \
            [(r["step"], r.get("loss"), r.get("val_loss")) for r in logs[1]]
    assert {o["pid"] for o in b["outcomes"]} == worker_pids and len(worker_pids) == 2   # both workers ran runs
    invocation = json.loads((tmp_path / "dask" / "sweep.json").read_text())["invocations"][-1]
    assert invocation["dask"] == cluster.scheduler_address and invocation["jobs"] == 1
