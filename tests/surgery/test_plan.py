"""The surgery plan: run_surgery composes nbcli.ops in the documented order; the options, their
record and the tensors the plan holds back."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from nbcli import array_ops, ops, surgery
from nbcli.checkpoint import open_checkpoint, resolve_roles
from nbcli.counts import UnigramCounts, write_counts
from nbcli.errors import CheckpointError, ConfigError
from tests.checkpoint.builders import gpt2_tensors, nb_tensors, save, seq2seq_tensors

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


@pytest.mark.parametrize(("spec", "expected"), [
    ("xavier", surgery.StandardiseSpec("xavier")),
    ("match:/a/b:c.safetensors:emb.weight", surgery.StandardiseSpec("match", match_file="/a/b:c.safetensors",
                                                                    match_tensor="emb.weight")),
    ("match:/a/b.safetensors", surgery.StandardiseSpec("match", match_file="/a/b.safetensors")),
    ("mean=0.1,std=0.02", surgery.StandardiseSpec("explicit", mean=0.1, std=0.02)),
])
def test_parse_standardise(spec: str, expected: surgery.StandardiseSpec) -> None:
    assert surgery.parse_standardise(spec) == expected


@pytest.mark.parametrize("bad", ["gauss", "match:", "match::emb", "mean=1", "mean=x,std=1", "mean=0,std=-1", "std=nan,mean=0"])
def test_parse_standardise_errors(bad: str) -> None:
    with pytest.raises(ConfigError):
        surgery.parse_standardise(bad)


@pytest.mark.parametrize("dtype", DTYPES)
def test_composed_operations_equal_their_sequence(tmp_path: Path, dtype: torch.dtype) -> None:
    """run_surgery = the pure functions applied one after another in the documented order, in fp32."""
    tensors, meta = nb_tensors(tied=False, dtype=dtype)
    meta["nb.tokenizer_sha256"] = "ab" * 32  # the counts' tokenizer: 37 < 40 rows is then padding
    ckpt = open_checkpoint(save(tmp_path / "m.safetensors", tensors, meta))
    counts = np.random.default_rng(1).integers(0, 100, size=37)
    write_counts(tmp_path / "c.safetensors", UnigramCounts(counts=counts, metadata={"nb.tokenizer_sha256": "ab" * 32}))
    options = surgery.SurgeryOptions(
        output_bias_counts=tmp_path / "c.safetensors", smoothing_k=0.5, rescale_w="spectral",
        standardise=surgery.StandardiseSpec("explicit", mean=0.0, std=0.05), shuffle=True, seed=3,
        scale_ln_bias=0.25, remove_frequency_direction=True)
    new, _ws, warnings = surgery.run_surgery(ckpt, resolve_roles(ckpt), options)
    assert len(warnings) == 2 and "vocabulary padding (the tokenizer matched)" in warnings[1]
    assert "no tokenizer fingerprint" in warnings[0]  # both record only a sha256 (an older nb): said once

    work = torch.float64 if dtype == torch.float64 else torch.float32
    bias = ops.unigram_log_prior(counts, 40, 0.5).to(work)
    w = ops.rescale_w(tensors["head.weight"].to(work), bias, "spectral")
    emb = ops.shuffle_embeddings(ops.standardise_embeddings(tensors["tok_emb.weight"].to(work), 0.0, 0.05), 3)
    ln = ops.scale_ln_bias(tensors["ln_f.bias"].to(work), 0.25)
    w = array_ops.remove_direction(w, tensors["ln_f.bias"].to(work))
    expected = {"head.bias": bias, "head.weight": w, "tok_emb.weight": emb, "ln_f.bias": ln}
    assert set(new) == set(expected)
    for name, value in expected.items():
        assert new[name].dtype == dtype, name
        assert torch.equal(new[name], value.to(dtype)), name


def test_tied_output_side_warns_and_untie_separates(tmp_path: Path) -> None:
    ckpt = open_checkpoint(save(tmp_path / "g.safetensors", gpt2_tensors()))
    roles = resolve_roles(ckpt)
    opts = surgery.SurgeryOptions(remove_frequency_direction=True)
    new, _ws, warnings = surgery.run_surgery(ckpt, roles, opts)
    assert set(new) == {"wte.weight"} and any("tied" in w for w in warnings)
    opts = surgery.SurgeryOptions(remove_frequency_direction=True, untie=True)
    new, ws, warnings = surgery.run_surgery(ckpt, roles, opts)
    assert set(new) == {"lm_head.weight"} and ws.touched["lm_head.weight"].created
    expected = array_ops.remove_direction(ckpt.get("wte.weight"), ckpt.get("ln_f.bias"))
    assert torch.allclose(new["lm_head.weight"], expected, atol=1e-6)


def test_gpt2_bias_needs_a_name(tmp_path: Path) -> None:
    ckpt = open_checkpoint(save(tmp_path / "g.safetensors", gpt2_tensors()))
    write_counts(tmp_path / "c.safetensors", UnigramCounts(counts=np.ones(40, dtype=np.int64)))
    opts = surgery.SurgeryOptions(output_bias_counts=tmp_path / "c.safetensors")
    with pytest.raises(CheckpointError, match="--bias-name"):
        surgery.run_surgery(ckpt, resolve_roles(ckpt), opts)
    opts.bias_name = "lm_head.bias"
    new, ws, _ = surgery.run_surgery(ckpt, resolve_roles(ckpt), opts)
    assert ws.touched["lm_head.bias"].created and new["lm_head.bias"].shape == (40,)
    assert torch.allclose(new["lm_head.bias"].double(), torch.full((40,), -math.log(40), dtype=torch.float64))


def test_nonfinite_input_is_refused_unless_allowed(tmp_path: Path) -> None:
    tensors = gpt2_tensors()
    tensors["ln_f.bias"][2] = math.nan
    ckpt = open_checkpoint(save(tmp_path / "g.safetensors", tensors))
    opts = surgery.SurgeryOptions(scale_ln_bias=0.5)
    with pytest.raises(CheckpointError, match="'ln_f.bias' contains NaN"):
        surgery.run_surgery(ckpt, resolve_roles(ckpt), opts)
    opts.allow_nonfinite = True
    new, _, _ = surgery.run_surgery(ckpt, resolve_roles(ckpt), opts)
    assert math.isnan(float(new["ln_f.bias"][2]))


def test_overflow_on_cast_back_is_refused(tmp_path: Path) -> None:
    tensors = {"tok_emb.weight": torch.randn(40, 8).half(), "head.bias": torch.zeros(40).half(),
               "ln_f.bias": torch.ones(8).half()}
    ckpt = open_checkpoint(save(tmp_path / "m.safetensors", tensors, nb_tensors()[1]))
    opts = surgery.SurgeryOptions(scale_ln_bias=1e6)  # 1e6 does not fit in float16
    with pytest.raises(CheckpointError, match="would contain NaN or Inf"):
        surgery.run_surgery(ckpt, resolve_roles(ckpt), opts)


def test_operations_record_order_and_arguments() -> None:
    opts = surgery.SurgeryOptions(output_bias_counts=Path("c.safetensors"), rescale_w="fro", scale_ln_bias=0.5,
                                  shuffle=True, seed=7)
    ops = [op["op"] for op in opts.operations()]
    assert ops == ["set-output-bias", "rescale-w", "shuffle-embeddings", "scale-ln-bias"]
    assert [o for o in surgery.OPERATION_ORDER if o in ops] == ops
    doc = json.loads(surgery.provenance_entry(opts, {"checkpoint:m": "ab" * 32}, previous='{"tool": "x"}'))
    assert doc["operations"][2] == {"op": "shuffle-embeddings", "seed": 7, "mode": "rows"}
    assert doc["previous"] == {"tool": "x"} and doc["inputs_sha256"] == {"checkpoint:m": "ab" * 32}


def test_held_tensors_none_when_the_layout_changes(tmp_path: Path) -> None:
    ckpt = open_checkpoint(save(tmp_path / "g.safetensors", gpt2_tensors()))
    roles = resolve_roles(ckpt)
    counts = tmp_path / "c.safetensors"
    assert surgery.held_tensors(ckpt, roles, surgery.SurgeryOptions(scale_ln_bias=0.5)) == {"ln_f.bias"}
    assert surgery.held_tensors(ckpt, roles, surgery.SurgeryOptions(untie=True, scale_ln_bias=0.5)) is None
    created = surgery.SurgeryOptions(output_bias_counts=counts, bias_name="lm_head.bias")
    assert surgery.held_tensors(ckpt, roles, created) is None
    existing = surgery.SurgeryOptions(output_bias_counts=counts, bias_name="ln_f.bias")
    assert surgery.held_tensors(ckpt, roles, existing) == {"ln_f.bias"}


def test_resolve_options_makes_the_standardise_target_concrete(tmp_path: Path) -> None:
    ckpt = open_checkpoint(save(tmp_path / "m.safetensors", gpt2_tensors()))
    roles = resolve_roles(ckpt)
    options = surgery.SurgeryOptions(standardise=surgery.StandardiseSpec("xavier"))
    resolved = surgery.resolve_options(ckpt, roles, options)
    rows, dim = ckpt.shape("wte.weight")
    assert resolved.standardise == surgery.StandardiseSpec("xavier", mean=0.0, std=ops.xavier_std(rows, dim))
    plain = surgery.SurgeryOptions(scale_ln_bias=0.5)
    assert surgery.resolve_options(ckpt, roles, plain) is plain


def test_surgery_result_reports_the_workspace(tmp_path: Path) -> None:
    ckpt = open_checkpoint(save(tmp_path / "m.safetensors", gpt2_tensors()))
    roles = resolve_roles(ckpt)
    options = surgery.SurgeryOptions(scale_ln_bias=0.5)
    _new, ws, warnings = surgery.run_surgery(ckpt, roles, options)
    result = surgery.surgery_result(roles, options, ws, warnings, dry_run=True)
    assert result.architecture == "gpt2" and result.roles == roles.as_dict() and result.dry_run
    assert result.operations == [{"op": "scale-ln-bias", "lambda": 0.5}] and result.outputs == []
    assert [t.name for t in result.tensors] == ["ln_f.bias"] and result.warnings is warnings
    assert result.tensors[0].after["norm"] == pytest.approx(0.5 * result.tensors[0].before["norm"], rel=1e-6)


def test_marian_older_save_keeps_its_embedding_copies_equal(tmp_path: Path) -> None:
    """An older Marian save holds model.shared and encoder/decoder embed_tokens copies: every
    operation on the input embedding writes all three alike; final_logits_bias keeps its [1, V]
    shape (with the values of the unigram prior); --untie writes lm_head and leaves the copies."""
    tensors = seq2seq_tensors("marian")
    ckpt = open_checkpoint(save(tmp_path / "m.safetensors", tensors))
    counts = np.random.default_rng(2).integers(0, 100, size=40)
    write_counts(tmp_path / "c.safetensors", UnigramCounts(counts=counts, metadata={}))
    options = surgery.SurgeryOptions(output_bias_counts=tmp_path / "c.safetensors", shuffle=True, seed=5,
                                     standardise=surgery.StandardiseSpec("xavier"))
    new, _ws, _warnings = surgery.run_surgery(ckpt, resolve_roles(ckpt), surgery.resolve_options(
        ckpt, resolve_roles(ckpt), options))
    shared = ops.shuffle_embeddings(ops.standardise_embeddings(tensors["model.shared.weight"], 0.0,
                                                               ops.xavier_std(40, 8)), 5)
    for name in ("model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"):
        torch.testing.assert_close(new[name], shared)
    assert new["final_logits_bias"].shape == (1, 40)
    torch.testing.assert_close(new["final_logits_bias"][0], ops.unigram_log_prior(counts, 40, 1.0))
    untied, _ws, _warnings = surgery.run_surgery(ckpt, resolve_roles(ckpt), surgery.SurgeryOptions(untie=True))
    assert set(untied) == {"lm_head.weight"}
    torch.testing.assert_close(untied["lm_head.weight"], tensors["model.shared.weight"])
