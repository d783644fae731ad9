"""nb train / eval / predict --task tagging through CliRunner and a real `nb` subprocess: a file that is not
token-per-line CoNLL (a GLUE TSV, JSON lines named .txt, a field name for CoNLL) is one FILE:LINE line on
stderr, exit 1, no run directory; the Hugging Face records (parquet with ClassLabel, JSONL of ids) train,
evaluate and predict with the tag names."""

from __future__ import annotations

import json

import pytest

from tests.cli.helpers import assert_one_line_error, invoke, run_nb
from tests.corpus.test_sentences import NAMES, write_records
from tests.tasks.builders import encoder_folder
from tests.tasks.test_tagging import tagged

GLUE = "sentence\tlabel\nthe cat sat on the mat\t1\na dog\t0\n"
HF_JSONL = '{"tokens": ["EU", "rejects"], "ner_tags": [3, 0]}\n{"tokens": ["Peter"], "ner_tags": [1]}\n'


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return encoder_folder(tmp_path_factory.mktemp("tag-cli") / "bert", "bert")


def _args(bert, corpus, out, *extra):
    return ["train", "--task", "tagging", "--init", bert, "--corpus", corpus, "--steps", "1", "--batch-size", "4",
            "--max-len", "16", "--device", "cpu", "--out", out, *extra]


@pytest.mark.parametrize("name, content, extra, fragments", [
    ("train.tsv", GLUE, [], ["train.tsv:2: 7 column(s), but the first token line", "not token-per-line CoNLL",
                             "a TSV of sentences?"]),
    ("train.txt", HF_JSONL, [], ["train.txt:1: a JSON object, not token-per-line CoNLL"]),
    ("train.conll", "the O\nof B-PER\n", ["--text-field", "tokens"], ["train.conll: CoNLL text has columns"]),
    ("train.csv", "tokens,ner_tags\nthe,0\n", [], ["train.csv: a CSV file, not token-per-line CoNLL text"]),
])
def test_not_conll_is_one_line_exit_1_no_run_dir(bert, tmp_path, name, content, extra, fragments) -> None:
    (tmp_path / name).write_text(content)
    result = invoke(*_args(bert, tmp_path / name, tmp_path / "out", *extra))
    assert result.exit_code == 1, (result.exit_code, result.stderr)
    assert_one_line_error(result.stderr, *fragments)
    assert not (tmp_path / "out").exists()


def test_glue_tsv_refused_through_real_nb(bert, tmp_path) -> None:
    (tmp_path / "train.tsv").write_text(GLUE)
    result = run_nb(*_args(bert, tmp_path / "train.tsv", tmp_path / "out"), timeout=300)
    assert result.returncode == 1
    assert_one_line_error(result.stderr.decode(), f"{tmp_path / 'train.tsv'}:2: 7 column(s)")
    assert not (tmp_path / "out").exists()


def test_hub_records_train_eval_predict(bert, tmp_path) -> None:
    train = write_records(tmp_path / "train.parquet", tagged(8), "parquet")
    (tmp_path / "ids").mkdir()
    valid = write_records(tmp_path / "ids" / "validation.jsonl", tagged(4, 1), "jsonl")   # ids without names
    result = invoke(*_args(bert, train, tmp_path / "run", "--valid", f"dev={valid}", "--json"))
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["labels"] == NAMES and 0 <= summary["final"]["dev"]["f1"] <= 1
    evaluated = json.loads(invoke("eval", tmp_path / "run", "--task", "tagging", "--corpus", valid, "--json").stdout)
    assert evaluated["labels"] == NAMES and evaluated["accuracy"] == pytest.approx(summary["final"]["dev"]["accuracy"])
    predicted = run_nb("predict", tmp_path / "run", "--corpus", train, "--json", timeout=300)
    assert predicted.returncode == 0, predicted.stderr
    predictions = json.loads(predicted.stdout)["predictions"]
    assert [p["tokens"] for p in predictions] == [tk for tk, _ in tagged(8)]
    assert all(set(p["tags"]) <= set(NAMES) for p in predictions)
