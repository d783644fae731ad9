"""Issue 42's hostile inputs and faults, one test per class: a one-line `nb: error:`, exit 1, no
traceback, nothing written, inputs untouched (tests/fuzz's `hostile` family keeps the cases)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests import forked_nb
from tests.cli.helpers import assert_one_line_error, invoke


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("option,value", [("--max-len-a", "nan"), ("--max-len-a", "inf"), ("--max-len-a", "1e308")])
def test_translate_refuses_a_length_limit_that_is_not_a_finite_count(
        tmp_path: Path, translation_run: Path, option: str, value: str) -> None:
    (tmp_path / "in.de").write_text("a b c\n", encoding="utf-8")
    result = invoke("translate", translation_run, "-i", tmp_path / "in.de", "-o", tmp_path / "out.en", option, value)
    assert result.exit_code == 1, result.output
    assert_one_line_error(result.stderr, option)
    assert result.stdout == "" and not (tmp_path / "out.en").exists()


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_export_refuses_a_lenpen_that_is_not_finite(tmp_path: Path, translation_run: Path, value: str) -> None:
    before = _snapshot(translation_run)
    result = invoke("export", translation_run, "-o", tmp_path / "hf", "--lenpen", value)
    assert result.exit_code == 1, result.output
    assert_one_line_error(result.stderr, "--lenpen")
    assert not (tmp_path / "hf").exists() and _snapshot(translation_run) == before


@pytest.mark.parametrize("header,compress", [("3 1000000000000", False), ("4000000 4000000", False),
                                             ("3 1000000000000", True), ("4000000 4000000", True)])
def test_a_word_vector_header_is_checked_before_anything_is_allocated(tmp_path: Path, header: str,
                                                                       compress: bool) -> None:
    """A header's D larger than a row nb reads, or (uncompressed) than the file, is one line before
    np.empty; what is preallocated from a compressed file's header is bounded by its size (4,000,000
    rows of 4,000,000 dimensions in a gzip of 40 bytes: one row, then the truncation error)."""
    import gzip

    data = f"{header}\nthe 0.1 0.2\nof 0.3 0.4\n".encode()
    vectors = tmp_path / ("v.vec.gz" if compress else "v.vec")
    vectors.write_bytes(gzip.compress(data) if compress else data)
    (tmp_path / "q.txt").write_text(": s\nthe of the of\n", encoding="utf-8")
    result = invoke("analogy", vectors, "--questions", tmp_path / "q.txt")
    assert result.exit_code == 1, result.output
    assert_one_line_error(result.stderr, f"{vectors}")


def test_a_word_vector_header_for_pretrained_embeddings(tmp_path: Path) -> None:
    (tmp_path / "corpus.txt").write_text("the cat sat on the mat\n" * 20, encoding="utf-8")
    (tmp_path / "v.vec").write_text("3 1000000000000\nthe 0.1 0.2\n", encoding="utf-8")
    result = invoke("train", "--corpus", tmp_path / "corpus.txt", "-t", "words:min-freq=1", "--out", tmp_path / "run",
                    "--steps", "1", "--embedding-init", f"pretrained:{tmp_path / 'v.vec'}")
    assert result.exit_code == 1, result.output
    assert_one_line_error(result.stderr, "v.vec:1", "1,000,000,000,000 dimensions")
    assert not (tmp_path / "run").exists()


def _words_classifier(tmp_path: Path, corpus: Path, *extra: str | Path, min_freq: int = 1):
    return invoke("train", "--task", "classification", "-t", f"words:min-freq={min_freq}", "--corpus", corpus,
                  "--steps", "1", "--batch-size", "2", "--max-len", "8", "--device", "cpu", "--d-model", "4",
                  "--n-head", "2", "--out", tmp_path / "run", *extra)


def _jsonl(path: Path, rows: list[dict]) -> Path:
    import json

    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("where", ["--label-names", "dataset_info.json"])
def test_deep_json_of_label_names_is_one_line(tmp_path: Path, where: str) -> None:
    """--label-names FILE and a dataset_info.json beside the data go through nb's bounded JSON reader."""
    (tmp_path / "data").mkdir()
    corpus = _jsonl(tmp_path / "data" / "train.jsonl",
                    [{"text": "the cat", "label": "neg"}, {"text": "the dog", "label": "pos"}] * 2)
    names = tmp_path / "names.json" if where == "--label-names" else tmp_path / "data" / "dataset_info.json"
    names.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    result = _words_classifier(tmp_path, corpus, *(("--label-names", names) if where == "--label-names" else ()))
    assert result.exit_code == 1, result.output
    assert_one_line_error(result.stderr, f"{names}:", "nested more than 64 levels")
    assert not (tmp_path / "run").exists()


def test_labels_that_are_all_null_or_fractions_name_the_file(tmp_path: Path) -> None:
    corpus = _jsonl(tmp_path / "train.jsonl", [{"text": "the cat", "label": 0.5}, {"text": "the dog", "label": None}])
    result = _words_classifier(tmp_path, corpus)
    assert result.exit_code == 1, result.output
    assert_one_line_error(result.stderr, f"{corpus}: no labels")
    assert not (tmp_path / "run").exists()


def test_a_word_vocabulary_the_data_cannot_make_names_the_file(tmp_path: Path) -> None:
    corpus = _jsonl(tmp_path / "train.jsonl", [{"text": "the cat", "label": "a"}, {"text": "a dog", "label": "b"}])
    result = _words_classifier(tmp_path, corpus, min_freq=9)
    assert result.exit_code == 1, result.output
    assert_one_line_error(result.stderr, f"{corpus}: -t words:min-freq=9")
    (tmp_path / "pairs.tsv").write_text("a b\tc d\n", encoding="utf-8")
    result = invoke("train", "--task", "translation", "-t", "words:min-freq=5", "--corpus", tmp_path / "pairs.tsv",
                    "--src-lang", "de", "--tgt-lang", "en", "--out", tmp_path / "mt")
    assert result.exit_code == 1, result.output
    assert_one_line_error(result.stderr, f"{tmp_path / 'pairs.tsv'}: -t words:min-freq=5")
    assert not (tmp_path / "run").exists() and not (tmp_path / "mt").exists()


def _encoder_classifier(tmp_path: Path, init: str | Path, *extra: str | Path):
    from tests.tasks.builders import write_corpus
    from tests.tasks.test_finetune import pairs

    corpus = write_corpus(tmp_path / "train.jsonl", pairs(4), "jsonl")
    return invoke("train", "--task", "classification", "--init", init, "--corpus", corpus, "--text-field", "sentence1",
                  "--text-pair-field", "sentence2", "--steps", "1", "--batch-size", "4", "--device", "cpu", *extra)


def test_init_with_a_truncated_safetensors_is_one_line_naming_the_file(tmp_path: Path) -> None:
    from tests.tasks.builders import encoder_folder

    enc = encoder_folder(tmp_path / "enc", "bert")
    weights = enc / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:2000])
    before = _snapshot(enc)
    result = _encoder_classifier(tmp_path, enc, "--out", tmp_path / "run")
    assert result.exit_code == 1, result.output
    assert_one_line_error(result.stderr, "model.safetensors")
    assert not (tmp_path / "run").exists() and _snapshot(enc) == before


def test_init_given_as_a_local_path_prints_no_hub_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.tasks.builders import encoder_folder

    encoder_folder(tmp_path / "enc", "bert")
    monkeypatch.chdir(tmp_path)
    result = _encoder_classifier(tmp_path, "./enc", "--out", "run")
    assert result.exit_code == 0, result.output
    assert "Hub repo" not in result.stderr, result.stderr
    bare = _encoder_classifier(tmp_path, "enc", "--out", "run2")   # `enc` could be a repo id: one note, once
    assert bare.exit_code == 0 and bare.stderr.count("not the Hub repo enc") == 1, bare.stderr


@pytest.mark.slow
@pytest.mark.parametrize("fails", [False, True])
@pytest.mark.parametrize("task", ["translation", "lm", "classification"])
def test_a_training_run_destroys_its_process_group_when_it_ends(tmp_path: Path, parallel_corpus: Path,
                                                                monkeypatch: pytest.MonkeyPatch, task: str,
                                                                fails: bool) -> None:
    """Every DDP path (translation, the LM, fine-tuning) ends by destroying its process group (success,
    error), not at interpreter exit, where gloo can abort the rank with SIGABRT. The group here is a
    stand-in recording the calls."""
    import torch.distributed as dist

    from nbcli.errors import NbError

    alive = [True]
    destroyed: list[bool] = []
    monkeypatch.setattr(dist, "is_initialized", lambda: alive[0])
    monkeypatch.setattr(dist, "destroy_process_group", lambda *a, **k: (destroyed.append(True), alive.clear(),
                                                                        alive.append(False)))
    corpus = [str(parallel_corpus / ("absent" if fails else "train"))]
    if task == "translation":
        from nbcli.tasks.translation import build_translation_config, train_translation

        cfg = build_translation_config("tiny", dict(src_lang="de", tgt_lang="en", d_ff=32, eval_sentences=4),
                                       d_model=16, steps=1, eval_every=1, eval_batches=1, batch_size=8)
        run = lambda: train_translation(cfg, corpus, parallel_corpus / "joint.model",  # noqa: E731
                                        parallel_corpus / "joint.model", tmp_path / "run",
                                        valid=None if fails else [str(parallel_corpus / "valid")])
    elif task == "lm":
        from nbcli.train.config import build_config
        from nbcli.tasks.language_model import train

        cfg = build_config("tiny", steps=1, eval_every=1, eval_batches=1, batch_size=2, seq_len=16, d_model=16,
                           n_head=2, device="cpu")
        run = lambda: train(cfg, [c + ".en" for c in corpus], parallel_corpus / "joint.model",  # noqa: E731
                            tmp_path / "run")
    else:
        from nbcli.tasks.data import DataSpec
        from nbcli.tasks.finetune import FinetuneConfig, finetune

        (tmp_path / "train.tsv").write_text("sentence\tlabel\n" + "the cat sat\tpos\na dog ran\tneg\n" * 4)
        cfg = FinetuneConfig(data=DataSpec(max_len=16), tokenizer="words:min-freq=1", steps=1, batch_size=2, d_model=16,
                             n_head=2)
        run = lambda: finetune(cfg, [str(tmp_path / ("absent.tsv" if fails else "train.tsv"))], {},  # noqa: E731
                               tmp_path / "run")
    if fails:
        with pytest.raises(NbError):
            run()
    else:
        run()
    assert destroyed == [True]


def test_ctrl_c_after_the_first_saved_state_says_what_was_kept(tmp_path: Path) -> None:
    """A real `nb train` sent SIGINT at a later commit (NB_FAULT_INJECT, nbcli.atomic.commit): exit 130,
    one line naming the run directory and that --resume continues; the directory and its state stay."""
    import os

    (tmp_path / "lm.txt").write_text("the cat sat on the mat\n" * 200, encoding="utf-8")
    out = tmp_path / "run"
    env = {**os.environ, "NB_FAULT_INJECT": "before-commit:8:INT"}
    proc = forked_nb.run(["nb", "train", "--corpus", tmp_path / "lm.txt", "-t", "words:min-freq=1", "--out", out,
                           "--steps", "6", "--save-every", "2", "--seq-len", "8", "--batch-size", "4", "--d-model", "8",
                           "--n-head", "2", "--eval-every", "2", "--eval-batches", "1"],
                          capture_output=True, env=env, timeout=300)
    assert proc.returncode == 130, proc.stderr.decode()
    lines = proc.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"nb: interrupted; kept what was completed before it in {out}: ")
    assert "--resume" in lines[0] and (out / "train-state.json").exists()
