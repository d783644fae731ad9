"""nb's public Python API: what each `nb` command does, as a function for notebooks.

    import nbcli
    counts = nbcli.count_unigrams("corpus.txt", tokenizer="spm.model", output="counts.safetensors")
    report = nbcli.probe(model, counts="counts.safetensors")      # a path, a transformers model or a state dict
    patched = nbcli.patch(state_dict, scale_ln_bias=0.5)          # in memory: patched.state_dict
    report.to_dict() == json.loads(`nb probe-bias ... --json`)    # the same content

Every function calls the same core functions as its command (docs/python.md), and returns a
`Report` dataclass: `to_dict()` is the command's `--json` object; its keys also read as attributes
(`report.isotropy["mean_cosine"]`). Arguments that name files take a `str` or `os.PathLike`; a
model or tokenizer string may also be a Hugging Face repo id `org/name[@rev]` (`./name` is always a
local path: `_local`). Errors are `nbcli.errors.NbError` subclasses with a one-line message, as on
the command line, in this API's words: each function is `@public` (nbcli.arguments), so a wrong
type, choice or bound is refused before anything runs, and options are named as its parameters
(`scale_ln_bias=`, `mapping=`), not as the command's flags.

Internal modules are imported inside the functions, so `import nbcli` stays fast and torch is
loaded only by the functions that need it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union

from nbcli.arguments import public

if TYPE_CHECKING:
    import numpy as np
    import torch

    from nbcli.vectors.reader import WordVectors

    from nbcli.checkpoint.reader import Checkpoint
    from nbcli.checkpoint.memory import MemoryCheckpoint

PathLike = Union[str, "os.PathLike[str]"]
"""A local path; for a model or a tokenizer also a Hub repo id (nbcli.resolve)."""
RoleMap = Union[Mapping[str, str], Sequence[str], None]
"""Role -> tensor name overrides: {"output_bias": "lm_head.bias"} or ["output_bias=lm_head.bias"]."""


@dataclass(frozen=True)
class Report:
    """A command's result. `to_dict()`: plain JSON data, what `nb COMMAND --json` prints; its
    top-level keys also read as attributes and items, with the same value (`report.warnings`,
    `report["warnings"]`, `report.to_dict()["warnings"]`). The tables in it (`tables()`: `rows`,
    `bias_effect.bins`, `samples`, ...) come as flat records (`to_records`) or a pandas DataFrame
    (`to_pandas`), the rows `nb COMMAND --csv` writes."""

    data: dict[str, Any] = field(repr=False)

    def __post_init__(self) -> None:
        extra = {f.name for f in fields(self)} - {"data"}
        clash = sorted(extra & set(self.data))
        if clash:  # an attribute would hide the key of the same name: one name, two meanings
            raise TypeError(f"{type(self).__name__}: field(s) {', '.join(clash)} are also keys of its data")

    def to_dict(self) -> dict[str, Any]:
        from nbcli.jsonsafe import json_ready

        return json_ready(self.data)

    def tables(self) -> list[str]:
        """The names of the tables in this result (`nbcli.tables.find_tables`), the first the default."""
        from nbcli.tables import find_tables

        return find_tables(self.data)

    def to_records(self, table: str | None = None) -> list[dict[str, Any]]:
        """The rows of `table` (default: the first of `tables()`) as flat dicts: nested objects as
        dotted keys (`before.norm`), full precision, as `nb COMMAND --csv --table TABLE` writes them."""
        from nbcli.tables import table_records

        return table_records(self.to_dict(), table)

    def to_pandas(self, table: str | None = None) -> Any:
        """`to_records(table)` as a pandas DataFrame (pandas is optional: NbError when missing)."""
        from nbcli.tables import to_pandas

        return to_pandas(self.to_records(table))

    def __getattr__(self, name: str) -> Any:
        data = self.__dict__.get("data")
        if data is not None and name in data:
            return data[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def keys(self) -> list[str]:
        return list(self.data)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | {k for k in self.data if k.isidentifier()})

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(self.data)})"


@dataclass(frozen=True, repr=False)
class CountReport(Report):
    """`count_unigrams`: the summary (tokens, entropy, coverage, top pieces, `warnings`: lines
    replaced or skipped and options that did not apply, one line each, as the command prints them)
    and the counts vector."""

    counts: np.ndarray | None = None
    """int64 [V]: the count of each token id, as written to the counts file"""


@dataclass(frozen=True, repr=False)
class CheckpointReport(Report):
    """`inspect`: tensors, architecture, roles and metadata of a checkpoint."""


@dataclass(frozen=True, repr=False)
class PatchReport(Report):
    """`patch`: the operations and each touched tensor's statistics before and after."""

    state_dict: dict[str, torch.Tensor] | None = None
    """In-memory surgery: the patched state dict (the caller's tensors, the touched ones replaced;
    tied names share the new tensor). None when a file was patched."""


@dataclass(frozen=True, repr=False)
class ProbeReport(Report):
    """`probe`: frequency direction, isotropy, output bias vs unigram, log-frequency bins."""

    scores: np.ndarray | None = None
    """float32 [V]: <b_LN, w_i> per token (None without a usable b_LN and counts)"""


@dataclass(frozen=True, repr=False)
class EvalReport(Report):
    """`evaluate`: one row per arm (lambda): loss, perplexity, word perplexity, KL to the unigram."""


@dataclass(frozen=True, repr=False)
class GenerateReport(Report):
    """`generate`: one row per arm (`rows`: Distinct-n, length, EOS rate, perplexity) and every
    sample (`samples`: each continuation with its arm, lambda, prompt and seed, as `nb generate
    --json` prints them and `--out`'s samples.jsonl holds them); `samples_per_prompt` is --samples."""


@dataclass(frozen=True, repr=False)
class TrainReport(Report):
    """`train`: the run's summary (final validation loss, ALC, throughput, checkpoint path)."""


@dataclass(frozen=True, repr=False)
class TransplantReport(Report):
    """`transplant_embeddings`: the output, its source tensor and the vocabulary coverage."""


# ---------------------------------------------------------------------------------------------
# Arguments


def _local(source: PathLike) -> Path:
    """The path a source names, for the resolver: a string as typed (`./gpt2` is a folder, `gpt2` may
    be a repo id: nbcli.resolve.TypedPath), a Path as it is."""
    from nbcli.resolve import TypedPath

    return TypedPath(source) if isinstance(source, str) else Path(os.fspath(source))


def _optional(source: PathLike | None) -> Path | None:
    return None if source is None else _local(source)


def _paths(sources: PathLike | Sequence[PathLike]) -> list[str]:
    """One input or several, as the command's INPUT... strings (globs and - allowed)."""
    if isinstance(sources, (str, os.PathLike)):
        return [os.fspath(sources)]
    return [os.fspath(s) for s in sources]


def _role_map(mapping: RoleMap) -> dict[str, str]:
    from nbcli.checkpoint.roles import parse_role_map

    if mapping is None:
        return {}
    items = [f"{role}={name}" for role, name in mapping.items()] if isinstance(mapping, Mapping) else list(mapping)
    return parse_role_map(items)


def _role_items(mapping: RoleMap) -> list[str]:
    return [f"{role}={name}" for role, name in _role_map(mapping).items()]


def _is_path(value: Any) -> bool:
    return isinstance(value, (str, os.PathLike))


def _runnable(model: Any, function: str) -> Any:
    """A model argument of evaluate/generate: a path (or repo id) as given, or a loaded model (a
    transformers causal LM or nb's Transformer), run where it is; a state dict cannot run."""
    from nbcli.errors import ConfigError

    if _is_path(model):
        return _local(model)
    if isinstance(model, Mapping) or not callable(getattr(model, "parameters", None)):
        raise ConfigError(f"{function}() runs a model: give a path or a loaded model, not a "
                          f"{type(model).__name__} (load a state dict into its model first: model.load_state_dict(sd))")
    return model


def _held(model: Any) -> MemoryCheckpoint:
    """A loaded transformers model (any torch module) or a state dict, as a checkpoint in memory."""
    from nbcli.checkpoint.memory import MemoryCheckpoint
    from nbcli.errors import ConfigError

    if isinstance(model, Mapping):
        return MemoryCheckpoint(model)
    if hasattr(model, "state_dict") and callable(model.state_dict):
        return MemoryCheckpoint.from_model(model)
    raise ConfigError(f"checkpoint= takes a path, a state dict (dict of str -> torch.Tensor) or a loaded model, got "
                      f"{type(model).__name__}")


# ---------------------------------------------------------------------------------------------
# Commands


@public
def count_unigrams(inputs: PathLike | Sequence[PathLike], tokenizer: PathLike, output: PathLike, *,
                   tsv: PathLike | None = None, workers: int = 0,
                   format: Literal["text", "jsonl", "tsv", "csv"] | None = None,
                   field: str = "text", eos: bool | None = None, bos: bool = False, strict: bool = False,
                   skip_bad_lines: bool = False, smoothing: str = "add-k:1", dask: str | None = None,
                   chunk_cache: bool = True, unigram_certificate: bool = False) -> CountReport:
    """Count token unigrams of a corpus and write the counts file (`nb count-unigrams`).

    `inputs`: files, directories, globs (or a list of them), each read in the format its name says
    (`format` overrides it for files that are not parquet or Arrow: `nbcli.corpus.corpus_format`);
    `field`: the JSONL key or TSV/CSV/parquet/Arrow column of the text; `tokenizer`: a SentencePiece .model, a
    tokenizer.json or a model folder; `output`: the .safetensors counts file; `tsv`: also id, piece,
    count, smoothed log-probability per token. `eos`: one EOS per document (None: the tokenizer
    template's default); `workers=0`: all cores; `unigram_certificate`: count SentencePiece unigram
    models from cached chunks under the per-line certificate (exact; faster than whole documents
    only on large corpora: docs/design/counting.md). Counts are exact for any `workers`.
    """
    from nbcli.counting import CountOptions, count_to_file
    from nbcli.counts import parse_smoothing

    k = parse_smoothing(smoothing)
    options = CountOptions(format=format, field=field, eos=eos, bos=bos, strict=strict,
                           skip_bad_lines=skip_bad_lines, chunked=chunk_cache,
                           unigram_certificate=unigram_certificate)
    report, counts_file = count_to_file(_paths(inputs), _local(tokenizer), _local(output), _optional(tsv), options,
                                        smoothing_k=k, workers=workers or None, dask_address=dask)
    return CountReport(report, counts=counts_file.counts)


@public
def open_checkpoint(path: PathLike) -> Checkpoint:
    """The checkpoint reader: a .safetensors file, a sharded folder or its index.json, opened lazily
    (`.names()`, `.shape(name)`, `.get(name)` a tensor read through mmap, `.metadata`). Pickled
    checkpoints (.bin, .pt) are refused, never unpickled."""
    from nbcli.checkpoint.reader import open_checkpoint as open_file

    return open_file(_local(path))


@public
def inspect(checkpoint: PathLike | Any, *, arch: str = "auto", mapping: RoleMap = None) -> CheckpointReport:
    """A checkpoint's tensors (name, dtype, shape, bytes, shard), architecture, roles and metadata
    (`nb inspect`); reads only the headers. An unrecognised architecture is reported, not raised.
    `checkpoint`: a path, a loaded model or a state dict (tied names listed once, as saved)."""
    from nbcli.checkpoint.report import checkpoint_report, inspect_checkpoint

    if _is_path(checkpoint):
        return CheckpointReport(inspect_checkpoint(_local(checkpoint), arch, _role_map(mapping)))
    held = _held(checkpoint)
    return CheckpointReport(checkpoint_report(held, str(held.path), arch, _role_map(mapping)))


@public
def probe(checkpoint: PathLike | Any, counts: PathLike | None = None, *, tokenizer: PathLike | None = None,
          allow_vocab_mismatch: bool = False, arch: str = "auto", mapping: RoleMap = None, bins: int = 10,
          smoothing: str = "add-k:1", zipfian_weights: str = "raw", partition: bool = True, whiten: bool = True,
          device: str = "auto") -> ProbeReport:
    """Frequency-direction, isotropy and output-bias statistics (`nb probe-bias`; papers 003, 000).

    `checkpoint`: a path (as the command takes), a loaded transformers model, or a state dict
    (name -> tensor); roles come from the same architecture table either way (a model's
    `config.model_type` picks it as a model folder's config.json does). `counts`: a counts file;
    without it only what needs none is computed. `whiten`: with counts, the Zipfian-whitening section
    (Yokoi et al. 2024) with unigram weights `zipfian_weights` (`raw`, the paper's relative
    frequencies, or `add-k:K`; `smoothing` is for the output bias's KL). `device`: where the heavy
    algebra runs (auto: CUDA when present). Nothing is modified.
    """
    from nbcli.analysis.zipfian import parse_zipfian_weights
    from nbcli.counts import parse_smoothing
    from nbcli.probe_report import finish_report, load_probe_inputs, probe_inputs

    k = parse_smoothing(smoothing)
    zipfian_k = parse_zipfian_weights(zipfian_weights)
    options = {"arch": arch, "mapping": _role_items(mapping), "tokenizer": _optional(tokenizer),
               "allow_vocab_mismatch": allow_vocab_mismatch}
    if _is_path(checkpoint):
        inputs, header, warnings = load_probe_inputs(_local(checkpoint), _optional(counts), **options)
    else:
        inputs, header, warnings = probe_inputs(_held(checkpoint), _optional(counts), **options)
    report, arrays = finish_report(inputs, header, warnings, bins=bins, smoothing_k=k, zipfian_k=zipfian_k,
                                    partition=partition, whiten=whiten, device=device)
    return ProbeReport(report, scores=arrays.get("scores"))


@public
def patch(checkpoint: PathLike | Any, output: PathLike | None = None, *, set_output_bias: PathLike | None = None,
          smoothing: str = "add-k:1", tokenizer: PathLike | None = None, allow_vocab_mismatch: bool = False,
          new_tensor_dtype: Literal["float32", "bfloat16", "float16", "float64"] = "float32",
          bias_name: str | None = None, rescale_w: Literal["fro", "spectral"] | None = None, untie: bool = False,
          zipfian_whiten_embeddings: PathLike | None = None, standardise: str | None = None, shuffle: bool = False,
          shuffle_mode: Literal["rows", "rows-columns", "elements"] = "rows", seed: int = 0,
          scale_ln_bias: float | None = None, remove_frequency_direction: bool = False,
          allow_nonfinite: bool = False, arch: str = "auto", mapping: RoleMap = None, in_place: bool = False,
          dry_run: bool = False, hash_inputs: bool = True) -> PatchReport:
    """The papers' checkpoint surgery (`nb patch-checkpoint`), applied in its documented order:
    set_output_bias (b = log p(y) from a counts file, paper 000 sec. 3), untie, rescale_w (||W|| =
    ||b||, sec. 4.1), zipfian_whiten_embeddings (a counts file: v' = Sigma^(-1/2)(v - mu) under its
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
    if _is_path(checkpoint):
        return _patch_file(_local(checkpoint), _optional(output), options, arch=arch, mapping=mapping,
                           in_place=in_place, dry_run=dry_run, hash_inputs=hash_inputs)
    if output is not None:
        raise ConfigError("output is for a checkpoint path; a model or state dict is patched in memory "
                          "(save the result's state_dict, or patch the saved folder)")
    return _patch_held(checkpoint, options, arch=arch, mapping=mapping, in_place=in_place)


def _patch_file(path: Path, output: Path | None, options: Any, *, arch: str, mapping: RoleMap, in_place: bool,
                dry_run: bool, hash_inputs: bool) -> PatchReport:
    from nbcli.surgery import patch_file

    result = patch_file(path, output, options, arch=arch, mapping=_role_map(mapping), in_place=in_place,
                        dry_run=dry_run, hash_inputs=hash_inputs,
                        missing_output="give an output (or in_place=True to overwrite the checkpoint, or dry_run=True)")
    return PatchReport(result.as_dict())


def _patch_held(model: Any, options: Any, *, arch: str, mapping: RoleMap, in_place: bool) -> PatchReport:
    """Surgery in memory: the same `run_surgery` plan as a file's, on a state dict's tensors."""
    import torch

    from nbcli.checkpoint.roles import resolve_roles
    from nbcli.surgery import resolve_options, run_surgery, surgery_result

    held = _held(model)
    roles = resolve_roles(held, arch, _role_map(mapping))
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
def evaluate(checkpoint: PathLike | Any, corpus: PathLike | Sequence[PathLike], tokenizer: PathLike, *,
             scale_ln_bias: str | Sequence[float] | None = None, remove_frequency_direction: bool = False,
             counts: PathLike | None = None, smoothing: str = "add-k:1", stride: int | None = None,
             batch_size: int = 8, arch: str = "auto", mapping: RoleMap = None, device: str = "auto",
             bias_effect: bool = False, bias_effect_positions: Literal["all", "target"] = "all",
             bias_effect_space: Literal["prob", "log"] = "prob", bias_effect_plot: PathLike | None = None,
             by_frequency: PathLike | None = None, by_frequency_plot: PathLike | None = None,
             bins: int = 10, allow_vocab_mismatch: bool = False) -> EvalReport:
    """Loss, perplexity, word perplexity and KL of the average prediction from the unigram, with and
    without b_LN, one row per lambda (`nb eval`; paper 003 table 1). `checkpoint`: an nb train
    checkpoint or a transformers causal-LM folder (its output bias applied, `nbcli.load_model`), or a
    loaded causal LM (run on its device, lambda arms restored after); `scale_ln_bias`: "1,0.5,0",
    "0,0.1,...,1" or a list of numbers (b_LN scaled in memory, nothing written). `bias_effect` (or a
    `bias_effect_plot` figure: .pdf, .svg or .png) adds paper 003 fig. 1 (section `bias_effect`);
    `by_frequency` (training counts) adds paper 000 fig. 4 (section `by_frequency`, figure
    `by_frequency_plot`), in `bins` bins.
    `allow_vocab_mismatch`: accept a tokenizer (or counts) whose fingerprint differs from the model's."""
    from nbcli.counts import parse_smoothing
    from nbcli.lm.frequency_report import TokenFigures
    from nbcli.lm.evaluation import eval_report

    figures = TokenFigures(bias_effect=bias_effect or bias_effect_plot is not None, positions=bias_effect_positions,
                           space=bias_effect_space, by_frequency=_optional(by_frequency), bins=bins,
                           bias_effect_plot=_optional(bias_effect_plot), by_frequency_plot=_optional(by_frequency_plot))

    return EvalReport(eval_report(
        _runnable(checkpoint, "evaluate"), _paths(corpus), _local(tokenizer), _lambdas(scale_ln_bias),
        remove_direction=remove_frequency_direction, counts=_optional(counts), smoothing_k=parse_smoothing(smoothing),
        stride=stride, batch_size=batch_size, arch=arch, mapping=_role_map(mapping), device=device, figures=figures,
        allow_vocab_mismatch=allow_vocab_mismatch))


@public
def plot_by_frequency(reports: Sequence[PathLike], output: PathLike | None = None, *,
                      labels: Sequence[str] | None = None) -> Report:
    """Paper 000 fig. 4 for several checkpoints on one figure (`nb plot-by-frequency`): the
    `by_frequency` sections of `evaluate(..., by_frequency=COUNTS)` reports saved as JSON."""
    from nbcli.lm.frequency_report import by_frequency_overlay

    return Report(by_frequency_overlay([_local(r) for r in reports], labels, _optional(output)))


def _lambdas(values: str | Sequence[float] | float | None) -> str | None:
    """The command's LAMBDA list spec from a string or numbers."""
    if values is None or isinstance(values, str):
        return values
    if isinstance(values, (int, float)):
        return repr(float(values))
    return ",".join(repr(float(v)) for v in values)


@public
def generate(checkpoint: PathLike | Any, prompts: PathLike | Sequence[PathLike], tokenizer: PathLike, *,
             scale_ln_bias: str | Sequence[float] | None = None, decoding: str = "top-p:0.9", prompt_words: int = 10,
             max_new_tokens: int = 256, samples: int = 1, max_prompts: int | None = None, seed: int = 0,
             eval_corpus: PathLike | Sequence[PathLike] | None = None, logit_adjust: float | None = None,
             counts: PathLike | None = None, smoothing: str = "add-k:1", remove_frequency_direction: bool = False,
             mauve_featurizer: str | None = None, out: PathLike | None = None, batch_size: int = 16,
             kv_cache: bool = True, arch: str = "auto", mapping: RoleMap = None, device: str = "auto",
             allow_vocab_mismatch: bool = False) -> GenerateReport:
    """Continuations of held-out prompts per arm (b_LN scaled by each lambda, and/or logit adjustment
    by `logit_adjust` with `counts`), with Distinct-n, length, EOS rate and perplexity per arm
    (`nb generate`; paper 003 sec. 3.3, table 2). `checkpoint`: a path or a loaded causal LM, as for
    `evaluate`. The samples are in the result's `samples`; with `out` (a directory) also in
    out/samples.jsonl, beside table.json and the plot (`nb generate --out`). `samples` is the number
    of continuations per prompt; the result's `samples` is the list of them."""
    from nbcli.counts import parse_smoothing
    from nbcli.lm.decoding import parse_decoding
    from nbcli.lm.generation import GenerationOptions, generation_report

    opts = GenerationOptions(parse_decoding(decoding), max_new_tokens, samples, seed, batch_size, use_cache=kv_cache)
    report, _ = generation_report(
        _runnable(checkpoint, "generate"), _paths(prompts), _local(tokenizer), opts, _lambdas(scale_ln_bias), prompt_words=prompt_words,
        max_prompts=max_prompts, eval_corpus=_paths(eval_corpus) if eval_corpus is not None else None, tau=logit_adjust,
        counts=_optional(counts), smoothing_k=parse_smoothing(smoothing), remove_direction=remove_frequency_direction,
        featurizer=mauve_featurizer, arch=arch, mapping=_role_map(mapping), device=device, out=_optional(out),
        allow_vocab_mismatch=allow_vocab_mismatch)
    return GenerateReport(report)


@public
def train_model(corpus: PathLike | Sequence[PathLike], tokenizer: PathLike, out: PathLike, *, preset: str = "tiny",
          resume: bool = False, stop_at: int | None = None,
          on_step: Callable[[int, dict[str, Any]], None] | None = None, allow_vocab_mismatch: bool = False,
          **config: Any) -> TrainReport:
    """Train nb's reference Transformer (`nb train`; named train_model because `nbcli.train` is the
    training package) into the run directory `out` (config, log.jsonl,
    step-N.safetensors, summary.json). `config`: `nbcli.train.config.TrainConfig` fields over the
    preset's (steps=200, bias_init="unigram", objective="mlm", ag_fraction=0.5, ...); `on_step(step,
    record)` sees every log record. Warnings are in the result's `warnings`."""
    from nbcli.train.config import build_config
    from nbcli.train.loop import train as run_training

    _check_train_config("train_model", config)
    cfg = build_config(preset, **config)
    result = run_training(cfg, _paths(corpus), _local(tokenizer), _local(out), resume=resume, stop_at=stop_at,
                          on_step=on_step, allow_vocab_mismatch=allow_vocab_mismatch)
    return TrainReport(result.as_dict())


def _check_train_config(function: str, config: Mapping[str, Any]) -> None:
    """The options of a training function's **config, checked as its named parameters are: each a
    field of `nbcli.train.config.TrainConfig` (not preset, task or task_options) of its type."""
    import typing

    from nbcli.arguments import check
    from nbcli.errors import ConfigError
    from nbcli.train.config import TrainConfig

    fields = {k: v for k, v in typing.get_type_hints(TrainConfig).items()
              if k not in ("preset", "task", "task_options")}
    for key, value in config.items():
        if key not in fields:
            raise ConfigError(f"{function}(): unknown option {key}=; the options are the fields of "
                              f"nbcli.train.config.TrainConfig: {', '.join(fields)}")
        check(function, key, value, typing.Optional[fields[key]])


@public
def train_translation(corpus: PathLike | Sequence[PathLike], src_lang: str, tgt_lang: str, out: PathLike, *,
                      tokenizer: PathLike | None = None, src_tokenizer: PathLike | None = None,
                      tgt_tokenizer: PathLike | None = None, valid: PathLike | Sequence[PathLike] | None = None,
                      preset: str = "tiny", task_options: Mapping[str, Any] | None = None, resume: bool = False,
                      stop_at: int | None = None, on_step: Callable[[int, dict[str, Any]], None] | None = None,
                      allow_vocab_mismatch: bool = False, **config: Any) -> TrainReport:
    """Train nb's encoder-decoder (`nb train --task translation`) on sentence pairs into `out`: one joint
    `tokenizer`, or `src_tokenizer` and `tgt_tokenizer`; `valid` pairs, else every k-th pair held out.
    `task_options`: `nbcli.tasks.translation.TranslationOptions` fields (norm="pre", positions="none",
    beam=5, ...); `config`: TrainConfig fields over the preset's (tiny, iwslt, base, kim-3). The summary
    adds best_val_bleu, best_step, alc_val_bleu and skipped_long_pairs."""
    from nbcli.errors import ConfigError
    from nbcli.tasks.translation import build_translation_config
    from nbcli.tasks.translation import train_translation as run_translation

    if tokenizer is not None:
        if src_tokenizer is not None or tgt_tokenizer is not None:
            raise ConfigError("give either tokenizer= (one joint tokenizer) or src_tokenizer= and tgt_tokenizer=")
        src_tokenizer = tgt_tokenizer = tokenizer
    if src_tokenizer is None or tgt_tokenizer is None:
        raise ConfigError("train_translation needs tokenizer= (joint) or src_tokenizer= and tgt_tokenizer=")
    _check_train_config("train_translation", config)
    cfg = build_translation_config(preset, {**(task_options or {}), "src_lang": src_lang, "tgt_lang": tgt_lang},
                                   **config)
    result = run_translation(cfg, _paths(corpus), _local(src_tokenizer), _local(tgt_tokenizer), _local(out),
                             valid=_paths(valid) if valid is not None else None, resume=resume, stop_at=stop_at,
                             on_step=on_step, allow_vocab_mismatch=allow_vocab_mismatch)
    return TrainReport(result.as_dict())


@public
def translate_file(checkpoint: PathLike, input: PathLike, output: PathLike, *, beam: int | None = None,
                   lenpen: float | None = None, batch_size: int = 64, device: str = "auto") -> Report:
    """Translate a file, one sentence a line, with a translation run or checkpoint (`nb translate`;
    beam/lenpen default to the run's; named translate_file because `nbcli.translate` is its module)."""
    from nbcli.translate import translate_file as run_translate

    return Report(run_translate(_local(checkpoint), _local(input), _local(output), beam=beam, lenpen=lenpen,
                                batch_size=batch_size, device=device).as_dict())


@public
def export_checkpoint(checkpoint: PathLike, out: PathLike, *, beam: int | None = None,
                      lenpen: float | None = None) -> Report:
    """A translation run or checkpoint as a transformers model folder, Marian layout (`nb export`; named
    export_checkpoint because `nbcli.export` is its module)."""
    from nbcli.export import export_checkpoint as run_export

    return Report(run_export(_local(checkpoint), _local(out), beam=beam, lenpen=lenpen).as_dict())


@public
def transplant_embeddings(source: PathLike, source_tokenizer: PathLike, target_tokenizer: PathLike,
                          output: PathLike, *, missing: Literal["xavier", "mean", "neighbours"] = "xavier",
                          counts: PathLike | None = None, min_count: int = 0, standardise: str | None = None,
                          seed: int = 0, allow_vocab_mismatch: bool = False) -> TransplantReport:
    """A target tokenizer's input embedding from a checkpoint trained with another vocabulary
    (`nb transplant-embeddings`; paper 002 sec. 3.3): shared pieces copied, the rest initialised by
    `missing`, then optionally standardised. `nb train --embedding-init pretrained:OUT` reads it."""
    from nbcli.transplant import transplant

    result = transplant(_local(source), _local(source_tokenizer), _local(target_tokenizer), _local(output),
                        missing=missing, counts_path=_optional(counts), min_count=min_count,
                        standardise=standardise, seed=seed, allow_vocab_mismatch=allow_vocab_mismatch)
    return TransplantReport(result.as_dict())


@public
def attention_maps(run_dir: PathLike, sentence: str, tokenizer: PathLike, *, steps: str | None = None,
                   checkpoints: Sequence[PathLike] = (), heads: str | None = None, delimiters: bool = True,
                   metric: Literal["l1", "kl", "mse"] = "l1", output: PathLike | None = None) -> Report:
    """Paper 001 figs. 1, 2, 4 (`nb attention-maps`): attention maps of `heads` ("L.H,...", "all",
    "assigned"; default the run's guided heads, else all) for one sentence at `steps` (`--at`: "0%,1%,100%":
    nearest saved checkpoints; or exact steps) or `checkpoints` of a run, each map's l1/kl/mse distance
    to each [Next]/[Prev]/[First]/[Delim]/[Period] pattern, and the figure (.pdf, .svg, .png) when
    `output` is given."""
    from nbcli.analysis.attention_report import attention_maps_report

    return Report(attention_maps_report(_local(run_dir), sentence, _local(tokenizer), steps=steps,
                                        checkpoints=[_local(c) for c in checkpoints], heads=heads,
                                        delimiters=delimiters, metric=metric, plot=_optional(output)))


@public
def evaluate_translation(corpus: PathLike | Sequence[PathLike], src_lang: str, tgt_lang: str, *,
                         hyps: PathLike | None = None, checkpoint: PathLike | None = None, beam: int | None = None,
                         lenpen: float | None = None, batch_size: int = 64, device: str = "auto") -> Report:
    """Corpus BLEU and chrF (sacreBLEU, with their signatures) of translations of a parallel test
    corpus's source side against its target side (`nb eval --task translation`; paper 000 fig. 2):
    aligned PREFIX.{src,tgt} files, TSV, JSONL translation objects or parquet. The translations are
    a hypotheses file (`hyps`, one line per pair) or decoded by an `nb train --task translation` run
    or checkpoint (`checkpoint`: a run means its best checkpoint by validation BLEU; `beam`/`lenpen`
    default to the run's)."""
    from nbcli.errors import ConfigError
    from nbcli.translation_eval import eval_translation

    if checkpoint is None:
        if beam is not None or lenpen is not None:
            raise ConfigError("--beam and --lenpen decode with a model: give RUN_OR_CKPT (not with --hyps)")
        return Report(eval_translation(_paths(corpus), src_lang, tgt_lang, hyps=_optional(hyps)))
    if hyps is not None:
        raise ConfigError(f"{checkpoint} and --hyps {hyps}: score a model's translations or a hypotheses file, "
                          "not both")
    from nbcli.translate import eval_translation_model

    return Report(eval_translation_model(_local(checkpoint), _paths(corpus), src_lang, tgt_lang, beam=beam,
                                         lenpen=lenpen, batch_size=batch_size, device=device))


@public
def plot_runs(runs: Sequence[PathLike], output: PathLike, *, group_seeds: bool = True,
              alc_steps: int | None = 20000) -> Report:
    """`nb plot-run`: the PNG curves of `nb train` runs in `output`, the seeds of an arm (configs
    equal but for the seed) as mean ± standard error, with each arm's table (`groups`: mean ± SE of
    best validation BLEU and loss and their ALCs over the first `alc_steps` updates, paper 000 sec. 4.2)."""
    from nbcli.run_plots import plot_runs as plot

    return Report(plot([_local(r) for r in runs], _local(output), group_seeds=group_seeds, alc_steps=alc_steps))


@public
def finetune_classifier(train: PathLike | Sequence[PathLike], out: PathLike, *,
                        task: Literal["classification", "tagging"] = "classification", init: PathLike | None = None,
                        tokenizer: PathLike | None = None, valid: Sequence[str] = (), text_field: str | None = None,
                        pair_field: str | None = None, label_field: str = "label", label_names: str | None = None,
                        max_len: int = 128, epochs: float = 3.0, steps: int = 0, batch_size: int = 32, lr: float = 2e-5,
                        warmup_ratio: float = 0.06, weight_decay: float = 0.01, dropout: float = 0.1,
                        pooling: Literal["first", "mean"] = "first", eval_every: int = 0, save_every: int = 0,
                        seed: int = 0, preset: str = "tiny", embedding_init: str = "normal",
                        positions: Literal["learned", "sinusoidal", "none"] = "learned",
                        freeze_embeddings: bool = False, device: str = "cpu", resume: bool = False) -> TrainReport:
    """`nb train --task classification|tagging`: fine-tune `init` (an nb MLM run or checkpoint, a
    transformers encoder folder or repo id; None: nb's encoder from scratch, paper 002) with a head on
    `train` (GLUE TSV, CSV, JSONL, parquet/Arrow; CoNLL for tagging), validating on the whole of each
    `valid` "NAME=FILE"; returns the run's summary (best_val_accuracy, best_step, final metrics)."""
    from nbcli.tasks.data import DataSpec, parse_valid
    from nbcli.tasks.finetune import FinetuneConfig, train_report

    cfg = FinetuneConfig(
        data=DataSpec(task=task, text_field=text_field, pair_field=pair_field, label_field=label_field,
                      max_len=max_len),
        init=None if init is None else os.fspath(init), tokenizer=None if tokenizer is None else os.fspath(tokenizer),
        label_names=label_names, epochs=epochs, steps=steps, batch_size=batch_size, lr=lr, warmup_ratio=warmup_ratio,
        weight_decay=weight_decay, dropout=dropout, pooling=pooling, eval_every=eval_every, save_every=save_every,
        seed=seed, preset=preset, embedding_init=embedding_init, positions=positions,
        freeze_embeddings=freeze_embeddings, device=device)
    return TrainReport(train_report(cfg, _paths(train), parse_valid(list(valid)), _local(out), resume=resume))


@public
def predict_labels(checkpoint: PathLike, corpus: PathLike | Sequence[PathLike], *, output: PathLike | None = None,
                   batch_size: int = 32, device: str = "cpu") -> Report:
    """`nb predict`: the label (by name) and class probabilities of every record of `corpus` (tags
    and per-token probabilities for a tagger), in input order, from a classifier run or its
    step-N.safetensors; written to `output` as JSON lines when given, else in `predictions`."""
    from nbcli.tasks.finetune import predict_report

    return Report(predict_report(_local(checkpoint), _paths(corpus), _optional(output), batch_size=batch_size,
                                 device=device))


@public
def evaluate_classifier(checkpoint: PathLike, corpus: PathLike | Sequence[PathLike], *, batch_size: int = 32,
                        device: str = "cpu") -> Report:
    """`nb eval --task classification|tagging`: loss, accuracy, F1 and Matthews (scikit-learn) or
    entity precision/recall/F1 (seqeval) of a classifier run on every record of a labelled file."""
    from nbcli.tasks.finetune import evaluate_classifier as evaluate_file, load_classifier

    return Report(evaluate_file(load_classifier(_local(checkpoint), device), _paths(corpus), batch_size))


@public
def read_vectors(path: PathLike, *, format: Literal["auto", "glove", "word2vec", "word2vec-binary"] = "auto",
                 limit: int | None = None, vocabulary: Sequence[str] | set[str] | None = None,
                 duplicates: Literal["error", "keep-first"] = "error") -> WordVectors:
    """Word vectors as they ship (GloVe text, word2vec text/binary, fastText .vec; gzip, bzip2, xz, zstd),
    the format read from the content: `.words` and the float32 `.vectors` [N, D] in file order, the
    first `limit` rows kept, only `vocabulary`'s words when given (docs/vectors.md; the reader of `nb analogy`)."""
    from nbcli.vectors.reader import read_vectors as read

    return read(_local(path), format=format, limit=limit, vocabulary=vocabulary, duplicates=duplicates)


@public
def analogy(vectors: PathLike, questions: PathLike, *, transform: str | Sequence[str] | None = None,
            positions: Literal["index", "random"] = "index", max_len: int = 5000, seed: int = 0,
            restrict_vocab: int = 300000, case_sensitive: bool = False, limit: int | None = None,
            vocabulary: PathLike | None = None, duplicates: Literal["error", "keep-first"] = "error") -> Report:
    """The word-analogy test (`nb analogy`; paper 002 sec. 6, table 4): 3CosAdd per `: section` and
    overall, scored as gensim's evaluate_word_analogies with its defaults, after `transform`
    ("scale-sqrt-d", "xavier-std", "pos-enc", "pos-enc-scaled", applied in order); `vocabulary`: a
    word-list file, the only words kept."""
    from nbcli.vectors.analogy import analogy_report
    from nbcli.vectors.transforms import Positions, parse_transforms

    chain = parse_transforms(transform if transform is None or isinstance(transform, str) else ",".join(transform))
    return Report(analogy_report(_local(vectors), _local(questions), transforms=chain,
                                 positions=Positions(positions, max_len, seed), case_sensitive=case_sensitive,
                                 restrict_vocab=restrict_vocab, limit=limit, duplicates=duplicates,
                                 vocabulary=_optional(vocabulary)))


__all__ = [
    "CheckpointReport", "CountReport", "EvalReport", "GenerateReport", "PatchReport", "ProbeReport", "Report",
    "TrainReport", "TransplantReport", "analogy", "attention_maps", "count_unigrams", "evaluate",
    "evaluate_classifier", "evaluate_translation", "export_checkpoint", "finetune_classifier", "generate", "inspect",
    "open_checkpoint", "patch", "plot_by_frequency", "plot_runs", "predict_labels", "probe", "read_vectors",
    "train_model", "train_translation", "translate_file", "transplant_embeddings",
]
