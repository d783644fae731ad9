"""`nb patch-checkpoint`: the papers' surgery on a safetensors checkpoint, streamed and atomic."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import typer

from nbcli.cli.base import NbCommand
from nbcli.cli.options import (
    AllowVocabMismatchOption, ArchOption, CsvOption, JsonOption, ModelTokenizerOption, RescaleNorm, RoleMapOption,
    SmoothingOption, ThreadsOption, TsvOption, on_threads, output_option, rescale_w_option, seed_option,
    shuffle_mode_option, standardise_option,
)
from nbcli.cli.render import KEY, NUM, TEXT, Col, print_rows

EPILOG = """\
[bold]Operations, applied in this order[/bold] (any combination in one run)

  1 --set-output-bias   b = log p(y), add-k smoothed (paper 000 sec. 3)
  2 --rescale-w         ||W|| = ||b||_2 (paper 000 sec. 4.1); default norm: Frobenius
    --zipfian-whiten-embeddings  v' = Sigma^(-1/2)(v - mu), unigram-weighted (Yokoi et al. 2024)
  3 --standardise-embeddings   x* = (x - mean X) * s / std X + m (paper 002 eq. 1, eq. 4)
  4 --shuffle-embeddings       Pre-trained_Shuffled (paper 002 sec. 3.4)
  5 --scale-ln-bias     b_LN <- LAMBDA b_LN (paper 003 sec. 3.3)
  6 --remove-frequency-direction  w_i <- w_i - <w_i,u> u, u = b_LN/||b_LN|| of the input (paper 003 sec. 3.2)
  (--untie, if given, runs right after 1.)

Touched tensors are computed in float32 and cast back to their dtype; all others are copied byte
for byte, in the kernel, while the surgery runs (unless a tensor is created: --untie, a new
--bias-name). The output keeps the input's metadata and adds `nb.provenance`; it is fsynced and
renamed into place.

[bold]Examples[/bold]

  nb patch-checkpoint openai-community/gpt2 -o gpt2-lam05/ --scale-ln-bias 0.5
  nb patch-checkpoint model.safetensors -o patched.safetensors --set-output-bias counts.safetensors
  nb patch-checkpoint gpt2/ -o gpt2-lam05/ --scale-ln-bias 0.5
  nb patch-checkpoint gpt2.safetensors -o g.safetensors --set-output-bias c.safetensors --bias-name lm_head.bias --rescale-w fro --untie
  nb patch-checkpoint bert.safetensors -o b.safetensors --standardise-embeddings xavier --dry-run
  nb patch-checkpoint m.safetensors -o m2.safetensors --standardise-embeddings match:bert.safetensors:bert.embeddings.word_embeddings.weight
  nb patch-checkpoint m.safetensors -o m.safetensors --in-place --remove-frequency-direction --json
"""


@on_threads
def patch_checkpoint(
    checkpoint: Annotated[Path, typer.Argument(
        metavar="IN", show_default=False,
        help="A .safetensors file, a sharded checkpoint directory, or its *.safetensors.index.json, or a Hub "
        "repo id org/name[@rev] (cache first; see docs/hub.md).")],
    output: Annotated[Optional[Path], output_option(
        "Output file; a directory for a sharded input (same shard layout, rewritten index) or a model "
        "folder (config.json beside IN): OUT is then a model folder, with config.json (updated where the "
        "surgery needs it, e.g. tie_word_embeddings after --untie), tokenizer and other non-weight files "
        "copied. End OUT with .safetensors to write the tensors alone.")] = None,
    arch: ArchOption = "auto",
    mapping: RoleMapOption = None,
    set_output_bias: Annotated[Optional[Path], typer.Option(
        "--set-output-bias", metavar="COUNTS.safetensors",
        help="Set the output bias to the log-unigram distribution of this counts file (nb count-unigrams). "
        "Counts shorter than the vocabulary (padded vocabularies) give padding rows the smoothed floor; "
        "longer counts are an error.")] = None,
    smoothing: SmoothingOption = "add-k:1",
    tokenizer: ModelTokenizerOption = None,
    allow_vocab_mismatch: AllowVocabMismatchOption = False,
    new_tensor_dtype: Annotated[Literal["float32", "bfloat16", "float16", "float64"], typer.Option(
        "--new-tensor-dtype", metavar="float32|bfloat16|float16|float64",
        help="dtype of a created output bias (--bias-name). Default float32: no loader needs the "
        "checkpoint's dtype (transformers casts each tensor to its parameter's), and bfloat16 keeps "
        "only 2-3 digits of log-unigram values near -20.")] = "float32",
    bias_name: Annotated[Optional[str], typer.Option(
        "--bias-name", metavar="NAME",
        help="Output-bias tensor to write, created if absent (needed for GPT-2/Llama, which have none). "
        "A created bias is applied by nb's own model, eval, generate and probe-bias; transformers' "
        "from_pretrained drops it (GPT-2 and Llama classes have none): load OUT with nbcli.load_model.")] = None,
    rescale_w: Annotated[Optional[RescaleNorm], rescale_w_option(
        "Scale the output weight W so its matrix norm equals the output bias's l2 norm (paper 000 sec. "
        "4.1, 'matrix l2 norm'). fro = Frobenius (the entries' l2 norm, like for like with the bias vector; "
        "recommended), spectral = largest singular value, none = W left as it is (the default).")] = None,
    untie: Annotated[bool, typer.Option(
        "--untie", help="Write a separate output weight (copy of the tied input embedding) so output-side "
        "operations leave the input embedding alone. Loaders must not re-tie it (transformers: "
        "tie_word_embeddings=false; nb: nb.config is updated).")] = False,
    zipfian_whiten: Annotated[Optional[Path], typer.Option(
        "--zipfian-whiten-embeddings", metavar="COUNTS.safetensors",
        help="Zipfian-whiten the input embedding (Yokoi et al. 2024): v' = Sigma^(-1/2)(v - mu) with "
        "mu = sum p(w) v_w, Sigma = sum p(w)(v_w - mu)(v_w - mu)^T, p the add-k unigram of these counts "
        "(--smoothing; add-k:0 = raw frequencies) and the symmetric (ZCA) root. Runs after --rescale-w, before "
        "--standardise-embeddings. A singular Sigma is an error.")] = None,
    standardise: Annotated[Optional[str], standardise_option("--standardise-embeddings")] = None,
    shuffle: Annotated[bool, typer.Option(
        "--shuffle-embeddings", help="Shuffle the input embedding (Pre-trained_Shuffled, paper 002 sec. 3.4).")] = False,
    shuffle_mode: Annotated[Literal["rows", "rows-columns", "elements"], shuffle_mode_option()] = "rows",
    seed: Annotated[int, seed_option("Seed for --shuffle-embeddings")] = 0,
    scale_ln_bias: Annotated[Optional[str], typer.Option(
        "--scale-ln-bias", metavar="LAMBDA",
        help="Multiply the final LayerNorm bias b_LN by LAMBDA (paper 003 sec. 3.3; the paper uses [0, 1]).")] = None,
    remove_direction: Annotated[bool, typer.Option(
        "--remove-frequency-direction",
        help="Project the b_LN direction (of the input checkpoint) out of every output-embedding row "
        "(paper 003 sec. 3.2).")] = False,
    allow_nonfinite: Annotated[bool, typer.Option(
        "--allow-nonfinite", help="Operate on touched tensors that contain NaN/Inf (default: error).")] = False,
    hash_inputs: Annotated[bool, typer.Option(
        "--hash-inputs/--no-hash-inputs",
        help="Record the sha256 of the checkpoint files in nb.provenance (hashed in a background thread "
        "during the copy; SHA-256 runs at ~1.6 GB/s per core, so on 2 busy cores it can add half the copy "
        "time). A digest is remembered in ~/.cache/nb/sha256 (NB_CACHE_DIR; NB_HASH_CACHE=0: off) under "
        "the file's device, inode, size, mtime and ctime, so patching the same checkpoint again (a sweep "
        "over LAMBDA) does not re-read it; the provenance lists digests taken from the cache. "
        "--no-hash-inputs records size and mtime instead; counts files are always hashed.")] = True,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Write nothing; print the before/after statistics of each touched tensor.")] = False,
    in_place: Annotated[bool, typer.Option(
        "--in-place", help="Allow OUT to be IN (or OUT omitted). IN stays intact until the new file is "
        "complete, then is replaced by rename; a model folder is replaced whole (a copy of it, the new files "
        "written in, swapped in by one rename: every reader sees the old folder or the new one); where no swap "
        "can be made, file by file under a journal the next nb run finishes after a crash.")] = False,
    csv: CsvOption = None,
    tsv: TsvOption = None,
    threads: ThreadsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Patch a safetensors checkpoint: log-unigram output bias, rescaled W, standardised or shuffled embeddings, scaled final-LayerNorm bias, frequency direction removed.

    Reads tensors one at a time through mmap; writes OUT to a temporary file beside it and renames it into place, so a failure leaves no OUT behind and IN is never modified (unless --in-place).
    """  # noqa: E501 (one line per paragraph: help text reflows)
    import atexit
    import gc

    # At exit, Python's final garbage collections walk every object torch created (~0.4 s on this
    # command's 2-core benchmark); frozen objects are skipped. Runs after the output is complete.
    atexit.register(gc.freeze)
    from nbcli.checkpoint import parse_role_map
    from nbcli.cli.console import byte_progress, check_table_targets, print_report, print_warnings
    from nbcli.outputs import model_inputs
    from nbcli.surgery import patch_file, surgery_options

    check_table_targets(as_json, csv, tsv, [*model_inputs(checkpoint), tokenizer])
    options = surgery_options(
        set_output_bias=set_output_bias, smoothing=smoothing, tokenizer=tokenizer,
        allow_vocab_mismatch=allow_vocab_mismatch, new_tensor_dtype=new_tensor_dtype, bias_name=bias_name,
        rescale_w=rescale_w, untie=untie, zipfian_whiten_embeddings=zipfian_whiten, standardise=standardise,
        shuffle=shuffle, shuffle_mode=shuffle_mode, seed=seed, scale_ln_bias=scale_ln_bias,
        remove_frequency_direction=remove_direction, allow_nonfinite=allow_nonfinite)
    with byte_progress("patching") as progress:
        result = patch_file(checkpoint, output, options, arch=arch, mapping=parse_role_map(mapping or []),
                            in_place=in_place, dry_run=dry_run, hash_inputs=hash_inputs, progress=progress)
    print_warnings(result.warnings)
    print_report(result.as_dict(), as_json, _render, csv=csv, tsv=tsv, table="tensors")


STATS = ("norm", "mean", "std", "min", "max")
#: (entry, stat) rows: the tensor's name, role, shape and dtype on its first row only.
COLUMNS = (Col("tensor", TEXT, lambda r: r[0]["name"] + (" (new)" if r[0]["created"] else "") if r[1] == "norm" else ""),
           Col("role", TEXT, lambda r: r[0]["role"] if r[1] == "norm" else ""),
           Col("shape", KEY, lambda r: "x".join(map(str, r[0]["shape"])) if r[1] == "norm" else ""),
           Col("dtype", KEY, lambda r: r[0]["dtype"] if r[1] == "norm" else ""),
           Col("stat", KEY, lambda r: r[1]),
           Col("before", NUM, lambda r: (r[0]["before"] or {}).get(r[1])),
           Col("after", NUM, lambda r: r[0]["after"].get(r[1])))


def _render(report: dict[str, Any]) -> None:
    from nbcli.cli.console import esc, stdout_console

    console = stdout_console()
    title = "dry run: nothing written" if report["dry_run"] else f"wrote {', '.join(report['outputs'])}"
    ops = ", ".join(op["op"] for op in report["operations"])
    console.print(f"[bold]{esc(title)}[/] ({esc(report['architecture'])}; {esc(ops)})")
    rows = [(entry, stat) for entry in report["tensors"] for stat in STATS]
    print_rows("touched tensors, before and after", COLUMNS, rows, "no tensor was touched", console,
               sections=lambda r: r[1] == STATS[-1])


def register(app: typer.Typer) -> None:
    app.command("patch-checkpoint", epilog=EPILOG, cls=NbCommand)(patch_checkpoint)
