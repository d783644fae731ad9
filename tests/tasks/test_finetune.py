"""nb train --task classification|tagging in Python: input forms give identical batches, labels
round-trip by name, resume equals uninterrupted, metrics on the whole file, bad input."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from nbcli.errors import CorpusError, NbError
from nbcli.tasks.data import DataSpec, encode_file, make_labels, read_records
from nbcli.tasks.finetune import FinetuneConfig, finetune, learning_rate
from nbcli.tasks.inference import evaluate_classifier, load_classifier, predict_file
from nbcli.tasks.tagging import align_words
from nbcli.tokenizers import load_tokenizer
from tests.tasks.builders import WORDS, encoder_folder, write_corpus

LABELS = ("entailment", "neutral", "contradiction")


def pairs(n: int, seed: int = 0) -> list[tuple[str, str, str]]:
    rng = random.Random(seed)
    return [(" ".join(rng.choices(WORDS, k=rng.randint(2, 7))), " ".join(rng.choices(WORDS, k=rng.randint(2, 5))),
             rng.choice(LABELS)) for _ in range(n)]


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> Path:
    return encoder_folder(tmp_path_factory.mktemp("enc") / "bert", "bert")


def test_input_forms_give_identical_batches(tmp_path, bert) -> None:
    rows = pairs(12)
    tok = load_tokenizer(bert)
    spec = DataSpec(text_field="sentence1", pair_field="sentence2")
    batches = []
    for form in ("tsv", "csv", "jsonl", "parquet"):
        path = write_corpus(tmp_path / f"d.{form}", rows, form)
        records = read_records(spec, [str(path)])
        labels = make_labels(spec, records, None, [str(path)])
        assert labels.names == tuple(sorted(LABELS))
        batches.append(encode_file(spec, tok, records, labels).batch(list(range(12)), 0))
    for other in batches[1:]:
        for name in ("ids", "key_mask", "type_ids", "labels"):
            assert torch.equal(getattr(batches[0], name), getattr(other, name))
    assert bool((batches[0].type_ids == 1).any())     # the pair's segment is marked


def test_word_piece_alignment_labels_first_piece() -> None:
    assert align_words([-1, 0, 0, 1, 2, 2, 2, -1], [5, 6, 7]) == [-100, 5, -100, 6, 7, -100, -100, -100]


def test_linear_schedule() -> None:
    lrs = [learning_rate(s, 10, 1.0, 0.2) for s in range(10)]
    assert lrs[:2] == [0.5, 1.0] and lrs[2] == 1.0 and abs(lrs[-1] - 1 / 8) < 1e-12
    assert all(a >= b for a, b in zip(lrs[1:], lrs[2:]))


def _run(tmp_path: Path, bert: Path, name: str, **kw) -> Path:
    train = write_corpus(tmp_path / "train.jsonl", pairs(24), "jsonl")
    valid = write_corpus(tmp_path / "valid.tsv", pairs(10, 1), "tsv")
    cfg = FinetuneConfig(data=DataSpec(text_field="sentence1", pair_field="sentence2"), init=str(bert),
                         batch_size=8, lr=1e-3, **kw)
    finetune(cfg, [str(train)], {"m": str(valid), "mm": str(valid)}, tmp_path / name)
    return tmp_path / name


def test_train_predict_eval_roundtrip_by_name(tmp_path, bert) -> None:
    out = _run(tmp_path, bert, "run", steps=4)
    summary = json.loads((out / "summary.json").read_text())
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    evals = [r for r in log if "val_accuracy" in r]
    assert evals and "val_m_f1" in evals[-1] and "val_mm_accuracy" in evals[-1]
    assert summary["best_val_accuracy"] == max(r["val_accuracy"] for r in evals)
    loaded = load_classifier(out / "step-4.safetensors")
    preds = predict_file(loaded, [str(tmp_path / "valid.tsv")])
    gold = [r[2] for r in pairs(10, 1)]
    assert len(preds) == 10 and all(p["label"] in LABELS and abs(sum(p["probs"].values()) - 1) < 1e-5 for p in preds)
    metrics = evaluate_classifier(loaded, [str(tmp_path / "valid.tsv")])
    accuracy = sum(p["label"] == g for p, g in zip(preds, gold)) / 10
    assert abs(metrics["accuracy"] - accuracy) < 1e-12
    assert abs(metrics["accuracy"] - evals[-1]["val_accuracy"]) < 1e-12


def test_resume_equals_uninterrupted(tmp_path, bert) -> None:
    from nbcli.train.state import load_model_tensors

    whole = _run(tmp_path, bert, "whole", steps=6, save_every=3, eval_every=2)
    cfg = FinetuneConfig(data=DataSpec(text_field="sentence1", pair_field="sentence2"), init=str(bert),
                         batch_size=8, lr=1e-3, steps=6, save_every=3, eval_every=2)
    files = [str(tmp_path / "train.jsonl")], {"m": str(tmp_path / "valid.tsv"), "mm": str(tmp_path / "valid.tsv")}
    cut = tmp_path / "cut"
    finetune(cfg, *files, cut, stop_at=3)
    assert (cut / "step-3.safetensors").exists() and not (cut / "step-6.safetensors").exists()
    result = finetune(cfg, *files, cut, resume=True)
    assert result.resumed_from == 3
    a, _ = load_model_tensors(whole / "step-6.safetensors")
    b, _ = load_model_tensors(cut / "step-6.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    start, _ = load_model_tensors(cut / "step-3.safetensors")
    assert not all(torch.equal(a[k], start[k]) for k in a)   # the last three updates changed something
    log_whole = (whole / "log.jsonl").read_text().splitlines()
    assert (cut / "log.jsonl").read_text().splitlines() == log_whole or [
        {k: v for k, v in json.loads(line).items() if k != "tokens_per_s"} for line in log_whole] == [
        {k: v for k, v in json.loads(line).items() if k != "tokens_per_s"}
        for line in (cut / "log.jsonl").read_text().splitlines()]
    summaries = [json.loads((d / "summary.json").read_text()) for d in (whole, cut)]
    for key in ("best_val_accuracy", "best_step", "final"):
        assert summaries[0][key] == summaries[1][key]


def test_changed_options_refuse_resume(tmp_path, bert) -> None:
    out = _run(tmp_path, bert, "run", steps=2)
    cfg = FinetuneConfig(data=DataSpec(text_field="sentence1", pair_field="sentence2"), init=str(bert),
                         batch_size=8, lr=2e-3, steps=2)
    with pytest.raises(NbError, match="--resume: options differ"):
        finetune(cfg, [str(tmp_path / "train.jsonl")], {"m": str(tmp_path / "valid.tsv")}, out, resume=True)


def test_tagging_run(tmp_path, bert) -> None:
    rng = random.Random(3)
    lines = []
    for _ in range(12):
        for _w in range(rng.randint(2, 6)):
            lines.append(f"{rng.choice(WORDS)} {rng.choice(['O', 'B-PER', 'I-PER', 'B-LOC'])}")
        lines.append("")
    (tmp_path / "t.conll").write_text("\n".join(lines) + "\n")
    cfg = FinetuneConfig(data=DataSpec(task="tagging"), init=str(bert), batch_size=4, lr=1e-3, steps=3)
    result = finetune(cfg, [str(tmp_path / "t.conll")], {"dev": str(tmp_path / "t.conll")}, tmp_path / "tag")
    assert 0 <= result.final["dev"]["f1"] <= 1
    preds = predict_file(load_classifier(tmp_path / "tag"), [str(tmp_path / "t.conll")])
    assert len(preds) == 12 and all(len(p["tags"]) == len(p["tokens"]) for p in preds)


@pytest.mark.parametrize("case", ["missing_column", "no_label_field", "unseen_label", "empty", "conll_no_tag",
                                  "blank_label"])
def test_bad_input_is_one_line_and_leaves_nothing(tmp_path, bert, case: str) -> None:
    train = write_corpus(tmp_path / "train.jsonl", pairs(8), "jsonl")
    valid = write_corpus(tmp_path / "valid.tsv", pairs(4, 1), "tsv")
    task = "classification"
    if case == "missing_column":
        (tmp_path / "valid.tsv").write_text("sentence1\tlabel\nthe\tneutral\n")
    elif case == "no_label_field":
        train.write_text(train.read_text() + json.dumps({"sentence1": "a", "sentence2": "b"}) + "\n")
    elif case == "unseen_label":
        valid.write_text(valid.read_text() + "the\tof\tmaybe\n")
    elif case == "empty":
        valid.write_text("")
    elif case == "blank_label":
        valid.write_text(valid.read_text() + "the\tof\t \n")
    else:
        task = "tagging"
        train = tmp_path / "t.conll"
        train.write_text("the O\nof B-PER\n\nand\nto O\n")
        valid = train
    cfg = FinetuneConfig(data=DataSpec(task=task, **({} if task == "tagging" else
                                                        {"text_field": "sentence1", "pair_field": "sentence2"})),
                         init=str(bert), steps=2, batch_size=4)
    with pytest.raises(NbError) as err:
        finetune(cfg, [str(train)], {"v": str(valid)}, tmp_path / "out")
    message = str(err.value)
    assert "\n" not in message and not (tmp_path / "out").exists()
    where = {"missing_column": "valid.tsv:", "no_label_field": "train.jsonl:9", "unseen_label": "valid.tsv:6",
             "empty": "valid.tsv", "conll_no_tag": "t.conll:4", "blank_label": "valid.tsv:6"}[case]
    assert where in message, message
    if case == "unseen_label":
        assert isinstance(err.value, CorpusError) and "maybe" in message
    if case == "blank_label":
        assert isinstance(err.value, CorpusError) and "is empty" in message


def test_run_model_equals_one_record_at_a_time(tmp_path, bert) -> None:
    """run_model's batched logits (copied to the host once per batch) and its mean loss (summed on the
    device) equal each record run alone and an independent cross-entropy over the labelled records."""
    import torch.nn.functional as F

    from nbcli.tasks.data import padding_id
    from nbcli.tasks.inference import run_model

    out = _run(tmp_path, bert, "run", steps=1)
    loaded = load_classifier(out / "step-1.safetensors")
    spec = DataSpec(text_field="sentence1", pair_field="sentence2")
    records = read_records(spec, [str(tmp_path / "valid.tsv")])
    data = encode_file(spec, loaded.tokenizer, records, loaded.labels)
    pad = padding_id(loaded.tokenizer)
    logits, loss = run_model(loaded.model, data, pad, 4, torch.device("cpu"))
    alone, nll = [], 0.0
    with torch.no_grad():
        for i in range(len(data.items)):
            one = data.batch([i], pad)
            lg = loaded.model(one.ids, one.key_mask, one.type_ids)[0]
            alone.append(lg)
            nll += float(F.cross_entropy(lg[None].double(), one.labels.long(), reduction="sum"))
    assert len(logits) == len(alone) == 10
    for a, b in zip(logits, alone):
        assert a.dtype == torch.float32 and torch.allclose(a, b, atol=1e-5)
    assert loss == pytest.approx(nll / 10, rel=1e-5)


def _write_rows(path: Path, rows: torch.Tensor) -> Path:
    from safetensors.torch import save_file

    save_file({"emb": rows.contiguous()}, str(path))
    return path


def test_encoder_options_shape_and_paper_002_inits(tmp_path, bert) -> None:
    """d_model, n_head and encoder_options over the preset's: the width and depth asked for, and paper 002's
    Pre-trained_Xavier (eq. 1), Pre-trained_Shuffled (sec. 3.4) and Xavier_Pre-trained (eq. 4) on the
    input embedding, checked against statistics computed here."""
    from nbcli.tasks.encoders import encoder_from_scratch

    tok = load_tokenizer(bert)
    V, d = tok.vocab_size, 24
    gen = torch.Generator().manual_seed(5)
    rows = torch.randn(V, d, generator=gen) * 0.7 + 0.3
    spec = f"pretrained:{_write_rows(tmp_path / 'rows.safetensors', rows)}:emb"

    def emb(init: str, **options) -> torch.Tensor:
        model = encoder_from_scratch(tok, "classification", 3, preset="tiny", seq_len=32, dropout=0.1,
                                     embedding_init=init, positions="learned", pooling="first", seed=7,
                                     d_model=d, n_head=2, options={"n_layer": 1, **options})
        assert model.encoder.cfg.n_layer == 1 and model.encoder.cfg.d_model == d
        return model.encoder.tok_emb.weight.detach()

    assert torch.equal(emb(spec), rows)
    standardised = emb(spec, embedding_standardise="xavier")
    assert abs(float(standardised.mean())) < 1e-6
    assert abs(float(standardised.std()) - (2 / (V + d)) ** 0.5) < 1e-6
    assert torch.allclose((standardised - standardised.mean()) / standardised.std(),
                          (rows - rows.mean()) / rows.std(), atol=1e-5)   # an affine map of the rows
    shuffled = emb(spec, embedding_shuffle=True, embedding_shuffle_mode="rows-columns")
    assert not torch.equal(shuffled, rows)
    assert torch.equal(shuffled.flatten().sort().values, rows.flatten().sort().values)
    assert sorted(map(tuple, shuffled.sort(dim=0).values.T.tolist())) == \
        sorted(map(tuple, rows.sort(dim=0).values.T.tolist()))   # the columns permuted as wholes
    matched = emb("xavier", embedding_standardise=f"match:{tmp_path / 'rows.safetensors'}:emb")
    assert abs(float(matched.mean()) - float(rows.mean())) < 1e-5
    assert abs(float(matched.std()) - float(rows.std())) < 1e-5
    assert torch.equal(emb("xavier", embedding_standardise=f"match:{tmp_path / 'rows.safetensors'}"), matched)


def test_encoder_options_through_the_api(tmp_path, bert) -> None:
    import nbcli

    train = write_corpus(tmp_path / "train.jsonl", pairs(16), "jsonl")
    out = tmp_path / "scratch"
    nbcli.finetune_classifier(train, out, tokenizer=bert / "tokenizer.json", valid=[f"v={train}"],
                              text_field="sentence1", pair_field="sentence2", steps=2, batch_size=8, lr=1e-3,
                              d_model=24, n_head=2, encoder_options={"n_layer": 1, "embedding_standardise": "xavier"})
    assert json.loads((out / "config.json").read_text())["encoder_options"] == {
        "n_layer": 1, "embedding_standardise": "xavier"}
    encoder = load_classifier(out / "step-2.safetensors").model.encoder
    assert encoder.cfg.d_model == 24 and encoder.cfg.n_layer == 1
    with pytest.raises(NbError, match="unknown encoder option.*lr"):
        nbcli.finetune_classifier(train, tmp_path / "x", tokenizer=bert / "tokenizer.json", text_field="sentence1",
                                  steps=1, encoder_options={"lr": 0.1})
    with pytest.raises(NbError, match="n_layer"):
        nbcli.finetune_classifier(train, tmp_path / "y", tokenizer=bert / "tokenizer.json", text_field="sentence1",
                                  steps=1, encoder_options={"n_layer": "deep"})
    with pytest.raises(NbError, match="from scratch"):
        nbcli.finetune_classifier(train, tmp_path / "z", init=bert, text_field="sentence1", steps=1,
                                  encoder_options={"embedding_shuffle": True})
    assert not any((tmp_path / n).exists() for n in ("x", "y", "z"))


@pytest.mark.parametrize("options", [dict(embedding_init="xavier"), dict(preset="small")])
def test_init_refuses_from_scratch_options_in_the_core(tmp_path: Path, options: dict[str, str]) -> None:
    """The check lives in FinetuneConfig, so the Python API refuses what the command refuses (an
    --init encoder brings its own embedding), before any run directory exists."""
    import nbcli

    with pytest.raises(NbError, match="--init BASE brings its own|init"):
        FinetuneConfig(init=str(tmp_path / "encoder"), **options)  # type: ignore[arg-type]
    with pytest.raises(NbError):
        nbcli.finetune_classifier(tmp_path / "train.tsv", tmp_path / "run", init=tmp_path / "encoder", **options)
    assert not (tmp_path / "run").exists()


def test_tagging_refuses_the_pair_field_in_the_core() -> None:
    """Tagging's text and label fields name record fields or CoNLL columns (tests/tasks/test_tagging.py)."""
    with pytest.raises(NbError, match="applies to --task classification"):
        DataSpec(task="tagging", pair_field="sentence2")
    assert DataSpec(task="tagging", label_field="ner").tag_field == "ner" and DataSpec(task="tagging").tag_field is None


@pytest.mark.parametrize("encoder", ["bert", "nb"])
def test_an_update_builds_no_device_tensor_and_reads_once(tmp_path, bert, encoder: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 34 (tests/host_copies.py): an update of 2 micro-batches, a transformers or nb encoder, makes
    no host read but its sums (the tokens are counted on the host as batches are built, the real tokens
    of the update's examples) and builds no tensor from host data."""
    from nbcli.train.data import TrainSampler
    from tests.host_copies import update_copies

    counter = update_copies(monkeypatch)
    train = write_corpus(tmp_path / "train.jsonl", pairs(24), "jsonl")
    valid = write_corpus(tmp_path / "valid.tsv", pairs(10, 1), "tsv")
    source = dict(init=str(bert)) if encoder == "bert" else dict(tokenizer=str(bert / "tokenizer.json"))
    cfg = FinetuneConfig(data=DataSpec(text_field="sentence1", pair_field="sentence2"), batch_size=8, lr=1e-3,
                         steps=3, grad_accum=2, eval_every=10, **source)
    result = finetune(cfg, [str(train)], {"m": str(valid)}, tmp_path / "run")
    assert len(counter.updates) == 3
    for events in counter.updates:
        assert [kind for kind, _ in events] == ["tolist"], events
        assert events[0][1].startswith("step.py")
    spec = cfg.data
    items = encode_file(spec, load_tokenizer(bert), read_records(spec, [str(train)]),
                        make_labels(spec, read_records(spec, [str(train)]), None, [str(train)])).items
    assert result.tokens == sum(len(items[i][0]) for i in TrainSampler(len(items), 0).blocks(0, 3 * 8))


@pytest.mark.parametrize("task", ["classification", "tagging"])
def test_every_trainable_parameter_gets_a_gradient(tmp_path, bert, task: str) -> None:
    """DDP waits for a gradient of every trainable parameter (a multi-rank run stops at its second
    update otherwise): the classifier from scratch, on an nb MLM run (its MLM output layer, which the
    head never reads, is frozen but saved) and on a transformers encoder trains exactly what it uses."""
    from nbcli.tasks.encoders import encoder_from_scratch, open_encoder
    from nbcli.train.state import save_model

    tok = load_tokenizer(bert)
    scratch = encoder_from_scratch(tok, task, 3, preset="tiny", seq_len=16, dropout=0.1, embedding_init="normal",
                                   positions="learned", pooling="first", seed=0, options={"n_layer": 1})
    save_model(tmp_path / "step-0.safetensors", scratch.encoder, {"nb.config": json.dumps(
        {**scratch.spec.config, "special_ids": list(scratch.spec.config["special_ids"])})})
    models = {"scratch": scratch, "nb": open_encoder(str(tmp_path / "step-0.safetensors"), task, 3),
              "bert": open_encoder(str(bert), task, 3)}
    ids = torch.randint(5, tok.vocab_size, (2, 6), generator=torch.Generator().manual_seed(0))
    for name, model in models.items():
        model(ids, torch.ones(2, 6, dtype=torch.bool), torch.zeros(2, 6, dtype=torch.long)).sum().backward()
        unused = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
        assert unused == [], (name, unused)
        if name != "bert":
            assert not model.encoder.mlm.dense.weight.requires_grad and "encoder.mlm.dense.weight" in model.state_dict()
