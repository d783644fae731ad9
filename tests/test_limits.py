"""nbcli.limits: non-regular files are refused without blocking; what is read whole is capped."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from nbcli.counts import UnigramCounts, write_counts
from nbcli.errors import InputError
from nbcli.limits import input_stat, max_read_bytes, read_capped
from tests.checkpoint.builders import gpt2_tensors, save, save_sharded
from tests.cli.helpers import assert_one_line_error, invoke, run_nb


@pytest.fixture()
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe.safetensors"
    os.mkfifo(path)
    return path


@pytest.fixture()
def loop(tmp_path: Path) -> Path:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    return tmp_path / "a"


def test_input_stat_names_what_the_path_is(tmp_path: Path, fifo: Path, loop: Path) -> None:
    with pytest.raises(InputError, match="is a FIFO"):
        input_stat(fifo, "tokenizer file")
    with pytest.raises(InputError, match="is a character device"):
        input_stat("/dev/zero", "tokenizer file")
    with pytest.raises(InputError, match="symbolic link loop"):
        input_stat(loop, "checkpoint")
    with pytest.raises(InputError, match="counts file not found"):
        input_stat(tmp_path / "nope", "counts file")
    with pytest.raises(InputError, match="is a directory"):
        input_stat(tmp_path, "counts file")
    assert input_stat(fifo, "corpus file", allow_pipe=True)


def test_read_capped_honours_the_environment_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 2000)
    assert read_capped(path, "thing") == b"x" * 2000
    monkeypatch.setenv("NB_MAX_READ_MB", "0.001")
    assert max_read_bytes() == 1000
    with pytest.raises(InputError, match=r"f: thing is 0\.0 MB or more, over the 0\.001 MB .*NB_MAX_READ_MB"):
        read_capped(path, "thing")
    for bad in ("abc", "-1", "0", "nan", "inf"):
        monkeypatch.setenv("NB_MAX_READ_MB", bad)
        with pytest.raises(InputError, match="NB_MAX_READ_MB"):
            max_read_bytes()


@pytest.mark.parametrize("where", ["tokenizer", "checkpoint", "counts", "match"])
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "/dev/urandom", "loop"])
def test_commands_refuse_non_regular_inputs_in_one_line(tmp_path: Path, sp_model: Path, fifo: Path, loop: Path,
                                                        where: str, kind: str) -> None:
    bad = {"fifo": fifo, "loop": loop}.get(kind, Path(kind))
    ckpt = save(tmp_path / "m.safetensors", gpt2_tensors(vocab=40))
    counts = tmp_path / "c.safetensors"
    write_counts(counts, UnigramCounts(counts=np.ones(40, np.int64), metadata={"nb.format": "unigram-counts/1"}))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a b c\n")
    args = {
        "tokenizer": ["count-unigrams", corpus, "-t", bad, "-o", tmp_path / "o.safetensors"],
        "checkpoint": ["inspect", bad],
        "counts": ["patch-checkpoint", ckpt, "-o", tmp_path / "o.safetensors", "--set-output-bias", bad,
                   "--bias-name", "lm_head.bias"],
        "match": ["patch-checkpoint", ckpt, "-o", tmp_path / "o.safetensors", "--standardise-embeddings",
                  f"match:{bad}:wte.weight"],
    }[where]
    if kind == "fifo":  # a FIFO that were opened would block: in a subprocess, the timeout fails the test
        proc = run_nb(*args, timeout=60)
        code, stderr = proc.returncode, proc.stderr.decode()
    else:
        result = invoke(*args)
        code, stderr = result.exit_code, result.stderr
    assert code == 1
    expected = "symbolic link loop" if kind == "loop" else ("is a FIFO" if kind == "fifo" else "is a character device")
    assert_one_line_error(stderr, str(bad), expected)
    assert not (tmp_path / "o.safetensors").exists()


def test_corpus_may_be_a_pipe_but_not_a_device(tmp_path: Path, sp_model: Path, fifo: Path) -> None:
    def feed() -> None:
        with open(fifo, "wb") as handle:
            handle.write(b"one two three\n" * 50)

    writer = threading.Thread(target=feed)
    writer.start()
    result = invoke("count-unigrams", fifo, "-t", sp_model, "-o", tmp_path / "c.safetensors", "--json")
    writer.join(timeout=30)
    assert result.exit_code == 0, result.output
    result = invoke("count-unigrams", "/dev/zero", "-t", sp_model, "-o", tmp_path / "d.safetensors")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "/dev/zero", "is a character device")


def test_tokenizer_index_and_header_over_the_cap(tmp_path: Path, sp_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tok = tmp_path / "spm.model"
    shutil.copy(sp_model, tok)
    sharded = save_sharded(tmp_path / "sh", gpt2_tensors(vocab=40), shards=2)
    single = save(tmp_path / "m.safetensors", gpt2_tensors(vocab=40))
    cap = 400  # bytes: less than the tokenizer, the index and the header
    assert min(tok.stat().st_size, (sharded / "model.safetensors.index.json").stat().st_size) > cap
    monkeypatch.setenv("NB_MAX_READ_MB", str(cap / 1e6))
    result = invoke("count-unigrams", tmp_path / "x.txt", "-t", tok, "-o", tmp_path / "o.safetensors")
    assert_one_line_error(result.stderr, str(tok), "tokenizer file", "NB_MAX_READ_MB")
    result = invoke("inspect", sharded)
    assert_one_line_error(result.stderr, "index file", "NB_MAX_READ_MB")
    result = invoke("inspect", single)
    assert_one_line_error(result.stderr, str(single), "header of", "NB_MAX_READ_MB")


@pytest.mark.parametrize("suffix", [".txt", ".txt.gz"])
def test_a_corpus_line_over_the_cap_is_one_line_naming_file_and_line(tmp_path: Path, sp_model: Path, suffix: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import gzip

    text = b"short line\n" * 3 + b"word " * 600_000 + b"\nlast\n"  # line 4: 3 MB
    corpus = tmp_path / f"c{suffix}"
    corpus.write_bytes(gzip.compress(text) if suffix.endswith(".gz") else text)
    monkeypatch.setenv("NB_MAX_LINE_MB", "1")
    # a plain file counts it in pieces (the family cuts at spaces) unless whole documents are asked
    # for; a compressed stream cannot be read again, so there it is refused in any case
    for extra in ([], ["--no-chunk-cache"]) if suffix == ".txt" else ([],):
        result = invoke("count-unigrams", corpus, "-t", sp_model, "-o", tmp_path / "o.safetensors", "-j", "1", *extra)
        if suffix == ".txt" and not extra:
            assert result.exit_code == 0, result.output
            (tmp_path / "o.safetensors").rename(tmp_path / "pieces.safetensors")
            continue
        assert result.exit_code == 1
        assert_one_line_error(result.stderr, f"{corpus}:4:", "longer than 1 MB", "NB_MAX_LINE_MB")
        assert not (tmp_path / "o.safetensors").exists()
    monkeypatch.setenv("NB_MAX_LINE_MB", "4")
    result = invoke("count-unigrams", corpus, "-t", sp_model, "-o", tmp_path / "o.safetensors", "-j", "1", "--json")
    assert result.exit_code == 0, result.output
    if suffix == ".txt":
        from nbcli.counts import read_counts

        assert np.array_equal(read_counts(tmp_path / "o.safetensors").counts,
                              read_counts(tmp_path / "pieces.safetensors").counts)


def test_corpus_symlink_loop_and_glob_through_a_loop(tmp_path: Path, sp_model: Path, loop: Path) -> None:
    result = invoke("count-unigrams", loop, "-t", sp_model, "-o", tmp_path / "o.safetensors")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, str(loop), "symbolic link loop")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("one two three\n")
    (docs / "self").symlink_to(docs)  # docs/self/self/.../a.txt: the same file under many names
    result = invoke("count-unigrams", f"{docs}/**/*.txt", "-t", sp_model, "-o", tmp_path / "g.safetensors", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["documents"] == 1
