"""The surgery's operations: the pure functions of `nbcli.ops` applied to the tensors their roles
name (`nbcli.checkpoint.roles`), one function per operation (`OPERATIONS`, each taking the
`SurgeryRun`), applied by `nbcli.surgery.plan.run_surgery` in the documented order (OPERATION_ORDER):

    1 set-output-bias              b = log p(y)                      paper 000 sec. 3
      untie                        a separate output weight (the tied head's scale kept)
    2 rescale-w                    ||W|| = ||b||_2                   paper 000 sec. 4.1
      zipfian-whiten-embeddings    v' = Sigma^(-1/2)(v - mu)         Yokoi et al. 2024
    3 standardise-embeddings       Pre-trained_Xavier / eq. 4        paper 002 eq. 1, eq. 4
    4 shuffle-embeddings           Pre-trained_Shuffled              paper 002 sec. 3.4
    5 scale-ln-bias                b_LN <- lambda b_LN               paper 003 sec. 3.3
    6 remove-frequency-direction   w_i <- w_i - <w_i, u> u           paper 003 sec. 3.2

Each reads and writes tensors through the run's `Workspace` (`nbcli.surgery.workspace`). torch
(through `nbcli.ops`) is imported inside the functions that need it, so that patch-checkpoint's copy
starts while torch loads on the surgery thread.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from nbcli.errors import CheckpointError, naming
from nbcli.surgery.options import CREATED_BIAS_NOTE, StandardiseSpec, SurgeryOptions, check_lambda
from nbcli.surgery.workspace import Workspace

if TYPE_CHECKING:
    import torch

    from nbcli.checkpoint.reader import Checkpoint
    from nbcli.checkpoint.roles import Roles


def _counts_for(path: Path, checkpoint: Checkpoint, rows: int, options: SurgeryOptions) -> tuple[np.ndarray, list[str]]:
    """The counts vector padded to `rows`, checked against the checkpoint's tokenizer and vocabulary
    (nbcli.checkpoint.vocab, the one policy), and the warnings that check gave."""
    from nbcli.checkpoint.vocab import TOKENIZER_HINT, fit_counts, model_vocab

    fitted = fit_counts(path, model_vocab(checkpoint, rows, options.tokenizer, hint=TOKENIZER_HINT),
                        allow_mismatch=options.allow_vocab_mismatch)
    return fitted.counts, fitted.warnings


def standardise_to(x: torch.Tensor, spec: StandardiseSpec) -> torch.Tensor:
    """`standardise_embeddings` to the target a --standardise spec names: xavier (paper 002 eq. 1),
    match:FILE:TENSOR (eq. 4: that tensor's mean and sample std) or explicit mean/std. Shared by
    patch-checkpoint, train and transplant-embeddings."""
    from nbcli.ops import standardise_embeddings

    spec = spec.resolved(tuple(x.shape))  # the target recorded in provenance is the one used
    assert spec.mean is not None and spec.std is not None
    return standardise_embeddings(x, spec.mean, spec.std)


@dataclass
class SurgeryRun:
    """One run of the operations: the checkpoint, its roles, the options, the workspace the
    operations write into, their warnings, and where the output weight is (`untie` moves it)."""

    checkpoint: Checkpoint
    roles: Roles
    options: SurgeryOptions
    ws: Workspace
    warnings: list[str] = field(default_factory=list)
    output_name: str | None = None
    tied: bool = False
    untie_copies: list[str] = field(default_factory=list)
    """Input-embedding names `untie` leaves to write_aliases, to get the embedding's final value."""

    def output_weight(self, purpose: str) -> str:
        return self.roles.require("output_weight", purpose)

    def output_side(self, purpose: str) -> str:
        """The output weight an output-side operation rewrites; a warning when it is the tied input embedding."""
        name = self.output_name or self.output_weight(purpose)
        if self.tied:
            self.warnings.append(f"{purpose}: the output weight is tied to the input embedding {name!r}, so this "
                                 "also changes the input embeddings (--untie writes a separate output weight)")
        return name

    def input_embedding(self, option: str) -> str:
        """The input embedding an embedding operation rewrites; a warning when it is also the output weight."""
        emb = self.roles.require("input_embedding", option)
        if self.tied:
            self.warnings.append(f"{option}: {emb!r} is also the (tied) output weight")
        return emb

    def counts(self, path: Path, rows: int) -> np.ndarray:
        counts, warnings = _counts_for(path, self.checkpoint, rows, self.options)
        self.warnings.extend(warnings)
        return counts


def set_output_bias(run: SurgeryRun) -> None:
    """1. b = log p(y), add-k smoothed (paper 000 sec. 3); a named bias that is absent is created."""
    from nbcli.checkpoint.architectures import new_bias_shape
    from nbcli.checkpoint.roles import vector_length
    from nbcli.ops import unigram_log_prior

    checkpoint, options, ws = run.checkpoint, run.options, run.ws
    assert options.output_bias_counts is not None
    w_name = run.output_weight("--set-output-bias (its rows give the vocabulary size)")
    vocab = checkpoint.shape(w_name)[0]
    bias_name = options.bias_name or run.roles.get("output_bias")
    if bias_name is None:
        arch = run.roles.architecture
        raise CheckpointError(
            f"{checkpoint.path}: architecture {arch} has no output bias tensor; pass --bias-name NAME to "
            f"create one (e.g. --bias-name {_suggest_bias_name(arch)}). {CREATED_BIAS_NOTE}")
    stored_shape = (checkpoint.shape(bias_name) if bias_name in checkpoint
                    else new_bias_shape(run.roles.architecture, bias_name, vocab))
    if vector_length(stored_shape) != vocab:
        raise CheckpointError(f"{checkpoint.path}: output bias {bias_name!r} has shape "
                              f"{list(stored_shape)}, expected [{vocab}] (or [1, {vocab}])")
    if bias_name in checkpoint:
        ws.read(bias_name)  # validates dtype and finiteness
    counts = run.counts(options.output_bias_counts, vocab)
    with naming(f"{options.output_bias_counts} for {checkpoint.path} (tensor {w_name!r})"):
        bias = unigram_log_prior(counts, vocab, options.smoothing_k).reshape(stored_shape)  # [1, V]: Marian, BART
    ws.write(bias_name, "output_bias", bias, dtype=options.new_tensor_dtype, anchor=w_name)
    if bias_name not in checkpoint:
        run.warnings.append(f"created output bias {bias_name!r}: {CREATED_BIAS_NOTE}")
    for alias in run.roles.aliases.get("output_bias", ()):
        if alias != bias_name:
            ws.write(alias, "output_bias", bias.clone())


def untie(run: SurgeryRun) -> None:
    """A separate output weight, so that output-side operations leave the input embedding alone."""
    from nbcli.checkpoint.architectures import untie_bias_names, untie_input_names, untie_rule

    checkpoint, roles, ws, arch = run.checkpoint, run.roles, run.ws, run.roles.architecture
    emb = roles.require("input_embedding", "--untie")
    if not roles.head:
        roles.require("output_weight", "--untie")  # says there is no prediction head
    if not run.tied:
        run.warnings.append("--untie: the output weight is already a separate tensor; nothing to untie")
        return
    output_name = _untied_name(arch)
    if output_name in checkpoint:
        raise CheckpointError(f"{checkpoint.path}: cannot untie: {output_name!r} already exists")
    factor, changes = untie_rule(arch, checkpoint.model_config)
    if not math.isfinite(factor):
        raise CheckpointError(f"{checkpoint.path}: cannot untie {arch}: config.json has no usable d_model "
                              "(the tied head scales by d_model^-0.5)")
    copy = ws.read(emb).clone() if factor == 1.0 else ws.read(emb) * factor
    ws.write(output_name, "output_weight", copy, dtype=checkpoint.dtype(emb), anchor=emb)
    run.output_name, run.tied = output_name, False
    # the loader reads the output bias under these names too once the head is untied
    bias_now = run.options.bias_name if run.options.bias_name in ws.values else roles.get("output_bias")
    for extra in untie_bias_names(arch):
        if bias_now is not None and extra not in checkpoint and extra != bias_now:
            source_dtype = ws.touched[bias_now].dtype if bias_now in ws.touched else checkpoint.dtype(bias_now)
            anchor = bias_now if bias_now in checkpoint else ws.anchor.get(bias_now)
            ws.write(extra, "output_bias", ws.read(bias_now).clone(), dtype=source_dtype, anchor=anchor)
    # names the loader tied to the input embedding only while the head was tied (Marian, BART):
    # write_aliases writes them last, with the input embedding's final value
    run.untie_copies = [n for n in untie_input_names(arch) if n not in checkpoint and n != emb]
    ws.config_updates.update(changes)
    scaled = f" (scaled by {factor:.6g}: the tied head scaled the decoder output)" if factor != 1.0 else ""
    run.warnings.append(f"wrote a separate output weight {output_name!r}{scaled}; loaders must not re-tie it")


def rescale_output_weight(run: SurgeryRun) -> None:
    """2. ||W|| = ||b||_2 (paper 000 sec. 4.1)."""
    from nbcli.ops import rescale_w

    checkpoint, options, ws = run.checkpoint, run.options, run.ws
    assert options.rescale_w is not None
    w_name = run.output_side("--rescale-w")
    bias_name = options.bias_name if options.bias_name in ws.values else run.roles.get("output_bias")
    if bias_name is None or (bias_name not in ws.values and bias_name not in checkpoint):
        run.roles.require("output_bias", "--rescale-w (W is scaled to the bias's l2 norm)")
    assert bias_name is not None
    with naming(f"{checkpoint.path}: --rescale-w of {w_name!r} to the norm of {bias_name!r}"):
        ws.write(w_name, "output_weight", rescale_w(ws.read(w_name), ws.read(bias_name), options.rescale_w))


def zipfian_whiten_embedding(run: SurgeryRun) -> None:
    """Zipfian whitening of the input embedding (Yokoi et al. 2024)."""
    from nbcli.array_ops import unigram_weights
    from nbcli.ops import zipfian_whiten

    checkpoint, options, ws = run.checkpoint, run.options, run.ws
    assert options.zipfian_whiten_counts is not None
    emb = run.input_embedding("--zipfian-whiten-embeddings")
    x = ws.read(emb)
    if x.ndim != 2 or 0 in x.shape:
        raise CheckpointError(f"{checkpoint.path}: --zipfian-whiten-embeddings of {emb!r}: expected a non-empty "
                              f"[V, d] matrix, got {list(x.shape)}")
    counts = run.counts(options.zipfian_whiten_counts, x.shape[0])
    with naming(f"{checkpoint.path}: --zipfian-whiten-embeddings of {emb!r} with {options.zipfian_whiten_counts}"):
        ws.write(emb, "input_embedding", zipfian_whiten(x, unigram_weights(counts, x.shape[0], options.smoothing_k)))


def standardise_embedding(run: SurgeryRun) -> None:
    """3. standardise the input embedding (paper 002 eq. 1 / eq. 4)."""
    assert run.options.standardise is not None
    emb = run.input_embedding("--standardise-embeddings")
    x = run.ws.read(emb)
    with naming(f"{run.checkpoint.path}: --standardise-embeddings of {emb!r} {list(x.shape)}"):
        if x.ndim != 2:
            raise CheckpointError("expected a [V, d] matrix")
        run.ws.write(emb, "input_embedding", standardise_to(x, run.options.standardise))


def shuffle_embedding(run: SurgeryRun) -> None:
    """4. Pre-trained_Shuffled (paper 002 sec. 3.4)."""
    from nbcli.ops import shuffle_embeddings

    emb = run.input_embedding("--shuffle-embeddings")
    with naming(f"{run.checkpoint.path}: --shuffle-embeddings of {emb!r}"):
        run.ws.write(emb, "input_embedding",
                     shuffle_embeddings(run.ws.read(emb), run.options.seed, run.options.shuffle_mode))


def scale_final_ln_bias(run: SurgeryRun) -> None:
    """5. b_LN <- lambda b_LN (paper 003 sec. 3.3)."""
    from nbcli.ops import scale_ln_bias

    assert run.options.scale_ln_bias is not None
    ln = run.roles.require("final_ln_bias", "--scale-ln-bias")
    with naming(f"{run.checkpoint.path}: --scale-ln-bias of {ln!r}"):
        run.ws.write(ln, "final_ln_bias", scale_ln_bias(run.ws.read(ln), check_lambda(run.options.scale_ln_bias)))


def remove_frequency_direction(run: SurgeryRun) -> None:
    """6. w_i <- w_i - <w_i, u> u, u = b_LN / ||b_LN|| of the input checkpoint (paper 003 sec. 3.2):
    the stored b_LN, whatever scale-ln-bias wrote before."""
    from nbcli.array_ops import remove_direction

    ln_name = run.roles.require("final_ln_bias", "--remove-frequency-direction")
    ln_original = run.ws.read_stored(ln_name)
    w_name = run.output_side("--remove-frequency-direction")
    w = run.ws.read(w_name)
    with naming(f"{run.checkpoint.path}: --remove-frequency-direction of {ln_name!r} from {w_name!r}"):
        run.ws.write(w_name, "output_weight", remove_direction(w, ln_original.to(w.dtype)))


#: Each operation's function, by its name in OPERATION_ORDER (run_surgery applies them in that order;
#: tests/surgery/test_operations.py checks the two name the same operations).
OPERATIONS: dict[str, Callable[[SurgeryRun], None]] = {
    "set-output-bias": set_output_bias, "untie": untie, "rescale-w": rescale_output_weight,
    "zipfian-whiten-embeddings": zipfian_whiten_embedding, "standardise-embeddings": standardise_embedding,
    "shuffle-embeddings": shuffle_embedding, "scale-ln-bias": scale_final_ln_bias,
    "remove-frequency-direction": remove_frequency_direction,
}


def write_aliases(run: SurgeryRun) -> None:
    """Other names of a rewritten tensor (T5's encoder/decoder.embed_tokens beside shared) get its value;
    so do the input-embedding copies `untie` asked for (Marian's and BART's embed_tokens)."""
    for role, others in run.roles.aliases.items():
        main = run.roles.get(role)
        if main is not None and main in run.ws.values:
            for alias in others:
                if alias not in run.ws.touched:
                    run.ws.write(alias, role, run.ws.values[main].clone())
    for name in run.untie_copies:
        source = run.roles.require("input_embedding", "--untie")
        run.ws.write(name, "input_embedding", run.ws.read(source).clone(), dtype=run.checkpoint.dtype(source),
                     anchor=source)


def _suggest_bias_name(arch: str) -> str:
    from nbcli.checkpoint.architectures import candidate_names

    candidates = candidate_names(arch, "output_bias")
    return candidates[0] if candidates else "lm_head.bias"


def _untied_name(arch: str) -> str:
    from nbcli.checkpoint.architectures import untied_output_name

    return untied_output_name(arch)
