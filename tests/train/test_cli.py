"""`nb train` through typer's CliRunner and a real subprocess; checkpoints read by `nb probe-bias`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.cli.helpers import assert_one_line_error, invoke, run_nb

FAST = ["--seq-len", "32", "--batch-size", "8", "--eval-every", "2", "--eval-batches", "2"]


def test_train_json_then_probe_bias_subprocess(tmp_path: Path, sp_model: Path, train_corpus: Path) -> None:
    out = tmp_path / "run"
    proc = run_nb("train", "--corpus", train_corpus, "-t", sp_model, "--out", out, "--steps", "3",
                  "--bias-init", "unigram", "--json", *FAST)
    assert proc.returncode == 0, proc.stderr.decode()
    summary = json.loads(proc.stdout)
    assert summary["steps"] == 3 and Path(summary["checkpoint"]).name == "step-3.safetensors"
    assert proc.stderr.decode().strip() == ""          # piped: no progress bar
    probe = run_nb("probe-bias", out / "step-3.safetensors", "-c", out / "counts.safetensors", "--json")
    assert probe.returncode == 0, probe.stderr.decode()
    report = json.loads(probe.stdout)
    text = json.dumps(report)
    assert "head.bias" in text and "tok_emb.weight" in text


def test_train_table_output(tmp_path: Path, sp_model: Path, train_corpus: Path) -> None:
    result = invoke("train", "--corpus", train_corpus, "-t", sp_model, "--out", tmp_path / "r", "--steps", "2",
                    "--objective", "mlm", "--ag-fraction", "0.5", *FAST)
    assert result.exit_code == 0, result.output
    assert "final val loss" in result.stdout and "ALC" in result.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA; the error is for machines without")
def test_device_cuda_without_cuda_is_one_line_error(tmp_path: Path, sp_model: Path, train_corpus: Path) -> None:
    proc = run_nb("train", "--corpus", train_corpus, "-t", sp_model, "--out", tmp_path / "r", "--device", "cuda")
    assert proc.returncode == 1
    assert_one_line_error(proc.stderr.decode(), "--device cuda", "CUDA is not available")
    assert not (tmp_path / "r").exists()


def test_next_pattern_in_causal_model_is_refused(tmp_path: Path, sp_model: Path, train_corpus: Path) -> None:
    result = invoke("train", "--corpus", train_corpus, "-t", sp_model, "--out", tmp_path / "r",
                    "--ag-fraction", "0.5", "--ag-patterns", "next,first")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "[Next] is impossible in a causal model")


@pytest.mark.parametrize("args,fragment", [
    (["--rescale-w", "fro"], "needs --bias-init unigram"),
    (["--ag-patterns", "diagonal", "--ag-fraction", "0.5"], "unknown pattern 'diagonal'"),
    (["--embedding-init", "glove"], "--embedding-init must be"),
    (["--batch-size", "6", "--grad-accum", "4"], "not divisible"),
    (["--unigram-reg-lambda", "nan", "--unigram-reg-steps", "5"], "--unigram-reg-lambda must be a finite number"),
    (["--unigram-reg-lambda", "-1", "--unigram-reg-steps", "5"], "--unigram-reg-lambda must be a finite number"),
    (["--unigram-reg-steps", "5"], "--unigram-reg-steps needs --unigram-reg-lambda"),
    (["--unigram-reg-lambda", "0.5"], "--unigram-reg-lambda needs --unigram-reg-steps"),
    (["--unigram-reg-lambda", "0.5", "--unigram-reg-steps", "201"], "past --steps 200"),
])
def test_bad_options(tmp_path: Path, sp_model: Path, train_corpus: Path, args: list[str], fragment: str) -> None:
    result = invoke("train", "--corpus", train_corpus, "-t", sp_model, "--out", tmp_path / "r", *args)
    assert result.exit_code == 1, result.output
    assert_one_line_error(result.stderr, fragment)
    assert not (tmp_path / "r").exists()


def test_missing_corpus_and_tiny_corpus(tmp_path: Path, sp_model: Path) -> None:
    result = invoke("train", "--corpus", tmp_path / "nope.txt", "-t", sp_model, "--out", tmp_path / "r")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "nope.txt")
    small = tmp_path / "small.txt"
    small.write_text("the model\n" * 30)
    result = invoke("train", "--corpus", small, "-t", sp_model, "--out", tmp_path / "s")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "fewer than one block")
    assert not (tmp_path / "s").exists()


def test_patch_checkpoint_reads_and_patches_nb_checkpoints(tmp_path: Path, sp_model: Path,
                                                           train_corpus: Path) -> None:
    """A zero-bias run patched with the run's own counts gets exactly the bias `--bias-init unigram` sets."""
    from nbcli.checkpoint.reader import open_checkpoint
    from nbcli.counts import read_counts
    from nbcli.models.lm import ModelConfig, Transformer
    from nbcli.train.init import output_bias

    out = tmp_path / "run"
    result = invoke("train", "--corpus", train_corpus, "-t", sp_model, "--out", out, "--steps", "1", *FAST)
    assert result.exit_code == 0, result.output
    patched = tmp_path / "patched.safetensors"
    proc = run_nb("patch-checkpoint", out / "step-1.safetensors", "-o", patched,
                  "--set-output-bias", out / "counts.safetensors")
    assert proc.returncode == 0, proc.stderr.decode()
    counts = read_counts(out / "counts.safetensors").counts
    with open_checkpoint(patched) as ckpt:
        expected = output_bias(counts, ckpt.shape("head.bias")[0], 1.0)
        torch.testing.assert_close(ckpt.get("head.bias"), expected)
        cfg = ModelConfig.from_json(ckpt.metadata["nb.config"])
        model = Transformer(cfg)
        model.load_nb_state_dict({name: ckpt.get(name).clone() for name in ckpt.names()})


def test_word_vocabulary_with_glove_vectors_subprocess(tmp_path: Path, train_corpus: Path) -> None:
    """-t words:min-freq=K with --embedding-init pretrained:VECTORS: step 0 holds the vectors' rows of the
    matched words, --json reports the coverage, eval on the run needs no -t; a wrong width is one line."""
    import numpy as np

    from nbcli.checkpoint.reader import open_checkpoint
    from nbcli.tokenizers import load_tokenizer
    from tests.vectors.writers import write

    lines = train_corpus.read_text(encoding="utf-8").split()
    vocab = sorted({w.lower() for w in lines})[:40]
    x = np.random.default_rng(1).normal(size=(len(vocab), 16)).astype(np.float32)
    vectors = write(tmp_path / "glove.16d.txt.gz", "glove", vocab, x, compress="gzip")
    out = tmp_path / "run"
    proc = run_nb("train", "--corpus", train_corpus, "-t", "words:min-freq=2", "--out", out, "--steps", "2",
                  "--embedding-init", f"pretrained:{vectors}", "--d-model", "16", "--n-head", "2", "--missing", "mean",
                  "--json", *FAST)
    assert proc.returncode == 0, proc.stderr.decode()
    cov = json.loads(proc.stdout)["embedding_coverage"]["input"]
    tok = load_tokenizer(out / "tokenizer.json")
    pieces = tok.pieces()
    hits = [(i, vocab.index(p.lower())) for i, p in enumerate(pieces[4:], 4) if p.lower() in vocab]
    assert cov["matched"] == len(hits) > 0 and cov["words"] == len(pieces) - 4 and cov["missing"] == "mean"
    with open_checkpoint(out / "step-0.safetensors") as ckpt:
        emb = ckpt.get("tok_emb.weight")
    for i, j in hits:
        assert torch.allclose(emb[i], torch.from_numpy(x[j]))
    ev = run_nb("eval", out / "step-2.safetensors", "--corpus", train_corpus, "--json")
    assert ev.returncode == 0, ev.stderr.decode()
    bad = run_nb("train", "--corpus", train_corpus, "-t", "words:min-freq=2", "--out", tmp_path / "bad",
                 "--embedding-init", f"pretrained:{vectors}")
    assert bad.returncode == 1
    assert_one_line_error(bad.stderr.decode(), "dimension 16", "d_model is 128")
    assert not (tmp_path / "bad").exists()


def test_tied_word_vectors_warn_naming_the_fix(tmp_path: Path, train_corpus: Path) -> None:
    """GloVe-sized vectors (norms of several units) in a tied output layer start far above log V: the
    warning names --untie-embeddings and --embedding-standardise xavier, and each of them starts below it."""
    import numpy as np

    from tests.vectors.writers import write

    vocab = sorted({w.lower() for w in train_corpus.read_text(encoding="utf-8").split()})
    x = np.random.default_rng(2).normal(scale=1.5, size=(len(vocab), 16)).astype(np.float32)
    vectors = write(tmp_path / "glove.16d.txt", "glove", vocab, x)
    common = ["train", "--corpus", train_corpus, "-t", "words:min-freq=2", "--steps", "1", "--d-model", "16",
              "--n-head", "2", "--embedding-init", f"pretrained:{vectors}", "--json", *FAST]
    tied = invoke(*common, "--out", tmp_path / "tied")
    assert tied.exit_code == 0, tied.stderr
    warnings = json.loads(tied.stdout)["warnings"]
    assert any("exceeds log V" in w and "--untie-embeddings" in w and "--embedding-standardise xavier" in w
               for w in warnings), warnings
    for fix in (["--untie-embeddings"], ["--embedding-standardise", "xavier"]):
        fixed = invoke(*common, "--out", tmp_path / fix[0].strip("-"), *fix)
        assert fixed.exit_code == 0, fixed.stderr
        assert not any("exceeds log V" in w for w in json.loads(fixed.stdout)["warnings"]), fix


def test_word_vocabulary_of_an_empty_corpus_names_the_file(tmp_path: Path) -> None:
    """-t words:min-freq=K with a corpus that has no word K times: the one line names the corpus file (as
    the translation and classification paths do), not only the -t spec."""
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    result = invoke("train", "--corpus", empty, "-t", "words:min-freq=2", "--out", tmp_path / "r", "--steps", "2",
                    *FAST)
    assert result.exit_code == 1, result.stderr
    assert_one_line_error(result.stderr, str(empty), "words:min-freq=2")
    assert not (tmp_path / "r").exists()


def test_unicode_errors_reads_word_vectors_as_gensim_does(tmp_path: Path, train_corpus: Path) -> None:
    """--embedding-init pretrained:VECTORS with words that are not UTF-8 (one of the vocabulary's, in
    Latin-1): refused by default in one line that names the count and --unicode-errors, no run left;
    with --unicode-errors replace the run trains, the other words' rows are the vectors', and
    summary.json's coverage says how many words were read and by which rule. Without word vectors the
    option is refused."""
    import numpy as np

    from nbcli.checkpoint.reader import open_checkpoint
    from nbcli.tokenizers import load_tokenizer
    from tests.vectors.writers import text_lines

    vocab = sorted({w.lower() for w in train_corpus.read_text(encoding="utf-8").split() if w.isascii()})[:30]
    x = np.random.default_rng(3).normal(scale=0.1, size=(len(vocab) + 2, 16)).astype(np.float32)
    lines = text_lines(vocab, x[:len(vocab)])
    lines += [b"caf\xe9 " + b" ".join(repr(float(v)).encode() for v in x[-2]),
              vocab[0].encode() + b"\x97 " + b" ".join(repr(float(v)).encode() for v in x[-1])]
    vectors = tmp_path / "latin.16d.txt"
    vectors.write_bytes(b"\n".join(lines) + b"\n")
    common = ["train", "--corpus", train_corpus, "-t", "words:min-freq=2", "--steps", "1", "--d-model", "16",
              "--n-head", "2", "--embedding-init", f"pretrained:{vectors}", "--json", *FAST]
    refused = invoke(*common, "--out", tmp_path / "strict")
    assert refused.exit_code == 1, refused.output
    assert_one_line_error(refused.stderr, f"{vectors}:{len(vocab) + 1}", "2 word(s)", "--unicode-errors")
    assert not (tmp_path / "strict").exists()
    out = tmp_path / "replace"
    read = invoke(*common, "--out", out, "--unicode-errors", "replace")
    assert read.exit_code == 0, read.output
    coverage = json.loads(read.stdout)["embedding_coverage"]["input"]
    assert coverage["vectors"]["escaped_words"] == 2 and coverage["vectors"]["unicode_errors"] == "replace"
    assert json.loads((out / "config.json").read_text())["embedding_unicode_errors"] == "replace"
    pieces = load_tokenizer(out / "tokenizer.json").pieces()
    with open_checkpoint(out / "step-0.safetensors") as ckpt:
        emb = ckpt.get("tok_emb.weight")
    hits = [(i, vocab.index(p)) for i, p in enumerate(pieces) if p in vocab]
    assert hits and all(torch.equal(emb[i], torch.from_numpy(x[j])) for i, j in hits)
    alone = invoke("train", "--corpus", train_corpus, "-t", "words:min-freq=2", "--out", tmp_path / "none",
                   "--unicode-errors", "ignore", *FAST)
    assert alone.exit_code == 1, alone.output
    assert_one_line_error(alone.stderr, "--unicode-errors", "pretrained:VECTORS")


def test_train_runs_and_records_its_threads(tmp_path: Path, sp_model: Path, train_corpus: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import nbcli.tasks.language_model as language_model

    seen: list[int] = []
    real = language_model.train
    monkeypatch.setattr(language_model, "train", lambda *a, **k: (seen.append(torch.get_num_threads()), real(*a, **k))[1])
    before = torch.get_num_threads()
    out = tmp_path / "run"
    result = invoke("train", "--corpus", train_corpus, "-t", sp_model, "--out", out, "--steps", "2", "--seq-len", "16",
                    "--batch-size", "4", "--stop-at", "1", "--threads", "1", "--json")
    assert result.exit_code == 0, result.output
    assert seen == [1] and torch.get_num_threads() == before
    assert json.loads(result.stdout)["threads"] == 1 == json.loads((out / "summary.json").read_text())["threads"]
    again = invoke("train", "--corpus", train_corpus, "-t", sp_model, "--out", out, "--steps", "2", "--seq-len", "16",
                   "--batch-size", "4", "--resume", "--json")
    assert again.exit_code == 0, again.output                              # not part of the config: resumable
    assert json.loads((out / "summary.json").read_text())["threads"] == before
