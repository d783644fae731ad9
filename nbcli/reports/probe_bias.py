"""The `nb probe-bias` report: which statistics a checkpoint's tensors allow, computed and collected.

`build_report` takes the tensors (by role) and counts and returns a JSON-ready dict whose keys are
the documented interface (`frequency_direction.spearman`, `isotropy.mean_cosine`, ...). The
formulas live in `nbcli.probes`; this module decides what can be computed from what, and says why
a section is absent. `load_probe_inputs` reads them from a checkpoint through the one reader and
architecture table (`nbcli.checkpoint`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nbcli import probes
from nbcli.analysis.bins import frequency_bins
from nbcli.analysis.geometry import FirstPass, SecondPass, first_pass, full_float32, second_pass
from nbcli.analysis.kernels import Device, accelerator_possible
from nbcli.analysis.probe_precision import precision_section
from nbcli.threads import check_threads, cpu_threads
from nbcli.analysis.zipfian import zipfian_section, zipfian_weights
from nbcli.checkpoint.reader import RowBlocks
from nbcli.counts import exact_total, log_unigram
from nbcli.errors import CheckpointError, ConfigError
from nbcli.figure_style import FigureOptions

#: Roles the report uses, in the order the error message lists them.
ROLES_USED = ("output_weight", "final_ln_bias", "output_bias")


@dataclass
class ProbeInputs:
    """Tensors by role (None = the checkpoint has no such tensor) and the corpus counts."""

    counts: np.ndarray | None  # int64 [V] (padded with zeros to the embedding's rows when shorter); None: no --counts
    output_weight: probes.Rows | None = None  # [V, d], read lazily by row blocks
    final_ln_bias: np.ndarray | None = None  # [d] float32
    output_bias: np.ndarray | None = None  # [V] float32
    names: dict[str, str | None] = field(default_factory=dict)  # role -> tensor name


Progress = Callable[[str], None]


def _none(_: str) -> None:
    return None


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def report_steps(inputs: ProbeInputs, partition: bool, whiten: bool = True) -> int:
    """How many progress steps `build_report` will announce (for a progress bar's total)."""
    zipf = whiten and inputs.output_weight is not None and inputs.counts is not None
    return (inputs.output_weight is not None) * (1 + (partition or zipf)) \
        + (inputs.output_bias is not None and inputs.counts is not None)


def build_report(inputs: ProbeInputs, *, bins: int = 10, smoothing_k: float = 1.0, zipfian_k: float = 0.0,
                 partition: bool = True, whiten: bool = True, device: str = "auto",
                 threads: int | None = None, progress: Progress = _none) -> dict[str, Any]:
    """All sections that the available roles allow; absent ones carry `present: false` and a note.

    Sections: frequency_direction (paper 003 sec. 3.2, table 3), isotropy (paper 003 sec. 3.2;
    Mu & Viswanath 2018), output_bias (paper 000 app. B.5), frequency_bins (paper 003 fig. 3),
    zipfian (Yokoi et al. 2024; weights p from `zipfian_k`, 0 = raw frequencies). W is read at most
    twice (`nbcli.analysis.geometry`: moments, then projections), the heavy algebra on `device`
    (auto: CUDA when present, else numpy on the CPU), on `threads` CPU threads (None: every core); the precision
    of each statistic is the report's `precision` section (`nbcli.analysis.probe_precision`).
    Returns the report and, under the private key `_arrays`, the per-token scores and bins for
    plotting.
    """
    dev = probe_device(device)
    n_threads = check_threads(threads)
    zipf = whiten and inputs.output_weight is not None and inputs.counts is not None
    weights, weights_note = _weights(inputs, zipf, zipfian_k)
    first = second = None
    if inputs.output_weight is not None:
        with full_float32(dev), cpu_threads(n_threads):
            first = _first_pass(inputs, weights, partition, dev, n_threads, progress)
            if partition or zipf:  # as report_steps counts
                progress(", ".join(["eigendecompositions"] + ["partition functions"] * partition
                                   + ["Zipfian whitening"] * zipf))
                second = second_pass(inputs.output_weight, first, _usable_b_ln(inputs), weights, partition, dev,
                                     n_threads)
    arrays: dict[str, Any] = {}
    report: dict[str, Any] = {
        "counts": _counts_section(inputs.counts, smoothing_k),
        "frequency_direction": _frequency_direction_section(inputs, first, arrays),
        "isotropy": _isotropy_section(inputs, first, second),
        "output_bias": _output_bias_section(inputs, smoothing_k, progress),
        "frequency_bins": _bins_section(inputs.counts, arrays, bins),
        "zipfian": _zipfian_section(inputs, second, zipfian_k, partition, whiten, weights_note, arrays)}
    report["precision"] = precision_section(str(dev), n_threads)
    report["_arrays"] = arrays
    return report


def probe_device(choice: str) -> Device:
    """Where `build_report`'s algebra runs (`nbcli.analysis.kernels`): auto (CUDA when present), cpu or
    cuda. The CPU is "cpu", numpy's: torch is imported only where a GPU driver is installed."""
    if choice not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"device {choice!r}: expected auto, cpu or cuda")
    if choice == "cpu" or (choice == "auto" and not accelerator_possible()):
        return "cpu"
    from nbcli.train.runtime import resolve_device

    device = resolve_device(choice)
    return "cpu" if device.type == "cpu" else device


def _usable_b_ln(inputs: ProbeInputs) -> np.ndarray | None:
    """b_LN when it defines a direction (not absent, not all zeros)."""
    b_ln = inputs.final_ln_bias
    return b_ln if b_ln is not None and bool(np.any(b_ln != 0)) else None


def _weights(inputs: ProbeInputs, zipf: bool, k: float) -> tuple[np.ndarray | None, str | None]:
    """The Zipfian section's unigram weights p (None when the section is not computed, with a note
    when they are undefined)."""
    if not zipf or inputs.output_weight is None or inputs.counts is None:
        return None, None
    return zipfian_weights(inputs.counts, int(inputs.output_weight.shape[0]), k)


def _first_pass(inputs: ProbeInputs, weights: np.ndarray | None, partition: bool, device: Any, threads: int,
                progress: Progress) -> FirstPass:
    """Pass 1 over W, and the one-line error naming the tensor when W is not finite."""
    w = inputs.output_weight
    assert w is not None
    progress("<b_LN, w_i>, mean cosines" + (", moments" if partition or weights is not None else ""))
    first = first_pass(w, _usable_b_ln(inputs), weights, partition, device, threads)
    if not first.finite():
        where = f"{w.info.file}: " if isinstance(w, RowBlocks) else ""
        raise CheckpointError(f"{where}tensor {inputs.names.get('output_weight')!r} (output_weight) has non-finite values "
                              "(or values whose products overflow float32)")
    return first


def _counts_section(counts: np.ndarray | None, smoothing_k: float) -> dict[str, Any] | None:
    if counts is None:
        return None
    return {"tokens_seen": int((counts > 0).sum()), "vocab_size": int(counts.size), "total": exact_total(counts),
            "smoothing_k": smoothing_k}


def _frequency_direction_section(inputs: ProbeInputs, first: FirstPass | None, arrays: dict[str, Any]) -> dict[str, Any]:
    """Section 1: <b_LN, w_i> against the counts (paper 003 sec. 3.2, table 3)."""
    w, b_ln, counts = inputs.output_weight, inputs.final_ln_bias, inputs.counts
    fd: dict[str, Any] = {"present": False, "spearman": None, "pearson_log": None,
                          "tokens": None if counts is None else int((counts > 0).sum()), "b_ln_norm": None, "note": None}
    if w is None or b_ln is None:
        fd["note"] = "needs " + " and ".join(r for r, t in (("output weight", w), ("final LayerNorm bias", b_ln))
                                              if t is None) + " (absent)"
        return fd
    fd["b_ln_norm"] = float(np.linalg.norm(b_ln.astype(np.float64)))
    if first is None or first.scores is None:
        fd["note"] = "b_LN is all zeros (e.g. an untrained model): it defines no direction"
    elif counts is None:
        fd["note"] = "needs corpus counts (--counts)"
    else:
        corr = probes.frequency_correlation(first.scores.values, counts)
        fd.update(present=True, spearman=_finite_or_none(corr.spearman), pearson_log=_finite_or_none(corr.pearson_log),
                  tokens=corr.tokens)
        arrays["scores"] = first.scores.values
    return fd


def _isotropy_section(inputs: ProbeInputs, first: FirstPass | None, second: SecondPass | None) -> dict[str, Any]:
    """Section 2: mean cosine with and without the b_LN direction (paper 003 sec. 3.2) and the
    partition ratio (Mu & Viswanath 2018) of the output embedding rows."""
    w = inputs.output_weight
    iso: dict[str, Any] = {"present": w is not None, "mean_cosine": None, "mean_cosine_without_bias_direction": None,
                           "partition_ratio": None, "rows": None,
                           "note": None if w is not None else "needs the output weight (absent)"}
    if w is None or first is None:
        return iso
    iso["rows"] = int(w.shape[0])
    iso["mean_cosine"] = _finite_or_none(first.cosine.result())
    if first.cosine_without is not None:
        iso["mean_cosine_without_bias_direction"] = _finite_or_none(first.cosine_without.result())
    else:
        iso["note"] = "no usable b_LN direction to remove"
    if second is not None and second.raw is not None and second.raw.partition is not None:
        part = probes.partition_isotropy_from_log_z(second.raw.log_partition()[0])
        iso.update(partition_ratio=part.ratio, partition_log_z_min=part.log_z_min,
                   partition_log_z_max=part.log_z_max, partition_directions=part.directions)
    else:
        iso["partition_ratio_note"] = "skipped (--no-partition)"
    return iso


def _output_bias_section(inputs: ProbeInputs, smoothing_k: float, progress: Progress) -> dict[str, Any]:
    """Section 3: the output bias against the unigram distribution (paper 000 app. B.5)."""
    b_out, counts = inputs.output_bias, inputs.counts
    ob: dict[str, Any] = {"present": b_out is not None, "spearman": None,
                          "tokens": None if counts is None else int((counts > 0).sum()),
                          "kl_unigram_to_bias": None, "kl_bias_to_unigram": None, "norm": None,
                          "note": None if b_out is not None else "no output bias"}
    if b_out is not None and counts is None:
        ob.update(norm=float(np.linalg.norm(b_out.astype(np.float64))),
                  note="Spearman and KL to the unigram need corpus counts (--counts)")
    elif b_out is not None:
        progress("output bias")
        ob["spearman"] = _finite_or_none(probes.frequency_correlation(b_out, counts).spearman)
        kl = probes.bias_vs_unigram(b_out, log_unigram(counts, smoothing_k))
        ob.update(kl_unigram_to_bias=kl.kl_unigram_to_bias, kl_bias_to_unigram=kl.kl_bias_to_unigram, norm=kl.norm)
    return ob


def _bins_section(counts: np.ndarray | None, arrays: dict[str, Any], bins: int) -> list[dict[str, Any]]:
    """Section 4: <b_LN, w_i> in equal-width bins of log10(count) (paper 003 fig. 3)."""
    if "scores" not in arrays or counts is None:
        return []
    arrays["bins"] = frequency_bins(arrays["scores"], counts, bins)
    return [{"log10_lo": item.log10_lo, "log10_hi": item.log10_hi, "count_lo": 10 ** item.log10_lo,
             "count_hi": 10 ** item.log10_hi, "tokens": item.tokens, "mean": _finite_or_none(item.mean),
             "std": _finite_or_none(item.std)} for item in arrays["bins"]]


def _zipfian_section(inputs: ProbeInputs, second: SecondPass | None, k: float, partition: bool, whiten: bool,
                     note: str | None, arrays: dict[str, Any]) -> dict[str, Any]:
    """Section 5: frequency-weighted geometry and Zipfian whitening (`nbcli.analysis.zipfian`), or
    why it is absent."""
    why = ("skipped (--no-whiten)" if not whiten else "needs the output weight (absent)" if inputs.output_weight is None
           else "needs corpus counts (--counts)" if inputs.counts is None else None)
    if why is not None:
        return {"present": False, "note": why}
    assert inputs.counts is not None
    section, zipf_arrays = zipfian_section(second, inputs.counts, k, partition, note)
    if zipf_arrays:
        arrays["zipfian"] = zipf_arrays
    return section


# ---------------------------------------------------------------------------------------------
# Reading the inputs


def load_counts_for(path: Path, vocab_rows: int, checkpoint: Any = None, *, tokenizer: Path | None = None,
                    allow_mismatch: bool = False) -> tuple[np.ndarray, dict[str, Any], list[str]]:
    """Counts as int64 [vocab_rows] plus their description and warnings.

    Accepts nb counts files and any safetensors file with an integer `counts` vector (warning that
    no tokenizer can be checked). The counts are checked against the checkpoint's tokenizer and
    vocabulary and padded to its rows by nb's one policy (nbcli.checkpoint.vocab.fit_counts).
    """
    from nbcli.checkpoint.vocab import TOKENIZER_HINT, fit_counts, model_vocab

    fitted = fit_counts(path, model_vocab(checkpoint, vocab_rows, tokenizer, hint=TOKENIZER_HINT),
                        allow_mismatch=allow_mismatch, allow_foreign=True)
    return fitted.counts, fitted.info, fitted.warnings


def _vector(checkpoint: Any, name: str | None, length: int | None, role: str) -> np.ndarray | None:
    """A role vector as float32 [n] (stored as [n], or as a [1, n] row like Marian's and BART's
    final_logits_bias), checked for shape and finiteness."""
    from nbcli.checkpoint.roles import vector_length

    if name is None:
        return None
    reader = checkpoint.rows(name)
    n = vector_length(reader.shape)
    if n is None or (length is not None and n != length):
        want = f"[{length}]" if length is not None else "1-D"
        raise CheckpointError(f"{reader.info.file}: tensor {name!r} ({role}) has shape {list(reader.shape)}, expected {want}")
    values = reader.read_all().reshape(n)
    if not np.all(np.isfinite(values)):
        raise CheckpointError(f"{reader.info.file}: tensor {name!r} ({role}) has non-finite values")
    return values


def load_probe_inputs(checkpoint_path: Path, counts_path: Path | None, *, arch: str = "auto",
                      mapping: list[str] | tuple[str, ...] = (), tokenizer: Path | None = None,
                      allow_vocab_mismatch: bool = False) -> tuple[ProbeInputs, dict[str, Any], list[str]]:
    """Open the checkpoint, resolve roles (architecture table + ROLE=TENSOR overrides), read counts.

    Returns the inputs, a header for the report (checkpoint, architecture, roles, shapes, counts
    file) and warnings. Roles the checkpoint lacks are None; if none of the sections can be computed
    (no output weight and no output bias) this is a CheckpointError listing the roles looked for.
    """
    from nbcli.checkpoint.reader import open_checkpoint

    return probe_inputs(open_checkpoint(checkpoint_path), counts_path, arch=arch, mapping=mapping,
                        tokenizer=tokenizer, allow_vocab_mismatch=allow_vocab_mismatch)


def probe_inputs(checkpoint: Any, counts_path: Path | None, *, arch: str = "auto",
                 mapping: list[str] | tuple[str, ...] = (), tokenizer: Path | None = None,
                 allow_vocab_mismatch: bool = False) -> tuple[ProbeInputs, dict[str, Any], list[str]]:
    """`load_probe_inputs` on an opened checkpoint: a file's (`open_checkpoint`) or one held in memory
    (`nbcli.checkpoint.memory.MemoryCheckpoint`: a state dict or a loaded transformers model)."""
    from nbcli.checkpoint.format import FLOAT_CODES

    checkpoint_path = checkpoint.path
    architecture, names, notes = _resolve_roles(checkpoint, arch, mapping)
    for role in ROLES_USED:
        name = names.get(role)
        if name is not None and checkpoint.dtype(name) not in FLOAT_CODES:
            raise CheckpointError(f"{checkpoint.shard_of(name)}: tensor {name!r} ({role}) is "
                                  f"{checkpoint.dtype(name)}, expected a floating-point tensor")
    if names.get("output_weight") is None and names.get("output_bias") is None:
        looked = ", ".join(f"{role} ({' or '.join(_candidates(architecture, role)) or 'no name known'})"
                           for role in ROLES_USED)
        raise CheckpointError(f"{checkpoint_path}: nothing to probe: found none of the roles {looked}; "
                              "name them with --arch or --map ROLE=TENSOR")
    weight = checkpoint.rows(names["output_weight"]) if names.get("output_weight") else None
    if weight is not None and len(weight.shape) != 2:
        raise CheckpointError(f"{weight.info.file}: tensor {weight.name!r} (output_weight) has shape "
                              f"{list(weight.shape)}, expected [vocab, d]")
    if weight is not None and 0 in weight.shape:
        raise CheckpointError(f"{weight.info.file}: tensor {weight.name!r} (output_weight) is empty {list(weight.shape)}")
    d = int(weight.shape[1]) if weight is not None else None
    b_ln = _vector(checkpoint, names.get("final_ln_bias"), d, "final_ln_bias")
    vocab = int(weight.shape[0]) if weight is not None else None
    b_out = _vector(checkpoint, names.get("output_bias"), vocab, "output_bias")
    if vocab is None and b_out is not None:
        vocab = int(b_out.shape[0])
    assert vocab is not None  # the output weight or the output bias exists (checked above)
    if counts_path is not None:
        counts, counts_info, warnings = load_counts_for(counts_path, vocab, checkpoint, tokenizer=tokenizer,
                                                        allow_mismatch=allow_vocab_mismatch)
    else:
        counts, counts_info, warnings = None, None, []
    inputs = ProbeInputs(counts=counts, output_weight=weight, final_ln_bias=b_ln, output_bias=b_out,
                         names={role: names.get(role) for role in ROLES_USED})
    header = {"checkpoint": str(checkpoint_path), "architecture": architecture,
              "roles": dict(inputs.names), "vocab_size": vocab, "d_model": d,
              "dtype": checkpoint.dtype(weight.name) if weight is not None else None, "counts_file": counts_info,
              "notes": notes}
    return inputs, header, warnings


def _candidates(architecture: str, role: str) -> list[str]:
    from nbcli.checkpoint.architectures import candidate_names

    return list(candidate_names(architecture, role))


def _resolve_roles(checkpoint: Any, arch: str, mapping: list[str] | tuple[str, ...]) -> tuple[str, dict[str, str | None], list[str]]:
    """(architecture, role -> tensor, notes) from the one architecture table, with --map overrides
    (a layout no signature matches, with --map: architecture custom). An encoder saved without
    its prediction head has no output weight: its input embedding is probed instead (isotropy
    only), and a note says so."""
    from nbcli.checkpoint.roles import parse_role_map, resolve_roles

    roles = resolve_roles(checkpoint, arch, parse_role_map(list(mapping)))
    names = {role: roles.get(role) for role in ROLES_USED}
    notes = []
    if not roles.head and names["output_weight"] is None and roles.get("input_embedding") is not None:
        names["output_weight"] = roles.get("input_embedding")
        notes.append(f"no prediction head (an encoder saved without its LM head): the isotropy section is of the "
                     f"input embedding {names['output_weight']!r}; there is no b_LN or output bias")
    else:
        notes.extend(f"{role}: {why}" for role, why in roles.notes.items() if role in ROLES_USED and names[role] is None)
    return roles.architecture, names, notes


#: The figures `write_probe_plots` draws, in this order (each named STEM.FORMAT: `probe_plot_paths`).
PROBE_PLOTS = ("frequency_direction", "cosine_histogram", "zipfian")


def probe_plot_paths(directory: Path, fmt: str = "png") -> list[Path]:
    """Where `write_probe_plots` may write, in PROBE_PLOTS order, as `fmt` (pdf, svg, png)."""
    return [directory / f"{stem}.{fmt}" for stem in PROBE_PLOTS]


def finish_report(inputs: ProbeInputs, header: dict[str, Any], warnings: list[str], *, bins: int = 10,
                  smoothing_k: float = 1.0, zipfian_k: float = 0.0, partition: bool = True, whiten: bool = True,
                  device: str = "auto", threads: int | None = None,
                  progress: Callable[[str], None] = _none) -> tuple[dict[str, Any], dict[str, Any]]:
    """The whole `nb probe-bias` report (what `--json` prints) from `load_probe_inputs`' result:
    `build_report`'s sections after the checkpoint's header, the counts file's identity in the
    counts section, and the warnings. Returns (report, arrays the figures draw)."""
    report = build_report(inputs, bins=bins, smoothing_k=smoothing_k, zipfian_k=zipfian_k, partition=partition,
                          whiten=whiten, device=device, threads=threads, progress=progress)
    arrays = report.pop("_arrays")
    header = dict(header)
    counts_file = header.pop("counts_file")
    if report["counts"] is not None:
        report["counts"].update(counts_file)
    return {**header, **report, "warnings": warnings}, arrays


def write_probe_plots(directory: Path, inputs: ProbeInputs, report: dict[str, Any],
                      arrays: dict[str, Any], fmt: str = "png", options: FigureOptions | None = None) -> list[str]:
    """PROBE_PLOTS into `directory` (made here if absent), committed together or not at all: corpus
    frequency against <b_LN, w_i> (paper 003 fig. 3) where counts and b_LN allow it, and the
    histogram of sampled pairwise cosines of W with and without the b_LN direction, and the Zipfian
    whitening figure where counts allow it (`nbcli.plots.plot_zipfian`), as `fmt` files drawn with
    `options` (--dpi, --figsize, --title). Each file's metadata names the checkpoint and counts it was
    drawn from (and their Hub commits); titles name the model and the counts. Returns the paths written."""
    from nbcli.figure_style import model_label, provenance

    cnt = report["counts"] or {}
    meta = provenance("probe-bias", checkpoint=report["checkpoint"], counts=cnt.get("path"),
                      counts_sha256=cnt.get("sha256"))
    name = model_label(report["checkpoint"]) + (f", counts {Path(cnt['path']).name}" if cnt.get("path") else "")
    written: list[str] = []
    from nbcli.atomic.checks import make_output_dir, remove_made

    made = make_output_dir(directory, what=f"--plot {directory}")   # and its missing parents (nbcli.outputs)
    try:
        _write_plots(probe_plot_paths(directory, fmt), inputs, report, arrays, meta, name, written,
                     options or FigureOptions())
    except BaseException:
        remove_made(made)  # nothing of this run is left: the folders it made go too
        raise
    return written


def _write_plots(paths: list[Path], inputs: ProbeInputs, report: dict[str, Any], arrays: dict[str, Any],
                 meta: dict[str, str], name: str, written: list[str], options: FigureOptions) -> None:
    from nbcli import plots
    from nbcli.atomic import OutputSet

    with OutputSet() as outputs:
        if "scores" in arrays:
            path = paths[0]
            plots.plot_frequency_direction(
                path, inputs.counts, arrays["scores"], arrays["bins"],
                rho=report["frequency_direction"]["spearman"] or float("nan"),
                title=f"{name}: corpus frequency and the b_LN direction", metadata=meta, outputs=outputs,
                options=options)
            written.append(str(path))
        if inputs.output_weight is not None:
            iso = report["isotropy"]
            b_ln = inputs.final_ln_bias if iso["mean_cosine_without_bias_direction"] is not None else None
            cosines = probes.cosine_sample(inputs.output_weight, remove=b_ln)
            path = paths[1]
            plots.plot_cosine_histogram(
                path, cosines.before, cosines.after, mean_before=iso["mean_cosine"],
                mean_after=iso["mean_cosine_without_bias_direction"],
                title=f"{name}: pairwise cosines of output embeddings ({cosines.rows:,} sampled tokens)",
                metadata=meta, outputs=outputs, options=options)
            written.append(str(path))
        if "zipfian" in arrays:
            path = paths[2]
            plots.plot_zipfian(path, inputs.counts, arrays["zipfian"]["before"], arrays["zipfian"]["after"],
                               report["zipfian"], title=f"{name}: Zipfian whitening (Yokoi et al. 2024)",
                               metadata=meta, outputs=outputs, options=options)
            written.append(str(path))
