"""Bad input to nb reproduce / nb sweep: one line naming the recipe file and the key (or the run),
exit 1, nothing started (no --out made, no run, no result changed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.helpers import assert_one_line_error, invoke, run_nb
from tests.reproduce.conftest import translation_data

ANALOGY = """\
task = "analogy"
seeds = [0]
[data.vectors]
help = "word vectors"
[data.questions]
help = "questions"
[options]
vectors = "{vectors}"
questions = "{questions}"
[[axes]]
name = "transform"
values = [{ name = "plain" }, { name = "scaled", options = { transform = "scale-sqrt-d" } }]
[[metrics]]
name = "accuracy"
from = "result"
key = "overall.accuracy"
spread = "none"
"""


@pytest.fixture
def analogy_data() -> list[str]:
    gensim = pytest.importorskip("gensim")
    data = Path(gensim.__file__).parent / "test" / "test_data"
    return ["--data", f"vectors={data / 'lee_fasttext.vec'}", "--data", f"questions={data / 'questions-words.txt'}"]


def _refused(tmp_path: Path, recipe: str, *fragments: str, extra: tuple[str, ...] = ()) -> None:
    path = tmp_path / "recipe.toml"
    path.write_text(recipe)
    out = tmp_path / "out"
    done = invoke("sweep", path, "--out", out, *extra)
    assert done.exit_code == 1, done.stdout
    assert_one_line_error(done.stderr, str(path), *fragments)
    assert not out.exists()


@pytest.mark.parametrize("recipe, fragments", [
    (ANALOGY.replace('task = "analogy"', 'task = "analogy"\ncolour = "red"'), ("colour", "unknown key")),
    (ANALOGY.replace('name = "scaled", options = { transform', 'name = "scaled", options = { transfrom'),
     ("[[axes]] 'transform' value 'scaled'", "options.transfrom", "takes no option")),
    (ANALOGY.replace("seeds = [0]", "seeds = []"), ("seeds", "empty")),
    (ANALOGY.replace('questions = "{questions}"', 'questions = "{questions}"\nrestrict_vocab = "all"'),
     ("options.restrict_vocab", "takes an integer")),
    (ANALOGY.replace('spread = "none"', 'spread = "iqr"'), ("[[metrics]] #1.spread", "'iqr'")),
    (ANALOGY.replace('task = "analogy"', 'task = "regression"'), ("task 'regression'",)),
    (ANALOGY.replace('[[metrics]]', '[[published]]\narm = "plian"\nmetric = "accuracy"\nvalue = 1\n[[metrics]]'),
     ("[[published]] arm 'plian'",)),
    (ANALOGY.replace("seeds = [0]", 'seeds = [0]\narms = ["scaeld"]'), ("arms: 'scaeld' matches no arm", "plain, scaled")),
    (ANALOGY.replace('[[metrics]]', '[evaluate]\nkind = "translation-by-frequency"\ndata = "questions"\n[[metrics]]'),
     ("[[metrics]]", "per-bin values")),
])
def test_a_bad_recipe_is_one_line_naming_file_and_key(tmp_path: Path, analogy_data: list[str], recipe: str,
                                                      fragments: tuple[str, ...]) -> None:
    _refused(tmp_path, recipe, *fragments, extra=tuple(analogy_data))


def test_an_option_of_another_task_names_the_task_that_has_it(tmp_path: Path) -> None:
    recipe = 'task = "classification"\nseeds = [0]\n[options]\ncorpus = ["x"]\nbias_init = "unigram"\n'
    _refused(tmp_path, recipe, "options.bias_init", "belongs to nb train lm, translation")


TRANSLATION = """\
task = "translation"
seeds = [0]
[data.train]
help = "pairs"
[options]
corpus = ["{train}"]
src_lang = "de"
tgt_lang = "en"
[[axes]]
name = "bias"
values = [{ name = "unigram", options = { bias_init = "unigram" } }, { name = "zero" }]
[[metrics]]
name = "loss"
from = "summary"
key = "final_val_loss"
"""


@pytest.mark.parametrize("preset, fragments", [
    ('preset = "paper000-gpt"\n', ("preset '*'", "paper000-gpt")),
    ('[preset]\nunigram = "paper000-iwslt"\n', ("preset: arm 'zero' matches 0 patterns",)),
    ('[preset]\n"*" = "paper000-iwslt"\nzero = "paper000-wmt"\n', ("preset: arm 'zero' matches 2 patterns",)),
    ('preset = ""\n', ("preset", "expected a preset name")),
])
def test_a_bad_recipe_preset_is_one_line(tmp_path: Path, preset: str, fragments: tuple[str, ...]) -> None:
    _refused(tmp_path, TRANSLATION.replace("[data.train]", preset + "[data.train]", 1), *fragments)


def test_a_preset_set_twice_is_refused(tmp_path: Path) -> None:
    recipe = TRANSLATION.replace("[data.train]", 'preset = "paper000-iwslt"\n[data.train]', 1)
    _refused(tmp_path, recipe.replace('tgt_lang = "en"', 'tgt_lang = "en"\npreset = "tiny"'),
             "[options]: options.preset", "the recipe's preset sets it")
    _refused(tmp_path, recipe + '[scales.smoke]\noptions = { preset = "tiny" }\n', "[scales.smoke]: options.preset")


def test_a_missing_data_role_lists_what_the_item_needs(tmp_path: Path, pairs: Path) -> None:
    out = tmp_path / "out"
    done = run_nb("reproduce", "000-fig2", "--scale", "smoke", "--data", f"train={pairs / 'train'}", "--out", out)
    assert done.returncode == 1
    assert_one_line_error(done.stderr.decode(), "000-fig2 needs --data", "test=PATH", "tokenizer=PATH", "valid=PATH")
    assert not out.exists()
    unknown = invoke("reproduce", "000-fig2", "--data", "trian=x", "--out", out)
    assert_one_line_error(unknown.stderr, "no data role 'trian'", "train, valid")
    gone = invoke("reproduce", "000-fig2", *translation_data(pairs)[:-1], f"tokenizer={pairs / 'nope.model'}",
                  "--out", out)
    assert_one_line_error(gone.stderr, "--data tokenizer=", "no such file")
    assert not out.exists()


def test_000_fig4_counts_only_aligned_training_files(tmp_path: Path, pairs: Path) -> None:
    tsv = tmp_path / "train.tsv"
    tsv.write_text("de\ten\nein haus\ta house\n")
    out = tmp_path / "out"
    data = [f"train={tsv}" if arg.startswith("train=") else arg for arg in translation_data(pairs)]
    done = invoke("reproduce", "000-fig4", "--scale", "smoke", *data, "--out", out)
    assert_one_line_error(done.stderr, f"--data train={tsv}", "PREFIX.de / PREFIX.en", "nb count-unigrams")
    assert not out.exists()


@pytest.mark.parametrize("args, fragments", [
    (("reproduce", "000-fig9", "--out", "o"), ("no item '000-fig9'", "000-fig2")),
    (("reproduce", "001-table4", "--out", "o"), ("cannot run 001-table4 yet", "two stages")),
    (("reproduce", "000-fig2", "--scale", "huge", "--out", "o"), ("no scale 'huge'", "smoke, cpu, paper")),
    (("reproduce", "000-fig2", "--arms", "uni*x", "--out", "o"), ("--arms uni*x matches no arm", "unigram, zero")),
    (("reproduce", "000-fig2", "--set", "bias_init=zero", "--out", "o"), ("--set bias_init", "axis 'bias init'")),
    (("reproduce", "002-table1", "--arms", "SST2/*", "--set", "preset=tiny", "--out", "o"),
     ("--set preset", "the preset of each arm")),
    (("reproduce", "000-fig2", "--resources", "GPU=1", "--out", "o"), ("--resources", "--dask",)),
    (("reproduce", "000-fig2"), ("needs ITEM and --out",)),
    (("reproduce", "000-fig2", "--seeds", "0,x", "--out", "o"), ("--seeds 0,x", "integers")),
    (("reproduce", "000-fig2", "--seeds", "1,1", "--out", "o"), ("--seeds 1,1", "distinct")),
])
def test_bad_command_lines(tmp_path: Path, args: tuple[str, ...], fragments: tuple[str, ...],
                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    done = invoke(*args)
    assert done.exit_code == 1, done.stdout
    assert_one_line_error(done.stderr, *fragments)
    assert not (tmp_path / "o").exists()


def test_an_out_holding_runs_made_with_other_settings_is_refused(tmp_path: Path, analogy_data: list[str]) -> None:
    path = tmp_path / "recipe.toml"
    path.write_text(ANALOGY)
    out = tmp_path / "out"
    first = invoke("sweep", path, "--out", out, *analogy_data, "--json", "--no-figures")
    assert first.exit_code == 0, first.stderr
    assert {o["action"] for o in json.loads(first.stdout)["outcomes"]} == {"trained"}
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != "sweep.json"}
    changed = invoke("sweep", path, "--out", out, *analogy_data, "--set", "restrict_vocab=100")
    assert changed.exit_code == 1
    assert_one_line_error(changed.stderr, f"--out {out}", "runs/plain-s0 was made with other settings",
                          "restrict_vocab: None -> 100")
    after = {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != "sweep.json"}
    assert after == before
    (out / "runs" / "plain-s0.json").unlink()      # a run directory without its record is not nb reproduce's
    stray = invoke("sweep", path, "--out", out, *analogy_data)
    assert_one_line_error(stray.stderr, "runs/plain-s0 exists without its record")
    again = invoke("sweep", path, "--out", tmp_path / "out2", *analogy_data, "--json", "--no-figures")
    assert json.loads(again.stdout)["rows"] == json.loads(first.stdout)["rows"]
