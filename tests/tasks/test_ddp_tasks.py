"""`nb train --task translation|classification|tagging` under torchrun (CPU, gloo): 2 ranks x 1
micro-step equal 1 process x 2 micro-steps (--grad-accum 2) step for step, validation metrics
included; a DDP run stopped and resumed equals the uninterrupted single process; a refusal on rank 0
stops every rank with the one-line error; the validation set is run once over the ranks."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from nbcli.train.rundir import read_log
from tests.tasks.builders import WORDS, bert_tokenizer, encoder_folder, write_corpus
from tests.train.ddp_helpers import assert_same_records, nb_plain_ranks, nb_single, nb_torchrun

# slow: each test runs nb as one process and again as two ranks (torchrun or plain ranks); --quick leaves them out.
pytestmark = [pytest.mark.skipif(sys.platform != "linux", reason="torchrun/gloo tests run on Linux"), pytest.mark.slow]

LABELS = ("entailment", "neutral", "contradiction")
TAGS = ("B-LOC", "I-LOC", "O")
FINETUNE_KEYS = ("loss", "val_loss", "val_accuracy", "val_f1")
# what a run directory holds besides the files whose content is the run's own (checked by content)
RUN_FILES = {"config.json", "log.jsonl", "summary.json", "train-state.json", "train-state.safetensors"}


def _pairs(n: int, seed: int) -> list[tuple[str, str, str]]:
    rng = random.Random(seed)
    return [(" ".join(rng.choices(WORDS, k=rng.randint(2, 7))), " ".join(rng.choices(WORDS, k=rng.randint(2, 5))),
             rng.choice(LABELS)) for _ in range(n)]


def _conll(path: Path, sentences: int, seed: int) -> Path:
    rng = random.Random(seed)
    lines = []
    for _ in range(sentences):
        lines += [f"{rng.choice(WORDS)} {rng.choice(['O', 'B-PER', 'I-PER', 'B-LOC'])}" for _ in range(rng.randint(2, 6))]
        lines.append("")
    path.write_text("\n".join(lines) + "\n")
    return path


def _files(out: Path) -> set[str]:
    return {p.name for p in out.iterdir()}


def _tensors(path: Path) -> dict[str, torch.Tensor]:
    from nbcli.train.state import load_model_tensors

    return load_model_tensors(path)[0]


def _assert_close_checkpoints(a: Path, b: Path) -> None:
    one, two = _tensors(a), _tensors(b)
    assert one.keys() == two.keys()
    for name in one:
        torch.testing.assert_close(one[name], two[name], rtol=1e-4, atol=1e-5, msg=name)


def test_translation_two_ranks_equal_gradient_accumulation(tmp_path: Path, parallel_corpus: Path) -> None:
    """Dropout 0.1 (the tiny preset's) on: each micro-batch draws its masks by its place in the global
    batch, so the losses match; val_loss and BLEU/chrF are computed a share per rank and combined."""
    common = ["train", "--task", "translation", "--src-lang", "de", "--tgt-lang", "en",
              "--corpus", parallel_corpus / "train", "--valid", parallel_corpus / "valid",
              "-t", parallel_corpus / "joint.model", "--d-model", "32", "--steps", "3", "--eval-every", "2",
              "--eval-batches", "1", "--batch-size", "16", "--eval-sentences", "8", "--bias-init", "unigram",
              "--device", "cpu", "--json"]
    nb_single([*common, "--out", tmp_path / "one", "--grad-accum", "2"])
    ddp = nb_torchrun([*common, "--out", tmp_path / "two"])
    summary = json.loads(ddp.stdout)    # one report (rank 0's), not one per rank
    one, two = read_log(tmp_path / "one"), read_log(tmp_path / "two")
    assert assert_same_records(one, two, ("loss", "val_loss", "kl_unigram", "kl_uniform", "val_bleu", "val_chrf")) >= 12
    assert len({r["val_bleu"] for r in one if "val_bleu" in r}) > 1   # the metric moved: the comparison can fail
    assert _files(tmp_path / "one") == _files(tmp_path / "two") >= RUN_FILES | {"best.safetensors"}
    single = json.loads((tmp_path / "one" / "summary.json").read_text())
    assert summary == json.loads((tmp_path / "two" / "summary.json").read_text())
    assert (summary["best_step"], summary["best_val_bleu"]) == (single["best_step"], pytest.approx(single["best_val_bleu"]))
    _assert_close_checkpoints(tmp_path / "one" / "step-3.safetensors", tmp_path / "two" / "step-3.safetensors")


def test_classification_two_ranks_stopped_and_resumed_equal_one_process(tmp_path: Path) -> None:
    """nb's encoder from scratch (its MLM output layer is never read: frozen, or DDP would wait for its
    gradients), dropout 0.1; the DDP run stops at update 2 and resumes under torchrun."""
    tokenizer = tmp_path / "tokenizer.json"
    bert_tokenizer().save(str(tokenizer))
    train = write_corpus(tmp_path / "train.tsv", _pairs(24, 0), "tsv")
    valid = write_corpus(tmp_path / "valid.tsv", _pairs(11, 1), "tsv")
    common = ["train", "--task", "classification", "--corpus", train, "--valid", f"m={valid}", "--text-field",
              "sentence1", "--text-pair-field", "sentence2", "-t", tokenizer, "--steps", "3", "--batch-size", "8",
              "--eval-every", "2", "--save-every", "2", "--lr", "1e-3", "--device", "cpu"]
    nb_single([*common, "--out", tmp_path / "one", "--grad-accum", "2"])
    nb_torchrun([*common, "--out", tmp_path / "two", "--stop-at", "2"])
    assert not (tmp_path / "two" / "step-3.safetensors").exists()
    nb_torchrun([*common, "--out", tmp_path / "two", "--resume"])
    one, two = read_log(tmp_path / "one"), read_log(tmp_path / "two")
    assert assert_same_records(one, two, (*FINETUNE_KEYS, "val_m_loss", "val_m_accuracy")) >= 14
    assert len({r["val_loss"] for r in one if "val_loss" in r}) == 3
    assert _files(tmp_path / "one") == _files(tmp_path / "two") >= RUN_FILES | {"step-2.safetensors"}
    single, ddp = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("one", "two"))
    assert ddp["resumed_from"] == 2 and single["resumed_from"] is None
    for key in ("best_val_accuracy", "best_step", "steps"):
        assert ddp[key] == single[key], key
    assert_numbers_close(ddp["final"]["m"], single["final"]["m"], rel=1e-4)
    _assert_close_checkpoints(tmp_path / "one" / "step-3.safetensors", tmp_path / "two" / "step-3.safetensors")


def assert_numbers_close(got: dict, want: dict, rel: float) -> None:
    """A summary's metric record: the same keys, numbers within `rel`, everything else (the F1 average's
    name, "macro") equal. pytest.approx refuses a string under a tolerance (pytest 9)."""
    assert got.keys() == want.keys()
    for key, value in want.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            assert got[key] == pytest.approx(value, rel=rel), key
        else:
            assert got[key] == value, key


def test_tagging_two_ranks_equal_gradient_accumulation(tmp_path: Path) -> None:
    """A transformers (BERT) encoder with its own dropout; entity F1 and token accuracy by seqeval on
    the predictions gathered from both ranks."""
    bert = encoder_folder(tmp_path / "bert", "bert")
    train, valid = _conll(tmp_path / "train.conll", 16, 3), _conll(tmp_path / "valid.conll", 9, 4)
    common = ["train", "--task", "tagging", "--corpus", train, "--valid", valid, "--init", bert, "--steps", "3",
              "--batch-size", "4", "--eval-every", "2", "--lr", "1e-3", "--device", "cpu"]
    nb_single([*common, "--out", tmp_path / "one", "--grad-accum", "2"])
    nb_torchrun([*common, "--out", tmp_path / "two"])
    one, two = read_log(tmp_path / "one"), read_log(tmp_path / "two")
    assert assert_same_records(one, two, FINETUNE_KEYS) >= 12
    assert _files(tmp_path / "one") == _files(tmp_path / "two")
    _assert_close_checkpoints(tmp_path / "one" / "step-3.safetensors", tmp_path / "two" / "step-3.safetensors")


def test_translation_refusal_on_rank_0_stops_every_rank(tmp_path: Path, parallel_corpus: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "log.jsonl").write_text('{"step": 0, "loss": 1.0}\n')
    results = nb_plain_ranks(["train", "--task", "translation", "--src-lang", "de", "--tgt-lang", "en", "--corpus",
                              parallel_corpus / "train", "-t", parallel_corpus / "joint.model", "--out", out,
                              "--steps", "2", "--d-model", "32", "--device", "cpu"])
    for rank, (returncode, stderr) in enumerate(results):
        lines = stderr.strip().splitlines()
        assert returncode == 1 and len(lines) == 1, (rank, stderr[-2000:])
        assert lines[0].startswith(f"nb: error: --out {out}") and "already holds a run" in lines[0], (rank, lines)
    assert _files(out) == {"log.jsonl"}


def test_finetune_refusal_on_rank_0_stops_every_rank(tmp_path: Path) -> None:
    """Rank 0 alone creates DIR once every input is read; when it cannot (its parent is a file), the
    other rank raises the same one-line error at once instead of waiting in its first collective."""
    tokenizer = tmp_path / "tokenizer.json"
    bert_tokenizer().save(str(tokenizer))
    train = write_corpus(tmp_path / "train.tsv", _pairs(8, 0), "tsv")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    results = nb_plain_ranks(["train", "--task", "classification", "--corpus", train, "--text-field", "sentence1",
                              "-t", tokenizer, "--steps", "2", "--batch-size", "4", "--device", "cpu",
                              "--out", blocker / "run"])
    for rank, (returncode, stderr) in enumerate(results):
        lines = stderr.strip().splitlines()
        assert returncode == 1 and len(lines) == 1, (rank, stderr[-2000:])
        assert lines[0].startswith(f"nb: error: --out {blocker / 'run'}: cannot create"), (rank, lines)
    assert blocker.read_text() == "not a directory\n"


# ---------------------------------------------------------------------------------------------
# The validation set, a share per rank


class _RowModel(torch.nn.Module):
    """Logits from a fixed random embedding of the ids ([B, L] summed over real tokens, or [B, T, L]);
    it notes the rows it ran (each row's first id is 100 + its index)."""

    def __init__(self, tagging: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(200, len(LABELS))
        self.tagging = tagging
        self.rows: list[int] = []

    def forward(self, ids: torch.Tensor, key_mask: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        self.rows += [int(i) - 100 for i in ids[:, 0]]
        out = self.emb(ids)
        return out if self.tagging else (out * key_mask[..., None]).sum(1)


def _validation(task: str) -> tuple[Any, Any]:
    """A validation set of 11 records (an odd number: the shares differ in size) with random labels."""
    from nbcli.corpus.records import Example, Sentence
    from nbcli.tasks.data import Encoded
    from nbcli.tasks.labels import LabelSet

    rng = random.Random(task)
    items, records = [], []
    for row in range(11):
        n = rng.randint(2, 6)
        ids = [100 + row] + [rng.randrange(3, 99) for _ in range(n)]
        if task == "tagging":
            tags = [rng.randrange(len(TAGS)) for _ in range(n)]
            items.append((ids, [0] * len(ids), [-100] + tags))
            records.append(Sentence(tuple(f"w{i}" for i in range(n)), tuple(TAGS[t] for t in tags), None))  # type: ignore[arg-type]
        else:
            label = rng.randrange(len(LABELS))
            items.append((ids, [0] * len(ids), label))
            records.append(Example("text", None, LABELS[label], None))  # type: ignore[arg-type]
    return Encoded(items, records), LabelSet(TAGS if task == "tagging" else LABELS)


def _shared_metrics_worker(rank: int, folder: str) -> None:
    import torch.distributed as dist

    from nbcli.tasks.finetune import shared_metrics
    from nbcli.train.runtime import Runtime

    dist.init_process_group("gloo", init_method=f"file://{folder}/rendezvous", rank=rank, world_size=2)
    rt = Runtime(device=torch.device("cpu"), rank=rank, world=2)
    found = {}
    for task in ("classification", "tagging"):
        model = _RowModel(task == "tagging")
        data, labels = _validation(task)
        found[task] = {"metrics": shared_metrics(model, task, data, labels, 0, 3, rt), "rows": model.rows}
    dist.destroy_process_group()
    (Path(folder) / f"rank{rank}.json").write_text(json.dumps(found))


def test_validation_runs_each_record_once_over_the_ranks(tmp_path: Path) -> None:
    """shared_metrics on two gloo ranks: each rank runs every other record (together each record once),
    and both get the loss and metrics one process computes on the whole file (run_model, file_metrics)."""
    import torch.multiprocessing as mp

    from nbcli.tasks.inference import file_metrics, run_model

    mp.start_processes(_shared_metrics_worker, args=(str(tmp_path),), nprocs=2, join=True, start_method="spawn")
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for task in ("classification", "tagging"):
        data, labels = _validation(task)
        logits, loss = run_model(_RowModel(task == "tagging"), data, 0, 3, torch.device("cpu"))
        expected = {"loss": loss, **file_metrics(task, data, logits, labels)}
        assert 0 < expected["accuracy"] < 1
        assert ranks[0][task]["rows"] == list(range(0, 11, 2)) and ranks[1][task]["rows"] == list(range(1, 11, 2))
        for found in ranks:   # the loss: float32 sums over other batches
            assert found[task]["metrics"] == {**expected, "loss": pytest.approx(expected["loss"], rel=1e-6)}, task
