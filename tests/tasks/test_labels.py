"""Label sets (nbcli.tasks.labels): how a stored label finds its class, kept in the checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbcli.errors import ConfigError, CorpusError
from nbcli.tasks.labels import LabelSet, collected_names, label_names_option
from tests.tasks.builders import encoder_folder


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return encoder_folder(tmp_path_factory.mktemp("enc") / "bert", "bert")


@settings(max_examples=80, deadline=None)
@given(ids=st.sets(st.integers(0, 50), min_size=1, max_size=8))
def test_integer_labels_with_gaps_are_their_own_classes(ids: set[int]) -> None:
    """Labels {0, 2, 5} collected from the data are three classes named "0", "2", "5": the int 2 is
    the class named "2" (not names[2] = "5"), and an int never seen is refused."""
    labels = LabelSet(collected_names(ids))
    for i in ids:
        assert labels.names[labels.index(i, "f:1")] == str(i)
        assert labels.names[labels.index(str(i), "f:1")] == str(i)
    unseen = next(i for i in range(52) if i not in ids)
    with pytest.raises(CorpusError, match="never seen in training"):
        labels.index(unseen, "f:1")


@settings(max_examples=80, deadline=None)
@given(ids=st.sets(st.integers(0, 50), min_size=1, max_size=8), data=st.data())
def test_an_int_and_its_digit_string_are_one_class(ids: set[int], data: st.DataObject) -> None:
    """A JSONL file whose labels mix 1 and "1" (one class written two ways): one class per name, each
    label indexing it (was: 'label names repeat: 0, 1, 1', naming no file, and no run)."""
    as_text = data.draw(st.sets(st.sampled_from(sorted(ids))))
    labels = [*ids, *(str(i) for i in as_text)]
    names = collected_names(data.draw(st.permutations(labels)))
    assert sorted(names) == sorted(str(i) for i in ids) and len(set(names)) == len(names)
    label_set = LabelSet(names)
    for label in labels:
        assert label_set.names[label_set.index(label, "f:1")] == str(label)


def test_label_names_given_twice_are_refused_naming_the_option() -> None:
    with pytest.raises(ConfigError, match=r"--label-names 'neg,pos,neg': 'neg' is given twice"):
        label_names_option("neg,pos,neg", [])


def test_given_names_are_indexed_by_ints_and_digit_strings() -> None:
    labels = LabelSet(("entailment", "neutral", "contradiction"), given=True)
    assert labels.index(2, "f:1") == 2 and labels.index("1", "f:1") == 1 and labels.index("neutral", "f:1") == 1
    with pytest.raises(CorpusError, match="f:3: label 3 was never seen"):
        labels.index(3, "f:3")


def test_ints_do_not_index_names_collected_from_strings() -> None:
    """A file of int tags evaluated against a run trained on string tags is an error, not names[i]."""
    labels = LabelSet(("B-ORG", "I-ORG", "O"))
    with pytest.raises(CorpusError, match="never seen"):
        labels.index(1, "f:2")


@pytest.mark.parametrize("labels", [LabelSet(("0", "2", "5")), LabelSet(("1", "2", "3"), given=True),
                                    LabelSet(("neg", "pos")), LabelSet(("neg", "pos"), given=True)])
def test_metadata_round_trip(labels: LabelSet) -> None:
    meta = labels.to_metadata()
    assert all(isinstance(v, str) for v in meta.values())
    assert LabelSet.from_metadata(meta) == labels


def test_checkpoints_from_before_labels_given_read_as_they_were_written() -> None:
    digits = LabelSet.from_metadata({"nb.labels": json.dumps(["0", "2", "5"])})
    assert not digits.given and digits.index(5, "f:1") == 2
    named = LabelSet.from_metadata({"nb.labels": json.dumps(["neg", "pos"])})
    assert named.given and named.index(1, "f:1") == 1


def test_a_run_on_labels_with_gaps_evaluates_by_name(tmp_path: Path, bert: Path) -> None:
    """Train on JSON lines whose labels are 0, 2 and 5; the checkpoint's predictions and eval's gold
    labels are the same names, and the label stored as 5 is class "5"."""
    from nbcli.tasks.data import DataSpec
    from nbcli.tasks.finetune import FinetuneConfig, finetune
    from nbcli.tasks.inference import evaluate_classifier, load_classifier, predict_file

    rows = [{"text": f"the model bias {'token ' * (i % 3)}", "label": (0, 2, 5)[i % 3]} for i in range(18)]
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    finetune(FinetuneConfig(data=DataSpec(), init=str(bert), batch_size=6, lr=1e-3, steps=2), [str(train)], {},
             out)
    loaded = load_classifier(out / "step-2.safetensors")
    assert loaded.labels.names == ("0", "2", "5") and not loaded.labels.given
    preds = predict_file(loaded, [str(train)])
    metrics = evaluate_classifier(loaded, [str(train)])
    accuracy = sum(p["label"] == str(r["label"]) for p, r in zip(preds, rows)) / len(rows)
    assert metrics["accuracy"] == pytest.approx(accuracy, abs=1e-12)


def test_classification_takes_classlabel_names_from_a_hub_parquet(tmp_path: Path) -> None:
    """GLUE as the Hub ships it: parquet with integer labels and the ClassLabel names in the schema
    metadata `huggingface`; the run's labels are the names, in id order (given: ints index them)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from nbcli.tasks.data import DataSpec, known_labels, make_labels, read_records

    names = ["negative", "positive"]
    features = {"sentence": {"dtype": "string", "_type": "Value"}, "label": {"names": names, "_type": "ClassLabel"}}
    table = pa.table({"sentence": ["a fine film", "a dull film", "fine"], "label": [1, 0, 1]})
    table = table.replace_schema_metadata({b"huggingface": json.dumps({"info": {"features": features}}).encode()})
    path = tmp_path / "train-00000-of-00001.parquet"
    pq.write_table(table, path)
    spec = DataSpec(text_field="sentence")
    assert known_labels(spec, None, [str(path)]) == names
    labels = make_labels(spec, read_records(spec, [str(path)]), None, [str(path)])
    assert labels == LabelSet(("negative", "positive"), given=True)
    assert [labels.names[labels.index(r.label, r.origin)] for r in read_records(spec, [str(path)])] == \
        ["positive", "negative", "positive"]
    assert known_labels(spec, "bad,good", [str(path)]) == ["bad", "good"]     # --label-names wins
