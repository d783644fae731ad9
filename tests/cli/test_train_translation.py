"""`nb train --task translation` through typer's CliRunner and a real `nb` subprocess: the run, its
summary, and bad input (one line naming FILE:LINE, exit 1, no run directory left behind)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors import safe_open

from tests.cli.helpers import assert_one_line_error, invoke, run_nb

FAST = ["--steps", "2", "--batch-size", "8", "--eval-every", "2", "--eval-batches", "1", "--eval-sentences", "4",
        "--beam", "2"]


def test_train_translation_subprocess_json(tmp_path: Path, parallel_corpus: Path) -> None:
    out = tmp_path / "run"
    proc = run_nb("train", "--task", "translation", "--corpus", parallel_corpus / "train", "--valid",
                  parallel_corpus / "valid", "--src-lang", "de", "--tgt-lang", "en", "-t", parallel_corpus / "joint.model",
                  "--out", out, "--bias-init", "unigram", "--json", *FAST, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()
    summary = json.loads(proc.stdout)
    assert summary["steps"] == 2 and Path(summary["checkpoint"]).name == "step-2.safetensors"
    assert {"best_val_bleu", "best_step", "alc_val_bleu", "final_val_chrf", "bleu_signature"} <= set(summary)
    assert Path(summary["best_checkpoint"]) == out / "best.safetensors"
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert "val_bleu" in records[0] and "val_chrf" in records[-1]
    config = json.loads((out / "config.json").read_text())
    assert config["task"] == "translation" and config["task_options"]["src_lang"] == "de"


def test_train_translation_table(tmp_path: Path, parallel_corpus: Path) -> None:
    result = invoke("train", "--task", "translation", "--corpus", parallel_corpus / "train", "--src-lang", "de",
                    "--tgt-lang", "en", "--src-tokenizer", parallel_corpus / "joint.model", "--tgt-tokenizer",
                    parallel_corpus / "joint.model", "--out", tmp_path / "r", "--positions", "learned",
                    "--share-embeddings", "decoder", *FAST)
    assert result.exit_code == 0, result.output
    assert "best val BLEU" in result.stdout and "ALC (val BLEU)" in result.stdout
    # summary.json's `pairs` counts the training and the validation pairs read: the table says so
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["pairs"] == len((parallel_corpus / "train.de").read_text().splitlines())   # validation held out of it
    assert "training / validation pairs used" in result.stdout and "too long skipped" in result.stdout


def write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")


BAD_PAIRS = [
    ({"m.de": "a b\nc d\ne f\n", "m.en": "b a\nd c\n"}, "m", "m.de:3"),                       # misaligned
    ({"m.de": "a b\nc d\n", "m.en": "b a\n\n"}, "m", "m.de:2: empty target"),                 # an empty side
    ({"m.jsonl": '{"translation": {"de": "a b", "fr": "b a"}}\n'}, "m.jsonl", "m.jsonl:1"),   # missing language key
    ({"m.tsv": "a b\n"}, "m.tsv", "m.tsv:1"),                                                  # no TAB
    ({"m.de": "a b\n", "x.en": "b a\n"}, "m", "m.de has no aligned"),                          # one side only
]


@pytest.mark.parametrize("files,corpus,fragment", BAD_PAIRS)
def test_bad_pairs_are_one_line_errors_and_leave_no_run(tmp_path: Path, parallel_corpus: Path, files: dict,
                                                       corpus: str, fragment: str) -> None:
    """Each as a real nb process for the first case (stderr as a terminal user reads it), in-process
    for the others (the same code from the command on)."""
    write(tmp_path, files)
    out = tmp_path / "run"
    args = ["train", "--task", "translation", "--corpus", tmp_path / corpus, "--src-lang", "de", "--tgt-lang",
            "en", "-t", parallel_corpus / "joint.model", "--out", out, *FAST]
    if files is BAD_PAIRS[0][0]:
        proc = run_nb(*args)
        code, stderr = proc.returncode, proc.stderr.decode()
    else:
        result = invoke(*args)
        code, stderr = result.exit_code, result.stderr
    assert code == 1
    assert_one_line_error(stderr, fragment)
    assert not out.exists()


@pytest.mark.parametrize("args,fragment", [
    (["--task", "translation", "--src-lang", "de"], "--tgt-lang"),
    (["--task", "translation", "--src-lang", "de", "--tgt-lang", "en", "--objective", "mlm"], "--objective"),
    (["--task", "translation", "--src-lang", "de", "--tgt-lang", "en", "--preset", "gpt2-124m"], "--preset"),
    (["--beam", "3"], "--beam applies to --task translation"),
    (["--task", "translation", "--src-lang", "de", "--tgt-lang", "en", "--share-embeddings", "all",
      "--src-tokenizer", "{tok}", "--tgt-tokenizer", "{other}"], "joint tokenizer"),
])
def test_option_refusals(tmp_path: Path, parallel_corpus: Path, sp_model: Path, args: list[str],
                         fragment: str) -> None:
    tok = str(parallel_corpus / "joint.model")
    args = [a.format(tok=tok, other=str(sp_model)) for a in args]
    joint = [] if "--src-tokenizer" in args else ["-t", tok]
    result = invoke("train", "--corpus", parallel_corpus / "train", *joint, "--out", tmp_path / "r", *args)
    assert result.exit_code == (2 if fragment == "--preset" else 1), result.output  # 2: a choice refused in parsing
    assert_one_line_error(result.stderr, fragment)
    assert not (tmp_path / "r").exists()


def test_two_tokenizers_xavier_draws_each_side_apart(tmp_path: Path, parallel_corpus: Path,
                                                     side_tokenizers: dict[str, Path]) -> None:
    """Issue 40's repro: `--src-tokenizer A --tgt-tokenizer B --embedding-init xavier` gave the two
    embeddings one draw (step 0: encoder[:V_tgt] / decoder a constant, correlation 1). Now each side
    has its own stream, and the same --seed gives the same step-0 checkpoint bit for bit."""
    import torch

    from nbcli.checkpoint.reader import open_checkpoint

    def train(name: str) -> dict[str, torch.Tensor]:
        result = invoke("train", "--task", "translation", "--corpus", parallel_corpus / "train", "--valid",
                        parallel_corpus / "valid", "--src-lang", "de", "--tgt-lang", "en", "--src-tokenizer",
                        side_tokenizers["de"], "--tgt-tokenizer", side_tokenizers["en"], "--preset", "tiny",
                        "--embedding-init", "xavier", "--steps", "1", "--eval-batches", "1", "--eval-sentences",
                        "4", "--seed", "0", "--out", tmp_path / name)
        assert result.exit_code == 0, result.output
        with open_checkpoint(tmp_path / name / "step-0.safetensors") as ckpt:
            return {n: ckpt.get(n) for n in ckpt.names()}

    a = train("a")
    enc, dec = a["encoder.embed_tokens.weight"], a["decoder.embed_tokens.weight"]
    assert enc.shape[0] == 400 and dec.shape[0] == 360
    x, y = enc[:360].flatten().double(), dec.flatten().double()
    assert abs(float(torch.corrcoef(torch.stack([x, y]))[0, 1])) < 0.1
    ratio = x / y
    assert float(ratio.std() / ratio.abs().mean()) > 0.1                  # not elementwise proportional
    b = train("b")
    assert a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)


def test_the_papers_hyper_parameters_are_options(tmp_path: Path, parallel_corpus: Path) -> None:
    """Paper 000 app. A states Adam's beta2 0.997, FFN 256 and the layers; paper 002 app. A eps 1e-9:
    each an option of nb train translation (and lm), recorded in config.json, shaping the model."""
    result = invoke("train", "translation", "--corpus", parallel_corpus / "train", "--src-lang", "de", "--tgt-lang",
                    "en", "-t", parallel_corpus / "joint.model", "--out", tmp_path / "r", "--steps", "1", "--d-model",
                    "32", "--d-ff", "48", "--n-layer", "1", "--adam-beta2", "0.997", "--adam-eps", "1e-9",
                    "--weight-decay", "0", "--grad-clip", "0.5", "--eval-sentences", "4", "--json")
    assert result.exit_code == 0, result.stderr
    config = json.loads((tmp_path / "r" / "config.json").read_text())
    assert (config["adam_beta2"], config["adam_eps"], config["weight_decay"], config["grad_clip"], config["n_layer"],
            config["task_options"]["d_ff"]) == (0.997, 1e-9, 0.0, 0.5, 1, 48)
    with safe_open(str(tmp_path / "r" / "step-1.safetensors"), "np") as ckpt:
        shapes = {name: ckpt.get_slice(name).get_shape() for name in ckpt.keys()}
    assert not any(".layers.1." in name for name in shapes) and "encoder.layers.0.fc1.weight" in shapes  # one a side
    assert shapes["encoder.layers.0.fc1.weight"] == [48, 32] and shapes["decoder.layers.0.fc2.weight"] == [32, 48]
    for bad, fragment in ((["--weight-decay", "-1"], "--weight-decay"), (["--adam-beta2", "1.5"], "beta2")):
        refused = invoke("train", "translation", "--corpus", parallel_corpus / "train", "--src-lang", "de", "--tgt-lang",
                         "en", "-t", parallel_corpus / "joint.model", "--out", tmp_path / "bad", *bad)
        assert refused.exit_code == 1
        assert_one_line_error(refused.stderr, fragment)


def test_unicode_errors_reaches_both_embeddings(tmp_path: Path, parallel_corpus: Path) -> None:
    """--embedding-init pretrained:VECTORS on a translation run, vectors with a word that is not UTF-8:
    refused by default naming --unicode-errors, read with --unicode-errors ignore (the coverage of the
    source and target embeddings says how)."""
    words = sorted({w.lower() for w in (parallel_corpus / "train.en").read_text().split() if w.isascii()})[:20]
    rows = [w.encode() + b" " + b" ".join(b"%.3f" % (0.01 * (i - j)) for j in range(32)) for i, w in enumerate(words)]
    vectors = tmp_path / "v.txt"
    vectors.write_bytes(b"\n".join([*rows, b"\xff\xfe " + b" ".join([b"0.5"] * 32)]) + b"\n")
    args = ["train", "translation", "--corpus", parallel_corpus / "train", "--src-lang", "de", "--tgt-lang", "en",
            "-t", parallel_corpus / "joint.model", "--d-model", "32", "--n-head", "2", "--embedding-init",
            f"pretrained:{vectors}", "--json", *FAST]
    refused = invoke(*args, "--out", tmp_path / "strict")
    assert refused.exit_code == 1, refused.output
    assert_one_line_error(refused.stderr, f"{vectors}:{len(words) + 1}", "--unicode-errors")
    read = invoke(*args, "--out", tmp_path / "ignore", "--unicode-errors", "ignore")
    assert read.exit_code == 0, read.output
    coverage = json.loads(read.stdout)["embedding_coverage"]
    assert coverage and all(c["vectors"]["escaped_words"] == 1 and c["vectors"]["unicode_errors"] == "ignore"
                            for c in coverage.values()), coverage
