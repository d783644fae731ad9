"""`nb probe-bias`: frequency-direction, isotropy and output-bias reports for a checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import typer

from nbcli.cli.base import NbCommand
from nbcli.cli.options import (
    AllowVocabMismatchOption, ArchOption, DpiOption, FigsizeOption, FigureFormatOption, JsonOption,
    CsvOption, ModelTokenizerOption, RoleMapOption, SmoothingOption, ThreadsOption, TitleOption, TsvOption, counts_option,
    table_option,
)
from nbcli.cli.render import KEY, NUM, TEXT, Col, num, percent, print_pairs, print_rows

EPILOG = """\
[bold]Definitions[/] (W = output embedding rows w_i, b_LN = final LayerNorm bias, b = output bias)

  [bold]frequency_direction.spearman[/]  Spearman rho (ties get average ranks) between <b_LN, w_i>
      and the corpus count of token i, over tokens with count > 0 (paper 003 sec. 3.2, table 3).
  [bold]frequency_direction.pearson_log[/]  Pearson r between <b_LN, w_i> and log(count), same tokens.
  [bold]isotropy.mean_cosine[/]  (1/n^2) sum_i sum_j cos(w_i, w_j) over all n non-zero rows, i = j
      included (paper 003 sec. 3.2), computed exactly as ||sum_i w_i/||w_i||||^2 / n^2.
  [bold]isotropy.mean_cosine_without_bias_direction[/]  the same after
      w_i <- w_i - <w_i, b_LN/||b_LN||> b_LN/||b_LN||.
  [bold]isotropy.partition_ratio[/]  Mu & Viswanath's I(W) = min_c Z(c) / max_c Z(c),
      Z(c) = sum_i exp(<c, w_i>), c over the unit eigenvectors of W^T W taken with both signs
      (an eigenvector's sign is arbitrary). 1 = isotropic. Costs O(V d^2); --no-partition skips it.
  [bold]output_bias.kl_unigram_to_bias / kl_bias_to_unigram[/]  KL(u || softmax(b)) and
      KL(softmax(b) || u) in nats, u = the add-k smoothed unigram distribution (--smoothing, the same
      formula nb patch-checkpoint uses, so a bias it set gives 0); output_bias.norm = ||b||_2
      (paper 000 app. B.5, figs. 11-12). output_bias.spearman: rho between b and the counts.
  [bold]frequency_bins[/]  --bins equal-width bins of log10(count) over seen tokens, each with the
      number of tokens and the mean and population std of <b_LN, w_i> (paper 003 fig. 3).
  [bold]zipfian[/]  frequency-weighted geometry (Yokoi et al. 2024, Zipfian whitening), needs --counts:
      p(w) = --zipfian-weights: raw (default, the paper's relative frequencies: a token with count 0
      has weight 0) or add-k:K; mu = sum p(w) w, Sigma = sum p(w)(w - mu)(w - mu)^T,
      w' = Sigma^(-1/2)(w - mu) with the symmetric (ZCA) root. --no-whiten skips the section.
  [bold]zipfian.raw / zipfian.whitened[/]  of W and of its whitened rows, _unigram under p, _uniform
      under 1/V. Yokoi et al.'s scores (1 = symmetric): sym1 = 1 - ||sum p(w) w|| / sum p(w) ||w||
      (first moment), sym2 = -sum l log l / log d, l = the covariance's eigenvalues over their sum
      (second moment). nb's own: mean_cosine = sum_ij p_i p_j cos(w_i, w_j); partition_ratio =
      min_c Z / max_c Z, Z(c) = sum_i p_i exp(<c, w_i>), c over the eigenvectors of the measured
      matrix's W^T W (both signs).
  [bold]zipfian.frequency_direction[/]  u = b_LN (or, without one, mu); share_before / share_after =
      sum_i p_i cos^2(w_i, u) of raw / whitened rows; removed = 1 - after / before;
      spearman_before / _after: rho(<w_i, u>, count).

Roles the checkpoint lacks are reported as absent. Tensors are read one at a time, in row blocks,
converted to float32; W is read twice, the d x d and V x d^2 algebra runs on --device: numpy's
BLAS and LAPACK on the CPU (on --threads threads; torch is not imported), torch on CUDA. [bold]precision[/]: what each
statistic is computed in and its tolerance against float64: float32 products summed in float64,
but the unigram-weighted covariance Sigma in float64 (whitening divides by its small eigenvalues);
eigendecompositions in float64.
Counts shorter than the embedding (padded vocabularies) are padded with zeros.

[bold]Examples[/]

  nb probe-bias openai-community/gpt2 --counts counts.safetensors
  nb probe-bias gpt2/model.safetensors --counts counts.safetensors
  nb probe-bias bert/ -c counts.safetensors --bins 20 --plot figures/
  nb probe-bias ckpt/ -c counts.safetensors --arch llama --no-partition --json
  nb probe-bias other.safetensors -c counts.safetensors --map output_weight=lm.W --map final_ln_bias=lm.ln.b
"""


def probe_bias(
    checkpoint: Annotated[Path, typer.Argument(
        metavar="CHECKPOINT", help="A .safetensors file, a sharded model's index JSON, or a directory holding "
        "either, or a Hub repo id org/name[@rev] (cache first; see docs/hub.md).")],
    counts: Annotated[Optional[Path], counts_option(
        "Counts from `nb count-unigrams`, or any safetensors file with an integer `counts` vector "
        "of the vocabulary's length (then no tokenizer can be checked). Without counts only what "
        "needs none is computed: isotropy, partition ratio, ||b_LN||, ||b||.")] = None,
    tokenizer: ModelTokenizerOption = None,
    allow_vocab_mismatch: AllowVocabMismatchOption = False,
    arch: ArchOption = "auto",
    mapping: RoleMapOption = None,
    plot: Annotated[Optional[Path], typer.Option(
        "--plot", metavar="DIR", help="Write the figures into DIR (frequency_direction, cosine_histogram, zipfian; "
        "in --figure-format; needs matplotlib: pip install 'nbcli[plot]').")] = None,
    figure_format: FigureFormatOption = "png",
    dpi: DpiOption = 200,
    figsize: FigsizeOption = None,
    title: TitleOption = None,
    csv: CsvOption = None,
    tsv: TsvOption = None,
    table: Annotated[Optional[str], table_option("frequency_bins")] = None,
    bins: Annotated[int, typer.Option("--bins", min=1, max=1000, help="Log-frequency bins in the binned table.")] = 10,
    smoothing: SmoothingOption = "add-k:1",
    zipfian_weights: Annotated[str, typer.Option(
        "--zipfian-weights", metavar="raw|add-k:K",
        help="Unigram weights p(w) of the zipfian section: raw relative frequencies (Yokoi et al.'s; "
        "tokens with count 0 get weight 0) or the add-k smoothed unigram. --smoothing is for the KL only.")] = "raw",
    partition: Annotated[bool, typer.Option(
        "--partition/--no-partition",
        help="Compute Mu & Viswanath's partition-function isotropy (O(V d^2): the slow part for large d).")] = True,
    whiten: Annotated[bool, typer.Option(
        "--whiten/--no-whiten",
        help="With --counts: Yokoi et al. 2024's symmetry scores and isotropy under uniform and unigram "
        "weighting before and after Zipfian whitening, and how much of the frequency direction whitening "
        "removes.")] = True,
    device: Annotated[Literal["auto", "cpu", "cuda"], typer.Option(
        "--device", help="Where the eigendecompositions and V x d^2 products run: auto = CUDA when present, "
        "else CPU (numpy; torch is imported only where a GPU driver is installed). Rows are read as float32 "
        "either way.")] = "auto",
    threads: ThreadsOption = None,   # the core sets them and records them in its precision section
    as_json: JsonOption = False,
) -> None:
    """Print frequency-direction, isotropy and output-bias reports for a checkpoint (papers 003, 000).

    How strongly the final LayerNorm bias b_LN encodes corpus frequency in the output embedding W,
    how anisotropic W is with and without the b_LN direction, and how far softmax of the output bias
    is from the unigram distribution. Definitions below; --json prints the same report as one object.
    """
    from nbcli.cli.console import check_table_targets, print_report, print_warnings, step_progress
    from nbcli.outputs import model_inputs
    from nbcli.analysis.zipfian import parse_zipfian_weights
    from nbcli.counts import parse_smoothing
    from nbcli.figure_style import figure_options
    from nbcli.reports.probe_bias import finish_report, load_probe_inputs, probe_device, report_steps, write_probe_plots

    k = parse_smoothing(smoothing)
    zipfian_k = parse_zipfian_weights(zipfian_weights)
    probe_device(device)  # --device cuda without CUDA: the one-line error before anything is read
    looks = figure_options(dpi, figsize, title)
    check_table_targets(as_json, csv, tsv, [*model_inputs(checkpoint), tokenizer, counts])
    if plot is not None:
        _check_plot_dir(plot, [*model_inputs(checkpoint), tokenizer, counts], figure_format)
    inputs, header, warnings = load_probe_inputs(checkpoint, counts, arch=arch, mapping=mapping or [],
                                                 tokenizer=tokenizer, allow_vocab_mismatch=allow_vocab_mismatch)
    with step_progress("probing", report_steps(inputs, partition, whiten)) as advance:
        report, arrays = finish_report(inputs, header, warnings, bins=bins, smoothing_k=k, zipfian_k=zipfian_k,
                                       partition=partition, whiten=whiten, device=device, threads=threads,
                                       progress=lambda status: advance(1, status=status))
    print_warnings(warnings)  # once the probe has succeeded: a failure is one error line alone
    if plot is not None:
        report["plots"] = write_probe_plots(plot, inputs, report, arrays, figure_format, looks)
    print_report(report, as_json, _render, csv=csv, tsv=tsv, table=table)


def _check_plot_dir(directory: Path, inputs: list[Path], fmt: str) -> None:
    """--plot DIR: matplotlib present, DIR writable, its figures none of the inputs; DIR is made."""
    from nbcli.checkpoint.reader import checkpoint_inputs
    from nbcli.plots import check_figure_outputs
    from nbcli.reports.probe_bias import probe_plot_paths

    check_figure_outputs("--plot", probe_plot_paths(directory, fmt),
                         [*checkpoint_inputs(inputs[0]), *inputs[1:]], folder=directory)
    # made (if absent) only when the figures are written: a failing probe leaves nothing behind


BIN_COLUMNS = (Col("bin", NUM, lambda r: r[0]),
               Col("count range", KEY, lambda r: (r[1]["count_lo"], r[1]["count_hi"]),
                   lambda v: f"{num(v[0])} to {num(v[1])}"),
               Col("tokens", NUM, lambda r: r[1]["tokens"]), Col("mean", NUM, lambda r: r[1]["mean"]),
               Col("std", NUM, lambda r: r[1]["std"]))
ZIPFIAN_MEASURES = (("sym1_unigram", "Sym1 (1st moment), unigram-weighted"),
                    ("sym2_unigram", "Sym2 (2nd moment), unigram-weighted"),
                    ("sym1_uniform", "Sym1 (1st moment), uniform"), ("sym2_uniform", "Sym2 (2nd moment), uniform"),
                    ("mean_cosine_uniform", "mean cosine, uniform"),
                    ("mean_cosine_unigram", "mean cosine, unigram-weighted"),
                    ("partition_ratio_uniform", "partition ratio, uniform"),
                    ("partition_ratio_unigram", "partition ratio, unigram-weighted"))


def _render(report: dict[str, Any]) -> None:
    from nbcli.cli.console import esc, stdout_console

    console = stdout_console()
    roles = ", ".join(f"{role}={name or 'absent'}" for role, name in report["roles"].items())
    console.print(f"[bold]{esc(report['checkpoint'])}[/] ({esc(report['architecture'])}): {esc(roles)}")
    for note in report.get("notes", []):
        console.print(f"note: {esc(note)}")
    cnt = report["counts"]
    if cnt is None:
        console.print("counts: none (--counts): only what needs no corpus counts is computed")
    else:
        console.print(f"counts: {esc(cnt['path'])} ({num(cnt['total'])} tokens; {num(cnt['tokens_seen'])} of "
                      f"{num(cnt['vocab_size'])} vocabulary entries seen)")

    fd = report["frequency_direction"]
    title = "1. frequency direction (paper 003 sec. 3.2, table 3)"
    if fd["present"]:
        print_pairs(title, [
            ("Spearman ρ(<b_LN, w_i>, count)", num(fd["spearman"]), f"over {num(fd['tokens'])} tokens with count > 0"),
            ("Pearson r(<b_LN, w_i>, log count)", num(fd["pearson_log"]), "same tokens"),
            ("‖b_LN‖₂", num(fd["b_ln_norm"]), "")], "", note=True)
    else:
        norm = f"; ‖b_LN‖₂ = {num(fd['b_ln_norm'])}" if fd["b_ln_norm"] is not None else ""
        console.print(f"[bold]{title}[/]: absent: {esc(fd['note'])}{norm}")

    iso = report["isotropy"]
    pairs = []
    if iso["present"]:
        pairs = [("mean pairwise cosine", num(iso["mean_cosine"]), f"over {num(iso['rows'])} rows"),
                 ("mean cosine without the b_LN direction", num(iso["mean_cosine_without_bias_direction"]), esc(iso["note"] or "")),
                 ("partition ratio min Z(c) / max Z(c)", num(iso["partition_ratio"]),
                  esc(iso.get("partition_ratio_note", "1 = isotropic")))]
    print_pairs("2. isotropy of output embeddings (paper 003 sec. 3.2; Mu & Viswanath 2018)", pairs,
                f"absent: {iso['note']}", note=True)

    ob = report["output_bias"]
    pairs = []
    if ob["present"] and cnt is not None:
        pairs = [("Spearman ρ(b, count)", num(ob["spearman"]), f"over {num(ob['tokens'])} tokens with count > 0"),
                 ("KL(unigram ‖ softmax(b))", num(ob["kl_unigram_to_bias"]),
                  f"nats, add-k:{num(cnt['smoothing_k'])} unigram"),
                 ("KL(softmax(b) ‖ unigram)", num(ob["kl_bias_to_unigram"]), "nats"), ("‖b‖₂", num(ob["norm"]), "")]
    elif ob["present"]:
        pairs = [("‖b‖₂", num(ob["norm"]), esc(ob["note"] or ""))]
    print_pairs("3. output bias vs unigram (paper 000 app. B.5)", pairs, "the checkpoint has no output bias", note=True)

    print_rows("4. <b_LN, w_i> by log-frequency bin (paper 003 fig. 3)", BIN_COLUMNS,
               list(enumerate(report["frequency_bins"] or [], 1)),
               "no bins (they need --counts and a b_LN)")
    _render_zipfian(console, report["zipfian"])
    _render_precision(report["precision"])
    for path in report.get("plots", []):
        console.print(f"wrote {esc(path)}")


def whitening_sentence(removed: float) -> str:
    """What whitening did to the frequency direction's share, in words that fit either sign."""
    if removed >= 0:
        return f"whitening removes {percent(removed)} of the frequency direction's share"
    return f"whitening raises the frequency direction's share by {percent(-removed)} (removes none of it)"


def _render_zipfian(console: Any, zipf: dict[str, Any]) -> None:
    from nbcli.cli.console import esc

    title = "5. frequency-weighted isotropy and Zipfian whitening (Yokoi et al. 2024)"
    if not zipf["present"]:
        console.print(f"[bold]{title}[/]: {esc(zipf['note'] or 'absent')}")
        return
    rows = [(label, zipf["raw"].get(k), zipf["whitened"].get(k)) for k, label in ZIPFIAN_MEASURES
            if k in zipf["raw"] or k in zipf["whitened"]]
    fd = zipf["frequency_direction"]
    if fd is not None:
        rows.append((f"share along u = {zipf['direction']} (Σ p cos²)", fd["share_before"], fd["share_after"]))
        rows.append(("Spearman ρ(<w_i, u>, count)", fd["spearman_before"], fd["spearman_after"]))
    print_rows(f"{title}; weights: {zipf['weighting']}",
               (Col("measure", TEXT, lambda r: r[0]), Col("raw", NUM, lambda r: r[1]), Col("whitened", NUM, lambda r: r[2])),
               rows, "no measure")
    if fd is not None and fd["removed"] is not None:
        console.print(whitening_sentence(fd["removed"]))


def _render_precision(precision: dict[str, Any]) -> None:
    rows = [(name, item["precision"], item["tolerance"]) for name, item in precision["statistics"].items()]
    print_rows(f"6. precision ({precision['device']}, {precision['threads']} CPU threads; "
               "tolerance: against a float64 computation)",
               (Col("statistic", TEXT, lambda r: r[0]), Col("computed in", TEXT, lambda r: r[1]),
                Col("tolerance", TEXT, lambda r: r[2])), rows, "no statistic")


def register(app: typer.Typer) -> None:
    app.command("probe-bias", epilog=EPILOG, cls=NbCommand)(probe_bias)
