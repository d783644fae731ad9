"""`nb eval --bias-effect / --by-frequency` (paper 003 fig. 1, paper 000 fig. 4) and `nb plot-by-frequency`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nbcli.analysis import frequency_effects as fx
from nbcli.corpus import read_documents
from nbcli.lm.perplexity import evaluate, tokenize_documents
from nbcli.lm.runner import load_runner
from nbcli.tokenizers import load_tokenizer
from tests.cli.helpers import assert_one_line_error, invoke, run_nb
from tests.conftest import english_like_lines
from tests.lm.conftest import nb_lm, save_nb_model  # noqa: F401  (fixture)


@pytest.fixture(scope="module")
def heldout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("heldout") / "heldout.txt"
    path.write_text("\n".join(english_like_lines(12, seed=9, unicode=False)) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def train_counts(tmp_path_factory: pytest.TempPathFactory, sp_model: Path) -> Path:
    corpus = tmp_path_factory.mktemp("train") / "train.txt"
    corpus.write_text("\n".join(english_like_lines(60, seed=3, unicode=False)) + "\n", encoding="utf-8")
    out = corpus.parent / "train.counts"
    assert invoke("count-unigrams", corpus, "-t", sp_model, "-o", out).exit_code == 0
    return out


@pytest.mark.parametrize("positions,space", [("all", "prob"), ("target", "log")])
def test_bias_effect_section_is_the_analysis_of_an_independent_pass(nb_lm: Path, sp_model: Path, heldout: Path,
                                                                     positions: str, space: str) -> None:
    result = invoke("eval", nb_lm, "--corpus", heldout, "-t", sp_model, "--bias-effect", "--bins", "5",
                    "--bias-effect-positions", positions, "--bias-effect-space", space, "--json")
    assert result.exit_code == 0, result.stderr
    section = json.loads(result.stdout)["bias_effect"]
    runner = load_runner(nb_lm)
    scored = tokenize_documents(read_documents([str(heldout)]), load_tokenizer(sp_model), runner.vocab_size)
    stats = evaluate(runner, scored, token_stats=True,
                     token_shifts={"ln_bias": runner.ln_bias_logit_shift()}).token_stats
    want = fx.bias_effect(fx.per_token_probability(stats, positions, space),  # type: ignore[arg-type]
                          fx.per_token_probability(stats.without["ln_bias"], positions, space),  # type: ignore[arg-type]
                          scored.target_counts(runner.vocab_size), bins=5)
    assert (section["positions"], section["space"]) == (positions, space)
    assert [b["tokens"] for b in section["bins"]] == [b["tokens"] for b in want["bins"]]
    for got, ref in zip(section["bins"], want["bins"]):
        for key in ("log10_p_with", "log10_p_without", "log10_change"):
            assert (got[key] is None) == (ref[key] is None)
            if ref[key] is not None:
                assert got[key] == pytest.approx(ref[key], abs=1e-4)
    assert any(abs(b["log10_change"] or 0) > 1e-3 for b in section["bins"])  # b_LN matters in this model


@pytest.mark.slow
def test_by_frequency_plots_and_overlays(nb_lm: Path, sp_model: Path, heldout: Path, train_counts: Path,
                                         tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    other = save_nb_model(tmp_path / "other.safetensors", load_tokenizer(sp_model).vocab_size,
                          load_tokenizer(sp_model).sha256, seed=4)
    reports = []
    for name, model in (("a", nb_lm), ("b", other)):
        png = tmp_path / f"{name}.png"
        result = invoke("eval", model, "--corpus", heldout, "-t", sp_model, "--by-frequency", train_counts,
                        "--by-frequency-plot", png, "--json")
        assert result.exit_code == 0, result.stderr
        section = json.loads(result.stdout)["by_frequency"]
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and section["plot"] == str(png)
        assert section["output_bias_dropped"] and sum(b["tokens"] for b in section["bins"]) == section["tokens"] > 0
        (tmp_path / f"{name}.json").write_text(result.stdout)
        reports.append(tmp_path / f"{name}.json")
    done = run_nb("plot-by-frequency", *reports, "--label", "first", "--label", "second", "-o", tmp_path / "o.png")
    assert done.returncode == 0, done.stderr.decode()
    assert "first" in done.stdout.decode() and "second" in done.stdout.decode()
    assert (tmp_path / "o.png").read_bytes()[:4] == b"\x89PNG"
    result = invoke("plot-by-frequency", *reports, "--json")
    series = json.loads(result.stdout)["series"]
    # labelled by the model: a model folder's name (the fixture's nb-lm*/model.safetensors), else the file's
    assert [s["label"] for s in series] == [nb_lm.parent.name, "other.safetensors"]
    assert series[0]["bins"] == json.loads(reports[0].read_text())["by_frequency"]["bins"]


def test_bias_effect_needs_b_ln_and_refuses_a_png_onto_an_input(sp_model: Path, heldout: Path, nb_lm: Path,
                                                                tmp_path: Path) -> None:
    tok = load_tokenizer(sp_model)
    flat = save_nb_model(tmp_path / "flat.safetensors", tok.vocab_size, tok.sha256, ln_bias=False)
    runner = load_runner(flat)
    assert runner.has_ln_bias()  # a zero b_LN still is one: the change is exactly 0
    result = invoke("eval", flat, "--corpus", heldout, "-t", sp_model, "--bias-effect", "--json")
    assert result.exit_code == 0, result.stderr
    assert all(b["log10_change"] in (None, 0.0) for b in json.loads(result.stdout)["bias_effect"]["bins"])
    before = heldout.read_bytes()
    pytest.importorskip("matplotlib")
    result = invoke("eval", nb_lm, "--corpus", heldout, "-t", sp_model, "--bias-effect-plot", heldout.with_suffix(".png"))
    assert result.exit_code == 0
    bad = tmp_path / "same.png"
    bad.write_bytes(nb_lm.read_bytes())
    result = invoke("eval", bad, "--corpus", heldout, "-t", sp_model, "--bias-effect-plot", bad)
    assert result.exit_code != 0
    assert_one_line_error(result.stderr, "same.png")
    assert heldout.read_bytes() == before and bad.read_bytes() == nb_lm.read_bytes()


@pytest.mark.parametrize("args,fragment", [
    (("--bias-effect-positions", "x"), "--bias-effect-positions"), (("--bias-effect-space", "x"), "--bias-effect-space"),
    (("--by-frequency-plot", "f.png"), "--by-frequency"),
    (("--bias-effect-plot", "f.jpg"), "extension '.jpg'; name the figure .pdf, .svg or .png")])
def test_bad_figure_options_are_one_line_errors(nb_lm: Path, sp_model: Path, heldout: Path, args: tuple[str, ...],
                                                fragment: str) -> None:
    result = invoke("eval", nb_lm, "--corpus", heldout, "-t", sp_model, *args)
    assert result.exit_code != 0
    assert_one_line_error(result.stderr, fragment)


def test_plot_by_frequency_rejects_what_is_not_a_report(tmp_path: Path) -> None:
    (tmp_path / "r.json").write_text(json.dumps({"rows": []}))
    result = invoke("plot-by-frequency", tmp_path / "r.json")
    assert result.exit_code != 0
    assert_one_line_error(result.stderr, "r.json", "by_frequency")
    np.testing.assert_equal((tmp_path / "r.json").read_text(), json.dumps({"rows": []}))
