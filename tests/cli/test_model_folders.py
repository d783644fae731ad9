"""Every architecture in the table against transformers itself.

For each layout: transformers' own tiny random model, saved with `save_pretrained` as one file and
sharded -> `nb inspect` names the architecture and every role -> each applicable `nb
patch-checkpoint` operation -> the output folder loads with `from_pretrained` with no missing keys
and no unexpected ones but a created output bias (transformers' classes without an output bias
ignore it and report it as unexpected) -> its logits equal those of the in-memory model after the
same operation, done on its parameters with nb's pure surgery functions.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")  # in the test extras; never skipped in CI

from nbcli.checkpoint import open_checkpoint  # noqa: E402
from nbcli.counts import UnigramCounts, write_counts  # noqa: E402
from nbcli.array_ops import remove_direction  # noqa: E402
from nbcli.ops import (  # noqa: E402
    rescale_w, scale_ln_bias, shuffle_embeddings, standardise_embeddings, unigram_log_prior, xavier_std,
)
from tests.cli.helpers import invoke  # noqa: E402
from tests.hf_layouts import ENC, IDS, LAYOUTS, V, Layout, build  # noqa: E402

LAMBDA = 0.5


def _logits(model: Any) -> torch.Tensor:
    ids = torch.tensor([[3, 17, 42, 5, 88, 9, 60]])
    with torch.no_grad():
        if model.config.is_encoder_decoder:
            return model(input_ids=ids, decoder_input_ids=ids[:, :4]).logits
        return model(input_ids=ids).logits


@pytest.fixture(scope="module")
def counts_path(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    counts = np.random.default_rng(3).integers(0, 1000, size=V).astype(np.int64)
    path = tmp_path_factory.mktemp("counts") / "counts.safetensors"
    write_counts(path, UnigramCounts(counts=counts, metadata={"nb.format": "unigram-counts/1"}))
    return path, counts


def _runs(layout: Layout) -> list[tuple[str, tuple[str, ...]]]:
    """(layout, operations) of each patch run: every applicable operation at least once, and the
    sharded layout through the ones that create tensors (untie, a created bias)."""
    ln = layout.final_norm is not None
    runs = [("single", ("set-output-bias", "rescale-w") + (("scale-ln-bias",) if ln else ())),
            ("single", ("standardise-embeddings",)),
            ("single", ("shuffle-embeddings",) + (("remove-frequency-direction",) if ln else ()))]
    if layout.tied:
        runs.append(("single", ("untie",)))
    runs.append(("sharded", ("set-output-bias",) + (("untie",) if layout.tied else ()) + ("rescale-w",)
                 + (("remove-frequency-direction",) if ln else ())))
    return runs


def _args(ops: tuple[str, ...], counts: Path, layout: Layout) -> list[str]:
    bias = [] if layout.roles["output_bias"] else ["--bias-name", "lm_head.bias"]
    args: list[str] = []
    for op in ops:
        args += {"set-output-bias": ["--set-output-bias", str(counts), *bias], "rescale-w": ["--rescale-w", "fro"],
                 "standardise-embeddings": ["--standardise-embeddings", "xavier"],
                 "shuffle-embeddings": ["--shuffle-embeddings", "--seed", "7"], "untie": ["--untie"],
                 "scale-ln-bias": ["--scale-ln-bias", str(LAMBDA)],
                 "remove-frequency-direction": ["--remove-frequency-direction"]}[op]
    return args


def _apply_in_memory(model: Any, ops: tuple[str, ...], counts: np.ndarray, layout: Layout) -> Any:
    """The same operations, in nb's documented order, on a copy of the in-memory model's parameters
    (tied parameters change together, as they do in the model)."""
    model = copy.deepcopy(model)
    emb = model.get_input_embeddings()
    bias = unigram_log_prior(counts, V)
    norm = model.get_submodule(layout.final_norm) if layout.final_norm else None
    b_ln = norm.bias.detach().clone() if norm is not None else None
    with torch.no_grad():
        if "set-output-bias" in ops and getattr(model.get_output_embeddings(), "bias", None) is not None:
            model.get_output_embeddings().bias.copy_(bias)
        if "set-output-bias" in ops and hasattr(model, "final_logits_bias"):
            model.final_logits_bias.copy_(bias.reshape(1, -1))
        if "untie" in ops:  # a separate output weight; T5's tied head scaled the decoder output by d^-0.5
            factor = model.config.d_model ** -0.5 if layout.arch == "t5" else 1.0
            out = model.get_output_embeddings()
            out.weight = torch.nn.Parameter(out.weight.detach().clone() * factor)
            model.config.tie_word_embeddings = False
            if layout.arch == "t5":
                model.config.scale_decoder_outputs = False
        out = model.get_output_embeddings()
        if "rescale-w" in ops:  # W scaled to the bias's norm (a created bias too, though transformers drops it)
            out.weight.copy_(rescale_w(out.weight, bias, "fro"))
        if "standardise-embeddings" in ops:
            emb.weight.copy_(standardise_embeddings(emb.weight, 0.0, xavier_std(*emb.weight.shape)))
        if "shuffle-embeddings" in ops:
            emb.weight.copy_(shuffle_embeddings(emb.weight, 7))
        if "scale-ln-bias" in ops:
            norm.bias.copy_(scale_ln_bias(norm.bias, LAMBDA))
        if "remove-frequency-direction" in ops:
            out.weight.copy_(remove_direction(out.weight, b_ln))
    return model


def _inspect(path: Path) -> dict[str, Any]:
    result = invoke("inspect", path, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _load(path: Path, layout: Layout) -> tuple[Any, dict[str, Any]]:
    return getattr(transformers, layout.model_class).from_pretrained(path, output_loading_info=True)


@pytest.mark.slow
@pytest.mark.parametrize("layout", LAYOUTS, ids=IDS)
def test_transformers_model_folder_every_operation(tmp_path: Path, layout: Layout, counts_path) -> None:  # noqa: ANN001
    transformers.logging.set_verbosity_error()
    counts_file, counts = counts_path
    model = build(layout)
    single, sharded = tmp_path / "single", tmp_path / "sharded"
    model.save_pretrained(single)
    model.save_pretrained(sharded, max_shard_size="12KB")
    assert (sharded / "model.safetensors.index.json").is_file()
    for folder in (single, sharded):
        report = _inspect(folder)
        assert report["architecture"] == layout.arch, report["architecture_error"]
        assert report["roles"] == layout.roles and report["tied"] is layout.tied
    expected_base = _logits(model)
    for which, ops in _runs(layout):
        folder = single if which == "single" else sharded
        out = tmp_path / f"out-{'-'.join(ops)}-{which}"
        result = invoke("patch-checkpoint", folder, "-o", out, *_args(ops, counts_file, layout), "--json")
        assert result.exit_code == 0, (ops, result.output)
        patched = json.loads(result.stdout)
        assert patched["model_folder"] is True
        assert {p.name for p in folder.iterdir()} <= {p.name for p in out.iterdir()}, ops
        loaded, info = _load(out, layout)
        assert not info["missing_keys"], (ops, info)
        created_bias = "set-output-bias" in ops and not layout.roles["output_bias"]
        assert set(info["unexpected_keys"]) == ({"lm_head.bias"} if created_bias else set()), (ops, info)
        got = _logits(loaded)
        torch.testing.assert_close(got, _logits(_apply_in_memory(model, ops, counts, layout)), rtol=1e-5, atol=1e-5,
                                   msg=lambda m: f"{ops}: {m}")  # noqa: B023
        if ops == ("untie",):
            torch.testing.assert_close(got, expected_base, rtol=1e-5, atol=1e-5)
        if "untie" in ops:
            assert json.loads((out / "config.json").read_text())["tie_word_embeddings"] is False
            assert loaded.get_output_embeddings().weight.data_ptr() != loaded.get_input_embeddings().weight.data_ptr()
        if which == "sharded":
            index = json.loads((out / "model.safetensors.index.json").read_text())
            ckpt = open_checkpoint(out)
            assert len(ckpt.files) > 1
            assert index["metadata"]["total_size"] == ckpt.total_bytes
            assert index["metadata"]["total_parameters"] == sum(math.prod(ckpt.shape(n)) for n in ckpt.names())


def test_model_folder_in_place_and_bare_file_output(tmp_path: Path, counts_path) -> None:  # noqa: ANN001
    """--in-place on a model folder updates its config.json; `-o x.safetensors` writes the tensors
    alone and says which config change a loader needs."""
    transformers.logging.set_verbosity_error()
    layout = next(item for item in LAYOUTS if item.arch == "gpt2")
    folder = tmp_path / "gpt2"
    build(layout).save_pretrained(folder)
    result = invoke("patch-checkpoint", folder, "-o", tmp_path / "bare.safetensors", "--untie", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["model_folder"] is False
    assert "tie_word_embeddings=false" in result.stderr and "no config.json is written" in result.stderr
    result = invoke("patch-checkpoint", folder, "--in-place", "--untie")
    assert result.exit_code == 0, result.output
    assert json.loads((folder / "config.json").read_text())["tie_word_embeddings"] is False
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "generation_config.json", "model.safetensors"]
    loaded, info = _load(folder, layout)
    assert not info["missing_keys"] and not info["unexpected_keys"]


def test_encoder_without_prediction_head(tmp_path: Path, counts_path) -> None:  # noqa: ANN001
    """A BERT encoder saved without its MLM head (BertModel, as sentence-transformers ship it): no
    output weight, output bias or b_LN is guessed; the output-side operations are refused, saying
    why; the input-side ones work and the result loads."""
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = transformers.BertModel(transformers.BertConfig(vocab_size=V, **ENC)).eval()
    folder = tmp_path / "enc"
    model.save_pretrained(folder)
    report = _inspect(folder)
    assert report["architecture"] == "bert" and report["head"] is False and report["tied"] is False
    assert report["roles"]["output_weight"] is None and report["roles"]["final_ln_bias"] is None
    assert "no prediction head" in report["absent"]["final_ln_bias"]
    for args in (["--scale-ln-bias", "0.5"], ["--set-output-bias", str(counts_path[0])], ["--untie"],
                 ["--remove-frequency-direction"]):
        result = invoke("patch-checkpoint", folder, "-o", tmp_path / "o", *args)
        assert result.exit_code == 1 and "no prediction head" in result.stderr, (args, result.output)
        assert not (tmp_path / "o").exists()
    probe = invoke("probe-bias", folder, "--json")  # what is used instead: the input embedding, said so
    assert probe.exit_code == 0, probe.output
    probed = json.loads(probe.stdout)
    assert probed["roles"]["output_weight"] == "embeddings.word_embeddings.weight"
    assert any("no prediction head" in note for note in probed["notes"]) and probed["isotropy"]["present"]
    assert probed["frequency_direction"]["present"] is False
    result = invoke("patch-checkpoint", folder, "-o", tmp_path / "o", "--standardise-embeddings", "xavier")
    assert result.exit_code == 0, result.output
    loaded, info = transformers.BertModel.from_pretrained(tmp_path / "o", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    weight = loaded.get_input_embeddings().weight.detach()
    assert abs(float(weight.std()) - xavier_std(*weight.shape)) < 1e-4


@pytest.mark.parametrize("model_class", ["MarianMTModel", "BartForConditionalGeneration"])
def test_seq2seq_output_bias_is_final_logits_bias(tmp_path: Path, counts_path, model_class: str) -> None:  # noqa: ANN001
    """Marian and BART keep b as `final_logits_bias`, a [1, V] buffer added to lm_head's logits:
    --set-output-bias rewrites it in that shape, and the loaded model's logits are its base logits
    with the old bias swapped for log p(y) (add-1 smoothing, computed here by hand); probe-bias reads
    it back (KL 0, Spearman 1 with the counts); a save without it gets one created as [1, V], which
    transformers loads (no unexpected key)."""
    from safetensors.torch import load_file, save_file

    transformers.logging.set_verbosity_error()
    counts_file, counts = counts_path
    layout = next(item for item in LAYOUTS if item.model_class == model_class and item.tied)
    model = build(layout)
    folder = tmp_path / "in"
    model.save_pretrained(folder)
    base = _logits(model)
    old_bias = model.final_logits_bias.detach().clone()
    by_hand = torch.from_numpy(np.log((counts + 1.0) / (counts.sum() + V))).float()

    def patched_logits(out: Path) -> torch.Tensor:
        loaded, info = _load(out, layout)
        assert not info["missing_keys"] and not info["unexpected_keys"], info
        assert open_checkpoint(out).shape("final_logits_bias") == (1, V)
        return _logits(loaded)

    result = invoke("patch-checkpoint", folder, "-o", tmp_path / "out", "--set-output-bias", counts_file, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["tensors"][0]["shape"] == [1, V]
    torch.testing.assert_close(patched_logits(tmp_path / "out"), base - old_bias + by_hand, rtol=1e-5, atol=1e-5)
    probe = invoke("probe-bias", tmp_path / "out", "-c", counts_file, "--json")
    assert probe.exit_code == 0, probe.output
    section = json.loads(probe.stdout)["output_bias"]
    assert section["present"] and section["kl_unigram_to_bias"] == pytest.approx(0.0, abs=1e-6)
    assert section["spearman"] == pytest.approx(1.0) and section["norm"] == pytest.approx(float(by_hand.norm()), rel=1e-5)

    weights = load_file(folder / "model.safetensors")  # a save without the bias (older conversions)
    del weights["final_logits_bias"]
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    assert _inspect(folder)["roles"]["output_bias"] is None
    result = invoke("patch-checkpoint", folder, "-o", tmp_path / "o2", "--set-output-bias", counts_file)
    assert result.exit_code == 1 and "--bias-name final_logits_bias" in result.stderr, result.output
    result = invoke("patch-checkpoint", folder, "-o", tmp_path / "o2", "--set-output-bias", counts_file,
                    "--bias-name", "final_logits_bias")
    assert result.exit_code == 0, result.output
    torch.testing.assert_close(patched_logits(tmp_path / "o2"), base - old_bias + by_hand, rtol=1e-5, atol=1e-5)
