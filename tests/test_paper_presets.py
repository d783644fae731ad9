"""Each paper preset holds exactly what its appendix states, checked against the numbers typed here
from the papers (/work/shared/papers: the line each row comes from is cited), not from nb's tables;
an option given with a preset wins and the summary names the preset values it replaced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nbcli.tasks.translation import build_translation_config
from nbcli.train.config import PRESETS, build_config

# ---- paper 000 (000_e9eb1d46ef8f58e2.txt) ------------------------------------------------------------
# line 207 (app. A): "6 layers in both", "The IWSLT and AfroMT En<->Run models have 4 attention heads per layer
# ... all other models have 8", "(beta_1, beta_2) = (0.9, 0.997)", "Dropout is set to 0.1", "the feedforward hidden
# dimension is set to 512 for the WMT model and 256 for all other models"; line 89 (sec. 4.1): W drawn from normal
# variables (its own matrix); line 95: "label smoothing with hyperparameter alpha = 0.1", "the checkpoint with the
# best validation set BLEU", "beam search with a beam size of 5", "length-normalised".
PAPER000 = {  # preset: (layers a side, heads, FFN)
    "paper000-iwslt": (6, 4, 256), "paper000-afromt": (6, 8, 256), "paper000-wmt": (6, 8, 512)}

# ---- paper 001 (001_be7d0c5b6d62c2ed.txt) ------------------------------------------------------------
# lines 437-442 (app. A.7, table 10): RoBERTa-8 8 layers 12 heads 768, RoBERTa-12 12/12/768, RoBERTa-16 16/16/768;
# line 435: "The size of feed-forward layers is always 4 x d_model".
TABLE10 = {8: (8, 12, 768), 12: (12, 12, 768), 16: (16, 16, 768)}
# lines 452-471 (app. A.8, table 11): language, model -> learning rate, warm-up steps, alpha_0 / lambda, batch size
TABLE11 = {
    ("", "8-mlm"): (1e-4, 10000, None, 120), ("", "12-mlm"): (5e-5, 10000, None, 84),
    ("", "16-mlm"): (1e-5, 10000, None, 48), ("", "8-ag"): (1e-4, 0, (100, 0.5), 120),
    ("", "12-ag"): (1e-4, 0, (10, 0.5), 84), ("", "16-ag"): (1e-4, 0, (10, 0.5), 48),
    ("-fil", "8-mlm"): (1e-4, 10000, None, 40), ("-fil", "12-mlm"): (5e-5, 10000, None, 28),
    ("-fil", "16-mlm"): (1e-5, 10000, None, 16), ("-fil", "8-ag"): (1e-4, 0, (100, 0.5), 40),
    ("-fil", "12-ag"): (1e-4, 0, (10, 0.5), 28), ("-fil", "16-ag"): (1e-4, 0, (10, 0.5), 16),
    ("-om", "8-mlm"): (1e-4, 1000, None, 40), ("-om", "12-mlm"): (5e-5, 1000, None, 40),
    ("-om", "16-mlm"): (1e-5, 1000, None, 32), ("-om", "8-ag"): (1e-4, 0, (100, 0.5), 40),
    ("-om", "12-ag"): (1e-4, 0, (10, 0.5), 40), ("-om", "16-ag"): (1e-4, 0, (10, 0.5), 32),
}
# line 263 (sec. 5.5): the BASE Transformer (Vaswani et al.: 6+6 layers, d 512, FFN 2048, 8 heads); "one head each
# guided with the [Next, Prev] pattern in the encoder, and no heads being guided in the decoder"; line 274: "All
# models are trained for 100,000 steps".

# ---- paper 002 (002_d5ec64e6449b4632.txt) ------------------------------------------------------------
# line 281 (app. A.2): Adam beta_1 0.9, beta_2 0.98, eps 1e-9, dropout 0.1, "8 heads (10 for GloVe)", "3 layers in
# either the encoder or decoder", lr 2e-4 for translation, 1e-4 for the others, "D = {300, 512, 768} for GloVe, T5,
# and BERT/mBERT/mT5"; line 107: translation keeps "the model with the lowest validation loss"; lines 289-294
# (Table 5): epochs, batch size and train size per experiment.
TABLE5 = {  # experiment: (epochs, batch size, train size)
    "multi30k-glove": (20, 64, 29_000), "multi30k-mbert": (20, 128, 29_000), "multi30k-mt5": (20, 96, 29_000),
    "iwslt2017-glove": (20, 128, 206_000), "iwslt2017-mbert": (20, 128, 206_000), "iwslt2017-mt5": (20, 112, 206_000),
}
D002 = {"glove": 300, "t5": 512, "bert": 768, "mbert": 768, "mt5": 768}


@pytest.mark.parametrize("name", sorted(PAPER000))
def test_paper000_presets_are_app_a(name: str) -> None:
    layers, heads, ffn = PAPER000[name]
    cfg = build_translation_config(name, dict(src_lang="de", tgt_lang="en"))
    o = cfg.task_options
    assert (cfg.n_layer, cfg.n_head, o["d_ff"]) == (layers, heads, ffn)
    assert (cfg.adam_beta1, cfg.adam_beta2, cfg.dropout, cfg.label_smoothing) == (0.9, 0.997, 0.1, 0.1)
    assert o["share_embeddings"] == "none" and not cfg.tie_embeddings      # W its own matrix
    assert (o["select_by"], o["beam"], o["lenpen"]) == ("val_bleu", 5, 1.0)
    assert cfg.preset_overridden == {}


@pytest.mark.parametrize("language, row", sorted(TABLE11))
def test_paper001_roberta_presets_are_tables_10_and_11(language: str, row: str) -> None:
    size, arm = row.split("-")
    lr, warmup, ag, batch = TABLE11[(language, row)]
    cfg = build_config(f"paper001-roberta-{row}{language}")
    assert (cfg.n_layer, cfg.n_head, cfg.d_model) == TABLE10[int(size)]
    assert (cfg.lr, cfg.warmup, cfg.batch_size, cfg.objective) == (lr, warmup, batch, "mlm")
    assert (cfg.ag_alpha, cfg.ag_fraction) == (ag if ag else (100.0, 0.0))   # MLM rows: no guidance
    # Liu et al. 2019 table 9, to which app. A.7/A.8 defer
    assert (cfg.adam_beta1, cfg.adam_beta2, cfg.adam_eps, cfg.weight_decay, cfg.dropout, cfg.grad_clip,
            cfg.seq_len) == (0.9, 0.98, 1e-6, 0.01, 0.1, 0.0, 512)
    assert cfg.lr_schedule == "linear" and cfg.min_lr_ratio == 0.0


def test_every_paper001_preset_is_in_the_table() -> None:
    names = {f"paper001-roberta-{row}{language}" for language, row in TABLE11}
    assert {n for n in PRESETS if n.startswith("paper001-")} == names


@pytest.mark.parametrize("name", ["paper001-mt-base", "paper001-mt-ag"])
def test_paper001_translation_presets_are_table_7s(name: str) -> None:
    cfg = build_translation_config(name, dict(src_lang="de", tgt_lang="en"))
    assert (cfg.n_layer, cfg.n_head, cfg.d_model, cfg.task_options["d_ff"], cfg.steps) == (6, 8, 512, 2048, 100_000)
    if name.endswith("ag"):
        assert cfg.ag_patterns == ("next", "prev") and round(cfg.ag_fraction * cfg.n_head) == 2
        assert cfg.task_options["ag_decoder_fraction"] == 0.0
    else:
        assert cfg.ag_fraction == 0.0


@pytest.mark.parametrize("experiment", sorted(TABLE5))
def test_paper002_translation_presets_are_app_a2_and_table_5(experiment: str) -> None:
    epochs, batch, pairs = TABLE5[experiment]
    embedding = experiment.split("-")[1]
    cfg = build_translation_config(f"paper002-{experiment}", dict(src_lang="de", tgt_lang="en"))
    per_epoch = -(-pairs // batch)
    assert (cfg.n_layer, cfg.n_head, cfg.d_model) == (3, 10 if embedding == "glove" else 8, D002[embedding])
    assert (cfg.lr, cfg.adam_beta2, cfg.adam_eps, cfg.dropout, cfg.batch_size) == (2e-4, 0.98, 1e-9, 0.1, batch)
    assert (cfg.steps, cfg.eval_every) == (epochs * per_epoch, per_epoch)
    assert cfg.task_options["select_by"] == "val_loss"
    assert (cfg.task_options["positions"], cfg.task_options["scale_embedding"]) == ("sinusoidal", True)  # eq. 2-3
    assert cfg.task_options["init_scheme"] == "xavier"    # line 283: every non-embedding parameter


def test_the_fairseq_and_vaswani_presets_keep_their_names_and_values() -> None:
    iwslt = build_translation_config("iwslt", dict(src_lang="de", tgt_lang="en"))
    base = build_translation_config("base", dict(src_lang="de", tgt_lang="en"))
    assert (iwslt.task_options["d_ff"], iwslt.dropout, iwslt.adam_beta2, iwslt.weight_decay) == (1024, 0.3, 0.98, 1e-4)
    assert (base.task_options["d_ff"], base.n_head, base.lr, base.adam_eps) == (2048, 8, 7e-4, 1e-9)


def test_an_option_wins_over_its_preset_and_is_recorded() -> None:
    cfg = build_translation_config("paper000-iwslt", dict(src_lang="de", tgt_lang="en", d_ff=512), adam_beta2=0.98,
                                   dropout=0.1, warmup_ratio=0.1, steps=100)
    assert (cfg.adam_beta2, cfg.task_options["d_ff"], cfg.warmup) == (0.98, 512, 10)
    assert cfg.preset_overridden == {"adam_beta2": {"preset": 0.997, "run": 0.98}, "d_ff": {"preset": 256, "run": 512},
                                     "warmup": {"preset": 4000, "run": 10}}   # dropout 0.1 given: the preset's own
    lm = build_config("paper001-roberta-8-ag", ag_patterns=("prev",), batch_size=60)
    assert lm.preset_overridden == {"batch_size": {"preset": 120, "run": 60}}
    assert build_config("tiny").preset_overridden == {}


def test_summary_json_names_the_overridden_preset_values(tmp_path: Path, sp_model: Path, train_corpus: Path) -> None:
    from nbcli.tasks.language_model import train

    cfg = build_config("paper001-roberta-8-mlm", n_layer=1, d_model=32, n_head=2, seq_len=16, batch_size=4,
                       steps=1, warmup=0, eval_every=1, eval_batches=1, device="cpu")
    train(cfg, [str(train_corpus)], sp_model, tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["preset_overridden"] == {
        "n_layer": {"preset": 8, "run": 1}, "n_head": {"preset": 12, "run": 2}, "d_model": {"preset": 768, "run": 32},
        "seq_len": {"preset": 512, "run": 16}, "batch_size": {"preset": 120, "run": 4},
        "warmup": {"preset": 10000, "run": 0}}
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["preset_overridden"] == summary["preset_overridden"]


# Paper 002 lines 285-294 (Table 5), the classification experiments: epochs, batch size; app. A.2 (line 281):
# lr 1e-4 for the non-translation tasks, D and heads as above; eq. 2-3 (lines 265-277): x sqrt(D) + sinusoids.
TABLE5_CLASSIFICATION = {"sst2-glove": (5, 128), "sst2-bert": (5, 128), "sst2-t5": (5, 128),
                         "mnli-glove": (9, 128), "mnli-bert": (10, 128), "mnli-t5": (10, 128)}
# Table 5's "Parameters" (millions) and "Vocab size" rows (line 290, 293): the FFN width paper 002 leaves unstated
# is the one whose parameter count matches every experiment.
TABLE5_PARAMETERS = {  # experiment: (millions, vocabulary (source, target), labels)
    "sst2-glove": (6, (13_000,), 2), "sst2-bert": (18, (11_000,), 2), "sst2-t5": (9, (8_800,), 2),
    "mnli-glove": (26, (79_000,), 3), "mnli-bert": (29, (26_000,), 3), "mnli-t5": (17, (23_000,), 3),
    "multi30k-glove": (11, (7_800, 5_900), 0), "multi30k-mbert": (39, (6_300, 5_500), 0),
    "multi30k-mt5": (39, (6_500, 5_500), 0), "iwslt2017-glove": (25, (27_000, 20_000), 0),
    "iwslt2017-mbert": (62, (15_000, 16_000), 0), "iwslt2017-mt5": (67, (18_000, 18_000), 0),
}


def _expanded(name: str, **given: object) -> dict:
    from nbcli.tasks.presets import with_classification_preset

    return with_classification_preset({"preset": name, **given})


@pytest.mark.parametrize("experiment", sorted(TABLE5_CLASSIFICATION))
def test_paper002_classification_presets_are_app_a2_and_table_5(experiment: str) -> None:
    from nbcli.tasks.finetune import FinetuneConfig, train_config

    epochs, batch = TABLE5_CLASSIFICATION[experiment]
    embedding = experiment.split("-")[1]
    cfg = FinetuneConfig(**_expanded(f"paper002-{experiment}"))
    assert (cfg.d_model, cfg.n_head, cfg.encoder_options["n_layer"]) == (D002[embedding], 10 if embedding == "glove"
                                                                         else 8, 3)
    assert (cfg.epochs, cfg.batch_size, cfg.lr, cfg.dropout) == (epochs, batch, 1e-4, 0.1)
    assert (cfg.adam_beta1, cfg.adam_beta2, cfg.adam_eps, cfg.weight_decay) == (0.9, 0.98, 1e-9, 0.0)   # Adam
    assert cfg.positions == "sinusoidal" and cfg.recipe == f"paper002-{experiment}" and cfg.preset_overridden == {}
    # x sqrt(D) + sinusoids (eq. 2-3), Xavier on every non-embedding parameter (line 283), post-LN (nn.Transformer)
    assert {k: cfg.encoder_options[k] for k in ("scale_embedding", "init_scheme", "norm")} == \
        {"scale_embedding": True, "init_scheme": "xavier", "norm": "post"}
    tcfg = train_config(cfg, 100, 10)
    assert (tcfg.adam_beta2, tcfg.adam_eps, tcfg.lr_schedule, tcfg.warmup) == (0.98, 1e-9, "constant", 0)


@pytest.mark.parametrize("experiment", sorted(TABLE5_PARAMETERS))
def test_ffn_512_fits_table_5s_parameter_counts(experiment: str) -> None:
    """The FFN width the presets choose (512) gives Table 5's parameter count of every experiment within its
    rounding (+-0.5 M, plus the rounded vocabulary), counting what the paper's PyTorch model has: the token
    embeddings, the layers and the classifier (translation: untied source, target and output matrices)."""
    import torch

    from nbcli.models.lm import ModelConfig, Transformer
    from nbcli.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer

    millions, vocab, labels = TABLE5_PARAMETERS[experiment]
    translation = len(vocab) == 2
    cfg = (build_translation_config(f"paper002-{experiment}", dict(src_lang="de", tgt_lang="en")) if translation
           else None)

    def count(ffn: int) -> float:
        with torch.device("meta"):
            if translation:
                model = Seq2SeqTransformer(Seq2SeqConfig(
                    src_vocab_size=vocab[0], tgt_vocab_size=vocab[1], eos_id=1, decoder_start_id=1,
                    encoder_layers=cfg.n_layer, decoder_layers=cfg.n_layer, n_head=cfg.n_head, d_model=cfg.d_model,
                    d_ff=ffn, share_embeddings=cfg.task_options["share_embeddings"]))
                return model.num_parameters() / 1e6
            o = _expanded(f"paper002-{experiment}")
            model = Transformer(ModelConfig(vocab_size=vocab[0], n_layer=o["encoder_options"]["n_layer"],
                                            n_head=o["n_head"], d_model=o["d_model"], d_ff=ffn, objective="mlm",
                                            mask_id=0))
            d = o["d_model"]
            layers = sum(p.numel() for p in [*model.blocks.parameters(), *model.ln_f.parameters()])
            return (vocab[0] * d + layers + d * labels + labels) / 1e6

    d = cfg.d_model if translation else _expanded(f"paper002-{experiment}")["d_model"]
    chosen = cfg.task_options["d_ff"] if translation else _expanded(f"paper002-{experiment}")["encoder_options"]["d_ff"]
    assert chosen == 512
    assert abs(count(chosen) - millions) <= 0.55, count(chosen)
    for other in (2048, 4 * d):   # nn.Transformer's default and nb's 4 x D would not fit
        assert abs(count(other) - millions) > 0.9


def test_a_classification_option_wins_over_its_preset_and_is_recorded() -> None:
    expanded = _expanded("paper002-mnli-bert", lr=3e-4, warmup=10, encoder_options={"n_layer": 2})
    assert (expanded["lr"], expanded["encoder_options"]["n_layer"], expanded["warmup"]) == (3e-4, 2, 10)
    assert "warmup_ratio" not in expanded      # --warmup replaces the preset's ratio
    assert expanded["preset_overridden"] == {"lr": {"preset": 1e-4, "run": 3e-4},
                                             "warmup_ratio": {"preset": 0.0, "run": None},
                                             "n_layer": {"preset": 3, "run": 2}}
    assert _expanded("tiny", lr=1e-3) == {"preset": "tiny", "lr": 1e-3}   # an architecture preset passes through
    from nbcli.errors import ConfigError
    from nbcli.tasks.finetune import FinetuneConfig

    with pytest.raises(ConfigError, match="with_classification_preset"):
        FinetuneConfig(preset="paper002-mnli-bert")     # not expanded: refused, not trained as something else
    assert FinetuneConfig(**_expanded("paper002-mnli-bert")).preset == "tiny"


def test_classification_summary_names_the_overridden_values(tmp_path: Path) -> None:
    from tests.cli.helpers import invoke
    from tests.tasks.builders import encoder_folder, write_corpus
    from tests.tasks.test_finetune import pairs

    bert = encoder_folder(tmp_path / "bert", "bert")
    train = write_corpus(tmp_path / "train.tsv", pairs(16), "tsv")
    result = invoke("train", "classification", "--preset", "paper002-sst2-bert", "-t", bert / "tokenizer.json",
                    "--corpus", train, "--text-field", "sentence1", "--d-model", "32", "--n-head", "2", "--n-layer", "1",
                    "--steps", "2", "--batch-size", "8", "--out", tmp_path / "run", "--json")
    assert result.exit_code == 0, result.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["preset_overridden"] == {"batch_size": {"preset": 128, "run": 8}, "d_model": {"preset": 768, "run": 32},
                                            "n_head": {"preset": 8, "run": 2}, "n_layer": {"preset": 3, "run": 1},
                                            "epochs": {"preset": 5.0, "run": None}}   # --steps 2 instead
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (config["recipe"], config["adam_beta2"], config["positions"], config["encoder_options"]["d_ff"],
            config["encoder_options"]["init_scheme"]) == ("paper002-sst2-bert", 0.98, "sinusoidal", 512, "xavier")
    refused = invoke("train", "classification", "--preset", "paper002-sst2-bert", "--init", bert, "--corpus", train,
                     "--out", tmp_path / "r2")
    assert refused.exit_code != 0 and "--preset paper002-sst2-bert" in refused.stderr and not (tmp_path / "r2").exists()


def test_the_summary_table_names_each_replaced_preset_value() -> None:
    from nbcli.tasks.lm import closing_rows

    rows = closing_rows({"preset_overridden": {"adam_beta2": {"preset": 0.997, "run": 0.98}}}, str)
    assert rows == [("preset's adam_beta2 replaced", "0.997 -> 0.98")]
    assert closing_rows({"preset_overridden": {}}, str) == [] and closing_rows({}, str) == []


@pytest.mark.parametrize("task, preset", [("lm", "paper001-roberta-12-ag"), ("translation", "paper001-mt-ag")])
def test_nb_trains_options_left_unset_keep_the_presets_guidance(task: str, preset: str) -> None:
    """nb train's option values (every option at its default) over an AG preset: its lambda and alpha_0
    stay (an option's default must not replace them); --ag-alpha auto and --ag-fraction given win."""
    from nbcli.tasks.common_options import common_config
    from nbcli.tasks.registry import get_task

    defaults = {o.name: o.default for o in get_task(task).options()}
    build = build_config if task == "lm" else (lambda name, **o: build_translation_config(name, dict(
        src_lang="de", tgt_lang="en"), **o))
    cfg = build(preset, **common_config(defaults))
    assert cfg.ag_fraction == (0.5 if task == "lm" else 0.25) and cfg.ag_alpha == (10.0 if task == "lm" else 100.0)
    assert cfg.preset_overridden == {}
    given = build(preset, **common_config({**defaults, "ag_alpha": "auto", "ag_fraction": 0.0}))
    assert (given.ag_alpha, given.ag_fraction) == ("auto", 0.0)
    assert set(given.preset_overridden) == {"ag_fraction"} | ({"ag_alpha"} if task == "lm" else set())
