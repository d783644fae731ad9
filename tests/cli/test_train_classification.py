"""nb train --task classification|tagging through CliRunner and a real `nb` subprocess: the options reach
the run, --json, refusals of other tasks' options, and bad input as one FILE:LINE line, exit 1, no run
directory left behind."""

from __future__ import annotations

import json
import random

import pytest
import torch

from tests.cli.helpers import assert_one_line_error, invoke, run_nb
from tests.tasks.builders import WORDS, encoder_folder, write_corpus
from tests.tasks.test_finetune import LABELS, pairs


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("cls-cli")
    encoder_folder(root / "bert", "bert")
    write_corpus(root / "train.jsonl", pairs(16), "jsonl")
    write_corpus(root / "dev.tsv", pairs(6, 1), "tsv")
    return root


def _args(root, out, *extra):
    return ["train", "--task", "classification", "--init", root / "bert", "--corpus", root / "train.jsonl",
            "--text-field", "sentence1", "--text-pair-field", "sentence2", "--batch-size", "8", "--lr", "1e-3",
            "--device", "cpu", "--out", out, *extra]


def test_classification_run_json_and_log(root, tmp_path) -> None:
    out = tmp_path / "run"
    result = invoke(*_args(root, out, "--valid", f"m={root / 'dev.tsv'}", "--valid", f"mm={root / 'dev.tsv'}",
                           "--epochs", "2", "--warmup-ratio", "0.25", "--json"))
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["steps"] == 4 and summary["steps_per_epoch"] == 2      # 16 records, batch 8, 2 epochs
    assert set(summary["final"]) == {"m", "mm"} and summary["labels"] == sorted(LABELS)
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    evals = [r for r in log if "val_accuracy" in r]
    assert [r["step"] for r in evals] == [0, 2, 4]                          # step 0, once per epoch, the end
    assert all({"val_m_f1", "val_mm_accuracy", "val_loss"} <= set(r) for r in evals)
    best = max(evals, key=lambda r: (r["val_accuracy"], -r["step"]))
    assert (summary["best_val_accuracy"], summary["best_step"], summary["best_epoch"]) == (
        best["val_accuracy"], best["step"], best["step"] / 2)
    lrs = [r["lr"] for r in log if "lr" in r]
    assert lrs[0] == pytest.approx(1e-3) and lrs[-1] == pytest.approx(1e-3 / 3)   # warm-up 1 update, then decay
    config = json.loads((out / "config.json").read_text())
    assert config["data"]["text_field"] == "sentence1" and config["warmup_ratio"] == 0.25


def test_tagging_run_through_real_nb(root, tmp_path) -> None:
    rng = random.Random(5)
    lines = []
    for _ in range(8):
        lines += [f"{rng.choice(WORDS)} {rng.choice(['O', 'B-PER', 'I-PER'])}" for _ in range(rng.randint(2, 5))] + [""]
    (tmp_path / "t.conll").write_text("\n".join(lines) + "\n")
    result = run_nb("train", "--task", "tagging", "--init", root / "bert", "--corpus", tmp_path / "t.conll",
                    "--valid", f"dev={tmp_path / 't.conll'}", "--steps", "2", "--batch-size", "4", "--device", "cpu",
                    "--out", tmp_path / "tag", "--json", timeout=300)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["task"] == "tagging" and 0 <= summary["final"]["dev"]["f1"] <= 1
    assert (tmp_path / "tag" / "step-2.safetensors").is_file() and not (tmp_path / "tag" / "step-0.safetensors").exists()


@pytest.mark.parametrize("flag", [["--bias-init", "unigram"], ["--ag-fraction", "0.5"], ["--src-lang", "de"],
                                  ["--objective", "mlm"], ["--bias-init", "zero"],
                                  ["--ag-decoder-fraction", "0.5"]])   # --warmup is every task's (test_shared_options)
def test_other_tasks_options_are_refused(root, tmp_path, flag) -> None:
    """Typed, an option of another task is refused even at its default value (it would be ignored)."""
    result = invoke(*_args(root, tmp_path / "r", *flag))
    assert result.exit_code != 0
    assert_one_line_error(result.stderr, f"{flag[0]} applies to --task ")  # as typed
    assert not (tmp_path / "r").exists()


def test_classification_options_refused_for_lm(root, tmp_path) -> None:
    result = invoke("train", "--corpus", root / "train.jsonl", "-t", root / "bert", "--out", tmp_path / "r",
                    "--pooling", "mean")
    assert result.exit_code != 0
    assert_one_line_error(result.stderr, "--pooling applies to --task classification, not")


BAD = ["missing_column", "no_label_field", "unseen_label", "empty", "conll_no_tag"]


def _bad_files(root, tmp_path, case: str) -> tuple[list[str], str]:
    """(the task's arguments, the FILE:LINE the error must name) of each bad input of issue 31."""
    train = write_corpus(tmp_path / "train.jsonl", pairs(8), "jsonl")
    valid = write_corpus(tmp_path / "valid.tsv", pairs(4, 1), "tsv")
    fields = ["--task", "classification", "--text-field", "sentence1", "--text-pair-field", "sentence2"]
    if case == "missing_column":
        valid.write_text("sentence1\tlabel\nthe\tneutral\n")
        where = "valid.tsv:"
    elif case == "no_label_field":
        train.write_text(train.read_text() + json.dumps({"sentence1": "a", "sentence2": "b"}) + "\n")
        where = "train.jsonl:9"
    elif case == "unseen_label":
        valid.write_text(valid.read_text() + "the\tof\tmaybe\n")
        where = "valid.tsv:6"
    elif case == "empty":
        valid.write_text("")
        where = "valid.tsv"
    else:
        train = valid = tmp_path / "t.conll"
        train.write_text("the O\nof B-PER\n\nand\nto O\n")
        fields, where = ["--task", "tagging"], "t.conll:4"
    return [*fields, "--init", str(root / "bert"), "--corpus", str(train), "--valid", f"v={valid}", "--steps", "2",
            "--batch-size", "4", "--device", "cpu"], where


@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_one_line_exit_1_no_run_dir(root, tmp_path, case: str) -> None:
    args, where = _bad_files(root, tmp_path, case)
    result = invoke("train", *args, "--out", tmp_path / "out")
    assert result.exit_code == 1, (result.exit_code, result.stderr)
    assert_one_line_error(result.stderr, where)
    assert not (tmp_path / "out").exists()


def test_bad_input_through_real_nb(root, tmp_path) -> None:
    args, where = _bad_files(root, tmp_path, "unseen_label")
    result = run_nb("train", *args, "--out", tmp_path / "out", timeout=300)
    assert result.returncode == 1
    assert_one_line_error(result.stderr.decode(), where, "maybe")
    assert not (tmp_path / "out").exists()


def test_stop_at_then_resume_equals_uninterrupted(root, tmp_path) -> None:
    from nbcli.train.state import load_model_tensors

    common = ["--valid", f"dev={root / 'dev.tsv'}", "--steps", "4", "--eval-every", "2", "--batch-size", "4"]
    whole = invoke(*_args(root, tmp_path / "whole", *common))
    assert whole.exit_code == 0, whole.stderr
    cut = invoke(*_args(root, tmp_path / "cut", *common, "--stop-at", "2"))
    assert cut.exit_code == 0 and not (tmp_path / "cut" / "step-4.safetensors").exists()
    changed = invoke(*_args(root, tmp_path / "cut", *common[:-2], "--batch-size", "8", "--resume"))
    assert changed.exit_code != 0 and "--resume: options differ" in changed.stderr
    resumed = invoke(*_args(root, tmp_path / "cut", *common, "--resume", "--json"))
    assert resumed.exit_code == 0, resumed.stderr
    assert json.loads(resumed.stdout)["resumed_from"] == 2
    a, _ = load_model_tensors(tmp_path / "whole" / "step-4.safetensors")
    b, _ = load_model_tensors(tmp_path / "cut" / "step-4.safetensors")
    assert a.keys() == b.keys() and all(bool((a[k] == b[k]).all()) for k in a)


def test_nb_mlm_init_and_from_scratch_with_paper_002_switches(root, tmp_path) -> None:
    """--init an nb MLM run (its encoder's weights carried over; --freeze-embeddings keeps them) and from
    scratch with --positions sinusoidal (the fixed table, frozen)."""
    from nbcli.models.lm import positions_table
    from nbcli.train.state import load_model_tensors
    from tests.conftest import english_like_lines

    tok = root / "bert" / "tokenizer.json"
    (tmp_path / "lines.txt").write_text("\n".join(english_like_lines(200, unicode=False)) + "\n")
    mlm = invoke("train", "--corpus", tmp_path / "lines.txt", "-t", tok, "--objective", "mlm", "--steps", "2",
                 "--seq-len", "32", "--batch-size", "4", "--device", "cpu", "--out", tmp_path / "mlm")
    assert mlm.exit_code == 0, mlm.stderr
    base = ["train", "--task", "classification", "-t", tok, "--corpus", root / "train.jsonl", "--text-field",
            "sentence1", "--text-pair-field", "sentence2", "--steps", "2", "--batch-size", "8", "--lr", "1e-2",
            "--device", "cpu", "--max-len", "32"]
    frozen = invoke(*base, "--init", tmp_path / "mlm", "--freeze-embeddings", "--out", tmp_path / "ft")
    assert frozen.exit_code == 0, frozen.stderr
    pre, _ = load_model_tensors(tmp_path / "mlm" / "step-2.safetensors")
    post, _ = load_model_tensors(tmp_path / "ft" / "step-2.safetensors")
    assert torch_equal(post["encoder.tok_emb.weight"], pre["tok_emb.weight"])          # frozen, carried over
    assert not torch_equal(post["encoder.pos_emb.weight"], pre["pos_emb.weight"])      # the rest trained
    scratch = invoke(*base, "--positions", "sinusoidal", "--embedding-init", "xavier", "--out", tmp_path / "s")
    assert scratch.exit_code == 0, scratch.stderr
    tensors, _ = load_model_tensors(tmp_path / "s" / "step-2.safetensors")
    table = tensors["encoder.pos_emb.weight"]
    assert torch_equal(table, positions_table(*table.shape))
    refused = invoke(*base, "--init", tmp_path / "mlm", "--positions", "none", "--out", tmp_path / "r")
    assert refused.exit_code != 0 and "--positions" in refused.stderr and not (tmp_path / "r").exists()
    big = root / "roberta"
    if not big.exists():
        encoder_folder(big, "roberta")     # a byte-level BPE of 300 tokens: more than the MLM's rows
    other = invoke(*[a if a != tok else big / "tokenizer.json" for a in base], "--init", tmp_path / "mlm",
                   "--out", tmp_path / "r")
    assert other.exit_code == 1 and not (tmp_path / "r").exists()
    assert_one_line_error(other.stderr, "do not fit the encoder's")


def torch_equal(a, b) -> bool:
    return a.shape == b.shape and bool((a == b).all())


def _word_args(tmp_path, out, *extra, vectors: bool = True):
    from tests.tasks.test_finetune_words import TRAIN, write_glove

    train = write_corpus(tmp_path / "train.csv", TRAIN, "csv")
    write_glove(tmp_path / "v.txt", {"the": [0.5, -1.0, 2.0, 0.25], "cat": [1.0, 2.0, 3.0, 4.0],
                                     "dog": [-0.5, 0.0, 0.5, 1.5], "nope": [9.0, 9.0, 9.0, 9.0]})
    return ["train", "--task", "classification", "-t", "words:min-freq=2,lower", "--corpus", train, "--text-field",
            "sentence1", "--text-pair-field", "sentence2",
            *(["--embedding-init", f"pretrained:{tmp_path / 'v.txt'}"] if vectors else []), "--steps", "2", "--batch-size", "2", "--max-len", "16", "--device", "cpu", "--out", out, *extra]


def test_word_vocabulary_and_vectors_through_real_nb(tmp_path) -> None:
    """-t words + pretrained:VECTORS with --missing/--d-model/--n-head: the coverage in --json and summary.json,
    the frozen rows equal to the vectors, then nb predict on the run without -t."""
    from nbcli.train.state import load_model_tensors

    out = tmp_path / "run"
    result = run_nb(*_word_args(tmp_path, out, "--missing", "mean", "--d-model", "4", "--n-head", "2",
                                "--freeze-embeddings", "--json"), timeout=300)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["embedding_coverage"] == json.loads((out / "summary.json").read_text())["embedding_coverage"]
    vocab = json.loads((out / "tokenizer.json").read_text())["model"]["vocab"]
    coverage = summary["embedding_coverage"]["input"]
    assert (coverage["words"], coverage["matched"], coverage["missing"]) == (len(vocab) - 4, 3, "mean")
    assert coverage["vectors"]["dim"] == 4 and coverage["initialised"] == len(vocab) - 3
    emb, _ = load_model_tensors(out / "step-2.safetensors")
    rows = emb["encoder.tok_emb.weight"]
    assert rows.shape[1] == 4 and bool((rows[vocab["cat"]] == torch.tensor([1.0, 2.0, 3.0, 4.0])).all())
    assert bool((rows[vocab["the"]] == torch.tensor([0.5, -1.0, 2.0, 0.25])).all())
    assert json.loads((out / "config.json").read_text())["d_model"] == 4
    predicted = invoke("predict", out, "--corpus", tmp_path / "train.csv", "--json")
    assert predicted.exit_code == 0, predicted.stderr
    shown = invoke(*_word_args(tmp_path, tmp_path / "text", "--d-model", "4", "--n-head", "2"))
    assert shown.exit_code == 0 and "words with a vector" in shown.stdout


@pytest.mark.parametrize("case", ["dimension", "init", "d_model_with_init"])
def test_word_level_bad_input_is_one_line_exit_1_no_run_dir(root, tmp_path, case) -> None:
    out = tmp_path / "out"
    if case == "dimension":   # the tiny preset's d_model 128 against 4-dimensional vectors
        args, where = _word_args(tmp_path, out), "dimension 4 but the model's d_model is 128"
    elif case == "init":
        args, where = _word_args(tmp_path, out, "--init", root / "bert", vectors=False), "no --init"
    else:
        args, where = [*_args(root, out), "--d-model", "4"], "--d-model and --n-head"
    result = invoke(*args)
    assert result.exit_code == 1, (result.exit_code, result.stderr)
    assert_one_line_error(result.stderr, where)
    assert not out.exists()


def test_from_scratch_width_heads_and_paper_002_transforms_reach_the_encoder(root, tmp_path) -> None:
    """--d-model, --n-head, --embedding-standardise and --embedding-shuffle build the encoder from
    scratch (--embedding-standardise/--embedding-shuffle: encoder_options, refused before); with --init
    they are refused."""
    from nbcli.ops import xavier_std
    from nbcli.train.state import load_model_tensors

    tok = root / "bert" / "tokenizer.json"
    base = ["train", "--task", "classification", "-t", tok, "--corpus", root / "train.jsonl", "--text-field",
            "sentence1", "--steps", "1", "--batch-size", "8", "--lr", "1e-9", "--device", "cpu", "--max-len", "32"]
    result = invoke(*base, "--d-model", "24", "--n-head", "3", "--embedding-init", "xavier",
                    "--embedding-standardise", "mean=0.5,std=0.25", "--embedding-shuffle", "--shuffle-mode",
                    "rows-columns", "--out", tmp_path / "s")
    assert result.exit_code == 0, result.stderr
    config = json.loads((tmp_path / "s" / "config.json").read_text())
    assert (config["d_model"], config["n_head"]) == (24, 3)
    assert config["encoder_options"] == {"embedding_standardise": "mean=0.5,std=0.25",
                                         "embedding_shuffle": True, "embedding_shuffle_mode": "rows-columns"}
    tensors, _ = load_model_tensors(tmp_path / "s" / "step-1.safetensors")
    emb = tensors["encoder.tok_emb.weight"]
    assert emb.shape[1] == 24 and abs(float(emb.mean()) - 0.5) < 1e-3 and abs(float(emb.std()) - 0.25) < 1e-3
    assert abs(0.25 - xavier_std(*emb.shape)) > 0.1   # the standardisation, not Xavier's own scale
    refused = invoke(*base, "--init", root / "bert", "--embedding-shuffle", "--out", tmp_path / "r")
    assert refused.exit_code == 1 and not (tmp_path / "r").exists()
    assert_one_line_error(refused.stderr, "from scratch")


def test_labels_1_and_string_1_are_one_class(root, tmp_path) -> None:
    """JSONL labels that write one class as 1 and as "1" train as classes "0" and "1" (was: 'label names
    repeat: 0, 1, 1', an error naming no file; found by the task fuzzer, tests/fuzz/test_tasks_fuzz.py)."""
    rows = [{"sentence1": a, "sentence2": b, "label": [0, 1, "1", "0"][i % 4]} for i, (a, b, _) in enumerate(pairs(8))]
    (tmp_path / "mixed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = invoke("train", "--task", "classification", "--init", root / "bert", "--corpus", tmp_path / "mixed.jsonl",
                    "--text-field", "sentence1", "--text-pair-field", "sentence2", "--steps", "1", "--batch-size", "4",
                    "--device", "cpu", "--out", tmp_path / "run", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["labels"] == ["0", "1"]
    evaluated = invoke("eval", tmp_path / "run", "--task", "classification", "--corpus", tmp_path / "mixed.jsonl",
                       "--json")
    assert evaluated.exit_code == 0, evaluated.stderr
    assert json.loads(evaluated.stdout)["examples"] == 8


def test_errors_point_the_right_way(root, tmp_path) -> None:
    """A missing --init says it is missing (was: "--tokenizer is needed ..."); a folder of plain text read
    for fields names no --format, which nb train does not have."""
    missing = invoke("train", "--task", "classification", "--init", tmp_path / "nonexistent-model", "--corpus",
                     root / "train.jsonl", "--text-field", "sentence1", "--out", tmp_path / "out")
    assert missing.exit_code == 1
    assert_one_line_error(missing.stderr, f"--init {tmp_path / 'nonexistent-model'}: no such file, folder")
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.txt").write_text("the cat\n")
    folder = invoke(*_args(root, tmp_path / "out", "--corpus", tmp_path / "texts"))
    assert folder.exit_code == 1
    assert_one_line_error(folder.stderr, "a.txt: plain text has no fields")
    assert "--format" not in folder.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize("task", ["classification", "tagging"])
@pytest.mark.parametrize("epochs", ["inf", "-inf", "nan", "1e300", "1e13", "1e12"])
def test_epochs_not_finite_or_out_of_range_is_one_line(root, tmp_path, task: str, epochs: str) -> None:
    """--epochs inf was an OverflowError from math.ceil; 1e300 a run of 10^300 updates; 1e12 epochs of
    several updates each more updates than any other option allows: one line, exit 1."""
    if task == "classification":
        data = ["--corpus", root / "train.jsonl", "--text-field", "sentence1", "--text-pair-field", "sentence2"]
    else:
        (tmp_path / "t.conll").write_text("the O\nof B-PER\n\nand O\nto O\n\n" * 3)  # 2 updates an epoch at batch 4
        data = ["--corpus", tmp_path / "t.conll"]
    result = invoke("train", task, "--init", root / "bert", *data, "--batch-size", "4", "--device", "cpu",
                    "--epochs", epochs, "--out", tmp_path / "out")
    assert result.exit_code == 1, (result.exit_code, result.stderr)
    assert_one_line_error(result.stderr, "--epochs")
    assert not (tmp_path / "out").exists()


def test_unicode_errors_reads_the_vectors_of_an_encoder_from_scratch(root, tmp_path) -> None:
    """--embedding-init pretrained:VECTORS for a classifier trained from scratch, with a word that is
    not UTF-8: refused by default naming --unicode-errors; read with --unicode-errors replace."""
    vectors = tmp_path / "v.txt"
    rows = [w.encode() + b" " + b" ".join(b"%.3f" % (0.01 * (i + j)) for j in range(16)) for i, w in enumerate(WORDS)]
    vectors.write_bytes(b"\n".join([*rows, b"caf\xe9 " + b" ".join([b"0.1"] * 16)]) + b"\n")
    args = ["train", "--task", "classification", "--corpus", root / "train.jsonl", "--text-field", "sentence1",
            "--text-pair-field", "sentence2", "-t", "words:min-freq=1", "--embedding-init", f"pretrained:{vectors}",
            "--d-model", "16", "--n-head", "2", "--steps", "1", "--batch-size", "8", "--device", "cpu", "--json"]
    refused = invoke(*args, "--out", tmp_path / "strict")
    assert refused.exit_code == 1, refused.output
    assert_one_line_error(refused.stderr, str(vectors), "--unicode-errors")
    read = invoke(*args, "--out", tmp_path / "replace", "--unicode-errors", "replace")
    assert read.exit_code == 0, read.output
    coverage = json.loads(read.stdout)["embedding_coverage"]["input"]
    assert coverage["vectors"]["escaped_words"] == 1 and coverage["vectors"]["unicode_errors"] == "replace"


def test_a_folder_per_class_trains_as_its_jsonl_conversion(root, tmp_path) -> None:
    """A corpus laid out as load_files reads it (one sub-folder per label, a file per document, BBC
    News' layout) and the same documents as JSONL give identical runs (every checkpoint tensor, the
    log's metrics); nb eval and nb predict read the folder too."""
    from safetensors.torch import load_file

    rng = random.Random(11)
    folder, rows = tmp_path / "bbc", []
    for label in ("business", "sport", "tech"):
        (folder / label).mkdir(parents=True)
        for i in range(6):
            text = " ".join(rng.choices(WORDS, k=rng.randint(3, 9))) + "\n" + " ".join(rng.choices(WORDS, k=3)) + "\n"
            (folder / label / f"{i:03d}.txt").write_text(text)
            rows.append({"text": text, "label": label})
    (folder / "README.TXT").write_text("BBC-like articles, not a document\n")
    (tmp_path / "bbc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    runs = {}
    for name, corpus in (("folder", folder), ("jsonl", tmp_path / "bbc.jsonl")):
        out = tmp_path / name
        result = invoke("train", "--task", "classification", "--init", root / "bert", "--corpus", corpus, "--valid",
                        f"dev={corpus}", "--steps", "4", "--batch-size", "6", "--lr", "1e-3", "--device", "cpu",
                        "--eval-every", "2", "--out", out, "--json")
        assert result.exit_code == 0, result.output
        runs[name] = out
    assert json.loads((runs["folder"] / "summary.json").read_text())["labels"] == ["business", "sport", "tech"]
    a, b = (load_file(runs[name] / "step-4.safetensors") for name in ("folder", "jsonl"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    logs = [[{k: v for k, v in json.loads(line).items() if "val" in k or k in ("step", "loss")}
             for line in (runs[name] / "log.jsonl").read_text().splitlines()] for name in ("folder", "jsonl")]
    assert logs[0] == logs[1] and any("val_accuracy" in r for r in logs[0])
    ev = invoke("eval", runs["folder"], "--corpus", folder, "--json")
    assert ev.exit_code == 0, ev.output
    assert json.loads(ev.stdout)["examples"] == 18
    pred = invoke("predict", runs["folder"], "--corpus", folder, "-o", tmp_path / "preds.jsonl", "--json")
    assert pred.exit_code == 0, pred.output
    assert len((tmp_path / "preds.jsonl").read_text().splitlines()) == 18
