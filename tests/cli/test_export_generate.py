"""An exported translation model decodes like nb (issue 42): `generate()` with nothing but the exported
generation_config.json gives `nb translate`'s translation of every sentence that nb's search ends before
its per-sentence length limit, and exactly nb's search with the position table P as the only limit on all;
a sentence that nb cuts at int(1.2 S + 10) goes on in generate() (greedy: nb's output is a prefix of it),
and passing max_new_tokens=int(1.2 S + 10) for it gives nb's output again (docs/training.md 'nb export')."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.cli.helpers import invoke
from tests.conftest import english_like_lines

transformers = pytest.importorskip("transformers")

P = 128   # the run's position table: small, so a sentence that never says EOS runs to it quickly


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory: pytest.TempPathFactory, parallel_corpus: Path) -> Path:
    """A tiny run trained long enough (150 updates) that most outputs end in EOS, some not before nb's limit."""
    from nbcli.tasks.translation import build_translation_config, train_translation

    out = tmp_path_factory.mktemp("mt-trained") / "run"
    cfg = build_translation_config("tiny", dict(src_lang="de", tgt_lang="en", d_ff=64, eval_sentences=8,
                                                max_positions=P),
                                   d_model=32, steps=150, eval_every=150, eval_batches=1, batch_size=16,
                                   seq_len=64, bias_init="unigram")
    train_translation(cfg, [str(parallel_corpus / "train")], parallel_corpus / "joint.model",
                      parallel_corpus / "joint.model", out, valid=[str(parallel_corpus / "valid")])
    return out


def _translate(run: Path, source: Path, out: Path, *args: str) -> list[str]:
    result = invoke("translate", run, "-i", source, "-o", out, *args)
    assert result.exit_code == 0, result.output
    return out.read_text(encoding="utf-8").split("\n")[:-1]


@pytest.mark.slow
@pytest.mark.parametrize("beam", [5, 1])
def test_generate_with_the_exported_defaults_decodes_as_nb_translate(tmp_path: Path, trained_run: Path,
                                                                      beam: int) -> None:
    from transformers.utils import logging

    from nbcli.translate import load_translation_model, source_ids

    texts = english_like_lines(50, seed=11, unicode=False)               # not the training sentences
    (tmp_path / "in.de").write_text("\n".join(texts) + "\n", encoding="utf-8")
    args = () if beam == 5 else ("--beam", "1")                          # beam 5: every default
    nb = _translate(trained_run, tmp_path / "in.de", tmp_path / "nb.en", *args)
    nb_ceiling = _translate(trained_run, tmp_path / "in.de", tmp_path / "p.en", *args, "--max-len-a", "0",
                            "--max-len-b", str(P))
    result = invoke("export", trained_run, "-o", tmp_path / "hf", *args, "--json")
    assert result.exit_code == 0, result.output
    generation = json.loads((tmp_path / "hf" / "generation_config.json").read_text())
    assert generation["num_beams"] == beam and generation["max_new_tokens"] == P and "max_length" not in generation

    logging.set_verbosity_error()
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "hf").eval()
    tm = load_translation_model(trained_run, device="cpu")
    decode, eos = tm.target_tokenizer.decode, tm.cfg.eos_id

    def generated(ids: list[int], **kw: int) -> list[int]:
        with torch.no_grad():
            row = hf.generate(input_ids=torch.tensor([ids]), **kw)[0, 1:].tolist()   # the exported defaults
        return row[:row.index(eos)] if eos in row else row

    ended = cut = 0
    for text, ours, ours_ceiling, ids in zip(texts, nb, nb_ceiling, source_ids(tm, texts)):
        theirs = generated(ids)
        assert decode(theirs) == ours_ceiling, text        # nb's search with P as its only limit, every sentence
        limit = int(1.2 * len(ids) + 10)
        assert decode(generated(ids, max_new_tokens=limit)) == ours, text   # nb's own limit passed: nb's output
        if ours == ours_ceiling:                           # nb's limit did not bind: the defaults give nb's output
            ended += 1
            assert decode(theirs) == ours
        else:                                              # nb cut it at its limit; generate goes on
            cut += 1
            assert len(theirs) > limit, text
            if beam == 1:
                assert decode(theirs[:limit]) == ours
    assert ended >= 30 and cut >= 1, (ended, cut)           # most sentences end before the limit, some do not
