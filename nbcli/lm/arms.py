"""The arms of an eval/generate study: one per lambda (b_LN <- lambda b_LN, paper 003 sec. 3.3),
and logit adjustment (logits - tau log p(y), Menon et al. 2021) as a comparison arm that needs no
b_LN. Parsing of the lambda list, the surgery each arm applies, and its log-prior."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbcli.errors import CheckpointError, ConfigError, TokenizerError

if TYPE_CHECKING:
    import numpy as np
    import torch

    from nbcli.checkpoint.vocab import FittedCounts, ModelVocab
    from nbcli.lm.runner import Runner
    from nbcli.surgery import SurgeryOptions

ProgressBar = Callable[[int], AbstractContextManager[Callable[[int], None]]]
"""A progress display for a study's work: called with the total (tokens, samples), it gives a
context manager yielding the callback that advances it (the CLI's `token_progress`)."""


@contextlib.contextmanager
def no_progress(total: int) -> Iterator[Callable[[int], None]]:
    """The ProgressBar that shows nothing."""
    yield lambda advance: None


def parse_lambdas(spec: str) -> list[float]:
    """`1`, `0,0.5,1`, or `0,0.1,...,1` (an arithmetic progression from the first two values to the last)."""
    parts = [p.strip() for p in spec.split(",")]
    try:
        if "..." in parts:
            if len(parts) != 4 or parts[2] != "...":
                raise ValueError
            first, second, last = float(parts[0]), float(parts[1]), float(parts[3])
            step = second - first
            if step == 0 or (last - first) / step < 0:
                raise ValueError
            n = round((last - first) / step)
            if abs(first + n * step - last) > 1e-9 * max(1.0, abs(last)):
                raise ValueError
            values = [round(first + i * step, 12) for i in range(n + 1)]
        else:
            values = [float(p) for p in parts]
    except ValueError:
        raise ConfigError(f"--scale-ln-bias {spec!r}: expected numbers separated by commas, e.g. 1,0.5,0 "
                          "or 0,0.1,...,1") from None
    if not values or not all(math.isfinite(v) for v in values):
        raise ConfigError(f"--scale-ln-bias {spec!r}: every LAMBDA must be a finite number")
    return list(dict.fromkeys(values))


@dataclass(frozen=True)
class Arm:
    """One row of the study: b_LN scaled by `lam` (None: as saved) and/or logit adjustment `tau`."""

    lam: float | None = None
    tau: float | None = None

    @property
    def label(self) -> str:
        if self.tau is not None:
            return f"logit-adjust {self.tau:g}"
        return "as saved" if self.lam is None else f"lambda {self.lam:g}"

    def as_dict(self) -> dict[str, Any]:
        return {"arm": self.label, "lambda": self.lam, "logit_adjust": self.tau}


def build_arms(runner: Runner, lambdas: list[float] | None, tau: float | None) -> list[Arm]:
    """One arm per lambda (an error when the model has no b_LN), else one 'as saved' arm; plus the
    logit-adjustment arm when tau is given."""
    if lambdas and not runner.has_ln_bias():
        raise CheckpointError(f"{runner.path}: --scale-ln-bias needs a final LayerNorm bias b_LN, and this "
                              f"{runner.architecture} model has none (RMSNorm or a bias-free LayerNorm); "
                              "use --logit-adjust TAU --counts C instead")
    arms = [Arm(lam=lam) for lam in lambdas] if lambdas else [Arm()]
    if tau is not None:
        if not math.isfinite(tau):
            raise ConfigError(f"--logit-adjust {tau!r}: TAU must be a finite number")
        arms.append(Arm(tau=tau))
    return arms


def arm_surgery(arm: Arm, base: SurgeryOptions) -> SurgeryOptions:
    """The in-memory surgery of `arm`: the base operations plus its lambda."""
    return replace(base, scale_ln_bias=arm.lam)


def counts_log_prior(path: Path, model: ModelVocab, k: float = 1.0, *, allow_mismatch: bool = False,
                     ) -> tuple[torch.Tensor, FittedCounts]:
    """log p(y) [rows] from a counts file (nb's one smoothing formula), and the counts checked against
    the model's tokenizer and rows and padded to them by nb's one policy (nbcli.checkpoint.vocab)."""
    from nbcli.checkpoint.vocab import fit_counts
    from nbcli.ops import unigram_log_prior

    fitted = fit_counts(path, model, allow_mismatch=allow_mismatch, allow_foreign=True)
    fitted.info["smoothing"] = f"add-k:{k:g}"
    return unigram_log_prior(fitted.counts, model.rows, k), fitted


@dataclass
class Study:
    """What eval and generate share: the loaded model, its tokenizer, the arms and their surgery, the
    counts (checked, padded to the model's rows) and the model's vocabulary as the tokenizer in use
    names it (`vocab`, for further counts files), with the warnings the checks gave."""

    runner: Runner
    tokenizer: Any
    arms: list[Arm]
    base: SurgeryOptions
    log_prior: torch.Tensor | None
    counts_info: dict[str, Any] | None
    counts: np.ndarray | None = None
    vocab: ModelVocab | None = None
    allow_vocab_mismatch: bool = False
    warnings: list[str] = field(default_factory=list)

    def provenance(self) -> dict[str, Any]:
        from nbcli.provenance import tool_version, utc_now
        from nbcli.resolve import hub_records

        return {"nb_version": tool_version(), "created": utc_now(), "model": self.runner.describe(),
                "tokenizer": {"path": str(self.tokenizer.path), "sha256": self.tokenizer.sha256,
                              "fingerprint": self.tokenizer.fingerprint},
                "surgery": self.base.operations(), "counts": self.counts_info,
                "hub": hub_records([*self.runner.checkpoint.files, self.tokenizer.path])}


def open_study(checkpoint: Path, tokenizer_path: Path | None, lambdas: str | None, *, remove_direction: bool = False,
               tau: float | None = None, counts: Path | None = None, smoothing_k: float = 1.0, arch: str = "auto",
               mapping: dict[str, str] | None = None, device: str = "auto", dtype: str = "auto", tf32: bool = True,
               allow_vocab_mismatch: bool = False) -> Study:
    """Load the model and tokenizer, check they belong together (and the counts with them: nb's one
    policy, nbcli.checkpoint.vocab; `allow_vocab_mismatch` relaxes its identity rule), build the arms.
    `dtype`, `tf32`: the forward passes' precision (`nbcli.precision`)."""
    from nbcli.checkpoint.vocab import check_vocab, model_vocab, tokenizer_vocabulary, with_tokenizer
    from nbcli.lm.runner import load_runner
    from nbcli.surgery import SurgeryOptions
    from nbcli.tokenizers import load_tokenizer

    lams = parse_lambdas(lambdas) if lambdas is not None else None
    if tau is not None and counts is None:
        raise ConfigError("--logit-adjust TAU needs --counts C (log p(y) comes from a counts file)")
    what = f"-t {tokenizer_path}"
    if tokenizer_path is None:  # the model's own tokenizer (nbcli.resolve says which file)
        from nbcli.tokenizers import model_tokenizer

        if not isinstance(checkpoint, (str, PathLike)):
            raise ConfigError("a model in memory carries no tokenizer file: give its tokenizer")
        tokenizer_path = model_tokenizer(checkpoint)
        what = f"tokenizer {tokenizer_path}"
    tokenizer = load_tokenizer(tokenizer_path)
    runner = load_runner(checkpoint, arch=arch, overrides=mapping, device=device, dtype=dtype, tf32=tf32)
    try:
        model = model_vocab(runner.checkpoint, runner.vocab_size)
        warnings = check_vocab(tokenizer_vocabulary(tokenizer, what), model, allow_mismatch=allow_vocab_mismatch,
                               error=TokenizerError).warnings
        vocab = with_tokenizer(model, tokenizer, what)  # counts must match the tokenizer the text is read with
        arms = build_arms(runner, lams, tau)
        log_prior = info = padded = None
        if counts is not None:
            log_prior, fitted = counts_log_prior(counts, vocab, smoothing_k, allow_mismatch=allow_vocab_mismatch)
            info, padded = fitted.info, fitted.counts
            warnings = [*warnings, *fitted.warnings]
        base = SurgeryOptions(remove_frequency_direction=remove_direction)
        if remove_direction and not runner.has_ln_bias():
            runner.roles.require("final_ln_bias", "--remove-frequency-direction")
    except BaseException:
        runner.close()
        raise
    return Study(runner, tokenizer, arms, base, log_prior, info, padded, vocab, allow_vocab_mismatch, warnings)


def each_arm(runner: Runner, arms: Sequence[Arm], base: SurgeryOptions, log_prior: torch.Tensor | None,
             warnings: list[str]) -> Iterator[tuple[Arm, torch.Tensor | None]]:
    """Apply each arm's surgery to the runner in memory and yield it with its logit adjustment
    (tau log p(y), or None); warnings are appended to `warnings`; the model is restored at the end."""
    try:
        for arm in arms:
            warnings += [w for w in runner.set_surgery(arm_surgery(arm, base)) if w not in warnings]
            if arm.tau is None:
                yield arm, None
            else:
                if log_prior is None:
                    raise ConfigError("--logit-adjust TAU needs --counts C (log p(y) comes from a counts file)")
                yield arm, arm.tau * log_prior
    finally:
        runner.set_surgery(None)
