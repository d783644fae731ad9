from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.helpers import assert_one_line_error, invoke, run_nb
from tests.conftest import english_like_lines
from tests.lm.conftest import nb_lm  # noqa: F401  (fixture)


@pytest.fixture(scope="module")
def heldout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("heldout") / "heldout.txt"
    path.write_text("\n".join(english_like_lines(12, seed=9, unicode=False)) + "\n", encoding="utf-8")
    return path


def test_eval_rows_per_lambda_json(nb_lm: Path, sp_model: Path, heldout: Path) -> None:
    result = invoke("eval", nb_lm, "--corpus", heldout, "-t", sp_model, "--scale-ln-bias", "1,0", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    one, zero = report["rows"]
    assert [one["lambda"], zero["lambda"]] == [1.0, 0.0]
    assert one["kl_unigram_without_ln_bias"] == pytest.approx(zero["kl_unigram"], abs=1e-6)
    assert one["perplexity"] != zero["perplexity"] and report["eos_scored"] is True
    assert report["tokenizer"]["sha256"] and report["model"]["architecture"] == "nb"


def test_generate_table_outputs_and_seeded_determinism(nb_lm: Path, sp_model: Path, heldout: Path,
                                                        tmp_path: Path) -> None:
    args = ["generate", nb_lm, "--prompts", heldout, "-t", sp_model, "--scale-ln-bias", "0,0.5,...,1",
            "--prompt-words", "3", "--max-new-tokens", "10", "--samples", "2", "--seed", "5", "--max-prompts", "4",
            "--eval-corpus", heldout]
    first = invoke(*args, "--out", tmp_path / "a", "--json")
    assert first.exit_code == 0, first.stderr
    report = json.loads(first.stdout)
    assert [r["lambda"] for r in report["rows"]] == [0.0, 0.5, 1.0]
    for row in report["rows"]:
        assert 0 < row["diversity"] <= 1 and row["perplexity"] > 1 and row["mauve"] is None
        assert row["mauve_note"].startswith("absent:")
    lines = (tmp_path / "a" / "samples.jsonl").read_text().splitlines()
    assert len(lines) == 3 * report["prompt_count"] * 2
    assert {"lambda", "prompt", "seed", "text", "tokens"} <= set(json.loads(lines[0]))
    assert json.loads((tmp_path / "a" / "table.json").read_text())["rows"] == report["rows"]
    assert (tmp_path / "a" / "diversity_vs_perplexity.png").read_bytes()[:4] == b"\x89PNG"
    second = invoke(*args, "--out", tmp_path / "b")
    assert second.exit_code == 0, second.stderr
    assert (tmp_path / "b" / "samples.jsonl").read_text() == "\n".join(lines) + "\n"
    assert "D-1" in second.stdout and "MAUVE absent" in second.stdout


def test_bad_inputs_are_one_line_errors(nb_lm: Path, sp_model: Path, sp_unigram_model: Path, heldout: Path,
                                        tmp_path: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    result = invoke("generate", nb_lm, "--prompts", empty, "-t", sp_model)
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "no non-empty documents")
    result = invoke("eval", nb_lm, "--corpus", heldout, "-t", sp_unigram_model)
    assert_one_line_error(result.stderr, "not the tokenizer")
    llama = tmp_path / "llama"
    LlamaForCausalLM(LlamaConfig(vocab_size=500, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
                     ).save_pretrained(str(llama))
    result = invoke("generate", llama, "--prompts", heldout, "-t", sp_model, "--scale-ln-bias", "0.5")
    assert_one_line_error(result.stderr, "b_LN", "--logit-adjust")
    result = invoke("generate", nb_lm, "--prompts", heldout, "-t", sp_model, "--decoding", "beam:3")
    assert_one_line_error(result.stderr, "--decoding")
    result = invoke("eval", nb_lm, "--corpus", heldout, "-t", sp_model, "--scale-ln-bias", "1,x")
    assert_one_line_error(result.stderr, "--scale-ln-bias")
    result = invoke("generate", nb_lm, "--prompts", heldout, "-t", sp_model, "--logit-adjust", "1")
    assert_one_line_error(result.stderr, "--counts")
    clash = tmp_path / "clash"
    clash.mkdir()
    (clash / "samples.jsonl").write_text(heldout.read_text())
    result = invoke("generate", nb_lm, "--prompts", clash / "samples.jsonl", "-t", sp_model, "--out", clash)
    assert_one_line_error(result.stderr, "same file as the input")
    assert (clash / "samples.jsonl").read_text() == heldout.read_text()


def test_logit_adjust_arm_on_a_model_without_ln_bias(sp_model: Path, heldout: Path, tmp_path: Path) -> None:
    import numpy as np
    from transformers import LlamaConfig, LlamaForCausalLM

    from nbcli.counts import UnigramCounts, write_counts

    llama = tmp_path / "llama"
    LlamaForCausalLM(LlamaConfig(vocab_size=500, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
                     ).save_pretrained(str(llama))
    write_counts(tmp_path / "c.safetensors", UnigramCounts(np.arange(500), {"nb.format": "unigram-counts/1"}))
    result = invoke("generate", llama, "--prompts", heldout, "-t", sp_model, "--logit-adjust", "0.7", "-c",
                    tmp_path / "c.safetensors", "--max-new-tokens", "6", "--prompt-words", "3", "--json")
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)["rows"]
    assert [r["arm"] for r in rows] == ["as saved", "logit-adjust 0.7"]


def test_real_nb_subprocess_eval(nb_lm: Path, sp_model: Path, heldout: Path) -> None:
    done = run_nb("eval", nb_lm, "--corpus", heldout, "-t", sp_model, "--scale-ln-bias", "1,0")
    assert done.returncode == 0, done.stderr.decode()
    out = done.stdout.decode()
    assert "lambda 1" in out and "lambda 0" in out and "KL w/o b_LN" in out


def test_eval_table_prints_markup_in_names_exactly(nb_lm: Path, sp_model: Path, heldout: Path,
                                                   tmp_path: Path) -> None:
    """Data that reaches rich (here a checkpoint named like a rich tag) is printed as it is."""
    named = tmp_path / "[bold]x[red].safetensors"
    named.write_bytes(nb_lm.read_bytes())
    result = invoke("eval", named, "--corpus", heldout, "-t", sp_model)
    assert result.exit_code == 0, result.stderr
    assert "[bold]x[red].safetensors" in result.stdout.replace("\n", "")


def test_dtype_and_tf32_options(nb_lm: Path, sp_model: Path, heldout: Path, tmp_path: Path) -> None:
    """--dtype bfloat16 on CPU: the same report within bf16 rounding; --dtype/--no-tf32 are language-model options."""
    base = ["eval", nb_lm, "--corpus", heldout, "-t", sp_model, "--json"]
    plain, bf16 = invoke(*base), invoke(*base, "--dtype", "bfloat16", "--no-tf32")
    assert plain.exit_code == 0 and bf16.exit_code == 0, (plain.stderr, bf16.stderr)
    (p,), (b,) = json.loads(plain.stdout)["rows"], json.loads(bf16.stdout)["rows"]
    assert b["loss"] == pytest.approx(p["loss"], rel=1e-2) and b["loss"] != p["loss"]
    assert json.loads(bf16.stdout)["model"]["autocast"] == "bfloat16"
    result = invoke("generate", nb_lm, "--prompts", heldout, "-t", sp_model, "--prompt-words", "3",
                    "--max-new-tokens", "4", "--max-prompts", "2", "--dtype", "bfloat16", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["model"]["autocast"] == "bfloat16"
    result = invoke("eval", nb_lm, "--corpus", heldout, "--dtype", "float16")
    assert result.exit_code == 2 and "--dtype" in result.stderr
    for task in ("translation", "classification"):
        result = invoke("eval", nb_lm, "--task", task, "--corpus", heldout, "--dtype", "bfloat16")
        assert result.exit_code != 0
        assert_one_line_error(result.stderr, "--dtype", "not an option of --task")
