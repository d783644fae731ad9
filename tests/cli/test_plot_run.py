"""nb plot-run: figures from run directories, ALC as an independent trapezoid, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nbcli.cli import app
from nbcli.train.runs import read_run

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
    (directory / "config.json").write_text(json.dumps({"seed": 0}))
    return directory


def test_figures_overlay_runs_and_report_alc(tmp_path: Path) -> None:
    runs = [fake_run(tmp_path / "ag-s0", 0.0, True), fake_run(tmp_path / "ag-s1", 0.1, True),
            fake_run(tmp_path / "plain-s0", 0.3, False)]
    out = tmp_path / "fig"
    result = CliRunner().invoke(app, ["plot-run", *map(str, runs), "-o", str(out), "--json"])
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
    runner = CliRunner()
    result = runner.invoke(app, ["plot-run", str(empty), "-o", str(tmp_path / "o")])
    assert result.exit_code == 0 and "no figures" in result.stdout
    result = runner.invoke(app, ["plot-run", str(tmp_path / "nothing"), "-o", str(tmp_path / "o")])
    assert result.exit_code == 1 and "no log.jsonl" in result.output and "Traceback" not in result.output
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "log.jsonl").write_text('{"step": 0}\nnot json\n')
    result = runner.invoke(app, ["plot-run", str(tmp_path / "bad"), "-o", str(tmp_path / "o")])
    assert result.exit_code == 1 and "log.jsonl:2" in result.output
    run = fake_run(tmp_path / "r", 0.0, False)
    (tmp_path / "file").write_text("x")
    result = runner.invoke(app, ["plot-run", str(run), "-o", str(tmp_path / "file")])
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
    result = CliRunner().invoke(app, ["plot-run", str(run), "-o", str(tmp_path / "fig"), "--json"])
    assert result.exit_code == 0, result.output
    (run / "config.json").write_bytes(b"\xff{}")
    result = CliRunner().invoke(app, ["plot-run", str(run), "-o", str(tmp_path / "fig2")])
    assert result.exit_code == 1 and "config.json" in result.output and "not UTF-8" in result.output
    assert not (tmp_path / "fig2").exists()


def test_subprocess_on_a_real_training_run(tmp_path: Path, sp_model: Path, sample_lines: list[str]) -> None:
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(sample_lines[:400]) + "\n")
    env_run = [sys.executable, "-m", "nbcli", "train", "--corpus", str(corpus), "-t", str(sp_model), "--steps", "3",
               "--seq-len", "32", "--batch-size", "4", "--eval-every", "1", "--eval-batches", "1", "--objective",
               "mlm", "--ag-fraction", "0.5", "--ag-alpha", "auto", "--bias-init", "unigram", "--json"]
    assert subprocess.run(env_run + ["--out", str(tmp_path / "run-s0")], capture_output=True).returncode == 0
    proc = subprocess.run([sys.executable, "-m", "nbcli", "plot-run", str(tmp_path / "run-s0"), "-o",
                           str(tmp_path / "fig")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "fig").iterdir()) == ["attention_guidance.png", "bias.png",
                                                                    "divergence.png", "val_loss.png"]


def test_figures_commit_together_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure while drawing a later figure leaves none of the earlier ones (one OutputSet)."""
    import nbcli.plots as plots

    original = plots._save_named

    def failing(fig, out_dir, name, metadata, outputs):  # type: ignore[no-untyped-def]
        if name == "bias":
            raise OSError(28, "No space left on device")
        return original(fig, out_dir, name, metadata, outputs)

    monkeypatch.setattr(plots, "_save_named", failing)
    run = fake_run(tmp_path / "ag-s0", 0.0, True)
    out = tmp_path / "fig"
    out.mkdir()
    result = CliRunner().invoke(app, ["plot-run", str(run), "-o", str(out)])
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


def test_the_unigram_regulariser_switch_is_marked(tmp_path: Path) -> None:
    """The step where --unigram-reg-steps switches back to the standard objective is in --json, in
    the PNGs' text chunk, and drawn: the same logs without it in config.json give other pixels."""
    from PIL import Image

    marked = _with_unigram_reg(tmp_path / "a" / "reg-s0", 0.5, 4)
    plain = fake_run(tmp_path / "plain", 0.3, False)
    result = CliRunner().invoke(app, ["plot-run", str(marked), str(plain), "-o", str(tmp_path / "fa"), "--json"])
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
    result = CliRunner().invoke(app, ["plot-run", str(unmarked), str(plain), "-o", str(tmp_path / "fb"), "--json"])
    assert result.exit_code == 0, result.output
    with Image.open(tmp_path / "fa" / "val_loss.png") as a, Image.open(tmp_path / "fb" / "val_loss.png") as b:
        assert _switch_chunk(b) is None
        assert a.size == b.size and a.tobytes() != b.tobytes()
