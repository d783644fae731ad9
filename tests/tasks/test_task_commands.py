"""nb eval, nb predict, nb export, nb translate and nb generate go through the task a run records
(`Task.evaluate`, `Task.predict_report`, `Task.export`, `Task.translate`, `Task.generate`): a task's own
options reach it by name, another's are refused naming the task, and a task without the command says so; an eval or
predict report records the Hub datasets among its inputs whatever the task; nb's own classifier runs
take the same path (tests/cli/test_predict.py, tests/tasks/test_classifier_export.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nbcli.tasks import registry
from nbcli.tasks.base import Task
from tests.cli.helpers import assert_one_line_error, invoke
from tests.corpus.test_hub_datasets import parquet_bytes
from tests.hub_cache import add_dataset_snapshot, commit_hash


class EchoTask(Task):
    """Predicts each line's length; exports a file naming the beam it was given."""

    name = "echo"
    help = "a test task"
    export_options = frozenset({"beam"})

    def predict(self, run: Path, corpus: list[str]) -> list[dict[str, Any]]:
        return [{"length": len(line)} for path in corpus for line in Path(path).read_text().splitlines()]

    def export(self, run: Path, out: Path, **options: Any) -> dict[str, Any]:
        out.mkdir()
        (out / "beam.txt").write_text(str(options["beam"]))
        return {"out": str(out), "beam": options["beam"], "options": sorted(options)}


class ParrotTask(Task):
    """Generates each prompt's first word repeated `max_new_tokens` times; nothing else."""

    name = "parrot"
    help = "a test task that generates"
    generate_options = frozenset({"tokenizer", "max_new_tokens", "seed", "progress_bar"})

    def generate(self, run: Path, prompts: list[str], **options: Any) -> dict[str, Any]:
        words = [line.split()[0] for path in prompts for line in Path(path).read_text().splitlines() if line.strip()]
        return {"run": str(run), "options": sorted(options), "seed": options["seed"],
                "tokenizer": None if options["tokenizer"] is None else str(options["tokenizer"]),
                "progress_bar": options["progress_bar"] is not None,
                "continuations": [" ".join([w] * options["max_new_tokens"]) for w in words]}


class JudgeTask(Task):
    """Evaluates by naming its inputs; nothing else."""

    name = "judge"
    help = "a test task that evaluates"

    def evaluate(self, run: Path, corpus: list[str], **options: Any) -> dict[str, Any]:
        return {"run": str(run), "inputs": list(corpus)}


@pytest.fixture
def echo_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    targets = {**registry.task_targets(), "echo": f"{__name__}:EchoTask", "parrot": f"{__name__}:ParrotTask",
               "judge": f"{__name__}:JudgeTask"}
    monkeypatch.setattr(registry, "task_targets", lambda: targets)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"task": "echo"}))
    (tmp_path / "in.txt").write_text("ab\nabcd\n\n")
    return run


@pytest.fixture
def parrot_run(echo_run: Path, tmp_path: Path) -> Path:
    run = tmp_path / "parrot-run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"task": "parrot"}))
    (tmp_path / "prompts.txt").write_text("ab cd\n\nef\n")
    return run


def test_predict_runs_the_recorded_task(echo_run: Path, tmp_path: Path) -> None:
    result = invoke("predict", echo_run, "--corpus", tmp_path / "in.txt", "-o", tmp_path / "p.jsonl", "--json")
    assert result.exit_code == 0, result.stderr
    assert [json.loads(x) for x in (tmp_path / "p.jsonl").read_text().splitlines()] == [
        {"length": 2}, {"length": 4}, {"length": 0}]
    report = json.loads(result.stdout)
    assert (report["task"], report["records"]) == ("echo", 3)


def test_predict_refuses_an_option_the_task_does_not_read(echo_run: Path, tmp_path: Path) -> None:
    result = invoke("predict", echo_run, "--corpus", tmp_path / "in.txt", "-o", tmp_path / "p.jsonl",
                    "--batch-size", "8")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "--batch-size: not an option of nb predict for a run of nb train echo")
    assert not (tmp_path / "p.jsonl").exists()


def test_export_passes_the_task_its_options_and_refuses_the_others(echo_run: Path, tmp_path: Path) -> None:
    result = invoke("export", echo_run, "-o", tmp_path / "hf", "--beam", "3", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {"out": str(tmp_path / "hf"), "beam": 3, "options": ["beam"]}
    assert (tmp_path / "hf" / "beam.txt").read_text() == "3"
    refused = invoke("export", echo_run, "-o", tmp_path / "hf2", "--lenpen", "0.5", "--src-tokenizer",
                     tmp_path / "in.txt")
    assert refused.exit_code == 1
    assert_one_line_error(refused.stderr, "--tokenizer/--src-tokenizer, --lenpen: not an option of nb export for a "
                          "run of nb train echo")
    assert not (tmp_path / "hf2").exists()


def test_a_task_without_an_export_says_so(tmp_path: Path) -> None:
    run = tmp_path / "lm-run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"task": "lm"}))
    result = invoke("export", run, "-o", tmp_path / "hf")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "nb train lm runs have no nb export")
    result = invoke("predict", run, "--corpus", run / "config.json")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "nb train lm runs have no nb predict")
    assert not (tmp_path / "hf").exists()


def test_the_python_api_takes_the_same_path(echo_run: Path, tmp_path: Path) -> None:
    from nbcli.api import export_checkpoint, predict_labels

    report = predict_labels(echo_run, tmp_path / "in.txt")
    assert report.predictions == [{"length": 2}, {"length": 4}, {"length": 0}]
    assert report.datasets == []
    assert export_checkpoint(echo_run, tmp_path / "hf", beam=2).beam == 2


def test_eval_and_predict_of_any_task_record_the_hub_datasets_among_their_inputs(
        echo_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`datasets` comes from the seam (nbcli.tasks.runs.eval_run, predict_run), not from the task: a task of
    another package gets it, the snapshot's commit for an id, [] for files."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    add_dataset_snapshot(tmp_path / "hf" / "hub", "org/lines", {
        "data/test-00000-of-00001.parquet": parquet_bytes({"text": ["ab", "abcd"]})}, commit_hash("lines"))
    run = tmp_path / "judge-run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"task": "judge"}))
    result = invoke("eval", run, "--corpus", "org/lines::test", "--corpus", tmp_path / "in.txt", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["inputs"] == ["org/lines::test", str(tmp_path / "in.txt")]
    assert [(d["input"], d["repo_id"], d["commit"], d["config"], d["split"], d["cache"], d["files"])
            for d in report["datasets"]] == [("org/lines::test", "org/lines", commit_hash("lines"), "default", "test",
                                              "hub", ["data/test-00000-of-00001.parquet"])]
    on_files = invoke("eval", run, "--corpus", tmp_path / "in.txt", "--json")
    assert on_files.exit_code == 0, on_files.stderr
    assert json.loads(on_files.stdout)["datasets"] == []
    predicted = invoke("predict", echo_run, "--corpus", tmp_path / "in.txt", "--json")
    assert predicted.exit_code == 0, predicted.stderr
    assert json.loads(predicted.stdout)["datasets"] == []


def test_translate_goes_to_the_task_too(echo_run: Path, tmp_path: Path) -> None:
    result = invoke("translate", echo_run, "-i", tmp_path / "in.txt", "-o", tmp_path / "out.txt")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "nb train echo runs have no nb translate (nb predict, nb export read them)")
    assert not (tmp_path / "out.txt").exists()


def test_generate_runs_the_recorded_task_with_its_options(parrot_run: Path, tmp_path: Path) -> None:
    result = invoke("generate", parrot_run, "--prompts", tmp_path / "prompts.txt", "--max-new-tokens", "2", "--seed",
                    "7", "-t", tmp_path / "in.txt", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {
        "run": str(parrot_run), "options": ["max_new_tokens", "progress_bar", "seed", "tokenizer"], "seed": 7,
        "tokenizer": str(tmp_path / "in.txt"), "progress_bar": True, "continuations": ["ab ab", "ef ef"]}
    shown = invoke("generate", parrot_run, "--prompts", tmp_path / "prompts.txt")   # a person's view: its scalars
    assert shown.exit_code == 0, shown.stderr
    assert "seed" in shown.stdout and "parrot-run" in shown.stdout


def test_generate_refuses_by_name_the_options_the_task_does_not_read(parrot_run: Path, tmp_path: Path) -> None:
    result = invoke("generate", parrot_run, "--prompts", tmp_path / "prompts.txt", "--scale-ln-bias", "0,1",
                    "--no-kv-cache", "--map", "output_bias=b", "--out", tmp_path / "study", "--seed", "3")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "--scale-ln-bias, --out, --no-kv-cache, --map: not an option of nb "
                          "generate for a run of nb train parrot")
    assert not (tmp_path / "study").exists()


@pytest.mark.parametrize(("task", "inference"), [("translation", "translate"), ("classification", "predict"),
                                                 ("tagging", "predict"), ("echo", "predict")])
def test_generate_refuses_a_run_of_a_task_without_it_naming_its_inference(echo_run: Path, tmp_path: Path, task: str,
                                                                          inference: str) -> None:
    run = tmp_path / f"{task}-run"
    run.mkdir(exist_ok=True)
    (run / "config.json").write_text(json.dumps({"task": task}))
    result = invoke("generate", run, "--prompts", tmp_path / "in.txt", "--out", tmp_path / "study")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, f"{run} is a run of nb train {task}: use nb {inference} (nb train {task} "
                          "runs have no nb generate)")
    assert not (tmp_path / "study").exists()


def test_generate_in_python_takes_the_same_path(parrot_run: Path, tmp_path: Path) -> None:
    import nbcli
    from nbcli.errors import NbError

    report = nbcli.generate(parrot_run, tmp_path / "prompts.txt", tmp_path / "in.txt", max_new_tokens=3)
    assert report.to_dict()["continuations"] == ["ab ab ab", "ef ef ef"]
    assert report.to_dict()["progress_bar"] is False
    with pytest.raises(NbError, match=r"^scale_ln_bias, kv_cache=False: not an option of nb generate for a run of "
                                      r"nb train parrot$"):
        nbcli.generate(parrot_run, tmp_path / "prompts.txt", tmp_path / "in.txt", scale_ln_bias=[0.5], kv_cache=False)
