"""`nb translate`: one translation a line in order, the run's tokenizers and decoding, errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from nbcli.translate import load_translation_model, translate_texts
from tests.cli.helpers import assert_one_line_error, invoke, run_nb


def test_translate_subprocess_keeps_lines_and_order(tmp_path: Path, translation_run: Path,
                                                    parallel_corpus: Path) -> None:
    sources = (parallel_corpus / "valid.de").read_text().splitlines()[:5]
    lines = [sources[0], "", sources[1], "   ", *sources[2:]]
    (tmp_path / "in.de").write_text("\n".join(lines) + "\n", encoding="utf-8")
    proc = run_nb("translate", translation_run, "--input", tmp_path / "in.de", "-o", tmp_path / "out.en", "--json")
    assert proc.returncode == 0, proc.stderr.decode()
    report = json.loads(proc.stdout)
    assert report["sentences"] == len(lines) and report["beam"] == 5 and Path(report["checkpoint"]).name == "best.safetensors"
    out = (tmp_path / "out.en").read_text(encoding="utf-8").split("\n")
    assert out[-1] == "" and len(out) - 1 == len(lines) and out[1] == "" and out[3] == ""
    tm = load_translation_model(translation_run, device="cpu")
    alone = [translate_texts(tm, [s], beam=5)[0] for s in sources]          # batching changes nothing
    assert [out[0], out[2], *out[4:-1]] == alone


def test_greedy_and_a_step_checkpoint(tmp_path: Path, translation_run: Path, parallel_corpus: Path) -> None:
    shutil.copy(parallel_corpus / "valid.de", tmp_path / "in.de")
    result = invoke("translate", translation_run / "step-4.safetensors", "-i", tmp_path / "in.de", "-o",
                    tmp_path / "out.en", "--beam", "1")
    assert result.exit_code == 0, result.output
    assert "beam 1" in result.stdout and "step 4" in result.stdout
    assert len((tmp_path / "out.en").read_text().splitlines()) == 40


def test_a_run_directory_is_read_as_its_best_checkpoint(translation_run: Path) -> None:
    assert load_translation_model(translation_run, device="cpu").path == translation_run / "best.safetensors"


def test_invalid_utf8_names_the_line_and_writes_nothing(tmp_path: Path, translation_run: Path) -> None:
    (tmp_path / "in.de").write_bytes(b"gut\nschlecht \xff\n")
    proc = run_nb("translate", translation_run, "-i", tmp_path / "in.de", "-o", tmp_path / "out.en")
    assert proc.returncode == 1
    assert_one_line_error(proc.stderr.decode(), "in.de:2")
    assert not (tmp_path / "out.en").exists()


def test_a_checkpoint_without_its_tokenizers(tmp_path: Path, translation_run: Path, sp_model: Path,
                                             parallel_corpus: Path) -> None:
    shutil.copy(translation_run / "best.safetensors", tmp_path / "model.safetensors")
    (tmp_path / "in.de").write_text("a b c\n")
    result = invoke("translate", tmp_path / "model.safetensors", "-i", tmp_path / "in.de", "-o", tmp_path / "o")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "no source-tokenizer")
    result = invoke("translate", tmp_path / "model.safetensors", "-i", tmp_path / "in.de", "-o", tmp_path / "o",
                    "-t", sp_model)
    assert_one_line_error(result.stderr, "not the source tokenizer")
    result = invoke("translate", tmp_path / "model.safetensors", "-i", tmp_path / "in.de", "-o", tmp_path / "o",
                    "-t", parallel_corpus / "joint.model")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("make,fragment", [
    (lambda d, sp: None, "no such file"),
    (lambda d, sp: (d / "lm.safetensors").write_bytes(b"x"), "lm.safetensors"),
])
def test_not_a_translation_checkpoint(tmp_path: Path, sp_model: Path, make, fragment: str) -> None:  # noqa: ANN001
    make(tmp_path, sp_model)
    (tmp_path / "in.de").write_text("a\n")
    result = invoke("translate", tmp_path / "lm.safetensors", "-i", tmp_path / "in.de", "-o", tmp_path / "o")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, fragment)


def test_an_lm_checkpoint_is_refused(tmp_path: Path, sp_model: Path, sample_lines: list[str]) -> None:
    from nbcli.train.config import build_config
    from nbcli.tasks.language_model import train

    (tmp_path / "corpus.txt").write_text("\n".join(sample_lines[:300]) + "\n")
    train(build_config("tiny", steps=1, seq_len=16, batch_size=4, eval_batches=1, d_model=32),
          [str(tmp_path / "corpus.txt")], sp_model, tmp_path / "lm")
    (tmp_path / "in.de").write_text("a\n")
    result = invoke("translate", tmp_path / "lm" / "step-1.safetensors", "-i", tmp_path / "in.de", "-o", tmp_path / "o",
                    "-t", sp_model)
    assert_one_line_error(result.stderr, "nb train lm runs have no nb translate (nb eval, nb generate read them)")
    lone = tmp_path / "lone.safetensors"   # out of its run directory: read as a translation model, and refused
    lone.write_bytes((tmp_path / "lm" / "step-1.safetensors").read_bytes())
    result = invoke("translate", lone, "-i", tmp_path / "in.de", "-o", tmp_path / "o", "-t", sp_model)
    assert_one_line_error(result.stderr, "not a translation model")
    assert not (tmp_path / "o").exists()


def test_eval_task_translation_decodes_with_the_run(tmp_path: Path, translation_run: Path,
                                                    parallel_corpus: Path) -> None:
    """nb eval --task translation RUN: the BLEU of nb translate's output against the references."""
    from nbcli.analysis.translation import score_translations

    result = invoke("eval", translation_run, "--task", "translation", "--corpus", parallel_corpus / "valid",
                    "--src-lang", "de", "--tgt-lang", "en", "--beam", "2", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["model"]["beam"] == 2 and report["model"]["step"] is not None and report["pairs"] == 40
    invoke("translate", translation_run, "-i", parallel_corpus / "valid.de", "-o", tmp_path / "hyp.en", "--beam", "2")
    hyps = (tmp_path / "hyp.en").read_text(encoding="utf-8").splitlines()
    refs = (parallel_corpus / "valid.en").read_text(encoding="utf-8").splitlines()
    assert report["bleu"] == pytest.approx(score_translations(hyps, refs)["bleu"])
    result = invoke("eval", "--task", "translation", "--corpus", parallel_corpus / "valid", "--src-lang", "de",
                    "--tgt-lang", "en", "--hyps", tmp_path / "hyp.en", "--beam", "3")
    assert_one_line_error(result.stderr, "--beam and --lenpen decode with a model")


def test_lm_commands_refuse_a_translation_checkpoint(translation_run: Path, parallel_corpus: Path,
                                                     tmp_path: Path) -> None:
    # in its run directory, nb eval knows the task: an LM option is refused naming it, as is --task lm
    result = invoke("eval", translation_run / "best.safetensors", "--corpus", parallel_corpus / "valid.de", "-t",
                    parallel_corpus / "joint.model")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "--tokenizer: not an option of --task translation")
    result = invoke("eval", translation_run / "best.safetensors", "--task", "lm", "--corpus", parallel_corpus / "valid.de")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "--task lm:", "nb train translation")
    # a lone copy (no run directory): the LM reader refuses it, naming nb translate
    lone = tmp_path / "mt.safetensors"
    shutil.copy(translation_run / "best.safetensors", lone)
    result = invoke("eval", lone, "--corpus", parallel_corpus / "valid.de", "-t", parallel_corpus / "joint.model")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "translation (encoder-decoder) checkpoint", "nb translate")
    probe = invoke("probe-bias", translation_run / "best.safetensors", "-c", translation_run / "counts.safetensors",
                   "--json")
    assert probe.exit_code == 0, probe.output
    assert "final_logits_bias" in probe.stdout


def test_generate_refuses_a_translation_run_naming_nb_translate(translation_run: Path, parallel_corpus: Path,
                                                                tmp_path: Path) -> None:
    result = invoke("generate", translation_run / "best.safetensors", "--prompts", parallel_corpus / "valid.de",
                    "-t", parallel_corpus / "joint.model", "--out", tmp_path / "study")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, f"{translation_run / 'best.safetensors'} is a run of nb train translation: "
                          "use nb translate")
    assert not (tmp_path / "study").exists()
