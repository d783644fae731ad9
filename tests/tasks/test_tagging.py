"""nb train --task tagging on Hugging Face token-classification records (tasks.tagging.read_sentences
through records.iter_sentences): tag names from the ClassLabel feature, else --label-names, else the
integers themselves (with a warning); integer tags of an evaluation file without names are the run's
labels by id; field options name record fields and are refused as names for CoNLL files."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from nbcli.errors import ConfigError, CorpusError
from nbcli.tasks.data import DataSpec
from nbcli.tasks.finetune import FinetuneConfig, finetune
from nbcli.tasks.inference import evaluate_classifier, load_classifier, predict_file
from nbcli.tasks.tagging import read_sentences
from tests.corpus.test_sentences import NAMES, write_records
from tests.tasks.builders import WORDS, encoder_folder


def tagged(n: int, seed: int = 0) -> list[tuple[list[str], list[str]]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(2, 6)
        out.append((rng.choices(WORDS, k=k), rng.choices(NAMES[:7], k=k)))   # B-MISC, I-MISC never occur
    return out


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> Path:
    return encoder_folder(tmp_path_factory.mktemp("enc") / "bert", "bert")


def _cfg(bert: Path, **data: str) -> FinetuneConfig:
    return FinetuneConfig(data=DataSpec(task="tagging", max_len=16, **data), init=str(bert), batch_size=4,
                          lr=1e-3, steps=1)


def test_hub_parquet_run_names_tags_by_classlabel_and_reads_ids_without_names(tmp_path, bert) -> None:
    train = write_records(tmp_path / "train.parquet", tagged(8), "parquet")
    valid = tagged(5, 1)
    parquet = write_records(tmp_path / "validation.parquet", valid, "parquet")
    (tmp_path / "ids").mkdir()
    ids = write_records(tmp_path / "ids" / "validation.jsonl", valid, "jsonl")   # Dataset.to_json: ids, no names
    result = finetune(_cfg(bert), [str(train)], {"dev": str(parquet)}, tmp_path / "run")
    assert result.labels == NAMES                         # the ClassLabel's order, unseen B-MISC/I-MISC included
    assert json.loads((tmp_path / "run" / "config.json").read_text())["labels"] == NAMES
    assert not result.warnings
    loaded = load_classifier(tmp_path / "run")
    by_names, by_ids = evaluate_classifier(loaded, [str(parquet)]), evaluate_classifier(loaded, [str(ids)])
    for key in ("loss", "accuracy", "f1", "precision", "recall"):
        assert by_ids[key] == pytest.approx(by_names[key]), key
    preds = predict_file(loaded, [str(ids)])
    assert [p["tokens"] for p in preds] == [tk for tk, _ in valid]
    assert all(set(p["tags"]) <= set(NAMES) for p in preds)


@pytest.mark.filterwarnings("ignore:.*seems not to be NE tag:UserWarning")   # seqeval, on the bare ids
def test_ids_without_names_name_themselves_and_the_run_says_so(tmp_path, bert) -> None:
    train = write_records(tmp_path / "train.jsonl", tagged(8), "jsonl")
    result = finetune(_cfg(bert), [str(train)], {"dev": str(train)}, tmp_path / "run")
    largest = max(NAMES.index(t) for _, tags in tagged(8) for t in tags)
    assert result.labels == [str(i) for i in range(largest + 1)]
    assert any("integer ids without names" in w for w in result.warnings)
    loaded = load_classifier(tmp_path / "run")
    assert set(predict_file(loaded, [str(train)])[0]["tags"]) <= set(result.labels)


def test_label_names_name_the_ids(tmp_path, bert) -> None:
    train = write_records(tmp_path / "train.jsonl", tagged(8), "jsonl")
    named = write_records(tmp_path / "named.parquet", tagged(8), "parquet")
    cfg = _cfg(bert)
    cfg.label_names = ",".join(NAMES)
    result = finetune(cfg, [str(train)], {"dev": str(train)}, tmp_path / "run")
    assert result.labels == NAMES and not result.warnings
    assert [s.tags for s in read_sentences([str(train)], tag_names=NAMES)] == [tuple(tg) for _, tg in tagged(8)]
    loaded = load_classifier(tmp_path / "run")
    assert evaluate_classifier(loaded, [str(train)])["f1"] == pytest.approx(
        evaluate_classifier(loaded, [str(named)])["f1"])


def test_other_fields_and_conll_refusals(tmp_path, bert) -> None:
    train = write_records(tmp_path / "pos.parquet", tagged(8), "parquet", tag_field="pos_tags")
    result = finetune(_cfg(bert, label_field="pos_tags"), [str(train)], {"dev": str(train)}, tmp_path / "run")
    assert result.labels == NAMES
    conll = tmp_path / "t.conll"
    conll.write_text("the O\nof B-PER\n")
    with pytest.raises(CorpusError, match=r"t\.conll: CoNLL text has columns, not named fields.*not 'pos_tags'"):
        finetune(_cfg(bert, label_field="pos_tags"), [str(conll)], {}, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
    with pytest.raises(ConfigError, match="--text-pair-field applies to --task classification"):
        DataSpec(task="tagging", pair_field="sentence2")


def test_conll_columns_by_number(tmp_path, bert) -> None:
    """CoNLL-U through the data spec: FORM and UPOS by column number; the default columns are refused."""
    lines = []
    for i, (tokens, tags) in enumerate(tagged(6)):
        lines += [f"# sent_id = {i}", f"# text = {' '.join(tokens)}"]
        lines += [f"{n}\t{w}\t{w}\t{t}\t_\t_\t0\tdep\t_\t_" for n, (w, t) in enumerate(zip(tokens, tags), 1)] + [""]
    ud = tmp_path / "train.conllu"
    ud.write_text("\n".join(lines) + "\n")
    result = finetune(_cfg(bert, text_field="1", label_field="3"), [str(ud)], {"dev": str(ud)}, tmp_path / "run")
    assert set(result.labels) == {t for _, tags in tagged(6) for t in tags}
    assert [p["tokens"] for p in predict_file(load_classifier(tmp_path / "run"), [str(ud)])] == \
        [tk for tk, _ in tagged(6)]
    with pytest.raises(CorpusError, match=r"train\.conllu:3: column 0 numbers the tokens"):
        finetune(_cfg(bert), [str(ud)], {}, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
