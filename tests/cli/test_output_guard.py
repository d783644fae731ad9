"""Every command refuses an output that is (a link to) one of its inputs, and leaves the inputs intact."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from conftest import english_like_lines
from nbcli.counts import UnigramCounts, write_counts
from tests import forked_nb
from tests.checkpoint.builders import gpt2_tensors, save, save_sharded
from tests.cli.helpers import assert_one_line_error, invoke, run_nb


def digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


@pytest.fixture()
def files(tmp_path: Path, sp_model: Path) -> dict[str, Path]:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(english_like_lines(50, seed=3)) + "\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("one two three\n")
    tok = tmp_path / "spm.model"
    shutil.copy(sp_model, tok)
    counts = tmp_path / "counts.safetensors"
    write_counts(counts, UnigramCounts(counts=np.arange(40, dtype=np.int64), metadata={"nb.format": "unigram-counts/1"}))
    counts2 = tmp_path / "counts2.safetensors"
    shutil.copy(counts, counts2)
    ckpt = save(tmp_path / "gpt2.safetensors", gpt2_tensors(vocab=40))
    match = save(tmp_path / "match.safetensors", gpt2_tensors(vocab=40))
    sharded = save_sharded(tmp_path / "sharded", gpt2_tensors(vocab=40))
    return {"corpus": corpus, "docs": tmp_path / "docs", "tok": tok, "counts": counts, "counts2": counts2,
            "ckpt": ckpt, "match": match, "sharded": sharded}


# name -> (argv builder given the files and the output path to use, input the output aliases)
CASES: dict[str, tuple[Callable[[dict[str, Path], Path], list[object]], str]] = {
    "count -o corpus": (lambda f, o: ["count-unigrams", f["corpus"], "-t", f["tok"], "-o", o], "corpus"),
    "count -o tokenizer": (lambda f, o: ["count-unigrams", f["corpus"], "-t", f["tok"], "-o", o], "tok"),
    "count -o file in a corpus dir": (lambda f, o: ["count-unigrams", f["docs"], "-t", f["tok"], "-o", o],
                                      "docs/a.txt"),
    "count -o file of a glob": (lambda f, o: ["count-unigrams", str(f["docs"]) + "/*.txt", "-t", f["tok"], "-o", o],
                                "docs/a.txt"),
    "count --tsv corpus": (lambda f, o: ["count-unigrams", f["corpus"], "-t", f["tok"], "-o",
                                         f["corpus"].parent / "new.safetensors", "--tsv", o], "corpus"),
    "merge -o first input": (lambda f, o: ["merge-counts", f["counts"], f["counts2"], "-o", o], "counts"),
    "patch -o checkpoint": (lambda f, o: ["patch-checkpoint", f["ckpt"], "-o", o, "--scale-ln-bias", "0.5"], "ckpt"),
    "patch -o counts": (lambda f, o: ["patch-checkpoint", f["ckpt"], "-o", o, "--set-output-bias", f["counts"]],
                        "counts"),
    "patch --in-place -o counts": (lambda f, o: ["patch-checkpoint", f["ckpt"], "-o", o, "--in-place",
                                                 "--set-output-bias", f["counts"]], "counts"),
    "patch -o match file": (lambda f, o: ["patch-checkpoint", f["ckpt"], "-o", o, "--standardise-embeddings",
                                          f"match:{f['match']}:wte.weight"], "match"),
    "probe-bias --plot over counts": (lambda f, o: ["probe-bias", f["ckpt"], "-c", f["counts"], "--plot",
                                                    o.parent], "counts"),
}


def _target(files: dict[str, Path], key: str) -> Path:
    return files[key] if key in files else files["corpus"].parent / key


@pytest.mark.parametrize("alias", ["name", "hardlink", "symlink"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_output_equal_to_an_input_is_refused(tmp_path: Path, files: dict[str, Path], case: str, alias: str) -> None:
    build, key = CASES[case]
    victim = _target(files, key)
    if case.startswith("probe-bias"):  # the plots have fixed names in DIR: make one of them the input
        plots = tmp_path / "plots"
        plots.mkdir()
        out = plots / "frequency_direction.png"
        link = {"name": None, "hardlink": os.link, "symlink": lambda a, b: Path(b).symlink_to(a)}[alias]
        (link or os.link)(victim, out)
    elif alias == "name":
        out = victim
    else:
        out = tmp_path / ("alias-" + alias)
        if alias == "hardlink":
            os.link(victim, out)
        else:
            out.symlink_to(victim)
    before = digests(tmp_path)
    result = invoke(*build(files, out))
    assert result.exit_code == 1, result.output
    assert_one_line_error(result.stderr, str(out), "output is the same file as the input")
    assert digests(tmp_path) == before
    assert not list(tmp_path.rglob("*.nbtmp"))


def test_quickstart_output_linked_to_the_bundled_sample_is_refused(tmp_path: Path) -> None:
    from nbcli.samples import SAMPLE_CORPUS

    out = tmp_path / "sample.safetensors"
    out.symlink_to(SAMPLE_CORPUS)
    before = hashlib.sha256(SAMPLE_CORPUS.read_bytes()).hexdigest()
    result = invoke("quickstart", "-o", out)
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, str(out), str(SAMPLE_CORPUS))
    assert hashlib.sha256(SAMPLE_CORPUS.read_bytes()).hexdigest() == before


def test_tsv_equal_to_output_is_refused(files: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "c.safetensors"
    result = invoke("count-unigrams", files["corpus"], "-t", files["tok"], "-o", out, "--tsv", tmp_path / "." / out.name)
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "same file as the output", str(out))
    assert not out.exists()


def test_sharded_output_directory_is_the_input_without_in_place(files: dict[str, Path]) -> None:
    before = digests(files["sharded"])
    result = invoke("patch-checkpoint", files["sharded"], "-o", files["sharded"], "--scale-ln-bias", "0.5")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "output is the same file as the input", "--in-place")
    assert digests(files["sharded"]) == before


def test_train_refuses_inputs_in_its_run_directory(tmp_path: Path, files: dict[str, Path]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    corpus = run / "corpus.txt"
    shutil.copy(files["corpus"], corpus)
    result = invoke("train", "--corpus", corpus, "-t", files["tok"], "--out", run, "--steps", "1")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, str(corpus), "lies in this run directory")
    assert sorted(p.name for p in run.iterdir()) == ["corpus.txt"]


def test_stdin_redirected_from_the_output_is_refused(tmp_path: Path, files: dict[str, Path]) -> None:
    corpus = files["corpus"]
    before = corpus.read_bytes()
    with open(corpus, "rb") as stdin:
        proc = forked_nb.run(["nb", "count-unigrams", "-", "-t", str(files["tok"]), "-o", str(corpus)],
                              stdin=stdin, capture_output=True, timeout=120)
    assert proc.returncode == 1
    assert_one_line_error(proc.stderr.decode(), "standard input")
    assert corpus.read_bytes() == before


def test_subprocess_refusal_is_one_line(files: dict[str, Path]) -> None:
    proc = run_nb("merge-counts", files["counts"], files["counts2"], "-o", files["counts2"])
    assert proc.returncode == 1
    assert_one_line_error(proc.stderr.decode(), str(files["counts2"]), "output is the same file as the input")
