"""`nb eval --task translation --hyps FILE`: scores without a model, through CliRunner and a real `nb`
subprocess (hypotheses on stdin); options of the other task are refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

from nbcli.analysis.translation import score_translations
from nbcli.cli.render import num
from tests.cli.helpers import assert_one_line_error, invoke, run_nb
from tests.test_translation_eval import HYPS, TARGETS, corpus_forms


def test_json_and_table(tmp_path: Path) -> None:
    corpus = corpus_forms(tmp_path)["jsonl"]
    hyps = tmp_path / "hyps.txt"
    hyps.write_text("\n".join(HYPS) + "\n", encoding="utf-8")
    args = ["eval", "--task", "translation", "--corpus", corpus, "--src-lang", "de", "--tgt-lang", "en", "--hyps", hyps]
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    expected = score_translations(HYPS, TARGETS)
    assert report["task"] == "translation" and report["pairs"] == 4
    assert report["bleu"] == expected["bleu"] and report["bleu_signature"] == expected["bleu_signature"]
    assert report["chrf"] == expected["chrf"] and report["chrf_signature"] == expected["chrf_signature"]
    table = invoke(*args)
    assert table.exit_code == 0, table.output
    # in nb's one number format (5 significant digits: cli/render.num)
    assert f"BLEU {num(expected['bleu'])}" in table.stdout and expected["bleu_signature"] in table.stdout
    assert f"chrF {num(expected['chrf'])}" in table.stdout


def test_subprocess_hypotheses_on_stdin(tmp_path: Path) -> None:
    corpus = corpus_forms(tmp_path)["aligned"]
    proc = run_nb("eval", "--task", "translation", "--corpus", corpus, "--src-lang", "de", "--tgt-lang", "en",
                  "--hyps", "-", "--json", input=("\n".join(HYPS) + "\n").encode())
    assert proc.returncode == 0, proc.stderr.decode()
    assert json.loads(proc.stdout)["bleu"] == score_translations(HYPS, TARGETS)["bleu"]
    proc = run_nb("eval", "--task", "translation", "--corpus", corpus, "--src-lang", "de", "--tgt-lang", "en",
                  "--hyps", "-", input=b"one line\n")
    assert proc.returncode == 1 and proc.stdout == b""
    assert_one_line_error(proc.stderr.decode(), "1 lines for the 4 pairs")


def test_options_of_the_other_task_are_refused(tmp_path: Path) -> None:
    corpus = corpus_forms(tmp_path)["tsv"]
    hyps = tmp_path / "hyps.txt"
    hyps.write_text("\n".join(HYPS) + "\n", encoding="utf-8")
    base = ["eval", "--task", "translation", "--corpus", corpus, "--src-lang", "de", "--tgt-lang", "en"]
    for extra, message in ((["--hyps", hyps, "--scale-ln-bias", "0.5"], "--scale-ln-bias: not an option of --task"),
                           (["--hyps", hyps, "--stride", "3"], "--stride: not an option"),
                           ([], "a model (CHECKPOINT) or a hypotheses file"),
                           (["--hyps", hyps, "--tgt-lang", "de"], "both 'de'")):
        result = invoke(*base, *extra)
        assert result.exit_code == 1 and message in result.stderr, (extra, result.output)
        assert_one_line_error(result.stderr)
    result = invoke("eval", tmp_path / "model.safetensors", "--task", "translation", "--corpus", corpus,
                    "--src-lang", "de", "--tgt-lang", "en", "--hyps", hyps)
    assert result.exit_code == 1 and "not both" in result.stderr, result.output
    result = invoke("eval", "--corpus", corpus)
    assert result.exit_code == 1 and "CHECKPOINT is required" in result.stderr
    result = invoke("eval", tmp_path / "m.safetensors", "--corpus", corpus, "--hyps", hyps)
    assert result.exit_code == 1 and "options of --task translation" in result.stderr
