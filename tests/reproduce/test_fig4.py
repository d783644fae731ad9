"""`nb reproduce 000-fig4 --scale smoke` end to end as a real `nb` process on pairs built by the test:
000-fig2's zero and unigram runs scored by nb eval's by-frequency section (paper 000 fig. 4); the
per-bin values against `nb eval --task translation RUN --by-frequency COUNTS --json` run apart; a
second invocation trains nothing and writes the same bytes."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from tests.cli.helpers import invoke, run_nb
from tests.reproduce.conftest import translation_data

RESULTS = ("results.json", "results.csv", "results.md")


@pytest.mark.slow
def test_000_fig4_smoke_equals_nb_eval_and_resumes(tmp_path: Path, pairs: Path) -> None:
    out = tmp_path / "repro"
    done = run_nb("reproduce", "000-fig4", "--scale", "smoke", *translation_data(pairs), "--out", out, "--json",
                  timeout=600)
    assert done.returncode == 0, done.stderr.decode()
    report = json.loads(done.stdout)
    for name in (*RESULTS, "figures/by_frequency.png"):
        assert (out / "000-fig4" / name).is_file(), name
    assert not (out / "000-fig4" / "figures" / "val_bleu.png").exists()
    assert [(r["arm"], r["seed"]) for r in report["runs"]] == [(a, s) for a in ("unigram", "zero") for s in (0, 1)]
    assert {o["action"] for o in report["outcomes"]} == {"trained+evaluated"}
    counts = list((out / "counts").glob("*.safetensors"))
    assert len(counts) == 1                                   # counted once for the four runs
    # the counts are nb count-unigrams' of the training targets with the run's target tokenizer
    mine = tmp_path / "tgt.safetensors"
    counted = invoke("count-unigrams", pairs / "train.en", "-t", pairs / "joint.model", "-o", mine, "--json")
    assert counted.exit_code == 0, counted.stderr
    from nbcli.counts import read_counts

    assert (read_counts(mine).counts == read_counts(counts[0]).counts).all()

    sections = {}
    for r in report["runs"]:   # each run's section is nb eval's, computed apart (in-process: the sweep's run
        evaluated = invoke("eval", "--task", "translation", out / r["run"], "--corpus", pairs / "test",  # above
                           "--by-frequency", mine, "--beam", "2", "--device", "cpu", "--json")            # is a process)
        assert evaluated.exit_code == 0, evaluated.stderr
        section = json.loads(evaluated.stdout)["by_frequency"]
        assert section["output_bias_dropped"] and len(r["by_frequency"]["bins"]) == len(section["bins"])
        for mine_bin, theirs in zip(r["by_frequency"]["bins"], section["bins"]):   # float32 logits: thread counts
            assert mine_bin.keys() == theirs.keys()                               # differ (the sweep runs on 1)
            for key, value in theirs.items():
                assert mine_bin[key] == (value if value is None else pytest.approx(value, rel=1e-5, abs=1e-9)), key
        sections[(r["arm"], r["seed"])] = r["by_frequency"]
    arms = {a["arm"]: a for a in report["by_frequency"]}
    assert list(arms) == ["unigram", "zero"] and all(a["output_bias_dropped"] for a in arms.values())
    some = 0
    for arm, row in arms.items():   # mean ± SE over the two seeds of the per-bin means, by an independent formula
        assert row["seeds"] == [0, 1]
        for i, b in enumerate(row["bins"]):
            for key, err in (("mean_log_prob", "sem"), ("mean_log_prob_without_bias", "sem_without_bias")):
                values = [sections[(arm, s)]["bins"][i][key] for s in (0, 1)]
                values = [v for v in values if v is not None]
                if len(values) == 2:
                    some += 1
                    assert b[key] == pytest.approx(statistics.fmean(values), abs=1e-12)
                    assert b[err] == pytest.approx(statistics.stdev(values) / math.sqrt(2), abs=1e-12)
                assert b["tokens"] == sections[(arm, 0)]["bins"][i]["tokens"]
    assert some >= 4
    table = (out / "000-fig4" / "results.md").read_text()
    assert "## zero (2 seeds" in table and "prints no numbers" in table
    assert len((out / "000-fig4" / "results.csv").read_text().splitlines()) == 1 + sum(len(a["bins"])
                                                                                       for a in arms.values())
    before = {name: (out / "000-fig4" / name).read_bytes() for name in RESULTS}
    record = json.loads((out / "runs" / "zero-s0.json").read_text())
    assert record["evaluation"] is None and "by_frequency" in record["by_frequency"]["result"]   # fig. 2's slot kept

    again = run_nb("reproduce", "000-fig4", "--scale", "smoke", *translation_data(pairs), "--out", out, "--json",
                   "--no-figures", timeout=600)
    assert again.returncode == 0, again.stderr.decode()
    assert {o["action"] for o in json.loads(again.stdout)["outcomes"]} == {"reused"}   # nothing trained
    assert {name: (out / "000-fig4" / name).read_bytes() for name in RESULTS} == before
