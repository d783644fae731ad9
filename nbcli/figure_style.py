"""nb's house style for figures, and the one place a figure is created and written.

Every figure of every command (probe-bias --plot, eval's figures, plot-by-frequency, plot-run,
embedding-stats, attention-maps, generate --out) is built here:

- `house_style` wraps a drawing function in ONE `matplotlib.rc_context(STYLE)`: DejaVu Sans (shipped
  with matplotlib, so the same glyphs on every machine), 9 pt text, the Okabe-Ito palette (readable
  with any colour-vision deficiency: Okabe & Ito 2002, Wong 2011), light grids, no top/right spines,
  fonts embedded as TrueType in PDF (Type 42) and as paths in SVG. Nothing touches matplotlib's
  global rcParams, and only its object API is used (Figure + the Agg canvas): no pyplot, no display.
- `new_figure` sizes it (`FigureOptions.size` over the figure's default); `save_figure` writes it in
  the format named by the file's extension (.pdf, .svg, .png; `figure_format`), at `FigureOptions.dpi`,
  atomically, with the provenance in the file's own metadata (PNG text chunks, PDF info dictionary,
  SVG <metadata>), never in the title. Titles say what is plotted (`model_label`: a repo id or a
  model's folder name, and the corpus); `--title` replaces them (`--title ''`: none).

matplotlib is an optional extra (`pip install 'nbcli[plot]'`), imported inside the functions.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from nbcli.errors import ConfigError

#: Okabe & Ito's colour-blind-safe palette, in the order lines take it (yellow last: faint on white).
PALETTE = {"blue": "#0072B2", "vermillion": "#D55E00", "green": "#009E73", "orange": "#E69F00",
           "purple": "#CC79A7", "sky": "#56B4E9", "black": "#000000", "yellow": "#F0E442"}
#: Reference lines and annotations (uniform distributions, zero lines, counts).
GREY = "#7F7F7F"
CYCLE = tuple(PALETTE.values())

#: The one rcParams set of every nb figure (`house_style`).
STYLE: dict[str, Any] = {
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],
    "mathtext.fontset": "dejavusans",
    "font.size": 9.0,
    "axes.titlesize": 9.0,
    "axes.labelsize": 9.0,
    "figure.titlesize": 10.0,
    "legend.fontsize": 8.0,
    "xtick.labelsize": 8.0,
    "ytick.labelsize": 8.0,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": False,
    "axes.axisbelow": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "lines.linewidth": 1.4,
    "lines.markersize": 4.0,
    "errorbar.capsize": 2.5,
    "legend.frameon": True,
    "legend.framealpha": 0.85,
    "legend.edgecolor": "0.85",
    "image.cmap": "viridis",
    "figure.facecolor": "white",
    "savefig.facecolor": "white",
    "pdf.fonttype": 42,            # TrueType, not Type 3: what publishers ask for; text stays text
    "svg.fonttype": "path",        # glyphs as paths: the same look in every viewer, no font needed
    "svg.hashsalt": "nb",          # stable ids: the same figure gives the same SVG
    "path.simplify": True,
}

#: Figure formats by file extension.
FORMATS = {".pdf": "pdf", ".svg": "svg", ".png": "png"}
DEFAULT_DPI = 200
"""Dots per inch of PNGs (and of the rasterised scatter layers inside PDF and SVG)."""


@dataclass(frozen=True)
class FigureOptions:
    """What a figure-making command's --dpi, --figsize and --title ask for. `size` None: each
    figure's own default (inches); `title` None: the command's title (what is plotted), "" none."""

    dpi: int = DEFAULT_DPI
    size: tuple[float, float] | None = None
    title: str | None = None

    def __post_init__(self) -> None:
        if not 10 <= self.dpi <= 2400:
            raise ConfigError(f"--dpi {self.dpi}: expected 10..2400 dots per inch")
        if self.size is not None and not all(0.5 <= v <= 100 for v in self.size):
            raise ConfigError(f"--figsize {self.size[0]:g},{self.size[1]:g}: each side must be 0.5..100 inches")

    def title_or(self, default: str) -> str:
        """The title to draw: --title when given ('' draws none), else `default`."""
        return default if self.title is None else self.title


DEFAULT_OPTIONS = FigureOptions()


def parse_figsize(spec: str | None) -> tuple[float, float] | None:
    """`--figsize W,H` in inches (`6.5,4`)."""
    if spec is None:
        return None
    parts = spec.replace("x", ",").split(",")
    try:
        width, height = (float(p) for p in parts)
    except ValueError:
        raise ConfigError(f"--figsize {spec!r}: expected W,H in inches, e.g. 6.5,4") from None
    return width, height


def figure_options(dpi: int | None = None, figsize: str | None = None, title: str | None = None) -> FigureOptions:
    """FigureOptions from a command's --dpi, --figsize W,H and --title."""
    return FigureOptions(dpi=DEFAULT_DPI if dpi is None else dpi, size=parse_figsize(figsize), title=title)


def figure_format(path: Path | str, option: str) -> str:
    """'pdf', 'svg' or 'png' from the file name's extension; any other is a one-line error."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        named = f"extension {suffix!r}" if suffix else "no extension"
        raise ConfigError(f"{option} {path}: {named}; name the figure .pdf, .svg or .png")
    return FORMATS[suffix]


def check_format_choice(fmt: str, option: str = "--figure-format") -> str:
    """A folder of figures' format (`--figure-format pdf|svg|png`)."""
    if fmt not in FORMATS.values():
        raise ConfigError(f"{option} {fmt!r}: expected pdf, svg or png")
    return fmt


def require_matplotlib(option: str) -> None:
    """A one-line error naming `option` when matplotlib is missing."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise ConfigError(f"{option} needs matplotlib: pip install 'nbcli[plot]'")


F = TypeVar("F", bound=Callable[..., Any])


def house_style(draw: F) -> F:
    """Run a drawing function inside the house style's rc_context (figure built and saved within it)."""

    @functools.wraps(draw)
    def styled(*args: Any, **kwargs: Any) -> Any:
        try:
            import matplotlib
        except ImportError:
            raise ConfigError("drawing a figure needs matplotlib: pip install 'nbcli[plot]'") from None
        from cycler import cycler

        with matplotlib.rc_context({**STYLE, "axes.prop_cycle": cycler(color=list(CYCLE))}):
            return draw(*args, **kwargs)

    return styled  # type: ignore[return-value]


def new_figure(width: float, height: float, options: FigureOptions | None = None) -> Any:
    """A Figure on the Agg canvas with constrained layout: `options.size` when given, else width x height."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    size = (options or DEFAULT_OPTIONS).size or (width, height)
    fig = Figure(figsize=size, dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def set_title(fig: Any, default: str, options: FigureOptions | None = None) -> str:
    """The figure's title (what is plotted): --title, else `default`; nothing for ''."""
    text = (options or DEFAULT_OPTIONS).title_or(default)
    if text:
        fig.suptitle(wrapped_title(text, fig.get_figwidth()))
    fig.set_label(text)  # the file's Title metadata (save_figure): the whole line
    return text


def wrapped_title(text: str, width_inches: float) -> str:
    """`text` broken at spaces into lines that fit a figure `width_inches` wide at the house title size
    (a long title is not cut off at the figure's edges)."""
    import textwrap

    size = float(STYLE["figure.titlesize"])
    per_line = max(20, int(width_inches * 72 / (0.55 * size)))   # ~0.55 em per character of DejaVu Sans
    return "\n".join(textwrap.fill(line, per_line, break_long_words=False, break_on_hyphens=False) for line in text.splitlines())


def file_metadata(fmt: str, title: str, metadata: Mapping[str, str]) -> dict[str, Any]:
    """The provenance (`metadata`: nb.version, nb.command, inputs and their hashes) in the keys each
    format has: PNG text chunks (Description = `k=v; ...`, and each key on its own), the PDF info
    dictionary (Subject, Keywords), SVG's Dublin Core (Description, Source). No date, so the same
    figure gives the same file."""
    version = metadata.get("nb.version", "")
    creator = version if version.startswith("nb") else f"nb {version}".strip()  # tool_version(): "nb X.Y.Z"
    description = "; ".join(f"{k}={v}" for k, v in metadata.items())
    if fmt == "png":
        return {"Title": title, "Software": creator, "Description": description, **dict(metadata)}
    if fmt == "pdf":
        return {"Title": title, "Creator": creator, "Subject": description,
                "Keywords": ", ".join(metadata), "CreationDate": None}
    return {"Title": title, "Creator": creator, "Description": description,
            "Source": metadata.get("nb.command", "nb"), "Date": None}


def save_figure(fig: Any, path: Path, metadata: Mapping[str, str], outputs: Any = None,
                options: FigureOptions | None = None) -> None:
    """Write `fig` in the format of `path`'s extension, atomically (or as one of `outputs`, an
    `nbcli.atomic.OutputSet` the caller commits), with `metadata` in the file."""
    from nbcli.atomic import atomic_write

    fmt = figure_format(path, "figure")
    title = fig.get_label() or ""
    opened = contextlib.nullcontext(outputs.open(path)) if outputs is not None else atomic_write(path)
    with opened as handle:
        fig.savefig(handle, format=fmt, dpi=(options or DEFAULT_OPTIONS).dpi,
                    metadata=file_metadata(fmt, title, metadata))


def named(directory: Path, stem: str, fmt: str) -> Path:
    """A figure in a folder of figures: DIR/STEM.FMT (`--figure-format`)."""
    return directory / f"{stem}.{fmt}"


def model_label(path: Path | str) -> str:
    """How a title names a model: its Hub repo id when it came from the Hub (the commit goes into
    the file's metadata, not the title), a model folder's name for its weights file, a run's
    `run/step-N` for an nb train checkpoint, else the file or folder name."""
    from nbcli.resolve import hub_origin

    origin = hub_origin(path)
    if origin is not None:
        return origin[0]
    p = Path(path)
    if p.name.startswith("step-") and p.suffix == ".safetensors":
        return f"{p.parent.name}/{p.stem}" if p.parent.name else p.stem
    if p.name == "model.safetensors" or p.name.endswith(".safetensors.index.json"):
        return p.parent.name or p.name
    return p.name


def corpus_label(corpus: Sequence[str | Path] | None) -> str:
    """How a title names a corpus: its first file's name, and how many more there are."""
    names = [Path(str(c)).name or str(c) for c in corpus or []]
    if not names:
        return ""
    return names[0] + (f" + {len(names) - 1} more" if len(names) > 1 else "")


def provenance(command: str, **inputs: Any) -> dict[str, str]:
    """A figure's metadata: nb's version, the command and its inputs (paths; None left out), and
    the Hub repo id and commit of any input that came from the Hub."""
    from nbcli.provenance import tool_version
    from nbcli.resolve import hub_inputs_metadata

    paths = {f"nb.{k}": str(v) for k, v in inputs.items() if v is not None and v != ""}
    hub = hub_inputs_metadata(v for v in inputs.values() if isinstance(v, (str, Path)) and v)
    return {"nb.version": tool_version(), "nb.command": command, **paths, **hub}
