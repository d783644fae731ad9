"""`nb reproduce 000-fig2 --scale smoke` end to end as a real `nb` process, on pairs built by the test;
then 000-fig3 in the same --out reuses its runs (same settings) and its ALC equals nb plot-run's, and
000-fig4 scores them without training them again or replacing their BLEU evaluation."""

from __future__ import annotations

import json
import math
import statistics
import time
from pathlib import Path

import pytest

import nbcli
from tests.cli.helpers import run_nb
from tests.reproduce.conftest import translation_data


def _se(values: list[float]) -> float:
    return statistics.stdev(values) / math.sqrt(len(values))


@pytest.mark.slow
def test_000_fig2_smoke_then_000_fig3_on_the_same_runs(tmp_path: Path, pairs: Path) -> None:
    out = tmp_path / "repro"
    began = time.perf_counter()
    done = run_nb("reproduce", "000-fig2", "--scale", "smoke", *translation_data(pairs), "--out", out, "--json",
                  timeout=600)
    seconds = time.perf_counter() - began
    assert done.returncode == 0, done.stderr.decode()
    report = json.loads(done.stdout)
    print(f"nb reproduce 000-fig2 --scale smoke: {seconds:.1f} s")  # the bar: under a minute
    for name in ("results.json", "results.csv", "results.md", "figures/val_bleu.png", "figures/results.png"):
        assert (out / "000-fig2" / name).is_file(), name
    assert json.loads((out / "000-fig2" / "results.json").read_text()) == {k: v for k, v in report.items()
                                                              if k not in ("out", "files", "outcomes", "warnings")}
    runs = report["runs"]
    assert [(r["arm"], r["seed"]) for r in runs] == [(a, s) for a in ("unigram", "zero", "none") for s in (0, 1)]
    assert {o["action"] for o in report["outcomes"]} == {"trained+evaluated"}
    for r in runs:   # each run an nb run directory made with its arm's option; its score is nb eval's
        run = out / r["run"]
        config = json.loads((run / "config.json").read_text())
        assert config["bias_init"] == r["arm"] and config["preset"] == "paper000-iwslt"   # paper 000 app. A
        assert config["rescale_w"] == ("fro" if r["arm"] == "unigram" else None)           # sec. 4.1
        assert config["task_options"]["share_embeddings"] == "none" and config["adam_beta2"] == 0.997
        assert {"n_layer", "d_model", "d_ff"} <= set(config["preset_overridden"])         # the smoke scale-down
        record = json.loads(run.with_suffix(".json").read_text())
        assert r["metrics"]["test_bleu"] == record["evaluation"]["result"]["bleu"]
    again = nbcli.evaluate_translation([str(pairs / "test")], "de", "en", checkpoint=out / runs[0]["run"], beam=2,
                                       device="cpu")
    assert again.bleu == pytest.approx(runs[0]["metrics"]["test_bleu"], abs=1e-9)
    for row in report["rows"]:   # mean ± SE over seeds, by an independent formula
        values = [r["metrics"]["test_bleu"] for r in runs if r["arm"] == row["arm"]]
        cell = row["metrics"]["test_bleu"]
        assert cell["mean"] == pytest.approx(statistics.fmean(values)) and cell["n"] == 2
        assert cell["se"] == pytest.approx(_se(values)) and cell["sd"] == pytest.approx(statistics.stdev(values))
        assert cell["paper"] is None and cell["difference"] is None     # paper 000 prints no numbers
    table = (out / "000-fig2" / "results.md").read_text()
    assert "| unigram | 2 |" in table and "prints no numbers" in table

    fig3 = run_nb("reproduce", "000-fig3", "--scale", "smoke", *translation_data(pairs, test=False), "--out", out,
                  "--json", "--no-figures", timeout=600)
    assert fig3.returncode == 0, fig3.stderr.decode()
    alc = json.loads(fig3.stdout)
    assert (out / "000-fig3" / "results.md").is_file() and (out / "000-fig2" / "results.md").read_text() == table
    assert {o["action"] for o in alc["outcomes"]} == {"reused"}       # 000-fig2's runs, not trained again
    plotted = nbcli.plot_runs([out / r["run"] for r in runs], tmp_path / "plots", alc_steps=20000).to_dict()
    groups = {g["group"]: g for g in plotted["groups"]}
    for row in alc["rows"]:
        assert row["metrics"]["alc_val_bleu"]["mean"] == pytest.approx(groups[row["arm"]]["alc_val_bleu"]["mean"])
        assert row["metrics"]["alc_val_bleu"]["se"] == pytest.approx(groups[row["arm"]]["alc_val_bleu"]["se"])
        assert row["metrics"]["best_val_bleu"]["mean"] == pytest.approx(groups[row["arm"]]["best_val_bleu"]["mean"])

    before = {r["run"]: json.loads((out / r["run"]).with_suffix(".json").read_text())["evaluation"] for r in runs}
    fig4 = run_nb("reproduce", "000-fig4", "--scale", "smoke", *translation_data(pairs), "--out", out, "--json",
                  "--no-figures", timeout=600)
    assert fig4.returncode == 0, fig4.stderr.decode()
    assert {o["action"] for o in json.loads(fig4.stdout)["outcomes"]} == {"evaluated"}   # 000-fig2's zero, unigram
    for run, evaluation in before.items():   # 000-fig2's BLEU stays in its slot beside fig. 4's
        record = json.loads((out / run).with_suffix(".json").read_text())
        assert record["evaluation"] == evaluation and (record.get("by_frequency") is not None) == (
            not run.startswith("runs/none"))
