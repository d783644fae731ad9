"""`nb eval` and `nb generate` on every causal architecture of the table, against transformers itself.

For each layout of tests/hf_layouts.py that is a causal LM: transformers' tiny random model, saved
with `save_pretrained` -> `nbcli.evaluate` (the model as saved and with b_LN scaled to 0, where it has
one) -> each row's loss equals the loss transformers' own forward gives on the same token ids (EOS +
document + EOS, as nb scores documents), with b_LN zeroed in the model's own parameters for the
second row -> `nbcli.generate` with greedy decoding -> each continuation equals transformers' own
`generate`. The layouts transformers 5 renames on load (GPT-NeoX's embed_out -> lm_head) need nb
to map the checkpoint's names to the loaded model's. Masked LMs and encoder-decoders are refused in
one line. A GPT-NeoX filed in a hub cache as EleutherAI/pythia-70m@step3000 (docs/hub.md's example)
runs through the CLI by its repo id.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")  # in the test extras; never skipped in CI

import nbcli  # noqa: E402
from nbcli.errors import CheckpointError  # noqa: E402
from nbcli.array_ops import remove_direction  # noqa: E402
from tests.cli.helpers import assert_one_line_error, invoke  # noqa: E402
from tests.hf_layouts import IDS, LAYOUTS, Layout, build  # noqa: E402
from tests.hub_cache import add_snapshot, commit_hash  # noqa: E402

NOT_CAUSAL = ("t5", "marian", "bart", "bert", "roberta", "distilbert")
CAUSAL = [(layout, name) for layout, name in zip(LAYOUTS, IDS) if layout.arch not in NOT_CAUSAL]
DOCS = ["The model is a bias of the token.", "Frequency and the word are in a model.", "A token is a word."]
NEW_TOKENS = 6


@pytest.fixture(scope="module")
def tok(hf_bytelevel_json: Path) -> tuple[Path, Any, int]:
    """The tokenizer file, the `tokenizers` library's own reading of it (independent of nb's
    loader) and its EOS id."""
    from tokenizers import Tokenizer

    transformers.logging.set_verbosity_error()
    reader = Tokenizer.from_file(str(hf_bytelevel_json))
    return hf_bytelevel_json, reader, reader.token_to_id("<|endoftext|>")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "heldout.txt"
    path.write_text("\n".join(DOCS) + "\n")
    return path


def _save(layout: Layout, folder: Path, tok: tuple[Path, Any, int], seed: int = 0) -> Any:
    """The layout's random model with the tokenizer's vocabulary, peaked (as a trained model's
    predictions are: greedy decoding then has no near-ties), saved with its tokenizer.json."""
    model = build(layout, tok[1].get_vocab_size(), seed)
    with torch.no_grad():
        model.get_input_embeddings().weight.normal_(0, 1)
        out = model.get_output_embeddings().weight
        if out is not model.get_input_embeddings().weight:
            out.normal_(0, 1)
    model.save_pretrained(folder)
    shutil.copy(tok[0], folder / "tokenizer.json")
    return model


def _without_ln_bias(model: Any, layout: Layout) -> Any:
    """A copy of the model with its final norm's bias zeroed (b_LN <- 0 * b_LN), on its own parameters."""
    zeroed = copy.deepcopy(model)
    with torch.no_grad():
        zeroed.get_submodule(layout.final_norm).bias.zero_()
    return zeroed


def _loss(model: Any, tok: tuple[Path, Any, int]) -> float:
    """Mean next-token NLL over every document, each scored as EOS + its tokens + EOS."""
    _path, reader, eos = tok
    total, count = 0.0, 0
    with torch.no_grad():
        for doc in DOCS:
            ids = torch.tensor([[eos, *reader.encode(doc).ids, eos]])
            n = ids.shape[1] - 1
            total += model(input_ids=ids, labels=ids).loss.item() * n
            count += n
    return total / count


def _greedy(model: Any, prompt: str, tok: tuple[Path, Any, int]) -> list[int]:
    """transformers' own greedy continuation of EOS + the prompt, up to (not including) EOS."""
    _path, reader, eos = tok
    ids = torch.tensor([[eos, *reader.encode(prompt).ids]])
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=NEW_TOKENS, eos_token_id=eos, pad_token_id=eos)
    new = out[0, ids.shape[1]:].tolist()
    return new[:new.index(eos)] if eos in new else new


@pytest.mark.slow
@pytest.mark.parametrize("layout", [layout for layout, _ in CAUSAL], ids=[name for _, name in CAUSAL])
def test_eval_and_generate_equal_transformers_own(tmp_path: Path, layout: Layout, tok, corpus: Path) -> None:  # noqa: ANN001
    folder = tmp_path / "model"
    model = _save(layout, folder, tok)
    models = [model] + ([_without_ln_bias(model, layout)] if layout.final_norm else [])
    lambdas = "1,0" if layout.final_norm else None
    report = nbcli.evaluate(folder, corpus, tok[0], scale_ln_bias=lambdas)
    assert [row["lambda"] for row in report.rows] == ([1.0, 0.0] if lambdas else [None])
    for row, reference in zip(report.rows, models):
        assert row["loss"] == pytest.approx(_loss(reference, tok), abs=1e-4), row
    if lambdas:
        assert report.rows[0]["loss"] != pytest.approx(report.rows[1]["loss"], abs=1e-4)
    made = nbcli.generate(folder, corpus, tok[0], scale_ln_bias=lambdas, decoding="greedy", prompt_words=3,
                          max_new_tokens=NEW_TOKENS)
    assert len(made.samples) == len(DOCS) * len(models)
    for sample in made.samples:
        reference = models[0] if sample["lambda"] in (None, 1.0) else models[1]
        assert sample["tokens"] == _greedy(reference, sample["prompt"], tok), sample


def test_gpt_neox_output_layer_renamed_on_load(tmp_path: Path, tok) -> None:  # noqa: ANN001
    """GPT-NeoX saves its output layer as embed_out.weight; transformers 5 loads it as lm_head: the
    runner's live tensor for the checkpoint's name is the loaded model's output layer, so in-memory
    surgery on it reaches the logits."""
    from nbcli.lm.runner import load_runner
    from nbcli.surgery import SurgeryOptions

    layout = next(item for item in LAYOUTS if item.arch == "gpt_neox")
    folder = tmp_path / "neox"
    model = _save(layout, folder, tok)
    expected = copy.deepcopy(model)
    with torch.no_grad():
        out = expected.get_output_embeddings().weight
        out.copy_(remove_direction(out, expected.get_submodule(layout.final_norm).bias))
    runner = load_runner(folder, device="cpu")
    try:
        assert runner.roles.get("output_weight") == "embed_out.weight"
        live = runner.live("embed_out.weight")
        assert live.data_ptr() == runner.module.get_output_embeddings().weight.data_ptr()
        ids = torch.tensor([[tok[2], 5, 17, 42]])
        before = runner.logits(ids)
        runner.set_surgery(SurgeryOptions(remove_frequency_direction=True))
        with torch.no_grad():
            torch.testing.assert_close(runner.logits(ids), expected(input_ids=ids).logits)
        assert not torch.allclose(runner.logits(ids), before)
        runner.set_surgery(None)
        torch.testing.assert_close(runner.logits(ids), before)
    finally:
        runner.close()


@pytest.mark.parametrize("arch", NOT_CAUSAL)
def test_masked_and_encoder_decoder_models_are_refused(tmp_path: Path, arch: str, tok, corpus: Path) -> None:  # noqa: ANN001
    layout = next(item for item in LAYOUTS if item.arch == arch)
    folder = tmp_path / arch
    _save(layout, folder, tok)
    with pytest.raises(CheckpointError, match="causal LM"):
        nbcli.evaluate(folder, corpus, tok[0])
    result = invoke("generate", folder, "--prompts", corpus, "-t", tok[0], "--max-new-tokens", "2")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "causal LM", arch)


def test_a_decoder_bert_is_a_causal_lm(tmp_path: Path, tok, corpus: Path) -> None:  # noqa: ANN001
    """BERT trained as a decoder (config is_decoder: BertLMHeadModel) scores left to right: allowed."""
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=tok[1].get_vocab_size(), hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=40,
                                     is_decoder=True)
    model = transformers.BertLMHeadModel(config).eval()
    model.save_pretrained(tmp_path / "bert-decoder")
    report = nbcli.evaluate(tmp_path / "bert-decoder", corpus, tok[0])
    assert report.rows[0]["loss"] == pytest.approx(_loss(model, tok), abs=1e-4)


def test_pythia_by_repo_id_and_revision(tmp_path: Path, tok, corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """docs/hub.md's `nb eval EleutherAI/pythia-70m@step3000 --corpus ...` (its own tokenizer), with a
    GPT-NeoX filed in a hub cache under that id: branch step3000 and main hold different models, and
    the rows are those of the step3000 one."""
    layout = next(item for item in LAYOUTS if item.arch == "gpt_neox")
    repo = "EleutherAI/pythia-70m"
    home = tmp_path / "hf-home"
    step = _save(layout, tmp_path / "step3000", tok, seed=1)
    main = _save(layout, tmp_path / "main", tok, seed=2)
    add_snapshot(home / "hub", repo, tmp_path / "step3000", commit_hash("step3000"), refs=("step3000",))
    add_snapshot(home / "hub", repo, tmp_path / "main", commit_hash("main"), refs=("main",))
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    result = invoke("eval", f"{repo}@step3000", "--corpus", corpus, "--scale-ln-bias", "1,0", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["rows"]
    assert rows[0]["loss"] == pytest.approx(_loss(step, tok), abs=1e-4)
    assert rows[0]["loss"] != pytest.approx(_loss(main, tok), abs=1e-3)
    assert rows[1]["loss"] == pytest.approx(_loss(_without_ln_bias(step, layout), tok), abs=1e-4)
    result = invoke("generate", f"{repo}@step3000", "--prompts", corpus, "--decoding", "greedy", "--prompt-words", "3",
                    "--max-new-tokens", str(NEW_TOKENS), "--out", tmp_path / "generated")
    assert result.exit_code == 0, result.output
    samples = [json.loads(line) for line in (tmp_path / "generated" / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == len(DOCS)
    assert [s["tokens"] for s in samples] == [_greedy(step, s["prompt"], tok) for s in samples]
