"""`AttentionGuidanceTrainer`: transformers' Trainer with paper 001's auxiliary loss, one changed line.

    trainer = nbcli.AttentionGuidanceTrainer(model=model, args=args, train_dataset=data,
                                             data_collator=collator, ag_fraction=0.5, ag_alpha=100)
    trainer.train()                    # logs loss (the total), lm_loss, ag_loss and ag_alpha

The training loss is L + alpha_t L_AG (eq. 4): L the model's own loss, L_AG `attention_guidance_loss`
(the loss of `nb train`, `nbcli.train.guidance`) over heads 0 .. k-1 of every layer, alpha_t
`ag_alpha(step, alpha_0, decay_steps, hold_steps)`: alpha_0 held for `ag_hold_steps` optimizer steps,
then decayed linearly to 0 at `ag_decay_steps` (default: the run's max_steps). `ag_alpha="auto"`
sets alpha_0 = L / L_AG on the first training batch (mean over processes; paper 001 sec. 4.5), in
training mode (nb train measures it in eval mode over the whole first update). Evaluation losses are
the model's own, without L_AG, as nb train's val_loss.

Maps (`ag_source`): "hooks" captures the query and key projections the architecture table names
(GPT-2, BERT, RoBERTa, DistilBERT) and recomputes the guided heads only, under any attention
kernel; "attentions" asks the model for output_attentions (eager attention: the trainer switches the
model to it, with a warning); "auto" (default) is hooks where the table names the projections.
With gradient accumulation L_AG is averaged over the micro-batches of an update, as in nb train.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch
from transformers import Trainer

from nbcli.analysis.patterns import parse_patterns
from nbcli.errors import ConfigError
from nbcli.hf.guidance import attention_guidance_loss, capture_qk, is_causal_model, pattern_ids, qk_projections
from nbcli.train.guidance import ag_alpha, auto_alpha, parse_alpha

AG_SOURCES = ("auto", "hooks", "attentions")


class AttentionGuidanceTrainer(Trainer):
    """A drop-in `transformers.Trainer` whose training loss is L + alpha_t L_AG (module docstring).

    ag_fraction: fraction of heads per layer guided (0 turns guidance off); ag_alpha: alpha_0, a
    number >= 0 or "auto"; ag_patterns: e.g. "prev,first" or a list (default: [Next], [Prev], the
    rest [First]; causal models drop [Next]); ag_decay_steps / ag_hold_steps: the schedule;
    ag_reduction: "mse" (the released code's units) or "frobenius"; ag_special_ids / ag_period_ids:
    the [Delim] / [Period] targets (default: from `processing_class`, `nbcli.pattern_ids`);
    ag_source: "auto", "hooks" or "attentions"."""

    def __init__(self, *args: Any, ag_fraction: float = 0.5, ag_alpha: float | str = 100.0,
                 ag_patterns: str | Sequence[str] | None = None, ag_decay_steps: int | None = None,
                 ag_hold_steps: int = 0, ag_reduction: str = "mse", ag_special_ids: Sequence[int] | None = None,
                 ag_period_ids: Sequence[int] | None = None, ag_source: str = "auto", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not 0.0 <= ag_fraction <= 1.0:
            raise ConfigError(f"ag_fraction must be in [0, 1], got {ag_fraction}")
        if ag_source not in AG_SOURCES:
            raise ConfigError(f"ag_source must be one of {', '.join(AG_SOURCES)}, got {ag_source!r}")
        if ag_hold_steps < 0 or (ag_decay_steps is not None and ag_decay_steps < 0):
            raise ConfigError("ag_hold_steps and ag_decay_steps must be >= 0")
        self.ag_fraction = ag_fraction
        self.ag_alpha0 = parse_alpha(ag_alpha)  # None: "auto", set on the first training batch
        self.ag_patterns = parse_patterns(ag_patterns) if isinstance(ag_patterns, str) else (
            None if ag_patterns is None else tuple(ag_patterns))
        self.ag_decay_steps, self.ag_hold_steps, self.ag_reduction = ag_decay_steps, ag_hold_steps, ag_reduction
        tokenizer = self.processing_class if hasattr(self.processing_class, "convert_ids_to_tokens") else None
        found = pattern_ids(tokenizer) if tokenizer is not None and (ag_special_ids is None or ag_period_ids is None) \
            else ((), ())
        self.ag_special_ids = tuple(found[0] if ag_special_ids is None else ag_special_ids)
        self.ag_period_ids = tuple(found[1] if ag_period_ids is None else ag_period_ids)
        self._ag_projections = None
        if ag_fraction > 0:
            self._ag_projections = self._choose_source(self.accelerator.unwrap_model(self.model), ag_source)
        self._ag_causal = is_causal_model(self.accelerator.unwrap_model(self.model))
        self._ag_sums = [0.0, 0.0, 0.0, 0]  # ag_loss, lm_loss, alpha_t, micro-batches since the last log

    @staticmethod
    def _choose_source(model: Any, source: str) -> Any:
        """The q/k projections to hook, or None for output_attentions (the model switched to eager)."""
        if source in ("auto", "hooks"):
            try:
                return qk_projections(model)
            except ConfigError:
                if source == "hooks":
                    raise
        implementation = getattr(model.config, "_attn_implementation", "eager")
        if implementation != "eager":
            if not callable(getattr(model, "set_attn_implementation", None)):
                raise ConfigError(f"attention guidance from output_attentions needs eager attention; load the model "
                                  f"with attn_implementation='eager' (it uses {implementation})")
            model.set_attn_implementation("eager")
            warnings.warn(f"AttentionGuidanceTrainer: switched the model's attention from {implementation} to eager "
                          "(output_attentions needs the maps; nb has no q/k hooks for this architecture)", stacklevel=3)
        return None

    def current_ag_alpha(self) -> float:
        """alpha_t at the current optimizer step (0 before alpha_0 is known)."""
        if self.ag_alpha0 is None:
            return 0.0
        decay = self.ag_decay_steps if self.ag_decay_steps is not None else self.state.max_steps
        return ag_alpha(self.state.global_step, self.ag_alpha0, decay, self.ag_hold_steps)

    def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> Any:
        if self.ag_fraction == 0 or not model.training:
            return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                        num_items_in_batch=num_items_in_batch)
        if self._ag_projections is not None:
            with capture_qk(model, self._ag_projections) as captured:
                loss, outputs = super().compute_loss(model, inputs, return_outputs=True,
                                                     num_items_in_batch=num_items_in_batch)
            maps: Any = captured
        else:
            loss, outputs = super().compute_loss(model, {**inputs, "output_attentions": True}, return_outputs=True,
                                                 num_items_in_batch=num_items_in_batch)
            maps = outputs.attentions
        ag = attention_guidance_loss(maps, inputs["input_ids"], attention_mask=inputs.get("attention_mask"),
                                     patterns=self.ag_patterns, fraction=self.ag_fraction,
                                     special_ids=self.ag_special_ids, period_ids=self.ag_period_ids,
                                     causal=self._ag_causal, reduction=self.ag_reduction)
        steps = max(1, int(getattr(self, "current_gradient_accumulation_steps", 1) or 1))
        scaled = self._loss_scaled_for_accumulation(num_items_in_batch)
        lm_value = loss.detach() * (steps if scaled else 1)  # the micro-batch's own loss
        if self.ag_alpha0 is None:
            both = self.accelerator.reduce(torch.stack([lm_value.float(), ag.detach().float()]), reduction="mean")
            self.ag_alpha0 = auto_alpha(float(both[0]), float(both[1]))
        alpha = self.current_ag_alpha()
        self._ag_sums[0] += float(ag.detach())
        self._ag_sums[1] += float(lm_value)
        self._ag_sums[2] += alpha
        self._ag_sums[3] += 1
        total = loss + alpha * ag / (steps if scaled else 1)  # Trainer divides an unscaled loss by the steps
        return (total, outputs) if return_outputs else total

    def _loss_scaled_for_accumulation(self, num_items_in_batch: Any) -> bool:
        """Whether the loss `compute_loss` returns is already divided over the accumulation steps
        (the Trainer's own rule in `training_step`); then L_AG is divided here."""
        fixed = getattr(self, "loss_is_scaled_for_ga", None)
        if fixed is not None:
            return bool(fixed)
        return bool((self.model_accepts_loss_kwargs and num_items_in_batch is not None)
                    or self.compute_loss_func is not None)

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        """The Trainer's log record, with lm_loss, ag_loss and ag_alpha in training records: the means
        over the micro-batches since the last record of L, L_AG and the alpha_t that weighed it (with
        logging_steps=1: that step's values, loss = lm_loss + ag_alpha * ag_loss)."""
        if "loss" in logs and self._ag_sums[3]:
            ag_sum, lm_sum, alpha_sum, count = self._ag_sums
            logs = {**logs, "lm_loss": lm_sum / count, "ag_loss": ag_sum / count, "ag_alpha": alpha_sum / count}
            self._ag_sums = [0.0, 0.0, 0.0, 0]
        super().log(logs, *args, **kwargs)
