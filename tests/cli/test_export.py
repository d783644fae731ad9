"""`nb export`: transformers loads the folder with nb's logits (<= 1e-4), generate() decodes as nb does,
the tokenizer encodes as nb does; refusals leave nothing behind."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from nbcli.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
from nbcli.tokenizers import load_tokenizer
from nbcli.train.state import save_model
from nbcli.translate import load_translation_model, source_ids
from tests.cli.helpers import assert_one_line_error, invoke, run_nb

transformers = pytest.importorskip("transformers")


def load_hf(folder: Path):  # noqa: ANN201
    from transformers.utils import logging

    logging.set_verbosity_error()
    return transformers.AutoModelForSeq2SeqLM.from_pretrained(folder).eval()


def make_run(folder: Path, tokenizer: Path, seed: int = 0, **kw: object) -> Path:
    """A run directory holding one random checkpoint (biases and the output bias drawn too) and its tokenizers."""
    tok = load_tokenizer(tokenizer)
    folder.mkdir()
    cfg = Seq2SeqConfig(**{**dict(src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size, eos_id=tok.eos_id,
                                  decoder_start_id=tok.bos_id, pad_id=tok.eos_id, src_eos_id=tok.eos_id, d_model=32,
                                  n_head=4, d_ff=48, max_positions=128), **kw})  # type: ignore[arg-type]
    torch.manual_seed(seed)
    model = Seq2SeqTransformer(cfg)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.normal_(0, 0.5)
    save_model(folder / "step-3.safetensors", model, {
        "nb.format": "nb-model/1", "nb.config": cfg.to_json(), "nb.step": "3",
        "nb.src_tokenizer_sha256": tok.sha256, "nb.tgt_tokenizer_sha256": tok.sha256})
    for side in ("source", "target"):
        shutil.copy(tokenizer, folder / f"{side}-tokenizer.model")
    return folder


def batch(tm, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ANN001
    rows = source_ids(tm, texts)
    L = max(map(len, rows))
    ids = torch.full((len(rows), L), tm.cfg.pad_id)
    mask = torch.zeros(len(rows), L, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r)
        mask[i, :len(r)] = 1
    return ids, mask


TEXTS = ["The quick brown fox jumps.", "Hello again, world", "a"]


@pytest.mark.parametrize("kw", [
    dict(share_embeddings="all"),
    dict(share_embeddings="decoder", positions="learned"),
    dict(share_embeddings="none", positions="none", activation="gelu", output_bias=False),
    dict(share_embeddings="all", scale_embedding=False),
])
def test_logits_round_trip_through_transformers(tmp_path: Path, parallel_corpus: Path, kw: dict) -> None:
    run = make_run(tmp_path / "run", parallel_corpus / "joint.model", **kw)
    result = invoke("export", run, "-o", tmp_path / "hf", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["layout"] == "marian" and "model.safetensors" in report["files"]
    tm = load_translation_model(run, device="cpu")
    hf = load_hf(tmp_path / "hf")
    src, mask = batch(tm, TEXTS)
    tgt = torch.tensor([[tm.cfg.decoder_start_id, 40, 41, 42, 43], [tm.cfg.decoder_start_id, 50, 51, 52, 53],
                        [tm.cfg.decoder_start_id, 60, 61, 62, 63]])
    with torch.no_grad():
        ours, _ = tm.model(src, tgt, mask.bool())
        theirs = hf(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
    assert float((ours - theirs).abs().max()) <= 1e-4
    if kw.get("output_bias", True):
        with torch.no_grad():
            assert torch.equal(hf.final_logits_bias[0], tm.model.final_logits_bias)


@pytest.mark.slow
@pytest.mark.parametrize("trained", [True, False])
def test_generate_equals_nbs_decoding_and_the_tokenizer_encodes_as_nb(tmp_path: Path, translation_run: Path,
                                                                      parallel_corpus: Path, trained: bool) -> None:
    """The trained tiny run, and a random model whose EOS bias is raised until outputs end at varied lengths."""
    run = translation_run if trained else make_run(tmp_path / "random", parallel_corpus / "joint.model", seed=3)
    texts = (parallel_corpus / "valid.de").read_text().splitlines()[:6]
    if not trained:   # raise EOS's output bias until greedy outputs end at different lengths
        from safetensors.torch import load_file, save_file

        from nbcli.decoding.seq2seq import translate_ids

        tensors = load_file(run / "step-3.safetensors")
        metadata = load_translation_model(run, device="cpu").metadata
        eos = load_tokenizer(parallel_corpus / "joint.model").eos_id
        base = tensors["final_logits_bias"].clone()
        for boost in torch.linspace(0.0, 6.0, 25).tolist():
            tensors["final_logits_bias"] = base.clone()
            tensors["final_logits_bias"][eos] += boost
            save_file(tensors, run / "step-3.safetensors", metadata)
            tm = load_translation_model(run, device="cpu")
            found = [h for beam in (1, 3) for h in translate_ids(tm.model, source_ids(tm, texts), beam=beam,
                                                                 lenpen=0.8, max_len_a=0, max_len_b=12)]
            if len({len(h.tokens) for h in found}) > 1:
                break
    proc = run_nb("export", run, "-o", tmp_path / "hf", "--beam", "3", "--lenpen", "0.8", "--json")
    assert proc.returncode == 0, proc.stderr.decode()
    tm = load_translation_model(run, device="cpu")
    hf = load_hf(tmp_path / "hf")
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert hf_tok(texts)["input_ids"] == source_ids(tm, texts)            # ids + EOS, as nb encodes
    from nbcli.decoding.seq2seq import translate_ids

    src, mask = batch(tm, texts)
    limit = 12
    lengths = set()
    for beam in (1, 3):
        ours = translate_ids(tm.model, source_ids(tm, texts), beam=beam, lenpen=0.8, max_len_a=0, max_len_b=limit)
        with torch.no_grad():
            out = hf.generate(input_ids=src, attention_mask=mask, num_beams=beam, max_new_tokens=limit,
                              length_penalty=0.8, early_stopping=True, do_sample=False)
        for row, hyp in zip(out.tolist(), ours):
            ids = row[1:]                                                    # drop the decoder start
            if tm.cfg.eos_id in ids:
                ids = ids[:ids.index(tm.cfg.eos_id)]
            else:
                ids = [i for i in ids if i != tm.cfg.pad_id]
            assert ids == hyp.tokens, (beam, row, hyp)
            lengths.add(len(ids))
    if not trained:
        assert len(lengths) > 1                                              # not one degenerate output
    generation = json.loads((tmp_path / "hf" / "generation_config.json").read_text())
    assert (generation["num_beams"], generation["length_penalty"], generation["early_stopping"]) == (3, 0.8, True)
    assert generation["decoder_start_token_id"] == tm.cfg.decoder_start_id == hf.config.decoder_start_token_id


def test_pre_ln_and_a_used_folder_are_refused(tmp_path: Path, parallel_corpus: Path) -> None:
    run = make_run(tmp_path / "pre", parallel_corpus / "joint.model", norm="pre")
    result = invoke("export", run, "-o", tmp_path / "hf")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "post-LN")
    assert not (tmp_path / "hf").exists()
    post = make_run(tmp_path / "post", parallel_corpus / "joint.model")
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "keep.txt").write_text("x")
    result = invoke("export", post, "-o", tmp_path / "used")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "not an empty directory")
    assert [p.name for p in (tmp_path / "used").iterdir()] == ["keep.txt"]
