"""The Python API (nbcli.api) against the command line: each function's `to_dict()` is the command's
--json on the same inputs; a loaded transformers model and a state dict give what their saved folder
gives; in-memory surgery leaves the caller's tensors alone (unless in_place)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import nbcli
from nbcli.checkpoint import open_checkpoint
from nbcli.errors import ConfigError
from nbcli.samples import SAMPLE_CORPUS, SAMPLE_TOKENIZER
from tests.cli.helpers import invoke
from tests.lm.conftest import nb_lm  # noqa: F401  (fixture)

transformers = pytest.importorskip("transformers")  # in the test extras; never skipped in CI

TIMING = {"seconds", "mb_per_s", "tokens_per_s", "created"}


def cli_json(*args: Any) -> dict[str, Any]:
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def without(report: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in report.items() if k not in TIMING and k not in keys}


@pytest.fixture(scope="module")
def counts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("counts") / "counts.safetensors"
    nbcli.count_unigrams(SAMPLE_CORPUS, SAMPLE_TOKENIZER, path, workers=1)
    return path


def tiny_gpt2(seed: int = 0) -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=2000, n_positions=64, n_embd=32, n_layer=2, n_head=2,
                                       bos_token_id=0, eos_token_id=0))
    with torch.no_grad():
        model.transformer.ln_f.bias.normal_(0, 0.5)
    return model.eval()


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    model = tiny_gpt2()
    folder = tmp_path_factory.mktemp("gpt2")
    model.save_pretrained(str(folder))
    return model, folder


@pytest.fixture(scope="module")
def heldout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("heldout") / "heldout.txt"
    path.write_text("the cat sat on the mat and looked at the dog\nsome words again and again here\n"
                    "a third line of held out text for the model to score\n")
    return path


def test_import_is_light_and_lists_the_api() -> None:
    code = ("import sys, nbcli\nassert set(nbcli.__all__) <= set(dir(nbcli))\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'typer', 'rich')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    assert callable(nbcli.probe) and nbcli.probe is nbcli.api.probe
    with pytest.raises(AttributeError):
        nbcli.no_such_function  # noqa: B018


def test_count_unigrams_matches_cli(tmp_path: Path, counts: Path) -> None:
    api = nbcli.count_unigrams([SAMPLE_CORPUS], SAMPLE_TOKENIZER, tmp_path / "a.safetensors", tsv=tmp_path / "a.tsv",
                               workers=1)
    cli = cli_json("count-unigrams", SAMPLE_CORPUS, "-t", SAMPLE_TOKENIZER, "-o", tmp_path / "b.safetensors",
                   "--tsv", tmp_path / "b.tsv", "-j", "1")
    assert without(api.to_dict(), "output", "tsv") == without(cli, "output", "tsv")
    assert api.tokens == cli["tokens"] > 0 and int(api.counts.sum()) == api.tokens
    a, b = open_checkpoint(tmp_path / "a.safetensors"), open_checkpoint(tmp_path / "b.safetensors")
    assert torch.equal(a.get("counts"), b.get("counts"))
    assert (tmp_path / "a.tsv").read_bytes() == (tmp_path / "b.tsv").read_bytes()


def test_count_unigrams_warnings_are_the_reports(tmp_path: Path) -> None:
    """The warnings the command prints are the core's: CountReport.warnings (issue #28)."""
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(b"the model\nbad \xff line\n")
    api = nbcli.count_unigrams(corpus, SAMPLE_TOKENIZER, tmp_path / "a.safetensors", workers=1)
    assert api.bad_utf8_lines == 1 and len(api.warnings) == 1 and "invalid UTF-8" in api.warnings[0]
    cli = cli_json("count-unigrams", corpus, "-t", SAMPLE_TOKENIZER, "-o", tmp_path / "b.safetensors", "-j", "1")
    assert cli["warnings"] == api.warnings


def test_inspect_matches_cli(gpt2: tuple[Any, Path]) -> None:
    _, folder = gpt2
    report = nbcli.inspect(folder)
    assert report.to_dict() == cli_json("inspect", folder)
    assert report.architecture == "gpt2" and report["roles"]["final_ln_bias"] == "transformer.ln_f.bias"
    with nbcli.open_checkpoint(folder) as ckpt:
        assert ckpt.names() == [t["name"] for t in report.tensors]


def test_probe_by_path_matches_cli(gpt2: tuple[Any, Path], counts: Path) -> None:
    _, folder = gpt2
    report = nbcli.probe(folder, counts, tokenizer=SAMPLE_TOKENIZER, bins=5)
    assert report.to_dict() == cli_json("probe-bias", folder, "-c", counts, "--tokenizer", SAMPLE_TOKENIZER,
                                        "--bins", "5")
    assert report.frequency_direction["present"] and report.scores is not None and report.scores.shape == (2000,)


def test_probe_model_and_state_dict_equal_the_saved_folder(gpt2: tuple[Any, Path], counts: Path) -> None:
    model, folder = gpt2
    before = {name: t.clone() for name, t in model.state_dict().items()}
    by_path = nbcli.probe(folder, counts, tokenizer=SAMPLE_TOKENIZER).to_dict()
    by_model = nbcli.probe(model, counts, tokenizer=SAMPLE_TOKENIZER).to_dict()
    by_dict = nbcli.probe(model.state_dict(), counts, tokenizer=SAMPLE_TOKENIZER).to_dict()
    assert [by_path.pop("checkpoint"), by_model.pop("checkpoint"), by_dict.pop("checkpoint")] == [
        str(folder), "GPT2LMHeadModel", "state dict"]
    assert by_model == by_path and by_dict == by_path
    assert by_path["architecture"] == "gpt2" and by_path["isotropy"]["mean_cosine"] is not None
    assert all(torch.equal(before[n], t) for n, t in model.state_dict().items())
    # bfloat16 tensors read as a bfloat16 file does
    half = {n: t.to(torch.bfloat16) for n, t in model.state_dict().items()}
    assert nbcli.probe(half)["isotropy"]["mean_cosine"] != by_path["isotropy"]["mean_cosine"]


def test_patch_by_path_matches_cli(tmp_path: Path, gpt2: tuple[Any, Path], counts: Path) -> None:
    _, folder = gpt2
    args = dict(scale_ln_bias=0.5, remove_frequency_direction=True)
    api = nbcli.patch(folder, tmp_path / "a", **args)
    cli = cli_json("patch-checkpoint", folder, "-o", tmp_path / "b", "--scale-ln-bias", "0.5",
                   "--remove-frequency-direction")
    assert without(api.to_dict(), "outputs") == without(cli, "outputs")
    assert [Path(p).name for p in api.outputs] == [Path(p).name for p in cli["outputs"]]
    a, b = open_checkpoint(tmp_path / "a"), open_checkpoint(tmp_path / "b")
    assert all(torch.equal(a.get(n), b.get(n)) for n in a.names())
    dry = nbcli.patch(folder, set_output_bias=counts, bias_name="lm_head.bias", tokenizer=SAMPLE_TOKENIZER,
                      dry_run=True)
    assert dry.dry_run and dry.tensors[0]["created"] and not dry.outputs


def test_patch_in_memory_equals_the_patched_file(tmp_path: Path, gpt2: tuple[Any, Path]) -> None:
    model, folder = gpt2
    on_file = nbcli.patch(folder, tmp_path / "out", scale_ln_bias=0.25, remove_frequency_direction=True)
    written = open_checkpoint(tmp_path / "out")
    state = model.state_dict()
    before = {name: t.clone() for name, t in state.items()}
    for source in (model, state):
        patched = nbcli.patch(source, scale_ln_bias=0.25, remove_frequency_direction=True)
        expected = without(on_file.to_dict(), "outputs", "model_folder")
        if source is state:  # a bare state dict has no config.json: no model_type
            expected["roles"]["model_type"] = None
        assert without(patched.to_dict(), "outputs", "model_folder") == expected
        new = patched.state_dict
        assert new is not None and set(new) == set(state)
        assert all(torch.equal(new[n], written.get(n)) for n in written.names())
        assert new["lm_head.weight"] is new["transformer.wte.weight"]  # still tied
        assert not torch.equal(new["transformer.wte.weight"], state["transformer.wte.weight"])
        assert all(torch.equal(before[n], t) for n, t in model.state_dict().items())  # caller's untouched
    copy = tiny_gpt2()
    nbcli.patch(copy, scale_ln_bias=0.25, remove_frequency_direction=True, in_place=True)
    assert all(torch.equal(copy.state_dict()[n], written.get(n)) for n in written.names())
    assert copy.lm_head.weight is copy.transformer.wte.weight


def test_patch_in_memory_untie_and_refusals(gpt2: tuple[Any, Path], counts: Path) -> None:
    model, _ = gpt2
    untied = nbcli.patch(model.state_dict(), untie=True, scale_ln_bias=0.5)
    new = untied.state_dict
    assert new is not None and untied.config_updates == {"tie_word_embeddings": False}
    assert new["lm_head.weight"] is not new["transformer.wte.weight"]
    assert torch.equal(new["lm_head.weight"], model.transformer.wte.weight)
    fresh = tiny_gpt2()  # in place, a created bias is installed live (nbcli.hf.output_bias), not refused
    nbcli.patch(fresh, set_output_bias=counts, bias_name="lm_head.bias", in_place=True)
    assert isinstance(fresh.lm_head.bias, torch.nn.Parameter) and fresh.lm_head.weight is fresh.transformer.wte.weight
    assert float(fresh.lm_head.bias.detach().exp().sum()) == pytest.approx(1.0, rel=1e-4)  # log p(y)
    with pytest.raises(ConfigError, match="no operation"):
        nbcli.patch(model)
    with pytest.raises(ConfigError, match="state dict"):
        nbcli.probe(42)


def test_evaluate_matches_cli(nb_lm: Path, sp_model: Path, heldout: Path) -> None:  # noqa: F811
    api = nbcli.evaluate(nb_lm, heldout, sp_model, scale_ln_bias=[1, 0], device="cpu")
    cli = cli_json("eval", nb_lm, "--corpus", heldout, "-t", sp_model, "--scale-ln-bias", "1,0", "--device", "cpu")
    assert without(api.to_dict()) == without(cli)
    assert [row["lambda"] for row in api.rows] == [1.0, 0.0]


def test_generate_matches_cli(nb_lm: Path, sp_model: Path, heldout: Path) -> None:  # noqa: F811
    api = nbcli.generate(nb_lm, heldout, sp_model, scale_ln_bias="0,1", prompt_words=3, max_new_tokens=6,
                         seed=3, device="cpu")
    cli = cli_json("generate", nb_lm, "--prompts", heldout, "-t", sp_model, "--scale-ln-bias", "0,1",
                   "--prompt-words", "3", "--max-new-tokens", "6", "--seed", "3", "--device", "cpu")
    assert without(api.to_dict()) == without(cli)
    assert len(api.samples) == 2 * api.prompt_count


def test_train_matches_cli(tmp_path: Path, sp_model: Path, train_corpus: Path) -> None:  # noqa: F811
    fast = dict(steps=2, seq_len=32, batch_size=8, eval_every=2, eval_batches=2, device="cpu", threads=1)
    api = nbcli.train_model(train_corpus, sp_model, tmp_path / "a", bias_init="unigram", **fast)
    cli = cli_json("train", "--corpus", train_corpus, "-t", sp_model, "--out", tmp_path / "b", "--bias-init", "unigram",
                   *[x for k, v in fast.items() for x in (f"--{k.replace('_', '-')}", str(v))])
    assert without(api.to_dict(), "out", "checkpoint") == without(cli, "out", "checkpoint")
    assert Path(api.checkpoint).is_file() and api.steps == 2
    assert api.threads == 1 == json.loads((tmp_path / "a" / "summary.json").read_text())["threads"]


def test_translation_functions_match_cli(tmp_path: Path, translation_run: Path, parallel_corpus: Path) -> None:
    """translate_file, export_checkpoint and evaluate_translation(checkpoint=) give their commands' --json."""
    source = parallel_corpus / "valid.de"
    api = nbcli.translate_file(translation_run, source, tmp_path / "a.en", beam=2, device="cpu")
    cli = cli_json("translate", translation_run, "-i", source, "-o", tmp_path / "b.en", "--beam", "2",
                   "--device", "cpu")
    assert without(api.to_dict(), "output", "sentences_per_s") == without(cli, "output", "sentences_per_s")
    assert (tmp_path / "a.en").read_text(encoding="utf-8") == (tmp_path / "b.en").read_text(encoding="utf-8")
    corpus = parallel_corpus / "valid"
    api = nbcli.evaluate_translation(corpus, "de", "en", checkpoint=translation_run, beam=2, device="cpu")
    cli = cli_json("eval", translation_run, "--task", "translation", "--corpus", corpus, "--src-lang", "de",
                   "--tgt-lang", "en", "--beam", "2", "--device", "cpu")
    assert without(api.to_dict(), "corpus") == without(cli, "corpus") and api.model["beam"] == 2
    with pytest.raises(ConfigError, match="beam and lenpen decode with a model"):
        nbcli.evaluate_translation(corpus, "de", "en", hyps=tmp_path / "a.en", beam=2)
    api = nbcli.export_checkpoint(translation_run, tmp_path / "hf-a")
    cli = cli_json("export", translation_run, "-o", tmp_path / "hf-b")
    assert without(api.to_dict(), "out") == without(cli, "out")


def test_transplant_matches_cli(tmp_path: Path, nb_lm: Path, sp_model: Path) -> None:  # noqa: F811
    api = nbcli.transplant_embeddings(nb_lm, sp_model, SAMPLE_TOKENIZER, tmp_path / "a.safetensors",
                                      missing="mean", standardise="xavier")
    cli = cli_json("transplant-embeddings", nb_lm, "--source-tokenizer", sp_model, "--target-tokenizer",
                   SAMPLE_TOKENIZER, "-o", tmp_path / "b.safetensors", "--missing", "mean", "--standardise", "xavier")

    def stable(report: dict[str, Any]) -> dict[str, Any]:
        return {**without(report, "output", "provenance"), "provenance": without(report["provenance"], "time")}

    assert stable(api.to_dict()) == stable(cli)
    assert torch.equal(open_checkpoint(tmp_path / "a.safetensors").get("tok_emb.weight"),
                       open_checkpoint(tmp_path / "b.safetensors").get("tok_emb.weight"))


def test_generate_out_writes_what_the_command_writes(nb_lm: Path, sp_model: Path, heldout: Path,  # noqa: F811
                                                     tmp_path: Path) -> None:
    api = nbcli.generate(nb_lm, heldout, sp_model, prompt_words=3, max_new_tokens=4, device="cpu", out=tmp_path / "o")
    assert api.outputs == [str(tmp_path / "o" / "samples.jsonl"), str(tmp_path / "o" / "table.json")]
    lines = (tmp_path / "o" / "samples.jsonl").read_text().splitlines()
    assert len(lines) == len(api.samples) == api.prompt_count
    assert json.loads((tmp_path / "o" / "table.json").read_text())["rows"] == api.to_dict()["rows"]
