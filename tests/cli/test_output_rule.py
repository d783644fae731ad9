"""One output rule for every command that writes (nbcli.outputs, nbcli.atomic.checks): an output's missing
folders are made (as `nb train --out newparent/r` always did), a file where a folder must go is one line
with nothing written, and `-` is standard output wherever a file of text is written (never a file named
`-`): translate, predict, export, plot-run, generate --out, eval/inspect --csv."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nbcli.tasks.data import DataSpec
from nbcli.tasks.finetune import FinetuneConfig, finetune
from tests.cli.helpers import assert_one_line_error, invoke, run_nb
from tests.conftest import english_like_lines
from tests.lm.conftest import nb_lm  # noqa: F401  (fixture)
from tests.tasks.builders import encoder_folder, write_corpus
from tests.tasks.test_finetune import pairs


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    root = tmp_path_factory.mktemp("rule-cls")
    train = write_corpus(root / "train.jsonl", pairs(8), "jsonl")
    write_corpus(root / "dev.tsv", pairs(4, 1), "tsv")
    cfg = FinetuneConfig(data=DataSpec(text_field="sentence1", pair_field="sentence2", max_len=32),
                         init=str(encoder_folder(root / "bert", "bert")), steps=1, batch_size=8)
    finetune(cfg, [str(train)], {}, root / "run")
    return root


def test_translate_to_stdout_and_into_missing_folders(tmp_path: Path, translation_run: Path,
                                                      parallel_corpus: Path) -> None:
    sources = (parallel_corpus / "valid.de").read_text().splitlines()[:3]
    stdin = ("\n".join(sources) + "\n").encode()
    proc = run_nb("translate", translation_run, "-i", "-", "-o", "-", "--beam", "1", input=stdin, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr.decode()
    assert len(proc.stdout.decode().splitlines()) == 3 and not (tmp_path / "-").exists()  # the translations alone
    (tmp_path / "in.de").write_text("\n".join(sources) + "\n")
    out = tmp_path / "new" / "parent" / "out.en"
    result = invoke("translate", translation_run, "-i", tmp_path / "in.de", "-o", out, "--beam", "1")
    assert result.exit_code == 0, result.stderr
    assert out.read_text().splitlines() == proc.stdout.decode().splitlines()
    both = invoke("translate", translation_run, "-i", tmp_path / "in.de", "-o", "-", "--json")
    assert both.exit_code == 1
    assert_one_line_error(both.stderr, "--json and -o - all write to stdout")
    blocked = invoke("translate", translation_run, "-i", tmp_path / "in.de", "-o", tmp_path / "in.de" / "x.en")
    assert blocked.exit_code == 1
    assert_one_line_error(blocked.stderr, "in.de is not a directory")
    assert (tmp_path / "in.de").read_text() == "\n".join(sources) + "\n"


def test_predict_to_stdout_and_into_missing_folders(classifier: Path, tmp_path: Path) -> None:
    result = invoke("predict", classifier / "run", "--corpus", classifier / "dev.tsv", "-o", "-")
    assert result.exit_code == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]   # the JSON lines alone
    assert len(lines) == 4 and all("label" in line for line in lines)
    out = tmp_path / "a" / "b" / "p.jsonl"
    assert invoke("predict", classifier / "run", "--corpus", classifier / "dev.tsv", "-o", out).exit_code == 0
    assert [json.loads(line) for line in out.read_text().splitlines()] == lines


def test_export_and_plot_run_into_missing_parents(tmp_path: Path, translation_run: Path) -> None:
    exported = invoke("export", translation_run, "-o", tmp_path / "hf" / "u-s0")
    assert exported.exit_code == 0, exported.stderr
    assert (tmp_path / "hf" / "u-s0" / "model.safetensors").is_file()
    plotted = invoke("plot-run", translation_run, "-o", tmp_path / "newp" / "figs")
    assert plotted.exit_code == 0, plotted.stderr
    assert any((tmp_path / "newp" / "figs").iterdir())
    dash = invoke("export", translation_run, "-o", "-")
    assert dash.exit_code == 1
    assert_one_line_error(dash.stderr, "-: standard output takes text")


def test_generate_eval_and_inspect_into_missing_folders(nb_lm: Path, sp_model: Path,  # noqa: F811
                                                         tmp_path: Path) -> None:
    heldout = tmp_path / "heldout.txt"
    heldout.write_text("\n".join(english_like_lines(6, seed=9, unicode=False)) + "\n")
    generated = invoke("generate", nb_lm, "--prompts", heldout, "-t", sp_model, "--scale-ln-bias", "0.5",
                       "--prompt-words", "3", "--max-new-tokens", "4", "--samples", "1", "--max-prompts", "2",
                       "--out", tmp_path / "g" / "h" / "study")
    assert generated.exit_code == 0, generated.stderr
    assert (tmp_path / "g" / "h" / "study" / "samples.jsonl").is_file()
    evaluated = invoke("eval", nb_lm, "--corpus", heldout, "-t", sp_model, "--csv", tmp_path / "e" / "f" / "e.csv")
    assert evaluated.exit_code == 0, evaluated.stderr
    assert (tmp_path / "e" / "f" / "e.csv").stat().st_size > 0
    inspected = invoke("inspect", nb_lm, "--csv", tmp_path / "i" / "j" / "i.csv")
    assert inspected.exit_code == 0, inspected.stderr
    assert (tmp_path / "i" / "j" / "i.csv").stat().st_size > 0
