"""`nb analogy` and `nb embedding-stats --vectors` through CliRunner and a real `nb` process: the
JSON report, the transforms' rows, and every reader error as one line naming FILE:LINE."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tests.cli.helpers import assert_one_line_error, invoke, run_nb
from tests.vectors.writers import random_vectors, to_bytes, write

QUESTIONS = ": s1\nw0 w1 w2 w3\nw4 w5 w6 w7\n: s2\nw8 w9 w10 absent\n"


def planted(tmp_path: Path) -> Path:
    words, x = random_vectors(30, 6, seed=2)
    x[3] = x[1] - x[0] + x[2]  # w0 : w1 :: w2 : w3 is right by construction
    return write(tmp_path / "v.txt", "glove", words, x)


@pytest.mark.slow
def test_json_report_in_process_and_subprocess(tmp_path: Path) -> None:
    vectors = planted(tmp_path)
    q = tmp_path / "q.txt"
    q.write_text(QUESTIONS)
    result = invoke("analogy", vectors, "--questions", q, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    s1, s2 = report["sections"]
    assert s1["section"] == "s1" and s1["applicable"] == 2 and s1["correct"] >= 1
    assert (s2["applicable"], s2["total"], s2["accuracy"]) == (0, 1, None)
    assert report["overall"]["total"] == 3 and report["vectors"]["format"] == "glove"
    proc = run_nb("analogy", vectors, "--questions", q, "--json", "--transform", "xavier-std,pos-enc",
                  "--row-positions", "random", "--seed", "3")
    assert proc.returncode == 0, proc.stderr
    sub = json.loads(proc.stdout)
    assert sub["transforms"] == ["xavier-std", "pos-enc"]
    assert sub["positions"] == {"mode": "random", "max_len": 5000, "seed": 3}
    table = invoke("analogy", vectors, "--questions", q)
    assert table.exit_code == 0 and "overall" in table.stdout


@pytest.mark.parametrize("content, where", [
    (b"a 1 2\nb 3 4\na 5 6\n", ":3: duplicate word 'a'"),
    (b"a 1 2\nb 3 4 5\n", ":2: 3 numbers, expected 2"),
    (b"a 1 2\n\xc3( 3 4\n", ":2: invalid UTF-8"),
])
def test_text_errors_are_one_line_naming_file_and_line(tmp_path: Path, content: bytes, where: str) -> None:
    vectors = tmp_path / "bad.txt"
    vectors.write_bytes(content)
    q = tmp_path / "q.txt"
    q.write_text(": s\na b a b\n")
    errors = [invoke("analogy", vectors, "--questions", q).stderr]
    if where.endswith("invalid UTF-8"):  # one case also as a real process (its stderr as a user sees it)
        errors.append(run_nb("analogy", vectors, "--questions", q).stderr.decode())
    for stderr in errors:
        assert_one_line_error(stderr, f"{vectors}{where}")
    assert vectors.read_bytes() == content  # inputs untouched


def test_truncated_binary_is_one_line_naming_the_record(tmp_path: Path) -> None:
    words, x = random_vectors(4, 3)
    vectors = tmp_path / "v.bin"
    vectors.write_bytes(to_bytes("word2vec-binary", words, x)[:-5])
    q = tmp_path / "q.txt"
    q.write_text(": s\nw0 w1 w0 w1\n")
    proc = run_nb("analogy", vectors, "--questions", q, "--json")
    assert proc.returncode == 1 and proc.stdout == b""
    assert_one_line_error(proc.stderr.decode(), f"{vectors}: record 4 (byte", "truncated")
    in_process = invoke("analogy", vectors, "--questions", q, "--json")
    assert in_process.exit_code == 1 and in_process.stdout == ""
    assert_one_line_error(in_process.stderr, f"{vectors}: record 4 (byte", "truncated")
    result = invoke("analogy", vectors, "--questions", q, "--transform", "nope")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "unknown transform 'nope'")


def test_embedding_stats_on_vectors_matches_numpy(tmp_path: Path) -> None:
    words, x = random_vectors(40, 8, seed=4)
    vectors = write(tmp_path / "v.vec.gz", "vec", words, x, "gzip")
    result = invoke("embedding-stats", vectors, "--vectors", "--transform", "scale-sqrt-d,xavier-std,pos-enc",
                    "--inits", "xavier", "--json")
    assert result.exit_code == 0, result.output
    rows = {r["label"]: r for r in json.loads(result.stdout)["rows"]}
    assert list(rows) == ["vectors", "scale-sqrt-d", "scale-sqrt-d,xavier-std", "scale-sqrt-d,xavier-std,pos-enc",
                          "positional-encoding", "xavier"]
    x64 = x.astype(np.float64)
    assert rows["vectors"]["std"] == pytest.approx(x64.std(ddof=1), rel=1e-6)
    assert rows["scale-sqrt-d"]["max"] == pytest.approx(x64.max() * math.sqrt(8), rel=1e-6)
    assert rows["scale-sqrt-d,xavier-std"]["std"] == pytest.approx(math.sqrt(2 / 48), rel=1e-5)
    assert rows["positional-encoding"]["max"] <= 1 and rows["xavier"]["shape"] == [40, 8]
    refused = invoke("embedding-stats", vectors, "--transform", "pos-enc")
    assert refused.exit_code == 1
    assert_one_line_error(refused.stderr, "add --vectors")


def test_vocabulary_file_keeps_only_its_words(tmp_path: Path) -> None:
    vectors = planted(tmp_path)
    q = tmp_path / "q.txt"
    q.write_text(QUESTIONS)
    vocab = tmp_path / "vocab.tsv"
    vocab.write_text("w3\t7\nw0 1\n\nw1\nw2\nw9\nnot-in-vectors\n")
    result = invoke("analogy", vectors, "--questions", q, "--vocabulary", vocab, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["vectors"]["rows"] == 5 and report["vocabulary_words"] == 6
    # w0 w1 w2 w3 is applicable and right by construction (w3 = w1 - w0 + w2); w4..w7 are gone
    assert [(s["correct"], s["applicable"]) for s in report["sections"]] == [(1, 1), (0, 0)]
    stats = invoke("embedding-stats", vectors, "--vectors", "--vocabulary", vocab, "--inits", "xavier", "--json")
    assert stats.exit_code == 0, stats.output
    assert [r["shape"] for r in json.loads(stats.stdout)["rows"]] == [[5, 6], [5, 6]]
    vocab.write_bytes(b"ok\n\xff\n")
    bad = run_nb("analogy", vectors, "--questions", q, "--vocabulary", vocab)
    assert_one_line_error(bad.stderr.decode(), f"{vocab}:2: invalid UTF-8")


def test_unicode_errors_option_of_analogy_and_embedding_stats(tmp_path: Path) -> None:
    """Words that are not UTF-8: one line with the count and the option (default), read with
    --unicode-errors replace, and the report says how many and how (was: refused, no option)."""
    vectors = tmp_path / "v.txt"
    vectors.write_bytes(b"w0 1 0\nw1 0 1\n\x97 1 1\nw3 2 1\n")
    q = tmp_path / "q.txt"
    q.write_text(": s\nw0 w1 w3 w0\n")
    refused = invoke("analogy", vectors, "--questions", q)
    assert refused.exit_code == 1
    assert_one_line_error(refused.stderr, f"{vectors}:3: invalid UTF-8 in the word at byte 0; 1 word(s)",
                          "(--unicode-errors)")
    read = invoke("analogy", vectors, "--questions", q, "--unicode-errors", "replace", "--json")
    assert read.exit_code == 0, read.stderr
    report = json.loads(read.stdout)
    assert report["vectors"]["escaped_words"] == 1 and report["vectors"]["unicode_errors"] == "replace"
    assert report["warnings"] == [f"{vectors}: 1 word(s) with invalid UTF-8, read with U+FFFD (unicode_errors "
                                  "'replace')"]
    stats = invoke("embedding-stats", vectors, "--vectors", "--unicode-errors", "ignore", "--json")
    assert stats.exit_code == 0, stats.stderr
    assert json.loads(stats.stdout)["vectors"]["rows"] == 4
    assert invoke("embedding-stats", vectors, "--vectors").exit_code == 1
