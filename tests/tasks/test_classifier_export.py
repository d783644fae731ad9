"""nb export of classifier and tagger runs: transformers' Auto classes load the folder with the same
logits (<= 1e-4), the labels by name, the run's tokenizer beside it; nb's own encoder is refused."""

from __future__ import annotations

import json
import random

import pytest
import torch
import transformers

from nbcli.errors import NbError
from nbcli.models.heads import FAMILIES, TokenHead
from nbcli.tasks.classifier_export import export_classifier, hf_classifier_config
from nbcli.tasks.data import DataSpec
from nbcli.tasks.finetune import FinetuneConfig, finetune
from nbcli.tasks.inference import load_classifier
from nbcli.tokenizers import load_tokenizer
from tests.cli.helpers import assert_one_line_error, invoke
from tests.tasks.builders import WORDS, encoder_folder, write_corpus
from tests.tasks.test_finetune import LABELS, pairs


def _conll(path, seed: int = 0):
    rng = random.Random(seed)
    lines = []
    for _ in range(10):
        lines += [f"{rng.choice(WORDS)} {rng.choice(['O', 'B-PER', 'I-PER', 'B-LOC'])}"
                  for _ in range(rng.randint(2, 6))] + [""]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert"])
@pytest.mark.parametrize("task", ["classification", "tagging"])
def test_export_loads_in_transformers_with_same_logits(tmp_path, family: str, task: str) -> None:
    folder = encoder_folder(tmp_path / family, family)
    if task == "classification":
        train = write_corpus(tmp_path / "train.jsonl", pairs(16), "jsonl")
        spec = DataSpec(text_field="sentence1", pair_field="sentence2")
    else:
        train = _conll(tmp_path / "train.conll")
        spec = DataSpec(task="tagging")
    cfg = FinetuneConfig(data=spec, init=str(folder), steps=3, batch_size=8, lr=5e-3)
    finetune(cfg, [str(train)], {}, tmp_path / "run")
    report = export_classifier(tmp_path / "run", tmp_path / "hf")
    loaded = load_classifier(tmp_path / "run")
    auto = transformers.AutoModelForSequenceClassification if task == "classification" else \
        transformers.AutoModelForTokenClassification
    theirs = auto.from_pretrained(tmp_path / "hf").eval()
    names = list(loaded.labels.names)
    assert report.labels == names and theirs.config.id2label == dict(enumerate(names))
    assert theirs.config.label2id == {n: i for i, n in enumerate(names)}
    if task == "classification":
        assert set(names) == set(LABELS)
    # the exported tokenizer encodes as the run's
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    ours = load_tokenizer(tmp_path / "run" / "tokenizer.json")
    text = "the frequency of a token in the corpus"
    assert tok(text, add_special_tokens=False)["input_ids"] == ours.encode(text)
    assert tok.pad_token is not None and len(tok(text)["input_ids"]) == len(ours.encode(text)) + 2   # <s>/[CLS] .. [SEP]
    ids = torch.randint(5, 40, (3, 11))
    mask = torch.ones(3, 11, dtype=torch.bool)
    mask[1, 7:] = False
    with torch.no_grad():
        mine = loaded.model(ids, mask)
        ref = theirs(input_ids=ids, attention_mask=mask.long()).logits
    keep = mask if task == "tagging" else torch.ones(3, dtype=torch.bool)
    assert mine.shape == ref.shape
    assert torch.allclose(mine[keep], ref[keep], atol=1e-4)
    assert not torch.allclose(mine, torch.zeros_like(mine))


def test_from_scratch_run_is_refused_in_one_line(tmp_path) -> None:
    folder = encoder_folder(tmp_path / "bert", "bert")
    train = write_corpus(tmp_path / "train.jsonl", pairs(8), "jsonl")
    cfg = FinetuneConfig(data=DataSpec(text_field="sentence1", pair_field="sentence2", max_len=32),
                         tokenizer=str(folder / "tokenizer.json"), steps=1, batch_size=8)
    finetune(cfg, [str(train)], {}, tmp_path / "run")
    with pytest.raises(NbError, match="pre-LN"):
        export_classifier(tmp_path / "run", tmp_path / "hf")
    result = invoke("export", tmp_path / "run", "-o", tmp_path / "hf")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "pre-LN")
    assert not (tmp_path / "hf").exists()


def test_export_cli_json_and_translation_options_refused(tmp_path) -> None:
    folder = encoder_folder(tmp_path / "bert", "bert")
    train = write_corpus(tmp_path / "train.jsonl", pairs(8), "jsonl")
    cfg = FinetuneConfig(data=DataSpec(text_field="sentence1", pair_field="sentence2"), init=str(folder), steps=1,
                         batch_size=8)
    finetune(cfg, [str(train)], {}, tmp_path / "run")
    refused = invoke("export", tmp_path / "run", "-o", tmp_path / "x", "--beam", "4")
    assert refused.exit_code == 1 and "--beam" in refused.stderr and not (tmp_path / "x").exists()
    result = invoke("export", tmp_path / "run" / "step-1.safetensors", "-o", tmp_path / "hf", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["layout"] == "BertForSequenceClassification" and report["step"] == 1
    assert {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"} <= set(report["files"])


def test_config_keeps_the_encoder_and_names_labels() -> None:
    row = FAMILIES["roberta"]
    config = hf_classifier_config({"model_type": "roberta", "architectures": ["RobertaForMaskedLM"], "hidden_size": 8,
                                   "id2label": {"0": "LABEL_0"}}, row, TokenHead, ["B-PER", "O"])
    assert config["architectures"] == ["RobertaForTokenClassification"] and config["hidden_size"] == 8
    assert config["id2label"] == {"0": "B-PER", "1": "O"} and config["label2id"] == {"B-PER": 0, "O": 1}
    assert "problem_type" not in config
    # no architectures in the encoder's config: the family row's class; a sentence head adds its problem type
    bare = hf_classifier_config({"model_type": "xlm-roberta"}, row, row.sequence_head, ["a", "b"])
    assert bare["architectures"] == ["RobertaForSequenceClassification"]
    assert bare["problem_type"] == "single_label_classification"
    xlmr = hf_classifier_config({"model_type": "xlm-roberta", "architectures": ["XLMRobertaModel"]}, row, TokenHead, ["a"])
    assert xlmr["architectures"] == ["XLMRobertaForTokenClassification"]


def test_exported_tokenizer_truncates_where_nb_predict_does(tmp_path) -> None:
    """tokenizer_config.json's model_max_length is the run's --max-len (was: the encoder's positions), so
    AutoTokenizer(truncation=True) plus the exported model give nb predict's labels and probabilities on
    lines longer than --max-len."""
    from nbcli.tasks.inference import predict_file

    folder = encoder_folder(tmp_path / "bert", "bert")
    train = write_corpus(tmp_path / "train.jsonl", pairs(16), "jsonl")
    cfg = FinetuneConfig(data=DataSpec(text_field="sentence1", pair_field="sentence2", max_len=16), init=str(folder),
                         steps=3, batch_size=8, lr=5e-3)
    finetune(cfg, [str(train)], {}, tmp_path / "run")
    export_classifier(tmp_path / "run", tmp_path / "hf")
    rng = random.Random(3)
    rows = [(" ".join(rng.choices(WORDS, k=rng.randint(10, 25))), " ".join(rng.choices(WORDS, k=rng.randint(3, 20))),
             LABELS[0]) for _ in range(12)]
    long = write_corpus(tmp_path / "long.jsonl", rows, "jsonl")
    ours = predict_file(load_classifier(tmp_path / "run"), [str(long)])
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert tok.model_max_length == 16
    model = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf").eval()
    batch = tok([r[0] for r in rows], [r[1] for r in rows], truncation=True, padding=True, return_tensors="pt")
    assert batch["input_ids"].shape[1] == 16
    with torch.no_grad():
        probs = torch.softmax(model(**batch).logits, dim=-1)
    names = [model.config.id2label[i] for i in range(probs.shape[1])]
    assert [names[i] for i in probs.argmax(-1).tolist()] == [p["label"] for p in ours]
    assert torch.allclose(probs, torch.tensor([[p["probs"][n] for n in names] for p in ours]), atol=1e-4)


def test_macro_f1_is_scikit_learns_default() -> None:
    """A run of three labels scored on a file whose gold and predictions hold two: macro F1 over the labels
    present, as f1_score(average="macro") (was: over all three, the absent one counting 0)."""
    from sklearn.metrics import f1_score

    from nbcli.tasks.classification import classification_metrics

    gold, pred = [0, 0, 1, 1, 1, 0, 1], [0, 1, 1, 1, 0, 0, 1]
    got = classification_metrics(gold, pred, 3)
    assert got["f1"] == pytest.approx(f1_score(gold, pred, average="macro")) and got["f1_average"] == "macro"
    pred3 = [0, 2, 1, 1, 0, 0, 1]
    assert classification_metrics(gold, pred3, 3)["f1"] == pytest.approx(f1_score(gold, pred3, average="macro"))
    assert classification_metrics(gold, pred, 2)["f1"] == pytest.approx(f1_score(gold, pred))
