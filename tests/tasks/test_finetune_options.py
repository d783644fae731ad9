"""nb train classification|tagging: the optimiser and schedule options (paper 002 app. A.2's Adam
(0.9, 0.98, 1e-9), no stated schedule) reach AdamW and the log, declared once under --help."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from nbcli.errors import ConfigError
from nbcli.tasks.data import DataSpec
from nbcli.tasks.finetune import FinetuneConfig, train_config
from nbcli.train.step import make_optimizer
from tests.cli.helpers import assert_one_line_error, invoke
from tests.tasks.builders import encoder_folder, write_corpus
from tests.tasks.test_finetune import pairs


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> Path:
    return encoder_folder(tmp_path_factory.mktemp("enc") / "bert", "bert")


def test_adam_options_reach_the_optimizer() -> None:
    cfg = FinetuneConfig(adam_beta1=0.8, adam_beta2=0.98, adam_eps=1e-9, weight_decay=0.0, grad_clip=0.0,
                         lr_schedule="constant")
    tcfg = train_config(cfg, 10, 5)
    assert (tcfg.adam_beta1, tcfg.adam_beta2, tcfg.adam_eps, tcfg.weight_decay, tcfg.grad_clip,
            tcfg.lr_schedule) == (0.8, 0.98, 1e-9, 0.0, 0.0, "constant")
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
    optimizer = make_optimizer(model, tcfg, torch.device("cpu"))
    for group in optimizer.param_groups:
        assert group["betas"] == (0.8, 0.98) and group["eps"] == 1e-9 and group["weight_decay"] == 0.0
    defaults = train_config(FinetuneConfig(), 10, 5)
    assert (defaults.adam_beta1, defaults.adam_beta2, defaults.adam_eps, defaults.weight_decay,
            defaults.lr_schedule) == (0.9, 0.999, 1e-8, 0.01, "linear")


@pytest.mark.parametrize("options, fragment", [
    (dict(adam_beta1=1.0), "--adam-beta1"), (dict(adam_beta2=-0.1), "--adam-beta2"), (dict(adam_eps=0.0), "--adam-eps"),
    (dict(weight_decay=float("inf")), "--weight-decay"), (dict(lr_schedule="step"), "--lr-schedule")])
def test_bad_optimizer_options_are_refused(options: dict, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        FinetuneConfig(data=DataSpec(), **options)


def test_cli_constant_schedule_and_adam_in_config(tmp_path: Path, bert: Path) -> None:
    train = write_corpus(tmp_path / "train.jsonl", pairs(16), "jsonl")
    result = invoke("train", "classification", "--init", bert, "--corpus", train, "--text-field", "sentence1",
                    "--text-pair-field", "sentence2", "--steps", "4", "--batch-size", "8", "--lr", "1e-3",
                    "--warmup-ratio", "0.25", "--lr-schedule", "constant", "--adam-beta1", "0.85", "--adam-beta2",
                    "0.98", "--adam-eps", "1e-9", "--weight-decay", "0", "--grad-clip", "0", "--out", tmp_path / "run",
                    "--json")
    assert result.exit_code == 0, result.stderr
    lrs = [json.loads(line)["lr"] for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()
           if "lr" in json.loads(line)]
    assert lrs == [1e-3] * 4   # warm-up of ceil(0.25 x 4) = 1 update reaches the peak at once; then constant
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (config["adam_beta1"], config["adam_beta2"], config["adam_eps"], config["lr_schedule"]) == \
        (0.85, 0.98, 1e-9, "constant")


def test_cli_refuses_a_bad_beta_in_one_line(tmp_path: Path, bert: Path) -> None:
    train = write_corpus(tmp_path / "train.jsonl", pairs(8), "jsonl")
    result = invoke("train", "classification", "--init", bert, "--corpus", train, "--adam-beta2", "1.5",
                    "--out", tmp_path / "run")
    assert result.exit_code != 0
    assert_one_line_error(result.stderr, "--adam-beta2")
    assert not (tmp_path / "run").exists()
