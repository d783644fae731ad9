"""README's paper-000 tour on tiny transformers folders (GPT-2, Llama, BERT-MLM): `nb patch-checkpoint
--set-output-bias` writes a bias that `nbcli.load_model` (the documented path) and `nb eval` apply:
their logits are the base model's plus the log-unigram bias, and eval's loss is the loss of the
same model built in memory (`nbcli.init_output_bias`). A bias eval cannot apply is refused."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")  # in the test extras; never skipped in CI

import nbcli  # noqa: E402
from nbcli.counts import read_counts  # noqa: E402
from nbcli.lm.runner import load_runner  # noqa: E402
from nbcli.ops import rescale_w, unigram_log_prior  # noqa: E402
from tests.cli.helpers import assert_one_line_error, invoke, run_nb  # noqa: E402

V = 500  # the session's SentencePiece model (sp_model)
IDS = torch.tensor([[1, 17, 42, 5, 88, 9, 60, 301]])


def _gpt2() -> Any:
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=V, n_positions=64, n_embd=16, n_layer=2, n_head=2, bos_token_id=1, eos_token_id=2))


def _llama() -> Any:
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=V, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=32, max_position_embeddings=64, bos_token_id=1, eos_token_id=2))


def _bert() -> Any:
    return transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=V, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=64))


def _folder(tmp_path: Path, name: str, make: Any) -> tuple[Path, Any]:
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = make().eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(20)  # peaked predictions: a bias that matters
    model.save_pretrained(tmp_path / name)
    return tmp_path / name, model


@pytest.fixture(scope="module")
def tour(tmp_path_factory: pytest.TempPathFactory, sp_model: Path, sample_lines: list[str]) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tour")
    (root / "corpus.txt").write_text("\n".join(sample_lines[:200]) + "\n", encoding="utf-8")
    (root / "heldout.txt").write_text("\n".join(sample_lines[200:230]) + "\n", encoding="utf-8")
    nbcli.count_unigrams(root / "corpus.txt", sp_model, root / "counts.safetensors", workers=1)
    return {"root": root, "counts": root / "counts.safetensors", "heldout": root / "heldout.txt", "tokenizer": sp_model}


def _prior(tour: dict[str, Path]) -> torch.Tensor:
    return unigram_log_prior(read_counts(tour["counts"]).counts, V)


def _logits(model: Any) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=IDS).logits[0]


def _patch(folder: Path, out: Path, tour: dict[str, Path], *extra: str) -> dict[str, Any]:
    result = invoke("patch-checkpoint", folder, "-o", out, "--set-output-bias", tour["counts"], "--tokenizer", tour["tokenizer"],
                    *extra, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _eval_loss(target: Path | Any, tour: dict[str, Path]) -> float:
    if isinstance(target, Path):
        result = invoke("eval", target, "--corpus", tour["heldout"], "-t", tour["tokenizer"], "--device", "cpu", "--json")
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)["rows"][0]["loss"]
    return nbcli.evaluate(target, tour["heldout"], tour["tokenizer"]).rows[0]["loss"]


@pytest.mark.parametrize("name,make", [("gpt2", _gpt2), ("llama", _llama)])
def test_created_bias_is_live_in_load_model_and_nb_eval(tmp_path: Path, tour: dict[str, Path], name: str,
                                                        make: Any) -> None:
    folder, base = _folder(tmp_path, name, make)
    patched = _patch(folder, tmp_path / f"{name}-unigram", tour, "--bias-name", "lm_head.bias")
    note = " ".join(patched["warnings"])
    assert "created output bias 'lm_head.bias'" in note and "nbcli.load_model" in note  # says which path to use
    loaded, info = type(base).from_pretrained(tmp_path / f"{name}-unigram", output_loading_info=True)
    assert info["unexpected_keys"] == {"lm_head.bias"}  # what from_pretrained alone does: drops it
    prior = _prior(tour)
    expected = _logits(base) + prior
    torch.testing.assert_close(_logits(nbcli.load_model(tmp_path / f"{name}-unigram")), expected, rtol=1e-5, atol=1e-4)
    runner = load_runner(tmp_path / f"{name}-unigram", device="cpu")  # what nb eval and nb generate run
    try:
        assert runner.describe()["output_bias_installed_by_nb"] is True
        torch.testing.assert_close(runner.logits(IDS)[0], expected, rtol=1e-5, atol=1e-4)
    finally:
        runner.close()
    in_memory = copy.deepcopy(base)
    nbcli.init_output_bias(in_memory, tour["counts"], tokenizer=tour["tokenizer"])
    eval_loss = _eval_loss(tmp_path / f"{name}-unigram", tour)
    assert eval_loss == pytest.approx(_eval_loss(in_memory, tour), rel=1e-6)
    assert eval_loss != pytest.approx(_eval_loss(folder, tour), rel=1e-3)  # the bias changed the score


def test_llama_with_rescaled_w_scores_with_its_bias(tmp_path: Path, tour: dict[str, Path]) -> None:
    """The issue's ppl 2.86e25: a rescaled W evaluated without its bias. Now the bias is applied: the
    loss is the in-memory model's with b and ||W|| = ||b|| (rescaled by nb's pure function)."""
    folder, base = _folder(tmp_path, "llama", _llama)
    _patch(folder, tmp_path / "llama-rescaled", tour, "--bias-name", "lm_head.bias", "--rescale-w", "fro")
    prior = _prior(tour)
    reference = copy.deepcopy(base)
    with torch.no_grad():
        reference.lm_head.weight.copy_(rescale_w(reference.lm_head.weight, prior, "fro"))
    nbcli.init_output_bias(reference, tour["counts"], tokenizer=tour["tokenizer"])
    torch.testing.assert_close(_logits(nbcli.load_model(tmp_path / "llama-rescaled")), _logits(reference),
                               rtol=1e-5, atol=1e-4)
    loss = _eval_loss(tmp_path / "llama-rescaled", tour)
    assert loss == pytest.approx(_eval_loss(reference, tour), rel=1e-6)
    assert loss < 50  # not the rescaled W alone


def test_bert_mlm_bias_is_replaced(tmp_path: Path, tour: dict[str, Path]) -> None:
    """BERT's MLM head has its own bias: patch-checkpoint rewrites it (both of its names) and the
    loaded logits are the base logits minus the old bias plus the log-unigram."""
    folder, base = _folder(tmp_path, "bert", _bert)
    with torch.no_grad():
        base.cls.predictions.bias.normal_()
    base.save_pretrained(folder)
    _patch(folder, tmp_path / "bert-unigram", tour)
    loaded = nbcli.load_model(tmp_path / "bert-unigram")
    expected = _logits(base) - base.cls.predictions.bias.detach() + _prior(tour)
    torch.testing.assert_close(_logits(loaded), expected, rtol=1e-5, atol=1e-4)
    same = transformers.BertForMaskedLM.from_pretrained(tmp_path / "bert-unigram")  # a bias transformers knows
    torch.testing.assert_close(_logits(same), expected, rtol=1e-5, atol=1e-4)


def test_a_bias_eval_cannot_apply_is_refused_in_one_line(tmp_path: Path, tour: dict[str, Path]) -> None:
    """A rescaled W whose stored bias does not fit the output layer: eval refuses (a real `nb`
    process: one line, exit 1) instead of scoring W without it."""
    from safetensors.numpy import load_file, save_file

    folder, _ = _folder(tmp_path, "llama", _llama)
    out = tmp_path / "llama-broken"
    _patch(folder, out, tour, "--bias-name", "lm_head.bias", "--rescale-w", "fro")
    path = out / "model.safetensors"
    with open(path, "rb") as handle:
        header = json.loads(handle.read(int.from_bytes(handle.read(8), "little")))
    tensors = load_file(path)
    tensors["lm_head.bias"] = np.zeros(V - 3, dtype=np.float32)
    save_file(tensors, path, metadata=header["__metadata__"])
    result = run_nb("eval", out, "--corpus", tour["heldout"], "-t", tour["tokenizer"], "--device", "cpu")
    assert result.returncode == 1
    assert_one_line_error(result.stderr.decode(), "lm_head.bias", "rescale-w", "cannot apply")
