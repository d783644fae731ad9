"""Every figure of nbcli.plots and nbcli.reports.plot_run in each format (PDF, SVG, PNG through Agg), checked
through the figure object (axes labels, scales, legends, error bars, markers), its file (the magic
bytes, the provenance in the metadata) and, for two figures, against a committed baseline image."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from matplotlib.container import ErrorbarContainer  # noqa: E402

from nbcli import plots  # noqa: E402
from nbcli.reports import plot_run as run_plots  # noqa: E402
from nbcli.errors import ConfigError  # noqa: E402
from nbcli.figure_style import FigureOptions, figure_format, parse_figsize  # noqa: E402
from tests import figure_data  # noqa: E402

BASELINES = Path(__file__).parent / "baseline_images"
MAGIC = {"png": b"\x89PNG\r\n\x1a\n", "pdf": b"%PDF-", "svg": b"<?xml"}


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The Figure objects the functions under test save, in order."""
    figures: list[Any] = []
    for module in (plots, run_plots):
        real = module.save_figure

        def keep(fig: Any, *args: Any, real: Any = real, **kwargs: Any) -> None:
            figures.append(fig)
            real(fig, *args, **kwargs)
        monkeypatch.setattr(module, "save_figure", keep)
    return figures


def _labels(ax: Any) -> list[str]:
    legend = ax.get_legend()
    return [t.get_text() for t in legend.get_texts()] if legend is not None else []


def _fig_labels(fig: Any) -> list[str]:
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


def _errorbars(ax: Any) -> list[ErrorbarContainer]:
    return [c for c in ax.containers if isinstance(c, ErrorbarContainer)]


def _check(name: str, fig: Any) -> None:
    """What the paper's counterpart has: labelled axes, its scales, error bars, markers, a legend."""
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.axison and ax.get_label() != "<colorbar>"]
    assert axes, name
    title = fig._suptitle.get_text() if fig._suptitle is not None else ""
    if name == "frequency_direction":
        (ax,) = axes
        assert ax.get_xscale() == "log" and "corpus frequency" in ax.get_xlabel() and "b}_{" in ax.get_ylabel()
        (bars,) = _errorbars(ax)
        assert bars.has_yerr and bars.lines[0].get_marker() == "o"
        assert any("Spearman ρ = 0.810" in t for t in _labels(ax)) and "bin mean ± std" in _labels(ax)
    elif name == "cosine_histogram":
        (ax,) = axes
        assert "cos" in ax.get_xlabel() and ax.get_ylabel() and len(_labels(ax)) == 2
    elif name == "zipfian":
        scatter, ones, zeros = axes
        # one title (the figure's), the projection labelled in words, and no bar chart mixing both ideals
        assert title == "tiny-gpt2: Zipfian whitening" and len(fig.texts) == 1  # the suptitle alone
        assert "/ std" not in scatter.get_ylabel() and "standard deviations" in scatter.get_ylabel()
        assert "whitening raises it by 10.2%" in scatter.get_title() and "-10.2" not in scatter.get_title()
        assert "1 = isotropic" in ones.get_ylabel() and "0 = isotropic" in zeros.get_ylabel()
        assert [t.get_text() for t in ones.get_xticklabels()] == ["Sym1\nunigram", "Sym2\nunigram", "Z ratio\nuniform",
                                                                 "Z ratio\nunigram"]
        assert [t.get_text() for t in zeros.get_xticklabels()] == ["uniform", "unigram"]
        assert _labels(ones) == ["raw", "Zipfian-whitened"]
    elif name == "bias_effect":
        left, right = axes
        assert left.get_xscale() == left.get_yscale() == "log" and right.get_xscale() == "log"
        assert len(_errorbars(left)) == 2 and {"unigram", "uniform 1/V"} <= set(_labels(left))
        assert "Spearman" in right.get_title() and right.get_ylabel().startswith("$\\log_{10}")
    elif name == "by_frequency":
        upper, lower = axes[:2]
        assert upper.get_title(loc="left") == "all parameters" and lower.get_title(loc="left") == "output bias dropped"
        assert "log-unigram" in lower.get_xlabel() and "log-probability" in upper.get_ylabel()
        for ax in (upper, lower):
            assert _labels(ax) == ["bias init 0", "bias init unigram"]
            bars = _errorbars(ax)
            assert len(bars) == 2 and all(b.has_yerr for b in bars)
            assert [b.lines[0].get_marker() for b in bars] == ["o", "s"]
        # the tokens per bin are the top axis's labels, not text beside the error bars
        (top,) = upper.child_axes
        assert [t.get_text() for t in top.get_xticklabels()] == [
            f"{b['tokens']:,}" for b in figure_data.by_frequency_section(5, 0.0)["bins"]]
        assert len(upper.texts) == 0 and "tokens per bin" in top.get_xlabel()
    elif name == "embedding_stats":
        stored, scaled = axes
        assert stored.get_xscale() == scaled.get_xscale() == "symlog" and "√D" not in stored.get_xlabel()
        assert "sqrt{D}" in scaled.get_xlabel() and _fig_labels(fig) == ["range [min, max]", "mean ± σ"]
    elif name == "diversity":
        (ax,) = axes
        assert "perplexity" in ax.get_xlabel() and "diversity" in ax.get_ylabel()
        assert ax.lines[0].get_marker() == "o" and "logit adjust 0.5" in _labels(ax)
    elif name == "attention_maps":
        # 2 heads x (2 distinct checkpoints + the target), then 5 patterns: 0 % and 1 % found one checkpoint
        maps = [ax for ax in axes if ax.images]
        assert len(maps) == 2 * 3 + 5
        headers = [ax.get_title() for ax in maps[:3]]
        assert headers == ["step 0\n(0 %, 1 %)", "step 100\n(100 %)", "target"]
        assert maps[0].get_ylabel() == "layer 1 head 0\nAG [Next]"
        assert any(ax.get_label() == "<colorbar>" for ax in fig.axes)


@pytest.mark.parametrize("fmt", [pytest.param("pdf", marks=pytest.mark.slow), pytest.param("svg", marks=pytest.mark.slow),
                                 "png"])  # the inner loop (--quick) draws each figure once
@pytest.mark.parametrize("name", sorted(figure_data.FIGURES))
def test_each_figure_in_each_format(name: str, fmt: str, tmp_path: Path, drawn: list[Any]) -> None:
    path = tmp_path / f"{name}.{fmt}"
    figure_data.FIGURES[name](path)
    data = path.read_bytes()
    assert data.startswith(MAGIC[fmt])
    (fig,) = drawn
    _check(name, fig)
    if fmt == "svg":
        assert b"<dc:description>nb.version=test; nb.command=test</dc:description>" in data
        assert b"<dc:date>" not in data  # no date: the same figure gives the same file
    elif fmt == "pdf":
        assert b"nb.version=test; nb.command=test" in data and b"CreationDate" not in data


def test_png_metadata_size_dpi_and_title(tmp_path: Path, drawn: list[Any]) -> None:
    from PIL import Image

    path = tmp_path / "f.png"
    figure_data.draw_diversity(path, FigureOptions(dpi=50, size=(4.0, 3.0), title="my title"))
    with Image.open(path) as png:
        assert png.size == (200, 150)
        assert png.text["Title"] == "my title" and png.text["nb.command"] == "test"
        assert png.text["Description"] == "nb.version=test; nb.command=test" and png.text["Software"] == "nb test"
    assert drawn[0]._suptitle.get_text() == "my title"
    figure_data.draw_diversity(tmp_path / "g.png", FigureOptions(title=""))
    assert drawn[1]._suptitle is None  # --title '': none


def test_the_style_stays_inside_its_context(tmp_path: Path) -> None:
    import matplotlib

    before = dict(matplotlib.rcParams)
    figure_data.draw_frequency_direction(tmp_path / "f.svg")
    assert dict(matplotlib.rcParams) == before


@pytest.mark.parametrize("width", [3.0, 7.5])
def test_a_long_title_is_wrapped_inside_the_figure(width: float) -> None:
    """A title of many run names (nb reproduce's arms) breaks into lines within the figure's width,
    every word kept, where one line was cut off at both edges; the file's Title keeps the whole line."""
    import matplotlib

    from nbcli.figure_style import STYLE, new_figure, set_title

    text = "nb train runs: " + ", ".join(f"SST2-BERT-arm_{i}_Shuffled" for i in range(4)) + " and 1 more"
    with matplotlib.rc_context(STYLE):
        fig = new_figure(width, 3.0)
        fig.add_subplot().plot([0, 1], [0, 1])
        assert set_title(fig, text) == text and fig.get_label() == text
        fig.canvas.draw()
        box = fig._suptitle.get_window_extent(fig.canvas.get_renderer())
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width
    assert fig._suptitle.get_text().split() == text.split() and "\n" in fig._suptitle.get_text()


def test_the_arms_legend_is_below_the_axes_never_over_a_curve() -> None:
    """plot-run's curve figures put the arms' legend under the axes: with five long labels it covered
    curves and bands in every corner inside them."""
    import matplotlib

    from nbcli.figure_style import STYLE, new_figure

    with matplotlib.rc_context(STYLE):
        fig = new_figure(7.5, 4.6)
        ax = fig.add_subplot()
        for i in range(5):
            ax.plot(range(6), [0.4 + 0.05 * i * t for t in range(6)], label=f"SST2-BERT-arm_{i} (best 0.6 ± 0.02, 3 runs)")
        run_plots.below_axes_legend(fig)
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        legend, axes = fig.legends[0].get_window_extent(renderer), ax.get_tightbbox(renderer)
    assert legend.y1 <= axes.y0 and len(fig.legends[0].get_texts()) == 5


def test_the_svg_is_the_same_file_each_time(tmp_path: Path) -> None:
    figure_data.draw_by_frequency(tmp_path / "a.svg")
    figure_data.draw_by_frequency(tmp_path / "b.svg")
    assert (tmp_path / "a.svg").read_bytes() == (tmp_path / "b.svg").read_bytes()


@pytest.mark.parametrize("fmt", ["pdf", "svg", "png"])
def test_run_figures_in_each_format(fmt: str, tmp_path: Path, drawn: list[Any]) -> None:
    written = figure_data.draw_run_figures(tmp_path, fmt)
    assert [p.name for p in written] == [f"{n}.{fmt}" for n in ("val_loss", "divergence", "bias")]
    assert all(p.read_bytes().startswith(MAGIC[fmt]) for p in written)
    val_loss, divergence, bias = drawn
    (ax,) = divergence.axes
    assert ax.get_xscale() == "symlog" and "evaluated steps" in ax.get_xlabel()
    curves = [line for line in ax.lines if len(line.get_xdata()) > 0]
    assert all(line.get_marker() == "o" for line in curves)  # a marker at each evaluation
    joined = [line for line in curves if line.get_linestyle() != "None"]
    at_zero = [line for line in curves if line.get_linestyle() == "None"]
    # each arm x (unigram, uniform): the evaluations after step 0 joined, step 0 a marker of its own
    assert len(joined) == len(at_zero) == 4 and all(0 not in line.get_xdata() for line in joined)
    assert all(list(line.get_xdata()) == [0] for line in at_zero)
    assert {"unigram", "zero", "KL(p_θ ‖ unigram)", "KL(p_θ ‖ uniform)"} == set(_labels(ax))
    assert all(line.get_marker() == "o" for line in val_loss.axes[0].lines if len(line.get_xdata()) > 0)
    assert bias.axes[0].get_ylabel() == "‖b‖₂" and bias._suptitle.get_text() == "nb train runs: unigram, zero"


def test_divergence_has_standard_error_bars_over_seeds(tmp_path: Path, drawn: list[Any]) -> None:
    """Paper 000 fig. 1: each arm's mean over its seeds, bars of ± the standard error (ddof 1)."""
    figure_data.draw_run_figures(tmp_path, "png", seeds=2)
    (ax,) = drawn[1].axes
    bars = _errorbars(ax)
    # two arms x (unigram, uniform) x (step 0 on its own, the joined evaluations after it)
    assert len(bars) == 8 and all(b.has_yerr for b in bars)
    segments = bars[0].lines[2][0].get_segments()
    half = [abs(seg[1][1] - seg[0][1]) / 2 for seg in segments]
    np.testing.assert_allclose(half, np.std([0.0, 0.05], ddof=1) / np.sqrt(2), rtol=1e-6)


@pytest.mark.parametrize("name", ["by_frequency", "attention_maps"])
def test_matches_the_committed_baseline(name: str, tmp_path: Path) -> None:
    """Fixed data, DejaVu Sans and the one style: the pixels match tests/baseline_images/NAME.png
    (RMS tolerance 2 of 255: freetype builds differ in antialiasing, not in layout)."""
    from matplotlib.testing.compare import compare_images

    actual = tmp_path / f"{name}.png"
    figure_data.FIGURES[name](actual, FigureOptions(dpi=60))
    assert compare_images(str(BASELINES / f"{name}.png"), str(actual), tol=2) is None


def test_figure_names_and_sizes_are_one_line_errors() -> None:
    assert [figure_format(f"f{ext}", "-o") for ext in (".pdf", ".SVG", ".png")] == ["pdf", "svg", "png"]
    with pytest.raises(ConfigError, match=r"^-o fig.jpg: extension '.jpg'; name the figure .pdf, .svg or .png$"):
        figure_format("fig.jpg", "-o")
    with pytest.raises(ConfigError, match="no extension"):
        figure_format("fig", "--plot")
    assert parse_figsize("6.5,4") == (6.5, 4.0) and parse_figsize(None) is None
    for bad in ("6", "a,b", "1,2,3"):
        with pytest.raises(ConfigError, match="--figsize"):
            parse_figsize(bad)
    with pytest.raises(ConfigError, match="each side must be 0.5..100 inches"):
        FigureOptions(size=(0.1, 4.0))
    with pytest.raises(ConfigError, match="--dpi 5"):
        FigureOptions(dpi=5)


def test_check_figure_outputs_refuses_an_unknown_format_and_an_input(tmp_path: Path) -> None:
    from nbcli.errors import OutputError
    from nbcli.plots import check_figure_outputs

    source = tmp_path / "in.png"
    source.write_bytes(b"x")
    check_figure_outputs("--plot", [tmp_path / "fig.pdf", tmp_path / "fig.svg"], [source])
    with pytest.raises(ConfigError, match="--plot .*fig.jpg: extension '.jpg'"):
        check_figure_outputs("--plot", [tmp_path / "fig.jpg"], [source])
    with pytest.raises(OutputError, match="same file as the input"):
        check_figure_outputs("--plot", [source], [source])
    assert source.read_bytes() == b"x"


def test_cosine_histogram_series_do_not_hide_each_other(tmp_path: Path, drawn: list[Any]) -> None:
    rng = np.random.default_rng(0)
    before, after = rng.normal(0.3, 0.1, 5000), rng.normal(0.3, 0.1, 5000)  # fully overlapping
    plots.plot_cosine_histogram(tmp_path / "c.png", before, after, mean_before=0.3, mean_after=0.3, title="t",
                                metadata={"nb.version": "test"})
    ax = drawn[0].axes[0]
    outlines = [p for p in ax.patches if not p.get_fill()]
    fills = [p for p in ax.patches if p.get_fill()]
    assert len(outlines) == 2, "each series is drawn as an unfilled step outline"
    assert all(p.get_facecolor()[3] <= 0.25 for p in fills), "fills are light enough to see through"
    assert len({tuple(np.round(p.get_edgecolor()[:3], 3)) for p in outlines}) == 2


def test_the_palette_is_okabe_ito(tmp_path: Path, drawn: list[Any]) -> None:
    from matplotlib.colors import to_hex

    figure_data.draw_by_frequency(tmp_path / "f.png")
    colours = [to_hex(b.lines[0].get_color()) for b in _errorbars(drawn[0].axes[0])]
    assert colours == ["#0072b2", "#d55e00"]
