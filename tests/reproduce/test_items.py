"""The other smoke-scale items end to end on data built here: 002-table1 (classification, a tiny BERT
folder) as a real `nb` process, and 002-table4 (nb analogy per transform) whose accuracies equal
`nbcli.analogy`'s; the packaged recipes all load, check against their tasks, and list their data."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

import nbcli
from tests.cli.helpers import invoke, run_nb


def test_every_item_loads_and_checks_or_says_why_not() -> None:
    from nbcli.sweeps.items import item_ids, item_recipe
    from nbcli.sweeps.plan import check_recipe, recipe_arms, roles_needed

    items = item_ids()
    assert {"000-fig2", "000-fig3", "000-fig4", "001-table1", "001-table7", "002-table1", "002-table3", "002-table4",
            "002-fig1", "003-fig1"} <= set(items)
    for item in items:
        recipe = item_recipe(item)
        if recipe.unavailable:
            with pytest.raises(nbcli.errors.ConfigError, match="cannot run"):
                check_recipe(recipe)
        else:
            check_recipe(recipe)
            tabled = recipe.metrics or (recipe.evaluation is not None and recipe.evaluation.kind == "translation-by-frequency")
            assert roles_needed(recipe) and tabled and {"smoke", "cpu", "paper"} == {s.name for s in recipe.scales}
            arms = {name for name, _ in recipe_arms(recipe)}
            assert all(p.arm in arms or p.note for p in recipe.published), item


def test_list_shows_each_item_with_its_data_or_why_it_cannot_run() -> None:
    done = invoke("reproduce", "--list", "--json")
    assert done.exit_code == 0, done.stderr
    items = {i["item"]: i for i in json.loads(done.stdout)["items"]}
    assert [r["role"] for r in items["000-fig2"]["data"]] == ["train", "valid", "test", "tokenizer"]
    assert [r["role"] for r in items["000-fig3"]["data"]] == ["train", "valid", "tokenizer"]   # no test set
    assert items["000-fig4"]["runnable"] and items["000-fig4"]["arms"] == ["unigram", "zero"]   # fig. 4's two arms
    assert [r["role"] for r in items["000-fig4"]["data"]] == ["train", "valid", "test", "tokenizer"]
    assert not items["001-table4"]["runnable"] and "two stages" in items["001-table4"]["unavailable"]
    assert items["002-table1"]["published"] == 78 and "SST2/BERT/Xavier_BERT" in items["002-table1"]["arms"]
    assert items["002-table1"]["presets"]["SST2/BERT/*"] == "paper002-sst2-bert"
    assert items["000-fig2"]["presets"] == {"*": "paper000-iwslt"}
    text = invoke("reproduce", "--list")
    assert "not runnable yet" in text.stdout and "--data tokenizer=" in text.stdout
    one = json.loads(invoke("reproduce", "002-table4", "--list", "--json").stdout)["items"]
    assert [i["item"] for i in one] == ["002-table4"]


@pytest.mark.slow
def test_002_table1_smoke_classification(tmp_path: Path, sst2: dict[str, Path]) -> None:
    out = tmp_path / "repro"
    done = run_nb("reproduce", "002-table1", "--scale", "smoke", "--arms", "SST2/BERT/*", "--data",
                  f"sst2_train={sst2['train']}", "--data", f"sst2_valid={sst2['valid']}", "--data", f"bert={sst2['bert']}",
                  "--out", out, "--json", timeout=600)
    assert done.returncode == 0, done.stderr.decode()
    report = json.loads(done.stdout)
    assert [row["arm"] for row in report["rows"]] == [f"SST2/BERT/{a}" for a in ("Xavier", "BERT", "BERT_Xavier",
                                                                               "BERT_Shuffled", "Xavier_BERT")]
    runs = {r["run"]: r for r in report["runs"]}
    for name, r in runs.items():
        summary = json.loads((out / name / "summary.json").read_text())
        assert r["metrics"]["accuracy"] == pytest.approx(100 * summary["best_val_accuracy"])
        assert r["metrics"]["epoch"] == pytest.approx(summary["best_epoch"])
        assert r["metrics"]["mismatched"] is None                       # an SST2 arm logs no mismatched set
    config = json.loads((out / "runs/SST2-BERT-BERT_Shuffled-s1/config.json").read_text())
    assert config["encoder_options"]["embedding_shuffle"] is True and config["seed"] == 1
    # the paper's preset, scaled down by the smoke scale's options alone (and D, the model's width)
    assert config["recipe"] == "paper002-sst2-bert" and config["encoder_options"]["n_layer"] == 3
    assert set(config["preset_overridden"]) == {"d_model", "batch_size", "epochs"}
    plotted = {g["group"]: g for g in nbcli.plot_runs([out / n for n in runs], tmp_path / "p").to_dict()["groups"]}
    for row in report["rows"]:
        values = [r["metrics"]["accuracy"] for r in runs.values() if r["arm"] == row["arm"]]
        cell = row["metrics"]["accuracy"]
        assert cell["mean"] == pytest.approx(statistics.fmean(values)) and cell["spread"] == "sd"
        assert cell["sd"] == pytest.approx(statistics.stdev(values))
        group = plotted[row["arm"].replace("/", "-")]                  # nb plot-run's ± σ of the same runs
        assert cell["sd"] == pytest.approx(100 * group["best_val_accuracy"]["sd"], abs=1e-9)
    bert = next(row for row in report["rows"] if row["arm"] == "SST2/BERT/BERT")["metrics"]["accuracy"]
    assert (bert["paper"], bert["paper_spread"]) == (83.3, 0.5)
    assert bert["difference"] == pytest.approx(bert["mean"] - 83.3)


def _gensim_data() -> Path:
    gensim = pytest.importorskip("gensim")
    return Path(gensim.__file__).parent / "test" / "test_data"


def test_002_table4_smoke_analogy_equals_nb_analogy(tmp_path: Path) -> None:
    data = _gensim_data()
    vectors, questions = data / "lee_fasttext.vec", data / "questions-words.txt"
    words = tmp_path / "words.txt"
    words.write_text("".join(line.split(" ")[0] + "\n" for line in vectors.read_text().splitlines()[1:]))
    out = tmp_path / "repro"
    done = invoke("reproduce", "002-table4", "--scale", "smoke", "--data", f"glove={vectors}", "--data",
                  f"questions={questions}", "--data", f"vocabulary={words}", "--out", out, "--json")
    assert done.exit_code == 0, done.stderr
    report = json.loads(done.stdout)
    transforms = {"GloVe": None, "GloVe & Scaled": "scale-sqrt-d", "GloVe & Pos. Enc.": "pos-enc",
                  "GloVe & Xavier-Std.": "xavier-std", "GloVe & Xavier-Std & Scaled": "xavier-std,scale-sqrt-d",
                  "GloVe & Xavier-std & Pos. Enc.": "xavier-std,pos-enc",
                  "GloVe & (Pos. Enc. × σp÷σx)": "pos-enc-scaled"}
    assert [row["arm"] for row in report["rows"]] == list(transforms)
    for row in report["rows"]:
        direct = nbcli.analogy(vectors, questions, transform=transforms[row["arm"]], positions="random",
                               max_len=5000, seed=0, vocabulary=words).to_dict()["overall"]
        assert row["metrics"]["accuracy"]["mean"] == pytest.approx(100 * direct["accuracy"])
        assert row["metrics"]["correct"]["mean"] == direct["correct"]
        assert row["metrics"]["applicable"]["mean"] == direct["applicable"] == 98
    encoded = next(row for row in report["rows"] if row["arm"] == "GloVe & Pos. Enc.")["metrics"]["accuracy"]
    assert encoded["paper"] == 87.3 and encoded["difference"] == pytest.approx(encoded["mean"] - 87.3)
    assert "002-table4/figures/results.png" in report["files"]


def test_003_fig1_smoke_lm_eval_equals_nb_eval(tmp_path: Path, hf_bytelevel_json: Path, sample_lines: list[str]) -> None:
    import shutil

    from nbcli.tokenizers import load_tokenizer
    from tests.lm.conftest import save_hf_gpt2

    tok = load_tokenizer(hf_bytelevel_json)
    model = save_hf_gpt2(tmp_path / "gpt2", tok.vocab_size, eos_id=tok.eos_id or 0)
    shutil.copy(hf_bytelevel_json, model / "tokenizer.json")
    corpus = tmp_path / "held-out.txt"
    corpus.write_text("\n".join(sample_lines[:40]) + "\n")
    train = tmp_path / "train.txt"
    train.write_text("\n".join(sample_lines[100:600]) + "\n")
    counts = tmp_path / "counts.safetensors"
    nbcli.count_unigrams(train, tokenizer=model, output=counts)
    done = invoke("reproduce", "003-fig1", "--scale", "smoke", "--data", f"model={model}", "--data",
                  f"corpus={corpus}", "--data", f"counts={counts}", "--out", tmp_path / "repro", "--json")
    assert done.exit_code == 0, done.stderr
    row = json.loads(done.stdout)["rows"][0]
    direct = nbcli.evaluate(model, corpus, model, counts=counts, device="cpu").to_dict()["rows"][0]
    assert row["arm"] == "GPT-2 small"
    assert row["metrics"]["kl"]["mean"] == pytest.approx(direct["kl_unigram"])
    assert row["metrics"]["kl_without_ln_bias"]["mean"] == pytest.approx(direct["kl_unigram_without_ln_bias"])
    assert row["metrics"]["kl"]["paper"] == 0.14 and row["metrics"]["kl_without_ln_bias"]["paper"] == 0.83
    assert (tmp_path / "repro" / "runs" / "GPT-2-small-s0" / "bias_effect.png").is_file()
