"""`nb attention-maps` on a tiny real run (CliRunner and a subprocess): JSON, PNG, table, API, errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.cli.helpers import assert_one_line_error, invoke, run_nb

SENTENCE = "Welcome to the show."


@pytest.fixture(scope="module")
def ag_run(tmp_path_factory: pytest.TempPathFactory, sp_model: Path, sample_lines: list[str]) -> Path:
    """An MLM run with attention guidance on half the heads, checkpoints at steps 0, 2, 4, 6."""
    base = tmp_path_factory.mktemp("attn")
    corpus = base / "corpus.txt"
    corpus.write_text("\n".join(sample_lines) + "\n", encoding="utf-8")
    out = base / "run"
    result = invoke("train", "--corpus", corpus, "-t", sp_model, "--out", out, "--steps", "6", "--save-every", "2",
                    "--objective", "mlm", "--ag-fraction", "0.5", "--seq-len", "32", "--batch-size", "8",
                    "--eval-every", "2", "--eval-batches", "2")
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.slow
def test_json_and_png_subprocess(ag_run: Path, sp_model: Path, tmp_path: Path) -> None:
    fig = tmp_path / "fig.png"
    proc = run_nb("attention-maps", ag_run, "-t", sp_model, "--sentence", SENTENCE, "-o", fig, "--json")
    assert proc.returncode == 0, proc.stderr.decode()
    report = json.loads(proc.stdout)
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and report["plot"] == str(fig)
    # nb train saves the initial model: 0 % (and 1 % of 6 steps, step 0) is exact, without a note of its own;
    # 1 % finds the checkpoint 0 % found: computed and drawn once, and a note says so
    assert [c["step"] for c in report["checkpoints"]] == [0, 0, 6]
    assert not any(c["note"] for c in report["checkpoints"])
    assert len(report["notes"]) == 1 and report["notes"][0].startswith("1% found step 0, the checkpoint already shown for 0%")
    assert report["ag_heads"] == {"0": "next", "1": "prev"}       # sec. 4.5's default for an mlm run
    # by default a readable figure: the guided heads of the last layer (--heads assigned: of every layer)
    assert [(h["layer"], h["head"], h["assigned"]) for h in report["heads"]] == [(1, 0, "next"), (1, 1, "prev")]
    T = len(report["ids"])
    assert report["tokens"][0] == "<s>" and report["tokens"][-1] == "</s>"
    assert list(report["patterns"]) == ["next", "prev", "first", "delim", "period"]
    assert len(report["maps"]) == 2 * 2  # two heads at two distinct checkpoints (steps 0 and 6)
    assert {(m["layer"], m["head"], m["step"]) for m in report["maps"]} == {(1, 0, 0), (1, 1, 0), (1, 0, 6), (1, 1, 6)}
    for row in report["maps"]:
        H = row["matrix"]
        assert len(H) == T and all(abs(sum(r) - 1) < 1e-5 for r in H)
        assert row["closest"] == min(row["distances"], key=lambda n: row["distances"][n]["l1"])


def test_table_heads_steps_and_api(ag_run: Path, sp_model: Path) -> None:
    import nbcli

    result = invoke("attention-maps", ag_run, "-t", sp_model, "--sentence", SENTENCE, "--heads", "1.*",
                    "--at", "4,100%", "--metric", "kl", "--no-delimiters")
    assert result.exit_code == 0, result.output
    assert "kl distance" in result.stdout and "1.3" in result.stdout and "closest" in result.stdout
    cli = json.loads(invoke("attention-maps", ag_run, "-t", sp_model, "--sentence", SENTENCE, "--heads", "1.*",
                            "--at", "4,100%", "--metric", "kl", "--no-delimiters", "--json").stdout)
    assert [c["step"] for c in cli["checkpoints"]] == [4, 6] and cli["notes"] == []
    assert "<s>" not in cli["tokens"] and len(cli["maps"]) == 4 * 2
    api = nbcli.attention_maps(ag_run, SENTENCE, sp_model, heads="1.*", steps="4,100%", metric="kl",
                               delimiters=False)
    assert api.to_dict() == cli
    by_file = nbcli.attention_maps(ag_run, SENTENCE, sp_model, heads="0.0", checkpoints=["step-4.safetensors"])
    by_step = nbcli.attention_maps(ag_run, SENTENCE, sp_model, heads="0.0", steps="4")
    assert [c["step"] for c in by_file.checkpoints] == [4] and by_file.maps == by_step.maps


@pytest.mark.parametrize("args, fragments", [
    (["--at", "3"], ["no checkpoint step-3.safetensors", "saved: 0, 2, 4, 6"]),
    (["--at", "200%"], ["neither a percentage"]),
    (["--heads", "0.9"], ["head 9 does not exist"]),
    (["--heads", "a.b"], ["is not L.H"]),
    (["--sentence", "word " * 40], ["exceed the model's context of 32"]),
    (["--checkpoint", "nope.safetensors"], ["no such file"]),
    (["-o", "fig.jpg"], ["fig.jpg: extension '.jpg'; name the figure .pdf, .svg or .png"]),
])
def test_bad_inputs_are_one_line_errors(ag_run: Path, sp_model: Path, args: list[str], fragments: list[str]) -> None:
    base = ["attention-maps", ag_run, "-t", sp_model, "--sentence", SENTENCE]
    result = invoke(*base, *args)
    assert result.exit_code == 1, result.output
    assert_one_line_error(result.stderr, *fragments)


def test_run_without_checkpoints_and_wrong_tokenizer(ag_run: Path, sp_model: Path, sp_unigram_model: Path,
                                                    tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    shutil.copy(ag_run / "config.json", empty / "config.json")
    result = invoke("attention-maps", empty, "-t", sp_model, "--sentence", SENTENCE)
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, str(empty), "no step-N.safetensors")
    result = invoke("attention-maps", ag_run, "-t", sp_unigram_model, "--sentence", SENTENCE)
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "not the tokenizer")
