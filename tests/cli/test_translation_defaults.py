"""Decoding defaults of a translation run (issue 42): nb translate, nb eval and nb export decode with the
paper's beam 5 and lenpen 1 (paper 000 app. A) whatever beam the run validated with (nb train
--valid-beam, alias --beam), and every report says the beam and length penalty it used."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.cli.helpers import invoke


@pytest.fixture(scope="module")
def greedy_validated_run(tmp_path_factory: pytest.TempPathFactory, parallel_corpus: Path) -> Path:
    """A tiny run whose validation BLEU was decoded greedily (--beam 1, as the benchmark recipe for CPU time)."""
    from nbcli.tasks.translation import build_translation_config, train_translation

    out = tmp_path_factory.mktemp("greedy-valid") / "run"
    cfg = build_translation_config("tiny", dict(src_lang="de", tgt_lang="en", d_ff=32, eval_sentences=4, beam=1,
                                                lenpen=0.6),
                                   d_model=16, steps=2, eval_every=2, eval_batches=1, batch_size=8)
    train_translation(cfg, [str(parallel_corpus / "train")], parallel_corpus / "joint.model",
                      parallel_corpus / "joint.model", out, valid=[str(parallel_corpus / "valid")])
    assert json.loads((out / "config.json").read_text())["task_options"]["beam"] == 1
    return out


def test_translate_and_eval_default_to_beam_5_not_the_validation_beam(tmp_path: Path, greedy_validated_run: Path,
                                                                      parallel_corpus: Path) -> None:
    shutil.copy(parallel_corpus / "valid.de", tmp_path / "in.de")
    result = invoke("translate", greedy_validated_run, "-i", tmp_path / "in.de", "-o", tmp_path / "out.en", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["beam"], report["lenpen"], report["max_len_a"], report["max_len_b"]) == (5, 1.0, 1.2, 10)
    result = invoke("translate", greedy_validated_run, "-i", tmp_path / "in.de", "-o", tmp_path / "out2.en")
    assert result.exit_code == 0, result.output
    assert "beam 5, lenpen 1, length limit 1.2 x S + 10" in " ".join(result.stdout.split())

    args = ("eval", greedy_validated_run, "--task", "translation", "--corpus", parallel_corpus / "valid",
            "--src-lang", "de", "--tgt-lang", "en")
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    model = json.loads(result.stdout)["model"]
    assert (model["beam"], model["lenpen"]) == (5, 1.0)
    result = invoke(*args, "--beam", "2", "--lenpen", "0.5")
    assert result.exit_code == 0, result.output
    assert "beam 2, lenpen 0.5, length limit 1.2 x S + 10" in " ".join(result.stdout.split())


def test_export_writes_beam_5_and_a_greedy_export_no_beam_only_flags(tmp_path: Path,
                                                                       greedy_validated_run: Path) -> None:
    transformers = pytest.importorskip("transformers")
    result = invoke("export", greedy_validated_run, "-o", tmp_path / "hf", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["num_beams"], report["length_penalty"]) == (5, 1.0)
    generation = json.loads((tmp_path / "hf" / "generation_config.json").read_text())
    assert (generation["num_beams"], generation["length_penalty"], generation["early_stopping"]) == (5, 1.0, True)
    result = invoke("export", greedy_validated_run, "-o", tmp_path / "hf2")
    assert result.exit_code == 0, result.output
    assert "beam 5, lenpen 1," in " ".join(result.stdout.split())

    result = invoke("export", greedy_validated_run, "-o", tmp_path / "greedy", "--beam", "1", "--json")
    assert result.exit_code == 0, result.output
    generation = json.loads((tmp_path / "greedy" / "generation_config.json").read_text())
    assert generation["num_beams"] == 1 and "early_stopping" not in generation and "length_penalty" not in generation
    loaded = transformers.GenerationConfig.from_pretrained(tmp_path / "greedy")
    loaded.validate(strict=True)     # transformers finds nothing beam-only in a greedy config


def test_train_help_names_the_validation_beam() -> None:
    result = invoke("train", "translation", "--help")
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "--valid-beam" in text and "--valid-lenpen" in text
