"""nb export's model card (README.md): the Hub's metadata parses with huggingface_hub's own ModelCard, its
metrics are the run's (summary.json, log.jsonl), its papers are the methods the run used, and the Python
it shows (and docs/training.md's) runs against the installed transformers."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest

from tests.cli.helpers import invoke

transformers = pytest.importorskip("transformers")
huggingface_hub = pytest.importorskip("huggingface_hub")


def _export(run: Path, out: Path) -> huggingface_hub.ModelCard:
    result = invoke("export", run, "-o", out)
    assert result.exit_code == 0, result.output
    return huggingface_hub.ModelCard.load(out / "README.md")


def _run_python(code: str, capsys: pytest.CaptureFixture[str], cwd: Path | None = None) -> str:
    """Run `code` (in `cwd`: a card's code names its folder from the folder's parent); what it printed."""
    import os

    before = Path.cwd()
    os.chdir(cwd or before)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # MarianTokenizer recommends sacremoses
            exec(compile(code, "snippet", "exec"), {"__name__": "snippet"})  # noqa: S102
    finally:
        os.chdir(before)
    return capsys.readouterr().out


def test_translation_card_holds_the_runs_metrics_and_its_code_runs(
        tmp_path: Path, translation_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    card = _export(translation_run, tmp_path / "mt")
    data = card.data
    summary = json.loads((translation_run / "summary.json").read_text())
    config = json.loads((translation_run / "config.json").read_text())
    assert (data.library_name, data.pipeline_tag, data.language) == ("transformers", "translation", ["de", "en"])
    assert config["bias_init"] == "unigram" and "arxiv:2212.09686" in data.tags   # paper 000's output bias
    assert not any(tag in data.tags for tag in ("arxiv:2010.02399", "arxiv:2407.12514"))   # no AG, normal init
    results = {r.metric_type: r for r in data.eval_results}
    assert summary["best_step"] == 4 and set(results) == {"bleu", "chrf"}   # the export is best.safetensors
    assert results["bleu"].metric_value == summary["best_val_bleu"]
    assert results["bleu"].metric_config == summary["bleu_signature"]
    logged = [json.loads(line) for line in (translation_run / "log.jsonl").read_text().splitlines()]
    chrf = [r["val_chrf"] for r in logged if r["step"] == summary["best_step"] and "val_chrf" in r][-1]
    assert results["chrf"].metric_value == chrf and results["chrf"].dataset_split == "validation"
    generation = json.loads((tmp_path / "mt" / "generation_config.json").read_text())
    assert f"num_beams {generation['num_beams']}" in card.text
    (code,) = re.findall(r"```python\n(.*?)```", card.text, flags=re.DOTALL)
    printed = _run_python(code, capsys, tmp_path)
    assert re.fullmatch(r"\['.*'\]\n", printed), printed


def test_docs_export_example_runs(tmp_path: Path, translation_run: Path, capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/training.md's Python for an exported folder runs (as written, in a folder holding hf/mt), and
    nb export --help names the same calls; no page or help shows pipeline("translation"), gone from
    transformers 5."""
    from nbcli.cli.export import EPILOG

    docs = Path(__file__).resolve().parents[2] / "docs"
    text = (docs / "training.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL) if "hf/mt" in b]
    assert len(blocks) == 1
    (tmp_path / "hf").mkdir()
    _export(translation_run, tmp_path / "hf" / "mt")
    monkeypatch.chdir(tmp_path)
    assert re.fullmatch(r"\['.*'\]\n", _run_python(blocks[0], capsys))
    help_text = " ".join(EPILOG.split())
    for call in ("AutoTokenizer.from_pretrained(", "AutoModelForSeq2SeqLM.from_pretrained(", "model.generate(",
                 "tokenizer.batch_decode("):
        assert call in help_text and call in blocks[0], call
    assert all(hasattr(transformers, name) for name in ("AutoTokenizer", "AutoModelForSeq2SeqLM",
                                                        "AutoModelForSequenceClassification",
                                                        "AutoModelForTokenClassification"))
    for page in [*docs.rglob("*.md"), Path(__file__).resolve().parents[2] / "README.md"]:
        assert 'pipeline("translation"' not in page.read_text(encoding="utf-8"), page
    assert "pipeline(" not in EPILOG


@pytest.fixture(scope="module")
def classifier_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERT sentence-pair classifier with a named --valid set (3 updates)."""
    from nbcli.tasks.data import DataSpec
    from nbcli.tasks.finetune import FinetuneConfig, finetune
    from tests.tasks.builders import encoder_folder, write_corpus
    from tests.tasks.test_finetune import pairs

    root = tmp_path_factory.mktemp("card-clf")
    cfg = FinetuneConfig(data=DataSpec(text_field="sentence1", pair_field="sentence2"),
                         init=str(encoder_folder(root / "bert", "bert")), steps=3, batch_size=8, lr=5e-3)
    finetune(cfg, [str(write_corpus(root / "train.jsonl", pairs(16), "jsonl"))],
             {"dev": str(write_corpus(root / "dev.tsv", pairs(6, 1), "tsv"))}, root / "run")
    return root / "run"


def test_classifier_card_metrics_equal_the_summarys_and_its_code_runs(
        tmp_path: Path, classifier_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    card = _export(classifier_run, tmp_path / "clf")
    data = card.data
    summary = json.loads((classifier_run / "summary.json").read_text())
    assert (data.library_name, data.pipeline_tag) == ("transformers", "text-classification")
    assert data.base_model is None and not any(t.startswith("arxiv:") for t in data.tags)   # a local BERT, no paper
    got = {r.metric_type: r.metric_value for r in data.eval_results if r.dataset_name == "dev"}
    if summary["best_step"] == summary["steps"]:   # the exported best step is the last: summary.json's final
        final = summary["final"]["dev"]
        assert got == {"accuracy": final["accuracy"], "f1": final["f1"], "matthews_correlation": final["matthews"]}
    else:   # an earlier best step: its log.jsonl evaluation record
        records = [json.loads(line) for line in (classifier_run / "log.jsonl").read_text().splitlines()]
        at = next(r for r in records if r["step"] == summary["best_step"] and "val_loss" in r)
        assert got == {"accuracy": at["val_dev_accuracy"], "f1": at["val_dev_f1"]}
    assert {r.dataset_type for r in data.eval_results} == {"dev.tsv"}
    (code,) = re.findall(r"```python\n(.*?)```", card.text, flags=re.DOTALL)
    printed = _run_python(code, capsys, tmp_path)
    assert printed.strip() in {f"[{name!r}]" for name in summary["labels"]}


def test_papers_and_hub_ids() -> None:
    from nbcli.hf.model_card import hub_datasets, hub_model, papers_used

    assert papers_used({"bias_init": "zero", "embedding_init": "normal"}) == {}
    assert set(papers_used({"bias_init": "unigram", "ag_fraction": 0.5, "embedding_init": "xavier"})) == {
        "000", "001", "002"}
    assert set(papers_used({"task_options": {"ag_decoder_fraction": 0.25}})) == {"001"}
    assert set(papers_used({"embedding_init": "normal", "encoder_options": {"embedding_shuffle": True}})) == {"002"}
    cache = "/home/u/.cache/huggingface/hub/models--google-bert--bert-base-uncased/snapshots/86b5e0934494"
    assert hub_model(cache) == "google-bert/bert-base-uncased"
    assert hub_model("prajjwal1/bert-tiny@main") == "prajjwal1/bert-tiny" and hub_model(None) is None
    assert hub_model(__file__) is None                                          # a local path
    assert hub_datasets(["hf://datasets/glue/sst2/train.parquet", "x.tsv", "hf://datasets/glue/sst2/dev.parquet"]) == [
        "glue/sst2"]
    snapshot = "/home/u/.cache/huggingface/hub/datasets--stanfordnlp--imdb/snapshots/e6281661ce1c/plain_text/t.parquet"
    assert hub_datasets(["nyu-mll/glue:sst2:train", "x.tsv", snapshot, "nyu-mll/glue:sst2:validation"]) == [
        "nyu-mll/glue", "stanfordnlp/imdb"]
