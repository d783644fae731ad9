"""nb's one vocabulary policy through the six commands that put token-indexed data beside a model
(nbcli.checkpoint.vocab): a re-saved tokenizer is accepted, another tokenizer refused in every one
(one line naming both), and --allow-vocab-mismatch relaxes the identity check only."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nbcli.counts import UnigramCounts, write_counts
from nbcli.tokenizers import load_tokenizer
from nbcli.tokenizers.identity import identity_metadata
from tests.cli.helpers import assert_one_line_error, invoke
from tests.conftest import english_like_lines


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, hf_bytelevel_json: Path) -> dict[str, Path]:
    """A GPT-2 folder (d_model 128, as train's tiny preset) shipping tokenizer A; A re-saved by
    transformers; B: A with another pre-tokeniser (same size, other ids); counts of A and of B; a corpus."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    root = tmp_path_factory.mktemp("vocab-policy")
    a = load_tokenizer(hf_bytelevel_json)
    torch.manual_seed(0)
    model = root / "gpt2"
    GPT2LMHeadModel(GPT2Config(vocab_size=a.vocab_size, n_positions=64, n_embd=128, n_layer=1, n_head=2,
                               bos_token_id=a.eos_id, eos_token_id=a.eos_id)).save_pretrained(str(model))
    (model / "tokenizer.json").write_bytes(hf_bytelevel_json.read_bytes())
    PreTrainedTokenizerFast(tokenizer_file=str(hf_bytelevel_json), eos_token="<|endoftext|>").save_pretrained(
        root / "resaved")
    config = json.loads(hf_bytelevel_json.read_text(encoding="utf-8"))
    config["pre_tokenizer"]["add_prefix_space"] = True
    (root / "b").mkdir()
    (root / "b" / "tokenizer.json").write_text(json.dumps(config), encoding="utf-8")
    b = load_tokenizer(root / "b" / "tokenizer.json")
    assert b.vocab_size == a.vocab_size and b.fingerprint != a.fingerprint
    counts = np.random.default_rng(0).integers(0, 50, a.vocab_size)
    for name, tok in (("a", a), ("b", b)):
        write_counts(root / f"{name}.counts.safetensors", UnigramCounts(counts=counts, metadata=identity_metadata(tok)))
    (root / "corpus.txt").write_text("\n".join(english_like_lines(80, seed=5, unicode=False)) + "\n")
    return {"root": root, "model": model, "a": hf_bytelevel_json, "resaved": root / "resaved" / "tokenizer.json",
            "b": root / "b" / "tokenizer.json", "a_counts": root / "a.counts.safetensors",
            "b_counts": root / "b.counts.safetensors", "corpus": root / "corpus.txt"}


def six_commands(w: dict[str, Path], out: Path) -> dict[str, list[str | Path]]:
    """Each command given tokenizer B's ids (counts or -t) beside the model whose tokenizer is A."""
    return {
        "patch-checkpoint": ["patch-checkpoint", w["model"], "-o", out / "patched", "--set-output-bias",
                             w["b_counts"], "--bias-name", "lm_head.bias"],
        "probe-bias": ["probe-bias", w["model"], "-c", w["b_counts"]],
        "eval": ["eval", w["model"], "--corpus", w["corpus"], "-t", w["b"], "--device", "cpu"],
        "generate": ["generate", w["model"], "--prompts", w["corpus"], "-t", w["b"], "--max-prompts", "1",
                     "--max-new-tokens", "2", "--device", "cpu"],
        "transplant-embeddings": ["transplant-embeddings", w["model"], "--source-tokenizer", w["b"],
                                  "--target-tokenizer", w["a"], "-o", out / "emb.safetensors"],
        "train": ["train", "--corpus", w["corpus"], "-t", w["b"], "--out", out / "run", "--embedding-init",
                  f"pretrained:{w['model'] / 'model.safetensors'}", "--steps", "1", "--batch-size", "2",
                  "--seq-len", "16", "--eval-every", "1", "--eval-batches", "1", "--device", "cpu"],
    }


@pytest.mark.parametrize("command", ["patch-checkpoint", "probe-bias", "eval", "generate", "transplant-embeddings",
                                     "train"])
def test_another_tokenizer_is_refused_in_every_command(world: dict[str, Path], tmp_path: Path, command: str) -> None:
    args = six_commands(world, tmp_path)[command]
    refused = invoke(*args)
    assert refused.exit_code == 1
    # one line naming both tokenizers (B's file or its counts, and the model folder's tokenizer.json)
    b_name = world["b_counts"] if command in ("patch-checkpoint", "probe-bias") else world["b"]
    assert_one_line_error(refused.stderr, "another tokenizer", "--allow-vocab-mismatch", str(b_name),
                          str(world["model"] / "tokenizer.json"))
    assert not any(tmp_path.iterdir())  # nothing written
    # --allow-vocab-mismatch: the identity refusal becomes a warning and the command runs
    allowed = invoke(*args, "--allow-vocab-mismatch")
    assert allowed.exit_code == 0, allowed.output
    assert "another tokenizer" in allowed.stderr and "used anyway" in allowed.stderr


def test_the_flag_relaxes_identity_only(world: dict[str, Path], tmp_path: Path) -> None:
    """Mistral-on-GPT-2 in miniature: counts and a tokenizer shorter than the rows by more than padding,
    from another tokenizer, stay refused with --allow-vocab-mismatch."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    small = Tokenizer(models.BPE())
    small.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    small.train_from_iterator(english_like_lines(300, seed=9), trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    small.save(str(tmp_path / "small.json"))
    tok = load_tokenizer(tmp_path / "small.json")
    rows = load_tokenizer(world["a"]).vocab_size
    assert tok.vocab_size < rows and all(-(-tok.vocab_size // m) * m != rows for m in (64, 128))
    counts = tmp_path / "small.counts.safetensors"
    write_counts(counts, UnigramCounts(counts=np.ones(tok.vocab_size, dtype=np.int64), metadata=identity_metadata(tok)))
    for args in (["probe-bias", world["model"], "-c", counts],
                 ["eval", world["model"], "--corpus", world["corpus"], "-t", tmp_path / "small.json"]):
        plain = invoke(*args)
        assert plain.exit_code == 1 and "another tokenizer" in plain.stderr
        relaxed = invoke(*args, "--allow-vocab-mismatch")
        assert relaxed.exit_code == 1
        assert_one_line_error(relaxed.stderr, "not vocabulary padding", f"{tok.vocab_size} ")


def test_a_resaved_tokenizer_is_accepted(world: dict[str, Path], tmp_path: Path) -> None:
    """Counts made with the original file fit a model folder holding transformers' re-save of it (other
    bytes, same fingerprint), in probe-bias and patch-checkpoint; eval takes the re-save as -t."""
    import shutil

    folder = tmp_path / "gpt2-resaved"
    shutil.copytree(world["model"], folder)
    shutil.copy(world["resaved"], folder / "tokenizer.json")
    assert (folder / "tokenizer.json").read_bytes() != world["a"].read_bytes()
    counted = invoke("count-unigrams", world["corpus"], "-t", world["a"], "-o", tmp_path / "c.safetensors", "--json")
    assert counted.exit_code == 0, counted.output
    assert json.loads(counted.stdout)["tokenizer_fingerprint"] == load_tokenizer(world["a"]).fingerprint
    probe = invoke("probe-bias", folder, "-c", tmp_path / "c.safetensors", "--json")
    assert probe.exit_code == 0, probe.output
    counts_file = json.loads(probe.stdout)["counts"]
    assert counts_file["tokenizer_match"] == "same" and counts_file["compared_by"] == "fingerprint"
    assert "tokenizer" not in probe.stderr
    patched = invoke("patch-checkpoint", folder, "-o", tmp_path / "out", "--set-output-bias",
                     tmp_path / "c.safetensors", "--bias-name", "lm_head.bias", "--json")
    assert patched.exit_code == 0, patched.output
    assert not any("tokenizer" in w for w in json.loads(patched.stdout)["warnings"])
    evaluated = invoke("eval", world["model"], "--corpus", world["corpus"], "-t", world["resaved"], "--json",
                       "--device", "cpu")
    assert evaluated.exit_code == 0, evaluated.output
    assert json.loads(evaluated.stdout)["warnings"] == []
