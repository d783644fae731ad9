"""Models in memory: init_output_bias (live, trainable, restored by load_model), in-place untie, the
in-memory surgery functions, and evaluate/generate/inspect/probe given a loaded model."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")  # in the test extras; never skipped in CI

import nbcli  # noqa: E402
from nbcli.counts import UnigramCounts, write_counts  # noqa: E402
from nbcli.errors import CheckpointError, ConfigError, CountsError  # noqa: E402
from nbcli.array_ops import remove_direction, unigram_weights  # noqa: E402
from nbcli.ops import (  # noqa: E402
    shuffle_embeddings, standardise_embeddings, unigram_log_prior, xavier_std, zipfian_whiten,
)

V = 64
COUNTS = np.random.default_rng(5).integers(0, 500, size=V).astype(np.int64)
IDS = torch.tensor([[3, 17, 42, 5, 60, 9]])


def _decoder(cls: str, config: str, **extra: Any) -> Any:
    return lambda: getattr(transformers, cls)(getattr(transformers, config)(
        vocab_size=V, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=32, **extra))


FAMILIES = {
    "gpt2": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=V, n_positions=32, n_embd=16,
                                                                         n_layer=2, n_head=2, bos_token_id=1,
                                                                         eos_token_id=2)),
    "llama": _decoder("LlamaForCausalLM", "LlamaConfig", num_key_value_heads=1),
    "mistral": _decoder("MistralForCausalLM", "MistralConfig", num_key_value_heads=1),
    "qwen2": _decoder("Qwen2ForCausalLM", "Qwen2Config", num_key_value_heads=1),
    "bert": _decoder("BertForMaskedLM", "BertConfig"),
    "marian": lambda: transformers.MarianMTModel(transformers.MarianConfig(
        vocab_size=V, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32,
        pad_token_id=0, decoder_start_token_id=0)),
}


def _build(family: str) -> Any:
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = FAMILIES[family]().eval()
    bias = getattr(model.get_output_embeddings(), "bias", None)
    if bias is not None:
        with torch.no_grad():
            bias.normal_()  # an existing bias (BERT) that init_output_bias replaces
    return model


def _logits(model: Any) -> torch.Tensor:
    if model.config.is_encoder_decoder:
        return model(input_ids=IDS, decoder_input_ids=IDS[:, :4]).logits
    return model(input_ids=IDS).logits


@pytest.mark.parametrize("family", list(FAMILIES))
def test_init_output_bias_is_live_trainable_and_restored(family: str, tmp_path: Path) -> None:
    model = _build(family)
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    old = getattr(model.get_output_embeddings(), "bias", None)
    old = torch.zeros(V) if old is None else old.detach().clone()
    with torch.no_grad():
        before = _logits(model)
    report = nbcli.init_output_bias(model, COUNTS)
    prior = unigram_log_prior(COUNTS, V)
    after = _logits(model)
    torch.testing.assert_close(after.detach() - before, (prior - old).expand_as(before), rtol=1e-5, atol=1e-5)
    bias = dict(model.named_parameters())[report.bias]  # a Parameter an optimizer sees
    assert bias.requires_grad and report.created is (family not in ("bert",))
    after.sum().backward()
    assert bias.grad is not None and float(bias.grad.abs().sum()) > 0
    assert (model.get_output_embeddings().weight is model.get_input_embeddings().weight) is tied  # ties kept
    model.save_pretrained(tmp_path / family)
    again = nbcli.load_model(tmp_path / family)
    torch.testing.assert_close(_logits(again).detach(), after.detach(), rtol=1e-5, atol=1e-5)


def test_counts_file_or_array_and_bad_counts(tmp_path: Path) -> None:
    path = tmp_path / "c.safetensors"
    write_counts(path, UnigramCounts(counts=COUNTS, metadata={}))
    a, b = _build("gpt2"), _build("gpt2")
    nbcli.init_output_bias(a, path, smoothing="add-k:0.5")
    nbcli.init_output_bias(b, torch.from_numpy(COUNTS), smoothing="add-k:0.5")
    assert torch.equal(a.lm_head.bias, b.lm_head.bias)
    torch.testing.assert_close(a.lm_head.bias.detach(), unigram_log_prior(COUNTS, V, 0.5))
    for bad in (np.ones(V + 1), -np.ones(V), np.ones((2, V)), np.array([np.nan] * V), np.array(['a'] * V)):
        with pytest.raises((CountsError, ConfigError)):
            nbcli.init_output_bias(_build("gpt2"), bad)


def test_rescale_w_matches_the_bias_norm() -> None:
    model = _build("llama")  # untied: W alone is scaled
    report = nbcli.init_output_bias(model, COUNTS, rescale_w="fro")
    assert float(model.lm_head.weight.detach().norm()) == pytest.approx(float(unigram_log_prior(COUNTS, V).norm()), rel=1e-5)
    assert [t["name"] for t in report.tensors] == ["lm_head.bias", "lm_head.weight"] and not report.warnings
    tied = _build("gpt2")
    assert "tied" in nbcli.init_output_bias(tied, COUNTS, rescale_w="fro").warnings[0]


def test_patch_untie_in_place_really_unties(tmp_path: Path) -> None:
    model = _build("gpt2")
    wte = model.transformer.wte.weight.detach().clone()
    report = nbcli.patch(model, untie=True, in_place=True)
    assert any("separate output weight" in w for w in report.warnings)
    assert model.lm_head.weight is not model.transformer.wte.weight and model.config.tie_word_embeddings is False
    assert torch.equal(model.lm_head.weight, wte)
    with torch.no_grad():
        model.lm_head.weight.mul_(2)
    assert torch.equal(model.transformer.wte.weight, wte)  # the embedding no longer moves with W
    model.save_pretrained(tmp_path / "untied")
    again = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "untied")
    assert torch.equal(again.lm_head.weight, 2 * wte) and torch.equal(again.transformer.wte.weight, wte)


def test_in_memory_surgery_uses_the_same_functions(tmp_path: Path) -> None:
    path = tmp_path / "c.safetensors"
    write_counts(path, UnigramCounts(counts=COUNTS, metadata={}))
    model = _build("gpt2")
    nbcli.patch(model, untie=True, in_place=True)
    with torch.no_grad():
        model.transformer.ln_f.bias.normal_()
    emb = lambda: model.transformer.wte.weight.detach().clone()  # noqa: E731
    x = emb()
    nbcli.standardise_embeddings(model)
    torch.testing.assert_close(emb(), standardise_embeddings(x, 0.0, xavier_std(*x.shape)))
    x = emb()
    report = nbcli.shuffle_embeddings(model, seed=3)
    assert torch.equal(emb(), shuffle_embeddings(x, 3)) and report.tensors[0]["name"] == "transformer.wte.weight"
    x = emb()
    nbcli.zipfian_whiten_embeddings(model, path)
    torch.testing.assert_close(emb(), zipfian_whiten(x, unigram_weights(COUNTS, V, 1.0)))
    b_ln, w = model.transformer.ln_f.bias.detach().clone(), model.lm_head.weight.detach().clone()
    report = nbcli.scale_ln_bias(model, 0.25)
    assert torch.equal(model.transformer.ln_f.bias, 0.25 * b_ln)
    assert report.tensors[0]["after"]["norm"] == pytest.approx(0.25 * report.tensors[0]["before"]["norm"], rel=1e-6)
    nbcli.remove_frequency_direction(model)  # u from the stored (current) b_LN: its direction is b_ln's
    torch.testing.assert_close(model.lm_head.weight.detach(), remove_direction(w, b_ln))
    with pytest.raises(ConfigError, match="in memory"):
        nbcli.scale_ln_bias(tmp_path / "folder", 0.5)


@pytest.fixture()
def hf_folder(tmp_path: Path, hf_bytelevel_json: Path) -> tuple[Path, Any]:
    from nbcli.tokenizers import load_tokenizer
    from tests.lm.conftest import save_hf_gpt2

    tok = load_tokenizer(hf_bytelevel_json)
    folder = save_hf_gpt2(tmp_path / "gpt2", tok.vocab_size, eos_id=tok.eos_id or 0)
    return folder, transformers.GPT2LMHeadModel.from_pretrained(folder)


def test_evaluate_generate_inspect_probe_take_a_loaded_model(tmp_path: Path, hf_folder: tuple[Path, Any],
                                                             hf_bytelevel_json: Path, sample_lines: list[str]) -> None:
    folder, model = hf_folder
    model.train()
    text = tmp_path / "heldout.txt"
    text.write_text("\n".join(sample_lines[:12]) + "\n", encoding="utf-8")
    by_path = nbcli.evaluate(folder, text, hf_bytelevel_json, scale_ln_bias=[1, 0.5], device="cpu")
    by_model = nbcli.evaluate(model, text, hf_bytelevel_json, scale_ln_bias=[1, 0.5])
    assert [r["loss"] for r in by_model.rows] == pytest.approx([r["loss"] for r in by_path.rows], rel=1e-6)
    assert model.training  # given back in the mode it came in, its b_LN as it was
    ln = model.transformer.ln_f.bias.detach().clone()
    gen_path = nbcli.generate(folder, text, hf_bytelevel_json, prompt_words=3, max_new_tokens=4, device="cpu")
    gen_model = nbcli.generate(model, text, hf_bytelevel_json, prompt_words=3, max_new_tokens=4)
    assert [s["tokens"] for s in gen_model.samples] == [s["tokens"] for s in gen_path.samples]
    assert torch.equal(model.transformer.ln_f.bias, ln)
    inspected = nbcli.inspect(model)
    assert inspected.roles == nbcli.inspect(folder).roles and inspected.architecture == "gpt2"
    assert nbcli.inspect(model.state_dict()).tensor_count == nbcli.inspect(folder).tensor_count
    assert nbcli.probe(model).to_dict()["isotropy"] == nbcli.probe(folder).to_dict()["isotropy"]
    with pytest.raises(ConfigError, match="load a state dict"):
        nbcli.evaluate(model.state_dict(), text, hf_bytelevel_json)
    with pytest.raises(CheckpointError, match="masked LM"):
        nbcli.evaluate(_build("bert"), text, hf_bytelevel_json)


def test_load_model_without_a_created_bias_is_from_pretrained(hf_folder: tuple[Path, Any]) -> None:
    folder, model = hf_folder
    loaded = nbcli.load_model(folder)
    assert type(loaded) is type(model) and loaded.lm_head.bias is None
    assert torch.equal(_logits(loaded), _logits(model.eval()))
    clone = copy.deepcopy(model)
    assert clone.lm_head.bias is None
