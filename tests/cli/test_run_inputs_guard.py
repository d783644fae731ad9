"""Commands that read a run directory or a model folder never write over a file in it: the checkpoint
it resolves to, its tokenizers, config.json, log.jsonl (the data-loss class of `nb translate -o
run/best.safetensors` and `nb predict -o run/step-1.safetensors`, which once printed "wrote" and left a
broken checkpoint). A new file written beside them is allowed."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from nbcli.outputs import check_outputs, model_inputs
from nbcli.errors import OutputError
from tests.cli.helpers import assert_one_line_error, invoke
from tests.tasks.builders import encoder_folder, write_corpus
from tests.tasks.test_finetune import pairs


def digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture()
def mt_run(tmp_path: Path, translation_run: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(translation_run, run, symlinks=True)
    return run


@pytest.fixture(scope="module")
def classifier_run_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from nbcli.tasks.data import DataSpec
    from nbcli.tasks.finetune import FinetuneConfig, finetune

    tmp = tmp_path_factory.mktemp("cls")
    folder = encoder_folder(tmp / "bert", "bert")
    train = write_corpus(tmp / "train.tsv", pairs(16), "tsv")
    cfg = FinetuneConfig(data=DataSpec(text_field="sentence1", pair_field="sentence2"), init=str(folder), steps=2,
                         batch_size=8, lr=5e-3)
    finetune(cfg, [str(train)], {}, tmp / "run")
    return tmp / "run", train


def _run_files(run: Path) -> list[str]:
    return sorted(p.name for p in run.iterdir() if p.is_file())


def test_translate_never_writes_over_a_file_of_the_run(mt_run: Path, tmp_path: Path, parallel_corpus: Path) -> None:
    source = tmp_path / "in.de"
    source.write_text("ein zwei drei\n")
    names = _run_files(mt_run)
    assert {"best.safetensors", "config.json"} <= set(names)
    before = digests(mt_run)
    for name in names:
        result = invoke("translate", mt_run, "--input", source, "-o", mt_run / name)
        assert result.exit_code == 1, (name, result.stdout)
        assert_one_line_error(result.stderr, name, "input folder")
        # the checkpoint file given instead of the run: its folder is still read (config, tokenizers)
        result = invoke("translate", mt_run / "best.safetensors", "--input", source, "-o", mt_run / name)
        assert result.exit_code == 1, (name, result.stdout)
    assert digests(mt_run) == before
    # an explicit tokenizer is an input too
    tok = tmp_path / "s.model"
    shutil.copy(parallel_corpus / "joint.model", tok)
    result = invoke("translate", mt_run, "--input", source, "-o", tok, "--src-tokenizer", tok)
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "s.model")
    assert tok.read_bytes() == (parallel_corpus / "joint.model").read_bytes()
    # a new file in the run directory is fine
    result = invoke("translate", mt_run, "--input", source, "-o", mt_run / "out.en")
    assert result.exit_code == 0, result.stderr
    assert (mt_run / "out.en").read_text().count("\n") == 1


def test_predict_never_writes_over_a_file_of_the_run(classifier_run_template: tuple[Path, Path],
                                                     tmp_path: Path) -> None:
    template, corpus = classifier_run_template
    run = tmp_path / "run"
    shutil.copytree(template, run, symlinks=True)
    before = digests(run)
    for name in _run_files(run):
        for given in (run, next(run.glob("step-*.safetensors"))):
            result = invoke("predict", given, "--corpus", corpus, "-o", run / name)
            assert result.exit_code == 1, (name, result.stdout)
            assert_one_line_error(result.stderr, name)
    assert digests(run) == before
    result = invoke("predict", run, "--corpus", corpus, "-o", run / "predictions.jsonl")
    assert result.exit_code == 0, result.stderr
    assert len((run / "predictions.jsonl").read_text().splitlines()) == 16


def test_table_outputs_and_export_spare_the_run(mt_run: Path, tmp_path: Path, parallel_corpus: Path) -> None:
    before = digests(mt_run)
    result = invoke("inspect", mt_run / "best.safetensors", "--csv", mt_run / "config.json")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "config.json")
    result = invoke("export", mt_run / "best.safetensors", "-o", mt_run)
    assert result.exit_code == 1
    assert digests(mt_run) == before


@pytest.mark.parametrize("how", ["name", "symlink", "hardlink"])
def test_check_outputs_protects_every_file_of_an_input_folder(tmp_path: Path, how: str) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    out = tmp_path / "elsewhere.json"
    if how == "name":
        out = folder / "config.json"
    elif how == "symlink":
        out.symlink_to(folder / "config.json")
    else:
        out.hardlink_to(folder / "config.json")
    if how == "hardlink":  # a hard link outside the folder is caught only when the file itself is an input
        check_outputs([out], model_inputs(folder))
        with pytest.raises(OutputError):
            check_outputs([out], [folder / "config.json"])
    else:
        with pytest.raises(OutputError, match="input folder"):
            check_outputs([out], model_inputs(folder))
    check_outputs([folder / "new.json"], model_inputs(folder))  # a new file beside the inputs: allowed
    assert model_inputs(folder / "config.json") == [folder / "config.json", folder]
    assert model_inputs(None) == [] and model_inputs("-") == []
