"""Checkpoints as functions: open, inspect, probe (papers 003, 000), patch (the papers' surgery, on a
file or in memory) and transplant embeddings (paper 002 sec. 3.3)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from nbcli.api.inputs import held_checkpoint, is_path, local_path, optional_path, role_items, role_map
from nbcli.api.reports import CheckpointReport, PatchReport, PathLike, ProbeReport, RoleMap, TransplantReport
from nbcli.arguments import public

if TYPE_CHECKING:
    from nbcli.checkpoint.reader import Checkpoint


@public
def open_checkpoint(path: PathLike) -> Checkpoint:
    """The checkpoint reader: a .safetensors file, a sharded folder or its index.json, opened lazily
    (`.names()`, `.shape(name)`, `.get(name)` a tensor read through mmap, `.metadata`). Pickled
    checkpoints (.bin, .pt) are refused, never unpickled."""
    from nbcli.checkpoint.reader import open_checkpoint as open_file

    return open_file(local_path(path))


@public
def inspect(checkpoint: PathLike | Any, *, arch: str = "auto", mapping: RoleMap = None) -> CheckpointReport:
    """A checkpoint's tensors (name, dtype, shape, bytes, shard), architecture, roles and metadata
    (`nb inspect`); reads only the headers. An unrecognised architecture is reported, not raised.
    `checkpoint`: a path, a loaded model or a state dict (tied names listed once, as saved)."""
    from nbcli.checkpoint.report import checkpoint_report, inspect_checkpoint

    if is_path(checkpoint):
        return CheckpointReport(inspect_checkpoint(local_path(checkpoint), arch, role_map(mapping)))
    held = held_checkpoint(checkpoint)
    return CheckpointReport(checkpoint_report(held, str(held.path), arch, role_map(mapping)))


@public
def probe(checkpoint: PathLike | Any, counts: PathLike | None = None, *, tokenizer: PathLike | None = None,
          allow_vocab_mismatch: bool = False, arch: str = "auto", mapping: RoleMap = None, bins: int = 10,
          smoothing: str = "add-k:1", zipfian_weights: str = "raw", partition: bool = True, whiten: bool = True,
          device: str = "auto", threads: int | None = None) -> ProbeReport:
    """Frequency-direction, isotropy and output-bias statistics (`nb probe-bias`; papers 003, 000).

    `checkpoint`: a path (as the command takes), a loaded transformers model, or a state dict
    (name -> tensor); roles come from the same architecture table either way (a model's
    `config.model_type` picks it as a model folder's config.json does). `counts`: a counts file;
    without it only what needs none is computed. `whiten`: with counts, the Zipfian-whitening section
    (Yokoi et al. 2024) with unigram weights `zipfian_weights` (`raw`, the paper's relative
    frequencies, or `add-k:K`; `smoothing` is for the output bias's KL). `device`: where the heavy
    algebra runs (auto: CUDA when present); `threads`: its CPU threads (None: every core). The
    report's `precision` section says what each statistic was computed in. Nothing is modified.
    """
    from nbcli.analysis.zipfian import parse_zipfian_weights
    from nbcli.counts import parse_smoothing
    from nbcli.reports.probe_bias import finish_report, load_probe_inputs, probe_inputs

    k = parse_smoothing(smoothing)
    zipfian_k = parse_zipfian_weights(zipfian_weights)
    options = {"arch": arch, "mapping": role_items(mapping), "tokenizer": optional_path(tokenizer),
               "allow_vocab_mismatch": allow_vocab_mismatch}
    if is_path(checkpoint):
        inputs, header, warnings = load_probe_inputs(local_path(checkpoint), optional_path(counts), **options)
    else:
        inputs, header, warnings = probe_inputs(held_checkpoint(checkpoint), optional_path(counts), **options)
    report, arrays = finish_report(inputs, header, warnings, bins=bins, smoothing_k=k, zipfian_k=zipfian_k,
                                    partition=partition, whiten=whiten, device=device, threads=threads)
    return ProbeReport(report, scores=arrays.get("scores"))


@public
def patch(checkpoint: PathLike | Any, output: PathLike | None = None, *, set_output_bias: PathLike | None = None,
          smoothing: str = "add-k:1", tokenizer: PathLike | None = None, allow_vocab_mismatch: bool = False,
          new_tensor_dtype: Literal["float32", "bfloat16", "float16", "float64"] = "float32",
          bias_name: str | None = None, rescale_w: Literal["fro", "spectral", "none"] | None = None, untie: bool = False,
          zipfian_whiten_embeddings: PathLike | None = None, standardise: str | None = None, shuffle: bool = False,
          shuffle_mode: Literal["rows", "rows-columns", "elements"] = "rows", seed: int = 0,
          scale_ln_bias: float | None = None, remove_frequency_direction: bool = False,
          allow_nonfinite: bool = False, arch: str = "auto", mapping: RoleMap = None, in_place: bool = False,
          dry_run: bool = False, hash_inputs: bool = True) -> PatchReport:
    """The papers' checkpoint surgery (`nb patch-checkpoint`), applied in its documented order:
    set_output_bias (b = log p(y) from a counts file, paper 000 sec. 3), untie, rescale_w (||W|| =
    ||b||, sec. 4.1; "none" as None), zipfian_whiten_embeddings (a counts file: v' = Sigma^(-1/2)(v - mu) under its
    unigram, Yokoi et al. 2024), standardise ("xavier", "match:FILE:TENSOR", "mean=M,std=S"; paper 002 eq. 1 /
    eq. 4), shuffle (paper 002 sec. 3.4), scale_ln_bias (b_LN <- lambda b_LN, paper 003 sec. 3.3),
    remove_frequency_direction (paper 003 sec. 3.2).

    A path: writes `output` (streamed, atomic; `in_place=True` may replace the input; `dry_run`
    writes nothing). A transformers model or a state dict: in memory; the result's `state_dict` is
    a new dict holding the caller's tensors with the touched ones replaced (the caller's tensors are
    not modified); `in_place=True` copies the new values into the given model's or dict's tensors.
    """
    from nbcli.errors import ConfigError
    from nbcli.surgery import surgery_options

    options = surgery_options(
        set_output_bias=set_output_bias, smoothing=smoothing, tokenizer=tokenizer,
        allow_vocab_mismatch=allow_vocab_mismatch, new_tensor_dtype=new_tensor_dtype, bias_name=bias_name,
        rescale_w=rescale_w, untie=untie, zipfian_whiten_embeddings=zipfian_whiten_embeddings,
        standardise=standardise, shuffle=shuffle, shuffle_mode=shuffle_mode, seed=seed, scale_ln_bias=scale_ln_bias,
        remove_frequency_direction=remove_frequency_direction, allow_nonfinite=allow_nonfinite, spelling="argument")
    if is_path(checkpoint):
        return _patch_file(local_path(checkpoint), optional_path(output), options, arch=arch, mapping=mapping,
                           in_place=in_place, dry_run=dry_run, hash_inputs=hash_inputs)
    if output is not None:
        raise ConfigError("output is for a checkpoint path; a model or state dict is patched in memory "
                          "(save the result's state_dict, or patch the saved folder)")
    return _patch_held(checkpoint, options, arch=arch, mapping=mapping, in_place=in_place)


def _patch_file(path: Path, output: Path | None, options: Any, *, arch: str, mapping: RoleMap, in_place: bool,
                dry_run: bool, hash_inputs: bool) -> PatchReport:
    from nbcli.surgery import patch_file

    result = patch_file(path, output, options, arch=arch, mapping=role_map(mapping), in_place=in_place,
                        dry_run=dry_run, hash_inputs=hash_inputs,
                        missing_output="give an output (or in_place=True to overwrite the checkpoint, or dry_run=True)")
    return PatchReport(result.as_dict())


def _patch_held(model: Any, options: Any, *, arch: str, mapping: RoleMap, in_place: bool) -> PatchReport:
    """Surgery in memory: the same `run_surgery` plan as a file's, on a state dict's tensors."""
    import torch

    from nbcli.checkpoint.roles import resolve_roles
    from nbcli.surgery import resolve_options, run_surgery, surgery_result

    held = held_checkpoint(model)
    roles = resolve_roles(held, arch, role_map(mapping))
    options = resolve_options(held, roles, options)  # the report records the standardise target used
    tensors, workspace, warnings = run_surgery(held, roles, options)
    result = surgery_result(roles, options, workspace, warnings)
    original = model if isinstance(model, Mapping) else model.state_dict()
    if in_place and not isinstance(model, Mapping):  # untie: a new Parameter; a created bias: installed live
        from nbcli.hf.inmemory import write_into_model

        write_into_model(model, tensors, workspace.touched, workspace.config_updates)
        return PatchReport(result.as_dict())
    if in_place:
        with torch.no_grad():
            for name, value in tensors.items():
                created = workspace.touched[name].created if name in workspace.touched else False
                if name in original and not created:
                    original[name].copy_(value)  # tied names share this storage
                else:  # a created tensor (untie's output weight: never into the tied storage)
                    model[name] = value
        return PatchReport(result.as_dict(), state_dict=dict(original) if isinstance(model, Mapping) else None)
    patched = dict(original)
    for name, value in tensors.items():
        kept = original[name] if name in original else None
        new = value.to(kept.device) if kept is not None else value
        for alias in [name, *held.aliases.get(name, [])]:
            if alias == name or alias not in tensors:
                patched[alias] = new
    return PatchReport(result.as_dict(), state_dict=patched)


@public
def transplant_embeddings(source: PathLike, source_tokenizer: PathLike, target_tokenizer: PathLike,
                          output: PathLike, *, missing: Literal["xavier", "mean", "neighbours"] = "xavier",
                          counts: PathLike | None = None, min_count: int = 0, standardise: str | None = None,
                          seed: int = 0, allow_vocab_mismatch: bool = False) -> TransplantReport:
    """A target tokenizer's input embedding from a checkpoint trained with another vocabulary
    (`nb transplant-embeddings`; paper 002 sec. 3.3): shared pieces copied, the rest initialised by
    `missing`, then optionally standardised. `nb train --embedding-init pretrained:OUT` reads it."""
    from nbcli.transplant import transplant

    result = transplant(local_path(source), local_path(source_tokenizer), local_path(target_tokenizer), local_path(output),
                        missing=missing, counts_path=optional_path(counts), min_count=min_count,
                        standardise=standardise, seed=seed, allow_vocab_mismatch=allow_vocab_mismatch)
    return TransplantReport(result.as_dict())

