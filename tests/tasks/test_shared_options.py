"""Options every task shares mean the same in each: warm-up as steps (--warmup) or as a share of the
run (--warmup-ratio), never both; --valid for the LM as for the other tasks."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nbcli.errors import ConfigError
from nbcli.tasks.runs import train_task
from nbcli.tokenizers import load_tokenizer
from nbcli.train.rundir import read_log
from tests import forked_nb
from tests.tasks.builders import bert_tokenizer, write_corpus


def _task_options(tmp_path: Path, sp_model: Path, train_corpus: Path, parallel_corpus: Path) -> dict[str, dict]:
    tokenizer = tmp_path / "tokenizer.json"
    bert_tokenizer().save(str(tokenizer))
    rows = [(f"good {i} fine", None, "pos") if i % 2 else (f"bad {i} awful", None, "neg") for i in range(16)]
    return {
        "lm": {"corpus": [str(train_corpus)], "tokenizer": str(sp_model), "seq_len": 32, "batch_size": 8},
        "translation": {"corpus": [str(parallel_corpus / "train")], "valid": [str(parallel_corpus / "valid")],
                        "src_lang": "de", "tgt_lang": "en", "src_tokenizer": str(parallel_corpus / "joint.model"),
                        "tgt_tokenizer": str(parallel_corpus / "joint.model"), "d_model": 32, "d_ff": 64,
                        "eval_sentences": 4, "batch_size": 8},
        "classification": {"corpus": [str(write_corpus(tmp_path / "train.tsv", rows, "tsv"))],
                           "tokenizer": str(tokenizer), "batch_size": 4}}


def _peak_step(out: Path) -> int:
    lrs = [r["lr"] for r in read_log(out) if "lr" in r]
    return int(np.argmax(lrs))


@pytest.mark.slow
def test_warmup_as_steps_or_ratio_in_every_task(tmp_path: Path, sp_model: Path, train_corpus: Path,
                                                parallel_corpus: Path) -> None:
    """Linear warm-up then decay in each task's schedule: the learning rate rises over the warm-up
    and first peaks at its last update (index 2 of 0-based steps for 3 warm-up updates): ceil(R x 8)
    = 3 updates for --warmup-ratio 0.3 as for --warmup 3; giving both is refused."""
    common: dict[str, Any] = {"steps": 8, "eval_every": 8, "device": "cpu", "lr_schedule": "linear"}
    for name, options in _task_options(tmp_path, sp_model, train_corpus, parallel_corpus).items():
        given = {**options, **({k: v for k, v in common.items() if name != "classification" or k != "lr_schedule"})}
        train_task(name, {**given, "out": tmp_path / f"{name}-ratio", "warmup_ratio": 0.3})
        train_task(name, {**given, "out": tmp_path / f"{name}-steps", "warmup": 3})
        assert _peak_step(tmp_path / f"{name}-ratio") == _peak_step(tmp_path / f"{name}-steps") == 2, name
        ratio_lrs = [r["lr"] for r in read_log(tmp_path / f"{name}-ratio") if "lr" in r]
        steps_lrs = [r["lr"] for r in read_log(tmp_path / f"{name}-steps") if "lr" in r]
        assert ratio_lrs == steps_lrs, name
        with pytest.raises(ConfigError, match="--warmup and --warmup-ratio"):
            train_task(name, {**given, "out": tmp_path / f"{name}-both", "warmup": 3, "warmup_ratio": 0.3})
        assert not (tmp_path / f"{name}-both").exists()


def test_warmup_ratio_out_of_range_is_one_line(tmp_path: Path, sp_model: Path, train_corpus: Path) -> None:
    result = forked_nb.run([sys.executable, "-m", "nbcli", "train", "lm", "--corpus", str(train_corpus), "-t",
                             str(sp_model), "--out", str(tmp_path / "r"), "--warmup-ratio", "1.5"],
                            capture_output=True, text=True)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "--warmup-ratio must be in [0, 1)" in result.stderr
    assert not (tmp_path / "r").exists()


def test_lm_valid_trains_on_the_whole_corpus_and_validates_on_valid(tmp_path: Path, sp_model: Path,
                                                                    train_corpus: Path) -> None:
    """With --valid no document of the corpus is held out: the training counts are those of every
    corpus document (each + EOS, counted here independently), and the validation loss is the valid
    file's (a different file gives a different loss at step 0, same model)."""
    from nbcli.counts import read_counts

    lines = [line for line in train_corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    valid = tmp_path / "valid.txt"
    valid.write_text("\n".join(reversed(lines[:40])) + "\n", encoding="utf-8")
    other = tmp_path / "other.txt"
    other.write_text("\n".join(lines[-40:]) + "\n", encoding="utf-8")
    base = {"corpus": [str(train_corpus)], "tokenizer": str(sp_model), "seq_len": 32, "batch_size": 8, "steps": 1,
            "device": "cpu"}
    summary = train_task("lm", {**base, "out": tmp_path / "v", "valid": [str(valid)]})
    train_task("lm", {**base, "out": tmp_path / "o", "valid": [str(other)]})
    train_task("lm", {**base, "out": tmp_path / "h"})

    tok = load_tokenizer(sp_model)
    expected = np.zeros(tok.vocab_size, dtype=np.int64)
    for ids in tok.encode_batch(lines):
        np.add.at(expected, ids + [tok.eos_id], 1)
    assert np.array_equal(read_counts(tmp_path / "v" / "counts.safetensors").counts, expected)
    held_out = read_counts(tmp_path / "h" / "counts.safetensors").counts
    assert held_out.sum() < expected.sum()          # --val-fraction held documents out of training
    config = json.loads((tmp_path / "v" / "config.json").read_text())
    assert config["task_options"]["valid"] == [str(valid)]
    v0, o0 = (read_log(tmp_path / d)[0]["val_loss"] for d in ("v", "o"))
    assert math.isfinite(v0) and v0 != o0
    assert summary["final_val_loss"] is not None


def test_lm_valid_missing_file_is_one_line(tmp_path: Path, sp_model: Path, train_corpus: Path) -> None:
    result = forked_nb.run([sys.executable, "-m", "nbcli", "train", "lm", "--corpus", str(train_corpus), "-t",
                             str(sp_model), "--out", str(tmp_path / "r"), "--valid", str(tmp_path / "nope.txt"),
                             "--steps", "1"], capture_output=True, text=True)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "nope.txt" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()
