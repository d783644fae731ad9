"""probe-bias figures: both histogram series stay visible where they overlap."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nbcli import plots

pytest.importorskip("matplotlib")


def test_cosine_histogram_series_do_not_hide_each_other(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    figures = []
    real_save = plots.save_figure
    monkeypatch.setattr(plots, "save_figure", lambda fig, path, meta, outputs: (figures.append(fig), real_save(fig, path, meta, outputs)))
    rng = np.random.default_rng(0)
    before, after = rng.normal(0.3, 0.1, 5000), rng.normal(0.3, 0.1, 5000)  # fully overlapping
    plots.plot_cosine_histogram(tmp_path / "c.png", before, after, mean_before=0.3, mean_after=0.3, title="t",
                                metadata={"nb.version": "test"})
    assert (tmp_path / "c.png").stat().st_size > 0
    ax = figures[0].axes[0]
    outlines = [p for p in ax.patches if not p.get_fill()]
    fills = [p for p in ax.patches if p.get_fill()]
    assert len(outlines) == 2, "each series is drawn as an unfilled step outline"
    assert all(p.get_facecolor()[3] <= 0.25 for p in fills), "fills are light enough to see through"
    assert {tuple(np.round(p.get_edgecolor()[:3], 3)) for p in outlines}.__len__() == 2


def test_check_figure_outputs_refuses_a_non_png_name_and_an_input(tmp_path: Path) -> None:
    from nbcli.errors import ConfigError, OutputError
    from nbcli.plots import check_figure_outputs

    pytest.importorskip("matplotlib")
    source = tmp_path / "in.png"
    source.write_bytes(b"x")
    check_figure_outputs("--plot", [tmp_path / "fig.png"], [source])
    with pytest.raises(ConfigError, match="--plot .*fig.jpg: the figure is a PNG"):
        check_figure_outputs("--plot", [tmp_path / "fig.jpg"], [source])
    with pytest.raises(OutputError, match="same file as the input"):
        check_figure_outputs("--plot", [source], [source])
    assert source.read_bytes() == b"x"
