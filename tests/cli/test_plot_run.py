"""nb plot-run: figures from run directories, ALC as an independent trapezoid, errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests import forked_nb
from tests.cli.helpers import run_cli
from nbcli.analysis.runs import read_run

PNG = b"\x89PNG\r\n\x1a\n"


def fake_run(directory: Path, offset: float, ag: bool) -> Path:
    directory.mkdir(parents=True)
    lines = []
    for step in range(0, 11):
        record = {"step": step, "loss": 7.0 - 0.2 * step + offset, "lr": 1e-3}
        if ag:
            record.update({"ag_loss": 0.05 / (step + 1), "ag_alpha": 100 * (1 - step / 10)})
        if step % 5 == 0:
            record.update({"val_loss": 7.2 - 0.25 * step + offset, "kl_unigram": 0.1 + 0.2 * step,
                           "kl_uniform": 2.0 - 0.01 * step, "bias_norm": 80.0 + step, "bias_kl_unigram": 0.01 * step})
        lines.append(json.dumps(record))
    (directory / "log.jsonl").write_text("\n".join(lines) + "\n")
    seed = int(directory.name.rsplit("-s", 1)[1]) if "-s" in directory.name else 0
    (directory / "config.json").write_text(json.dumps({"seed": seed, "ag_fraction": 0.5 if ag else 0.0}))
    return directory


def test_figures_overlay_runs_and_report_alc(tmp_path: Path) -> None:
    runs = [fake_run(tmp_path / "ag-s0", 0.0, True), fake_run(tmp_path / "ag-s1", 0.1, True),
            fake_run(tmp_path / "plain-s0", 0.3, False)]
    out = tmp_path / "fig"
    result = run_cli(["plot-run", *map(str, runs), "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    names = sorted(Path(f).name for f in report["files"])
    assert names == ["attention_guidance.png", "bias.png", "divergence.png", "val_loss.png"]
    for f in report["files"]:
        data = Path(f).read_bytes()
        assert data.startswith(PNG) and b"plot-run" in data          # provenance in the PNG text chunk
    assert [r["group"] for r in report["runs"]] == ["ag", "ag", "plain"]
    # ALC of (0, 7.2), (5, 5.95), (10, 4.7): trapezoids / span
    expected = ((7.2 + 5.95) / 2 * 5 + (5.95 + 4.7) / 2 * 5) / 10
    assert report["runs"][0]["alc"] == pytest.approx(expected)
    assert report["runs"][2]["final_val_loss"] == pytest.approx(4.7 + 0.3)
    assert not list(out.glob("*.tmp*"))


def test_runs_without_curves_and_errors(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "log.jsonl").write_text("")
    result = run_cli(["plot-run", str(empty), "-o", str(tmp_path / "o")])
    assert result.exit_code == 0 and "no figures" in result.stdout
    result = run_cli(["plot-run", str(tmp_path / "nothing"), "-o", str(tmp_path / "o")])
    assert result.exit_code == 1 and "no log.jsonl" in result.output and "Traceback" not in result.output
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "log.jsonl").write_text('{"step": 0}\nnot json\n')
    result = run_cli(["plot-run", str(tmp_path / "bad"), "-o", str(tmp_path / "o")])
    assert result.exit_code == 1 and "log.jsonl:2" in result.output
    run = fake_run(tmp_path / "r", 0.0, False)
    (tmp_path / "file").write_text("x")
    result = run_cli(["plot-run", str(run), "-o", str(tmp_path / "file")])
    assert result.exit_code == 1 and "not a directory" in result.output
    assert read_run(run).group == "r"


def test_a_diverged_step_is_left_out_of_the_curves(tmp_path: Path) -> None:
    """nb train logs NaN for a NaN loss: that point is no point of the curve (ALC over the others),
    and a config.json that is not UTF-8 JSON is a one-line error naming it."""
    run = fake_run(tmp_path / "d", 0.0, False)
    with open(run / "log.jsonl", "a") as log:
        log.write('{"step": 11, "loss": NaN, "val_loss": NaN}\n')
    logged = read_run(run)
    assert logged.series["val_loss"][0].tolist() == [0, 5, 10]
    assert logged.alc() == pytest.approx(((7.2 + 5.95) / 2 * 5 + (5.95 + 4.7) / 2 * 5) / 10)
    result = run_cli(["plot-run", str(run), "-o", str(tmp_path / "fig"), "--json"])
    assert result.exit_code == 0, result.output
    (run / "config.json").write_bytes(b"\xff{}")
    result = run_cli(["plot-run", str(run), "-o", str(tmp_path / "fig2")])
    assert result.exit_code == 1 and "config.json" in result.output and "not UTF-8" in result.output
    assert not (tmp_path / "fig2").exists()


@pytest.mark.slow
def test_subprocess_on_a_real_training_run(tmp_path: Path, sp_model: Path, sample_lines: list[str]) -> None:
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(sample_lines[:400]) + "\n")
    env_run = [sys.executable, "-m", "nbcli", "train", "--corpus", str(corpus), "-t", str(sp_model), "--steps", "3",
               "--seq-len", "32", "--batch-size", "4", "--eval-every", "1", "--eval-batches", "1", "--objective",
               "mlm", "--ag-fraction", "0.5", "--ag-alpha", "auto", "--bias-init", "unigram", "--json"]
    assert forked_nb.run(env_run + ["--out", str(tmp_path / "run-s0")], capture_output=True).returncode == 0
    proc = forked_nb.run([sys.executable, "-m", "nbcli", "plot-run", str(tmp_path / "run-s0"), "-o",
                           str(tmp_path / "fig")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "fig").iterdir()) == ["attention_guidance.png", "bias.png",
                                                                    "divergence.png", "val_loss.png"]


def test_figures_commit_together_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure while drawing a later figure leaves none of the earlier ones (one OutputSet)."""
    import nbcli.reports.plot_run as run_plots

    original = run_plots._save_named

    def failing(fig, out_dir, name, metadata, outputs, *rest):  # type: ignore[no-untyped-def]
        if name == "bias":
            raise OSError(28, "No space left on device")
        return original(fig, out_dir, name, metadata, outputs, *rest)

    monkeypatch.setattr(run_plots, "_save_named", failing)
    run = fake_run(tmp_path / "ag-s0", 0.0, True)
    out = tmp_path / "fig"
    out.mkdir()
    result = run_cli(["plot-run", str(run), "-o", str(out)])
    assert result.exit_code != 0
    assert sorted(p.name for p in out.iterdir()) == []


def _with_unigram_reg(directory: Path, lam: float | None, switch: int) -> Path:
    """A fake run that regularised away from the unigram for updates < switch (paper 000 app. B.3)."""
    fake_run(directory, 0.0, False)
    records = [json.loads(line) for line in (directory / "log.jsonl").read_text().splitlines()]
    for r in records:
        r["unigram_reg_on"] = r["step"] < switch
        if r["step"] < switch:
            r["unigram_kl"] = 0.5 + 0.1 * r["step"]
    (directory / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    config = {"seed": 0, "unigram_reg_lambda": lam or 0.0, "unigram_reg_steps": switch if lam else 0}
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def _switch_chunk(png) -> object:  # type: ignore[no-untyped-def]
    """The nb.unigram_reg_switch value in a PNG's Description text chunk (k=v; k=v), None when absent."""
    text = png.text["Description"]
    if "nb.unigram_reg_switch=" not in text:
        return None
    return json.JSONDecoder().raw_decode(text.split("nb.unigram_reg_switch=", 1)[1])[0]


@pytest.mark.slow
def test_the_unigram_regulariser_switch_is_marked(tmp_path: Path) -> None:
    """The step where --unigram-reg-steps switches back to the standard objective is in --json, in
    the PNGs' text chunk, and drawn: the same logs without it in config.json give other pixels."""
    from PIL import Image

    marked = _with_unigram_reg(tmp_path / "a" / "reg-s0", 0.5, 4)
    plain = fake_run(tmp_path / "plain", 0.3, False)
    result = run_cli(["plot-run", str(marked), str(plain), "-o", str(tmp_path / "fa"), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert sorted(Path(f).name for f in report["files"]) == ["bias.png", "divergence.png", "unigram_reg.png",
                                                             "val_loss.png"]
    assert [(r["unigram_reg_switch"], r["unigram_reg_lambda"]) for r in report["runs"]] == [(4, 0.5), (None, None)]
    for name in ("val_loss.png", "unigram_reg.png"):
        with Image.open(tmp_path / "fa" / name) as png:
            assert _switch_chunk(png) == [{"group": "reg", "step": 4, "lambda": 0.5}]
    with Image.open(tmp_path / "fa" / "divergence.png") as png:
        assert _switch_chunk(png) is None and "plot-run" in png.text["Description"]

    unmarked = _with_unigram_reg(tmp_path / "b" / "reg-s0", None, 4)
    result = run_cli(["plot-run", str(unmarked), str(plain), "-o", str(tmp_path / "fb"), "--json"])
    assert result.exit_code == 0, result.output
    with Image.open(tmp_path / "fa" / "val_loss.png") as a, Image.open(tmp_path / "fb" / "val_loss.png") as b:
        assert _switch_chunk(b) is None
        assert a.size == b.size and a.tobytes() != b.tobytes()


@pytest.mark.slow
def test_seeds_are_drawn_as_mean_and_standard_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Translation runs, 3 seeds per arm: val_bleu.png draws one line per arm, the mean of its seeds
    at the steps all of them evaluated, inside a band of ± the standard error (ddof 1); the legend
    gives the arm's ALC as mean ± SE; --json's groups hold the table; --no-group-seeds draws each run."""
    import numpy as np
    from matplotlib.colors import to_rgba

    import nbcli.reports.plot_run as run_plots
    from nbcli.analysis.curves import area_under_curve
    from tests.analysis.test_runs import BASE, make_run

    figures: dict[str, object] = {}
    real_save = run_plots.save_figure
    monkeypatch.setattr(run_plots, "save_figure", lambda fig, path, meta, outputs, *rest: (
        figures.__setitem__(Path(path).stem, fig), real_save(fig, path, meta, outputs, *rest)))
    rng = np.random.default_rng(1)
    steps = [0, 10000, 20000, 30000]
    dirs, bleus = [], {"unigram": [], "zero": []}
    for arm in ("unigram", "zero"):
        for seed in range(3):
            extra = [(40000, 30.0)] if seed == 0 else []  # one seed evaluated further: not in the mean
            bleu = [(s, float(v)) for s, v in zip(steps, np.sort(rng.uniform(0, 35, 4)))] + extra
            dirs.append(make_run(tmp_path / f"{arm}-s{seed}", {**BASE, "bias_init": arm, "seed": seed}, bleu=bleu,
                                 loss=[(s, 6.0 - s / 10000) for s in steps]))
            bleus[arm].append(bleu)
    result = run_cli(["plot-run", *map(str, dirs), "-o", str(tmp_path / "fig"), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert sorted(Path(f).name for f in report["files"]) == ["val_bleu.png", "val_loss.png"]
    assert [g["group"] for g in report["groups"]] == ["unigram", "zero"] and report["alc_steps"] == 20000
    ax = figures["val_bleu"].axes[0]
    lines = {line.get_label().split()[0]: line for line in ax.get_lines() if not line.get_label().startswith("_")}
    for arm, group in zip(("unigram", "zero"), report["groups"]):
        table = np.array([[v for s, v in b if s in steps] for b in bleus[arm]])
        assert lines[arm].get_xdata().tolist() == steps
        np.testing.assert_allclose(lines[arm].get_ydata(), table.mean(axis=0))
        alcs = [area_under_curve(b, until=20000) for b in bleus[arm]]
        alc, se = np.mean(alcs), np.std(alcs, ddof=1) / np.sqrt(3)
        assert group["alc_val_bleu"]["mean"] == pytest.approx(alc) and group["alc_val_bleu"]["se"] == pytest.approx(se)
        assert f"ALC {alc:.2f} ± {se:.2f}, 3 runs" in lines[arm].get_label()
        band = [c for c in ax.collections if np.allclose(c.get_facecolor()[0][:3], to_rgba(lines[arm].get_color())[:3])
                and c.get_facecolor()[0][3] > 0.2]
        top = band[0].get_paths()[0].vertices[:, 1].max()
        assert top == pytest.approx((table.mean(axis=0) + table.std(axis=0, ddof=1) / np.sqrt(3)).max())
    assert any("end of the ALC window" in line.get_label() for line in ax.get_lines())
    text = run_cli(["plot-run", *map(str, dirs), "-o", str(tmp_path / "fig2")])
    assert text.exit_code == 0 and "unigram" in text.stdout and "±" in text.stdout, text.output
    alone = run_cli(["plot-run", *map(str, dirs), "-o", str(tmp_path / "fig3"), "--no-group-seeds",
                                     "--alc-steps", "0", "--json"])
    assert alone.exit_code == 0, alone.output
    groups = json.loads(alone.stdout)["groups"]
    assert [g["group"] for g in groups] == [d.name for d in dirs] and all(g["alc_val_bleu"]["se"] is None for g in groups)
    assert groups[0]["alc_val_bleu"]["mean"] == pytest.approx(area_under_curve(bleus["unigram"][0]))


@pytest.mark.slow
def test_classifier_seeds_are_grouped_as_mean_and_sigma(tmp_path: Path) -> None:
    """Paper 002 table 1's format: best validation accuracy and its epoch, mean ± σ over seeds."""
    import statistics

    from nbcli.tasks.data import DataSpec
    from nbcli.tasks.finetune import FinetuneConfig, finetune
    from tests.tasks.builders import encoder_folder, write_corpus
    from tests.tasks.test_finetune import pairs

    bert = encoder_folder(tmp_path / "bert", "bert")
    train = write_corpus(tmp_path / "train.jsonl", pairs(16), "jsonl")
    valid = write_corpus(tmp_path / "dev.tsv", pairs(12, 1), "tsv")
    runs = []
    for seed in range(3):
        cfg = FinetuneConfig(data=DataSpec(text_field="sentence1", pair_field="sentence2"), init=str(bert), steps=4,
                             batch_size=4, lr=3e-3, seed=seed, eval_every=2)
        runs.append(finetune(cfg, [str(train)], {"dev": str(valid)}, tmp_path / f"sst-s{seed}").out)
    best = [json.loads((r / "summary.json").read_text()) for r in runs]
    acc = [b["best_val_accuracy"] for b in best]
    epochs = [b["best_epoch"] for b in best]
    assert all(e == b["best_step"] / 4 for e, b in zip(epochs, best))        # 16 records / batch 4 per epoch
    for spread, expect in (("sd", statistics.stdev), ("se", lambda x: statistics.stdev(x) / 3 ** 0.5)):
        out = tmp_path / f"fig-{spread}"
        result = run_cli(["plot-run", *map(str, runs), "-o", str(out), "--accuracy-spread", spread,
                                          "--json"])
        assert result.exit_code == 0, result.stderr
        report = json.loads(result.stdout)
        (group,) = report["groups"]                                            # the seeds are one arm
        assert group["seeds"] == [0, 1, 2] and report["accuracy_spread"] == spread
        cell = group["best_val_accuracy"]
        assert cell["n"] == 3 and abs(cell["mean"] - statistics.fmean(acc)) < 1e-12
        assert abs(cell["sd"] - statistics.stdev(acc)) < 1e-12 and abs(cell[spread] - expect(acc)) < 1e-12
        assert abs(group["best_epoch"]["mean"] - statistics.fmean(epochs)) < 1e-12
        assert (out / "val_accuracy.png").read_bytes().startswith(PNG)
    text = run_cli(["plot-run", *map(str, runs), "-o", str(tmp_path / "fig-text")])
    assert text.exit_code == 0 and "best val accuracy" in text.stdout and "±" in text.stdout


def test_classifier_seeds_group_by_data_content_not_by_path_spelling(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The same files typed relative or absolute are one arm; other training data is another arm."""
    from nbcli.tasks.data import DataSpec
    from nbcli.tasks.finetune import FinetuneConfig, finetune
    from nbcli.analysis.runs import read_runs
    from tests.tasks.builders import encoder_folder, write_corpus
    from tests.tasks.test_finetune import pairs

    bert = encoder_folder(tmp_path / "bert", "bert")
    train = write_corpus(tmp_path / "train.jsonl", pairs(16), "jsonl")
    other = write_corpus(tmp_path / "other.jsonl", pairs(16, 7), "jsonl")
    valid = write_corpus(tmp_path / "dev.tsv", pairs(12, 1), "tsv")
    monkeypatch.chdir(tmp_path)

    def run(name: str, seed: int, train_file: str, valid_file: str) -> Path:
        cfg = FinetuneConfig(data=DataSpec(text_field="sentence1", pair_field="sentence2"), init=str(bert), steps=2,
                             batch_size=4, lr=3e-3, seed=seed, eval_every=2)
        return finetune(cfg, [train_file], {"dev": valid_file}, tmp_path / name).out

    dirs = [run("a-s0", 0, "train.jsonl", "dev.tsv"), run("a-s1", 1, str(train), str(valid)),
            run("b-s0", 0, "other.jsonl", "dev.tsv")]
    assert json.loads((dirs[0] / "config.json").read_text())["train"] == ["train.jsonl"]   # recorded as typed
    groups = [r.group for r in read_runs(dirs)]
    assert groups[0] == groups[1] != groups[2]


@pytest.mark.slow
def test_tables_carry_only_the_metrics_some_run_logged(tmp_path: Path) -> None:
    """A translation run's --csv has no accuracy columns, a classifier's no BLEU columns; the text table
    matches, and with one run per arm it promises no spread."""
    import csv
    import io

    from tests.analysis.test_runs import BASE, make_run

    mt = make_run(tmp_path / "mt-s0", {**BASE, "seed": 0}, bleu=[(0, 1.0), (10, 5.0)], loss=[(0, 5.0), (10, 4.0)])
    cls = make_run(tmp_path / "cls-s0", {"task": "classification", "seed": 0}, loss=[(0, 1.2), (10, 0.7)],
                   summary={"best_val_accuracy": 0.75, "best_epoch": 2.0})
    for run, present, absent in ((mt, "best_val_bleu", "best_val_accuracy"), (cls, "best_val_accuracy", "best_val_bleu")):
        result = run_cli(["plot-run", str(run), "-o", str(tmp_path / f"fig-{run.name}"), "--csv", "-"])
        assert result.exit_code == 0, result.output
        (row,) = list(csv.DictReader(io.StringIO(result.stdout)))
        assert f"{present}.mean" in row and not any(name.startswith(absent) for name in row), row
        assert all(value != "" for name, value in row.items() if name.endswith((".mean", ".n"))), row
        text = run_cli(["plot-run", str(run), "-o", str(tmp_path / f"text-{run.name}")])
        assert text.exit_code == 0, text.output
        headers = {"best_val_bleu": "best val BLEU", "best_val_accuracy": "best val accuracy"}
        assert headers[present] in text.stdout and headers[absent] not in text.stdout
        assert "one run each" in text.stdout and "standard error" not in text.stdout
    both = run_cli(["plot-run", str(mt), str(cls), "-o", str(tmp_path / "fig-both"), "--json"])
    groups = json.loads(both.stdout)["groups"]
    assert groups[0]["best_val_accuracy"]["n"] == 0 and groups[1]["best_val_accuracy"]["n"] == 1


def _figures(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """The matplotlib figures plot-run saves, by name."""
    import nbcli.reports.plot_run as run_plots

    figures: dict[str, object] = {}
    real_save = run_plots.save_figure
    monkeypatch.setattr(run_plots, "save_figure", lambda fig, path, meta, outputs, *rest: (
        figures.__setitem__(Path(path).stem, fig), real_save(fig, path, meta, outputs, *rest)))
    return figures


@pytest.mark.slow
@pytest.mark.parametrize("seeds", [1, 2])
def test_captions_promise_a_spread_only_for_several_seeds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         seeds: int) -> None:
    figures = _figures(monkeypatch)
    runs = [fake_run(tmp_path / f"ag-s{seed}", 0.1 * seed, True) for seed in range(seeds)]
    result = run_cli(["plot-run", *map(str, runs), "-o", str(tmp_path / "fig")])
    assert result.exit_code == 0, result.output
    titles = {name: fig.axes[0].get_title() for name, fig in figures.items()}
    for name in ("val_loss", "divergence"):
        assert ("standard error" in titles[name]) == (seeds > 1), (name, titles[name])
    assert ("standard error over their runs" in result.stdout) == (seeds > 1)


@pytest.mark.slow
@pytest.mark.parametrize("seeds", [1, 3])
def test_divergence_does_not_join_step_0_on_its_log_axis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         seeds: int) -> None:
    """Step 0 sits in the symlog axis's linear part: it is drawn as a marker of its own, and the curve
    joins the evaluated steps after it (a straight line from 0 would draw an interpolation the log
    axis does not mean)."""
    import numpy as np

    figures = _figures(monkeypatch)
    runs = [fake_run(tmp_path / f"ag-s{seed}", 0.1 * seed, True) for seed in range(seeds)]
    result = run_cli(["plot-run", *map(str, runs), "-o", str(tmp_path / "fig")])
    assert result.exit_code == 0, result.output
    ax = figures["divergence"].axes[0]
    assert ax.get_xscale() == "symlog"
    drawn = [container.lines[0] for container in ax.containers]      # each errorbar's data line (not its caps)
    joined = [np.asarray(line.get_xdata()) for line in drawn if line.get_linestyle() not in ("None", "none", "")]
    alone = [np.asarray(line.get_xdata()) for line in drawn if line.get_linestyle() in ("None", "none", "")]
    assert joined and all(0 not in x for x in joined), joined
    assert sorted(x.tolist() for x in joined) == [[5, 10], [5, 10]]        # kl_unigram, kl_uniform: steps 5 and 10
    assert sorted(x.tolist() for x in alone) == [[0], [0]]
