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


# ---------------------------------------------------------------------------------------------
# What the task fuzzer (tests/fuzz/test_tasks_fuzz.py) found (each a class fixed in the reader)


@pytest.mark.slow
def test_rows_without_tokens_are_said_by_train_and_predict_through_real_nb(bert, tmp_path) -> None:
    """Rows of no tokens are no sentence; train and predict warn how many, so predict's output (one line
    a record) is not silently shorter than the file (was: no warning)."""
    rows = [([], []), *tagged(4), ([], [])]
    data = write_records(tmp_path / "train.jsonl", rows, "jsonl-names")
    trained = invoke(*_args(bert, data, tmp_path / "run", "--json"))
    assert trained.exit_code == 0, trained.stderr
    note = f"{data}: 2 record(s) with no tokens skipped (no sentence to tag)"
    assert note in json.loads(trained.stdout)["warnings"]
    predicted = run_nb("predict", tmp_path / "run", "--corpus", data, "-o", tmp_path / "p.jsonl", "--json",
                       timeout=300)
    assert predicted.returncode == 0, predicted.stderr
    report = json.loads(predicted.stdout)
    assert report["records"] == 4 and report["warnings"] == [note]
    assert [json.loads(line)["tokens"] for line in (tmp_path / "p.jsonl").read_text().splitlines()] == \
        [tk for tk, _ in tagged(4)]


def test_repeated_classlabel_names_are_one_line_naming_the_file(bert, tmp_path) -> None:
    data = write_records(tmp_path / "train.parquet", tagged(4), "parquet", names=NAMES + ["O"])
    result = invoke(*_args(bert, data, tmp_path / "out"))
    assert result.exit_code == 1, (result.exit_code, result.stderr)
    assert_one_line_error(result.stderr, f"{data}: schema metadata 'huggingface': the ClassLabel names of "
                                         "'ner_tags' repeat 'O'")
    assert not (tmp_path / "out").exists()


CONTRACTION = ("# text = du chat\n1-2\tdu\t_\t_\t_\t_\t_\t_\t_\t_\n1\tde\tde\tADP\t_\t_\t3\tcase\t_\t_\n"
               "2\tle\tle\tDET\t_\t_\t3\tdet\t_\t_\n3\tchat\tchat\tNOUN\t_\t_\t0\troot\t_\t_\n\n"
               "1\tun\tun\tDET\t_\t_\t2\tdet\t_\t_\n2\tchien\tchien\tNOUN\t_\t_\t0\troot\t_\t_\n")


def test_conllu_opening_with_a_contraction_needs_its_columns(bert, tmp_path) -> None:
    """A CoNLL-U file whose first sentence opens with a multiword token: without --text-field/--label-field
    it is refused (was: trained on the IDs as words and '_' as the one tag); with them it trains on UPOS."""
    (tmp_path / "fr.conllu").write_text(CONTRACTION)
    refused = invoke(*_args(bert, tmp_path / "fr.conllu", tmp_path / "out"))
    assert refused.exit_code == 1
    assert_one_line_error(refused.stderr, f"{tmp_path / 'fr.conllu'}:2: column 0 numbers the tokens 1, 2")
    assert not (tmp_path / "out").exists()
    trained = invoke(*_args(bert, tmp_path / "fr.conllu", tmp_path / "run", "--text-field", "1", "--label-field",
                            "3", "--json"))
    assert trained.exit_code == 0, trained.stderr
    assert json.loads(trained.stdout)["labels"] == ["ADP", "DET", "NOUN"]


def test_an_error_quoting_a_huge_token_is_one_bounded_line_through_real_nb(bert, tmp_path) -> None:
    """A first token line of 200,000 NUL bytes and no tag: one line that names FILE:LINE, says what is
    wrong and stays within MAX_MESSAGE (was: an 800 KB line quoting every byte)."""
    from nbcli.errors import MAX_MESSAGE

    (tmp_path / "t.conll").write_bytes(b"\x00" * 200_000 + b"\nthe O\n")
    result = run_nb(*_args(bert, tmp_path / "t.conll", tmp_path / "out"), timeout=300)
    assert result.returncode == 1
    stderr = result.stderr.decode()
    assert_one_line_error(stderr, f"{tmp_path / 't.conll'}:1: 1 column(s): the token '\\x00", "has no tag",
                          "characters cut")
    assert len(stderr.strip()) <= len("nb: error: ") + MAX_MESSAGE + 40
    assert not (tmp_path / "out").exists()


def test_predict_tags_text_of_one_token_a_line(bert, tmp_path) -> None:
    """Tagging new text needs no dummy tags: a CoNLL file of tokens alone is predicted (was: "1 column(s):
    the token 'But' has no tag"); nb eval of that file still asks for the tags."""
    train = tmp_path / "train.conll"
    train.write_text("\n\n".join("\n".join(f"{w} {t}" for w, t in zip(tk, tg)) for tk, tg in tagged(8)) + "\n")
    assert invoke(*_args(bert, train, tmp_path / "run")).exit_code == 0
    new = tmp_path / "new.conll"
    new.write_text("But\nthe\ncat\n\nof\nthe\n")
    result = invoke("predict", tmp_path / "run", "--corpus", new, "-o", tmp_path / "tags.jsonl", "--json")
    assert result.exit_code == 0, result.stderr
    lines = [json.loads(line) for line in (tmp_path / "tags.jsonl").read_text().splitlines()]
    assert [line["tokens"] for line in lines] == [["But", "the", "cat"], ["of", "the"]]
    assert [len(line["tags"]) for line in lines] == [3, 2]
    evaluated = invoke("eval", tmp_path / "run", "--task", "tagging", "--corpus", new)
    assert evaluated.exit_code == 1
    assert_one_line_error(evaluated.stderr, f"{new}:1: 1 column(s): the token 'But' has no tag")
