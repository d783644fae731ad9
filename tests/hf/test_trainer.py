"""AttentionGuidanceTrainer: a transformers Trainer with L + alpha_t L_AG, logging L_AG and alpha_t."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")  # in the test extras; never skipped in CI
pytest.importorskip("accelerate")  # the Trainer's own requirement; in the test extras

import nbcli  # noqa: E402
from nbcli.errors import ConfigError  # noqa: E402
from nbcli.train.guidance import ag_alpha  # noqa: E402

V, PAD, MASK = 50, 0, 49


def _rows(n: int = 16, seed: int = 0) -> list[dict[str, list[int]]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(5, 13, (n,), generator=g)
    return [{"input_ids": [1, *torch.randint(3, MASK, (int(k) - 2,), generator=g).tolist(), 2]} for k in lengths]


def _collate(batch: list[dict[str, Any]], mlm: bool) -> dict[str, torch.Tensor]:
    """Right padding; MLM: 15% of the real non-special tokens become <mask> and are the labels."""
    T = max(len(row["input_ids"]) for row in batch)
    ids = torch.tensor([row["input_ids"] + [PAD] * (T - len(row["input_ids"])) for row in batch])
    mask = torch.tensor([[1] * len(row["input_ids"]) + [0] * (T - len(row["input_ids"])) for row in batch])
    labels = ids.masked_fill(mask == 0, -100)
    if mlm:
        chosen = (torch.rand(ids.shape, generator=torch.Generator().manual_seed(T)) < 0.15) & mask.bool() & (ids > 2)
        labels = labels.masked_fill(~chosen, -100)
        ids = ids.masked_fill(chosen, MASK)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def _args(tmp_path: Path, **extra: Any) -> Any:
    return transformers.TrainingArguments(str(tmp_path / "run"), max_steps=3, per_device_train_batch_size=4,
                                          logging_steps=1, report_to=[], use_cpu=True, save_strategy="no",
                                          learning_rate=1e-3, seed=0, **extra)


def _roberta() -> Any:
    torch.manual_seed(0)
    return transformers.RobertaForMaskedLM(transformers.RobertaConfig(
        vocab_size=V, hidden_size=16, num_hidden_layers=2, num_attention_heads=4, intermediate_size=32,
        max_position_embeddings=24, pad_token_id=PAD))


def _train_records(trainer: Any) -> list[dict[str, Any]]:
    trainer.train()
    return [r for r in trainer.state.log_history if "loss" in r and "train_runtime" not in r]


def test_three_steps_with_guidance_log_ag_loss_and_alpha(tmp_path: Path) -> None:
    """RoBERTa MLM, alpha_0 auto: step 0's alpha_0 L_AG equals its L; alpha_t follows the linear decay
    to 0 at max_steps; each logged loss is L + alpha_t L_AG; the guided heads' q/k come from hooks."""
    trainer = nbcli.AttentionGuidanceTrainer(model=_roberta(), args=_args(tmp_path), train_dataset=_rows(),
                                             data_collator=lambda b: _collate(b, mlm=True), ag_fraction=0.5,
                                             ag_alpha="auto", ag_special_ids=(1, 2), ag_period_ids=(7,))
    records = _train_records(trainer)
    assert [r["step"] for r in records] == [1, 2, 3]
    alpha0 = trainer.ag_alpha0
    assert alpha0 is not None and alpha0 > 0
    assert records[0]["ag_alpha"] * records[0]["ag_loss"] == pytest.approx(records[0]["lm_loss"], rel=1e-5)
    for step, record in enumerate(records):
        assert record["ag_alpha"] == pytest.approx(ag_alpha(step, alpha0, 3))
        assert record["ag_loss"] > 0 and math.isfinite(record["lm_loss"])
        assert record["loss"] == pytest.approx(record["lm_loss"] + record["ag_alpha"] * record["ag_loss"], rel=1e-4)


def test_guidance_changes_the_update_and_fraction_zero_is_the_plain_trainer(tmp_path: Path) -> None:
    def weights(**ag: Any) -> dict[str, torch.Tensor]:
        model = _roberta()
        cls = nbcli.AttentionGuidanceTrainer if ag else transformers.Trainer
        trainer = cls(model=model, args=_args(tmp_path), train_dataset=_rows(),
                      data_collator=lambda b: _collate(b, mlm=True), **ag)
        trainer.train()
        return {k: v.detach().clone() for k, v in model.state_dict().items()}

    plain = weights()
    off = weights(ag_fraction=0.0)
    guided = weights(ag_fraction=0.5, ag_alpha=100.0, ag_patterns="next,prev")
    assert all(torch.equal(plain[k], off[k]) for k in plain)
    q0 = "roberta.encoder.layer.0.attention.self.query.weight"
    assert not torch.equal(plain[q0], guided[q0])


def test_gpt2_from_output_attentions_switches_to_eager(tmp_path: Path) -> None:
    torch.manual_seed(0)
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=V, n_positions=24, n_embd=16, n_layer=2,
                                                                n_head=4, bos_token_id=1, eos_token_id=2))
    with pytest.warns(UserWarning, match="eager"):
        trainer = nbcli.AttentionGuidanceTrainer(model=gpt2, args=_args(tmp_path), train_dataset=_rows(),
                                                 data_collator=lambda b: _collate(b, mlm=False), ag_fraction=0.5,
                                                 ag_alpha=10.0, ag_source="attentions", ag_hold_steps=1)
    assert gpt2.config._attn_implementation == "eager"
    records = _train_records(trainer)
    assert [r["ag_alpha"] for r in records] == pytest.approx([10.0, 10.0, 5.0])  # held 1 step, then decayed
    assert all(r["ag_loss"] > 0 for r in records)


def test_bad_options_are_config_errors(tmp_path: Path) -> None:
    for bad in (dict(ag_fraction=1.5), dict(ag_source="maps"), dict(ag_alpha="lots"), dict(ag_hold_steps=-1)):
        with pytest.raises(ConfigError):
            nbcli.AttentionGuidanceTrainer(model=_roberta(), args=_args(tmp_path), train_dataset=_rows(),
                                           data_collator=lambda b: _collate(b, mlm=True), **bad)
