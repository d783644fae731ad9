"""Nothing a read changes is silent: every command that reads text says, in its report's warnings,
how many lines held invalid UTF-8 (replaced by U+FFFD), with the one phrasing of `ReadStats.notes`."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from nbcli.corpus.rows import ReadStats
from tests.cli.helpers import invoke

BAD = "1 line(s) held invalid UTF-8 (replaced by U+FFFD)"
FAST = ["--seq-len", "32", "--batch-size", "8", "--eval-every", "2", "--eval-batches", "2", "--device", "cpu"]


@given(st.integers(0, 5), st.integers(0, 5), st.integers(0, 5), st.integers(0, 5))
def test_notes_name_every_count_and_only_those(bad: int, skipped: int, nulls: int, empty: int) -> None:
    notes = ReadStats(bad, skipped, nulls, empty).notes("f.txt")
    assert len(notes) == (bad > 0) + (skipped > 0) + (nulls > 0) + (empty > 0)
    assert all(note.startswith("f.txt: ") for note in notes)
    assert any(f"{empty} record(s) with no tokens skipped" in note for note in notes) == (empty > 0)
    total = ReadStats()
    total.add(ReadStats(bad, skipped, nulls, empty))
    total.add(ReadStats(1, 0, 2, 3))
    assert (total.bad_utf8_lines, total.skipped_lines, total.skipped_nulls, total.skipped_empty) == \
        (bad + 1, skipped, nulls + 2, empty + 3)


def with_bad_line(source: Path, target: Path, line: int = 3) -> Path:
    """`source` with one invalid byte put into line `line` (nothing else changed)."""
    lines = source.read_bytes().split(b"\n")
    lines[line] = lines[line][:2] + b"\xff" + lines[line][2:]
    target.write_bytes(b"\n".join(lines))
    return target


def report(*args: str | Path) -> dict:
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_language_model_train_and_eval_say_so(tmp_path: Path, sp_model: Path, sample_lines: list[str]) -> None:
    train_corpus = tmp_path / "corpus.txt"
    train_corpus.write_text("\n".join(sample_lines) + "\n", encoding="utf-8")
    bad = with_bad_line(train_corpus, tmp_path / "bad.txt")
    trained = report("train", "--corpus", bad, "-t", sp_model, "--out", tmp_path / "r", "--steps", "1", *FAST)
    assert f"--corpus {bad}: {BAD}" in trained["warnings"]
    clean = report("train", "--corpus", train_corpus, "-t", sp_model, "--out", tmp_path / "c", "--steps", "1", *FAST)
    assert not any("UTF-8" in w for w in clean["warnings"])
    evaluated = report("eval", tmp_path / "r" / "step-1.safetensors", "--corpus", bad, "-t", sp_model, "--device", "cpu")
    assert f"{bad}: {BAD}" in evaluated["warnings"]


def test_translation_train_names_the_side_that_held_it(tmp_path: Path, parallel_corpus: Path) -> None:
    for side in ("de", "en"):
        (tmp_path / f"train.{side}").write_bytes((parallel_corpus / f"train.{side}").read_bytes())
    with_bad_line(parallel_corpus / "valid.en", tmp_path / "valid.en")
    (tmp_path / "valid.de").write_bytes((parallel_corpus / "valid.de").read_bytes())
    trained = report("train", "--task", "translation", "--corpus", tmp_path / "train", "--valid", tmp_path / "valid",
                     "--src-lang", "de", "--tgt-lang", "en", "-t", parallel_corpus / "joint.model", "--out",
                     tmp_path / "r", "--steps", "1", "--batch-size", "8", "--eval-batches", "1", "--device", "cpu")
    assert f"--valid {tmp_path / 'valid'}: {BAD}" in trained["warnings"]
    assert not any(w.startswith("--corpus") for w in trained["warnings"])


def test_classification_train_eval_and_predict_say_so(tmp_path: Path) -> None:
    rows = [f"the model {'bias ' * (i % 3)}token {i}\t{('neg', 'pos')[i % 2]}" for i in range(16)]
    good = tmp_path / "train.tsv"
    good.write_text("sentence\tlabel\n" + "\n".join(rows) + "\n", encoding="utf-8")
    bad = with_bad_line(good, tmp_path / "bad.tsv")
    out = tmp_path / "r"
    trained = report("train", "--task", "classification", "--corpus", bad, "--valid", f"v={bad}",
                     "-t", "words:min-freq=1", "--preset", "tiny", "--out", out, "--steps", "1", "--batch-size", "4",
                     "--device", "cpu")
    assert f"{bad}: {BAD}" in trained["warnings"] and f"--valid {bad}: {BAD}" in trained["warnings"]
    evaluated = report("eval", out, "--corpus", bad, "--task", "classification", "--device", "cpu")
    assert evaluated["warnings"] == [f"{bad}: {BAD}"]
    predicted = report("predict", out, "--corpus", good, "--device", "cpu")
    assert predicted["warnings"] == []
