"""`nb eval --task translation --hyps FILE`: scores without a model, through CliRunner and a real `nb`
subprocess (hypotheses on stdin), of files and of a Hub dataset id (its snapshot recorded in
`datasets`); options of the other task are refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import nbcli
from nbcli.analysis.translation import score_translations
from nbcli.cli.render import num
from tests.cli.helpers import assert_one_line_error, invoke, run_nb
from tests.corpus.test_hub_datasets import parquet_bytes
from tests.hub_cache import add_dataset_snapshot, commit_hash
from tests.test_translation_eval import HYPS, SOURCES, TARGETS, corpus_forms


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
    assert report["datasets"] == []
    table = invoke(*args)
    assert table.exit_code == 0, table.output
    # in nb's one number format (5 significant digits: cli/render.num)
    assert f"BLEU {num(expected['bleu'])}" in table.stdout and expected["bleu_signature"] in table.stdout
    assert f"chrF {num(expected['chrf'])}" in table.stdout


def test_a_test_set_by_dataset_id_records_its_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pairs = [{"de": s, "en": t} for s, t in zip(SOURCES, TARGETS)]
    add_dataset_snapshot(tmp_path / "hf" / "hub", "wmt/wmt16", {
        "de-en/test-00000-of-00001.parquet": parquet_bytes({"translation": pairs})}, commit_hash("wmt16"))
    hyps = tmp_path / "hyps.txt"
    hyps.write_text("\n".join(HYPS) + "\n", encoding="utf-8")
    result = invoke("eval", "--task", "translation", "--corpus", "wmt/wmt16:de-en:test", "--src-lang", "de",
                    "--tgt-lang", "en", "--hyps", hyps, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["bleu"] == score_translations(HYPS, TARGETS)["bleu"]
    assert [(d["repo_id"], d["commit"], d["config"], d["split"], d["files"]) for d in report["datasets"]] == [
        ("wmt/wmt16", commit_hash("wmt16"), "de-en", "test", ["de-en/test-00000-of-00001.parquet"])]
    assert nbcli.evaluate_translation("wmt/wmt16:de-en:test", "de", "en", hyps=hyps).datasets == report["datasets"]


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
