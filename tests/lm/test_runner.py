from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nbcli.errors import CheckpointError, TokenizerError
from nbcli.lm.runner import load_runner
from nbcli.surgery import SurgeryOptions


def _ids(vocab: int, shape: tuple[int, int], seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("which", ["nb_lm", "hf_lm"])
def test_kv_cache_steps_equal_the_full_forward(which: str, request: pytest.FixtureRequest) -> None:
    runner = load_runner(request.getfixturevalue(which))
    ids = _ids(runner.vocab_size, (3, 20))
    full = runner.logits(ids)
    last, state = runner.prefill(ids[:, :6])
    steps = [last] + [runner.step(state, ids[:, t]) for t in range(6, 20)]
    assert torch.allclose(torch.stack(steps, 1), full[:, 5:], atol=1e-5)


def test_nb_cache_doubles_when_full_and_keeps_its_positions(nb_lm: Path) -> None:
    runner = load_runner(nb_lm)
    ids = _ids(runner.vocab_size, (2, 12))
    full = runner.logits(ids)
    last, cache = runner.prefill(ids[:, :3])             # no room asked for: full after the prompt
    sizes = {cache.keys[0].shape[2]}
    steps = [last]
    for t in range(3, 12):
        steps.append(runner.step(cache, ids[:, t]))
        sizes.add(cache.keys[0].shape[2])
    assert cache.length == 12 and sizes == {3, 6, 12}    # geometric growth, not one step at a time
    assert torch.allclose(torch.stack(steps, 1), full[:, 2:], atol=1e-5)


def test_nb_cache_preallocated_to_the_final_length_is_never_copied(nb_lm: Path) -> None:
    runner = load_runner(nb_lm)
    ids = _ids(runner.vocab_size, (2, 12))
    full = runner.logits(ids)
    last, cache = runner.prefill(ids[:, :3], room=9)
    storage = [k.data_ptr() for k in cache.keys]
    steps = [last] + [runner.step(cache, ids[:, t]) for t in range(3, 12)]
    assert [k.data_ptr() for k in cache.keys] == storage and cache.keys[0].shape[2] == 12
    assert torch.allclose(torch.stack(steps, 1), full[:, 2:], atol=1e-5)


@pytest.mark.parametrize("which", ["nb_lm", "hf_lm"])
def test_prefill_logits_are_the_full_forward_last_position(which: str, request: pytest.FixtureRequest) -> None:
    """The output layer runs on the last prompt position only: the same logits as the whole forward's."""
    runner = load_runner(request.getfixturevalue(which))
    ids = _ids(runner.vocab_size, (3, 9), seed=3)
    last, _ = runner.prefill(ids)
    assert last.shape == (3, runner.vocab_size) and last.dtype == torch.float32
    assert torch.allclose(last, runner.logits(ids)[:, -1], atol=1e-5)


@pytest.mark.parametrize("which", ["nb_lm", "hf_lm"])
def test_lambda_one_leaves_logits_unchanged_and_sweeps_restore(which: str, request: pytest.FixtureRequest) -> None:
    runner = load_runner(request.getfixturevalue(which))
    ids = _ids(runner.vocab_size, (2, 12))
    before = runner.logits(ids)
    runner.set_surgery(SurgeryOptions(scale_ln_bias=1.0))
    assert torch.equal(runner.logits(ids), before)
    runner.set_surgery(SurgeryOptions(scale_ln_bias=0.0))
    zero = runner.logits(ids)
    assert (zero - before).abs().max() > 1e-3
    runner.set_surgery(SurgeryOptions(scale_ln_bias=0.3))
    runner.set_surgery(None)
    assert torch.equal(runner.logits(ids), before)
    # b_LN enters the logits linearly: logits(0) = logits(1) - W b_LN
    shift = runner.ln_bias_logit_shift()
    assert shift is not None and torch.allclose(before - shift, zero, atol=1e-4)


@pytest.mark.parametrize("which", ["nb_lm", "hf_lm"])
@pytest.mark.parametrize("ops", [["--scale-ln-bias", "0.4"], ["--remove-frequency-direction"],
                                 ["--scale-ln-bias", "0.2", "--remove-frequency-direction"]])
def test_in_memory_surgery_equals_patch_checkpoint_file(which: str, ops: list[str], tmp_path: Path,
                                                        request: pytest.FixtureRequest) -> None:
    import shutil

    from tests.cli.helpers import invoke

    source = request.getfixturevalue(which)
    if source.is_dir():
        patched = tmp_path / "patched"
        shutil.copytree(source, patched)
        target = patched / "model.safetensors"
        result = invoke("patch-checkpoint", source / "model.safetensors", "-o", target, "--in-place", *ops)
    else:
        target = patched = tmp_path / "patched.safetensors"
        result = invoke("patch-checkpoint", source, "-o", target, *ops)
    assert result.exit_code == 0, result.output
    runner = load_runner(source)
    lam = float(ops[1]) if ops[0] == "--scale-ln-bias" else None
    runner.set_surgery(SurgeryOptions(scale_ln_bias=lam, remove_frequency_direction="--remove-frequency-direction" in ops))
    ids = _ids(runner.vocab_size, (2, 10), seed=3)
    assert torch.equal(runner.logits(ids), load_runner(patched).logits(ids))


def test_set_output_bias_in_memory(nb_lm: Path, tmp_path: Path) -> None:
    import numpy as np

    from nbcli.counts import UnigramCounts, log_unigram, write_counts

    runner = load_runner(nb_lm)
    counts = np.arange(runner.vocab_size, dtype=np.int64)
    write_counts(tmp_path / "c.safetensors", UnigramCounts(counts, {"nb.format": "unigram-counts/1"}))
    runner.set_surgery(SurgeryOptions(output_bias_counts=tmp_path / "c.safetensors"))
    assert torch.allclose(runner.module.head_bias.double(), torch.from_numpy(log_unigram(counts)), atol=1e-6)


def test_lambda_on_a_model_without_ln_bias_is_an_error(tmp_path: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
                     ).save_pretrained(str(tmp_path))
    runner = load_runner(tmp_path)
    assert not runner.has_ln_bias() and runner.ln_bias_logit_shift() is None
    with pytest.raises(CheckpointError, match="final_ln_bias"):
        runner.set_surgery(SurgeryOptions(scale_ln_bias=0.5))
    ids = _ids(64, (2, 8))
    last, state = runner.prefill(ids[:, :4])
    steps = [last] + [runner.step(state, ids[:, t]) for t in range(4, 8)]
    assert torch.allclose(torch.stack(steps, 1), runner.logits(ids)[:, 3:], atol=1e-5)


def test_tokenizer_must_match_the_model(nb_lm: Path, hf_lm: Path, sp_model: Path, sp_unigram_model: Path,
                                        tmp_path: Path) -> None:
    """eval and generate open the model through open_study, which checks -t by nb's one policy."""
    from nbcli.lm.arms import open_study
    from nbcli.tokenizers import load_tokenizer
    from tests.lm.conftest import save_nb_model

    study = open_study(nb_lm, sp_model, None)
    study.runner.close()
    assert study.warnings == []
    with pytest.raises(TokenizerError, match="another tokenizer"):
        open_study(nb_lm, sp_unigram_model, None)
    tok = load_tokenizer(sp_model)
    older = save_nb_model(tmp_path / "older.safetensors", tok.vocab_size, tok.sha256)  # records only a sha256
    study = open_study(older, sp_model, None)
    study.runner.close()
    assert len(study.warnings) == 1 and "no tokenizer fingerprint" in study.warnings[0]
    assert f"{older} (its nb metadata) records no tokenizer fingerprint" in study.warnings[0]
    with pytest.raises(TokenizerError, match="500 tokens do not fit the 400 vocabulary rows"):
        open_study(hf_lm, sp_model, None)


def test_not_a_model_is_a_checkpoint_error(tmp_path: Path) -> None:
    from tests.checkpoint.builders import gpt2_tensors
    from safetensors.torch import save_file

    save_file(gpt2_tensors(), str(tmp_path / "bare.safetensors"))
    with pytest.raises(CheckpointError, match="config.json"):
        load_runner(tmp_path / "bare.safetensors")


@pytest.mark.parametrize("which", ["nb_lm", "hf_lm"])
def test_bfloat16_autocast_on_cpu_is_close_to_float32(which: str, request: pytest.FixtureRequest) -> None:
    """--dtype bfloat16 works on CPU: logits (handed back as float32) and the LM loss within bf16's
    rounding of float32's, and the KV cache (held in bf16) agrees with the bf16 full forward."""
    import torch.nn.functional as F

    path = request.getfixturevalue(which)
    fp32, bf16 = load_runner(path, device="cpu"), load_runner(path, device="cpu", dtype="bfloat16")
    assert fp32.describe()["autocast"] is None and bf16.describe()["autocast"] == "bfloat16"
    assert bf16.describe()["tf32"] is False                          # CPU: TF32 means nothing there
    ids = _ids(fp32.vocab_size, (3, 20), seed=5)
    a, b = fp32.logits(ids), bf16.logits(ids)
    assert b.dtype == torch.float32 and not torch.equal(a, b)       # bf16 did run
    assert torch.allclose(a, b, atol=0.02 * float(a.abs().max()) + 1e-3)
    loss = [float(F.cross_entropy(x[:, :-1].flatten(0, 1), ids[:, 1:].flatten())) for x in (a, b)]
    assert loss[1] == pytest.approx(loss[0], rel=1e-2)
    last, state = bf16.prefill(ids[:, :6], room=14)
    steps = [last] + [bf16.step(state, ids[:, t]) for t in range(6, 20)]
    assert torch.allclose(torch.stack(steps, 1), b[:, 5:], atol=0.02 * float(b.abs().max()) + 1e-3)
    if which == "nb_lm":
        assert state.keys[0].dtype == torch.bfloat16


def test_a_run_directory_is_read_as_its_best_checkpoint_else_its_last_step(tmp_path: Path, nb_lm: Path) -> None:
    """nb eval / generate given an nb train run: `nbcli.checkpoint.runs.run_checkpoint`'s rule, past
    the run's other .safetensors (counts, training state)."""
    import shutil

    run = tmp_path / "run"
    run.mkdir()
    for name in ("step-2.safetensors", "step-10.safetensors", "counts.safetensors", "train-state.safetensors"):
        shutil.copy(nb_lm, run / name)
    runner = load_runner(run, device="cpu")
    assert runner.path == run / "step-10.safetensors"
    runner.close()
    shutil.copy(nb_lm, run / "best.safetensors")
    runner = load_runner(run, device="cpu")
    assert runner.path == run / "best.safetensors"
    runner.close()
