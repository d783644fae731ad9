"""Every table of every command, rendered at 40, 80 and 200 columns, through a pipe and on a terminal:
each number (and each key such as an arm or a bin range) of the report appears whole in the text,
never cut (`0.9…`) or wrapped across lines; empty sections are one sentence. Plus --csv/--tsv (FILE
and -), the Python reports' to_records/to_pandas, and generate's samples in --json."""

from __future__ import annotations

import csv
import io
import json
import re
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from nbcli.cli import analogy, attention_maps, embedding_stats, eval as eval_cli, generate, inspect, patch_checkpoint
from nbcli.cli import plot_by_frequency, probe_bias, render, train
from nbcli.tasks.registry import get_task
from nbcli.cli.render import KEY, NUM, num
from tests.checkpoint.builders import nb_tensors, save
from tests.cli.helpers import assert_one_line_error, invoke, run_nb
from tests.conftest import english_like_lines
from tests.lm.conftest import nb_lm  # noqa: F401  (fixture)

WIDTHS = (40, 80, 200)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _json(*args: Any) -> dict[str, Any]:
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.stderr + result.stdout
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory, nb_lm: Path, sp_model: Path,  # noqa: F811
            sample_lines: list[str]) -> dict[str, dict[str, Any]]:
    """One --json report of every command that prints a table, from tiny local inputs."""
    base = tmp_path_factory.mktemp("tables")
    heldout = base / "heldout.txt"
    heldout.write_text("\n".join(english_like_lines(12, seed=9, unicode=False)) + "\n", encoding="utf-8")
    corpus = base / "train.txt"
    corpus.write_text("\n".join(sample_lines) + "\n", encoding="utf-8")
    out: dict[str, dict[str, Any]] = {}
    out["count-unigrams"] = _json("count-unigrams", corpus, "-t", sp_model, "-o", base / "train.counts")
    out["eval"] = _json("eval", nb_lm, "--corpus", heldout, "-t", sp_model, "--scale-ln-bias", "1,0.5,0",
                        "--bias-effect", "--by-frequency", base / "train.counts", "--bins", "6")
    (base / "eval.json").write_text(json.dumps(out["eval"]))
    out["plot-by-frequency"] = _json("plot-by-frequency", base / "eval.json", base / "eval.json", "--label", "a",
                                     "--label", "lambda 0.5 with a long label")
    out["generate"] = _json("generate", nb_lm, "--prompts", heldout, "-t", sp_model, "--scale-ln-bias", "0,1",
                            "--prompt-words", "3", "--max-new-tokens", "5", "--max-prompts", "3", "--samples", "2",
                            "--eval-corpus", heldout)
    out["probe-bias"] = _json("probe-bias", nb_lm, "--counts", base / "train.counts", "--bins", "5")
    tensors, meta = nb_tensors(tied=False)
    model = save(base / "m.safetensors", tensors, meta)
    out["embedding-stats"] = _json("embedding-stats", model, "--inits", "all")
    out["inspect"] = _json("inspect", model)
    out["patch-checkpoint"] = _json("patch-checkpoint", model, "-o", base / "p.safetensors", "--scale-ln-bias",
                                    "0.5", "--dry-run")
    run = base / "run"
    out["train"] = _json("train", "--corpus", corpus, "-t", sp_model, "--out", run, "--steps", "4", "--save-every",
                         "2", "--objective", "mlm", "--ag-fraction", "0.5", "--seq-len", "32", "--batch-size", "8",
                         "--eval-every", "2", "--eval-batches", "2")
    out["attention-maps"] = _json("attention-maps", run, "-t", sp_model, "--sentence", "Welcome to the show.")
    from tests.cli.test_analogy import QUESTIONS, planted

    (base / "q.txt").write_text(QUESTIONS)
    out["analogy"] = _json("analogy", planted(base), "--questions", base / "q.txt")
    out["_paths"] = {"model": str(model), "counts": str(base / "train.counts"), "heldout": str(heldout),
                     "eval_json": str(base / "eval.json"), "base": str(base)}
    return out


def _tables(command: str, report: dict[str, Any]) -> list[tuple[tuple[render.Col, ...], list[Any]]]:
    """The row tables `command` prints: their columns and rows, as its renderer builds them."""
    if command == "eval":
        return [(eval_cli.ROW_COLUMNS, report["rows"]), (eval_cli.BIAS_EFFECT_COLUMNS, report["bias_effect"]["bins"]),
                (eval_cli.BY_FREQUENCY_COLUMNS + eval_cli.BY_FREQUENCY_DROPPED, report["by_frequency"]["bins"])]
    if command == "generate":
        return [(generate.ROW_COLUMNS, report["rows"])]
    if command == "plot-by-frequency":
        return [(plot_by_frequency.COLUMNS, [(s, b) for s in report["series"] for b in s["bins"]])]
    if command == "probe-bias":
        return [(probe_bias.BIN_COLUMNS, list(enumerate(report["frequency_bins"], 1)))]
    if command == "embedding-stats":
        return [(embedding_stats.STORED_COLUMNS, report["rows"]), (embedding_stats.SCALED_COLUMNS, report["rows"])]
    if command == "inspect":
        return [(inspect.TENSOR_COLUMNS, report["tensors"])]
    if command == "patch-checkpoint":
        return [(patch_checkpoint.COLUMNS, [(e, s) for e in report["tensors"] for s in patch_checkpoint.STATS])]
    if command == "attention-maps":
        return [(attention_maps.map_columns(list(report["patterns"]), report["metric"]), report["maps"])]
    if command == "count-unigrams":
        return [(render.TOP_COLUMNS, list(enumerate(report["top"], 1)))]
    if command == "analogy":
        return [(analogy.COLUMNS, [*report["sections"], report["overall"]])]
    return []


def _numbers(command: str, report: dict[str, Any]) -> list[Any]:
    """Numbers printed outside row tables (sentences and key-value tables)."""
    if command == "probe-bias":
        fd, iso, ob, z = (report[k] for k in ("frequency_direction", "isotropy", "output_bias", "zipfian"))
        values = [fd["spearman"], fd["pearson_log"], fd["b_ln_norm"], iso["mean_cosine"], iso["partition_ratio"],
                  iso["mean_cosine_without_bias_direction"], ob["norm"], ob["kl_unigram_to_bias"]]
        values += [v for arm in ("raw", "whitened") for v in z[arm].values() if isinstance(v, (int, float))]
        return values
    if command == "train":
        return [report[k] for k in ("steps", "parameters", "final_val_loss", "alc", "unigram_entropy", "log_v")]
    if command == "count-unigrams":
        return [report[k] for k in ("tokens", "documents", "bytes_read", "distinct_types", "entropy_nats")]
    if command in ("eval", "generate"):
        return [report["rows"][0]["tokens"] if command == "eval" else report["prompt_count"]]
    return []


RENDERERS: dict[str, Callable[[dict[str, Any]], None]] = {
    "eval": eval_cli._render, "generate": generate._render, "plot-by-frequency": plot_by_frequency._render,
    "probe-bias": probe_bias._render, "embedding-stats": embedding_stats._render, "inspect": inspect._render,
    "patch-checkpoint": patch_checkpoint._render, "attention-maps": attention_maps._render,
    "count-unigrams": render.render_count_summary, "train": lambda report: train._render(get_task("lm"), report),
    "analogy": analogy._render,
}


def _printed(command: str, report: dict[str, Any], width: int, terminal: bool, monkeypatch: pytest.MonkeyPatch,
             capsys: pytest.CaptureFixture[str]) -> str:
    import nbcli.cli.console as console_module

    monkeypatch.setenv("COLUMNS", str(width))
    if terminal:
        def console() -> Console:
            return Console(file=sys.stdout, width=width, force_terminal=True, color_system=None, highlight=False,
                           soft_wrap=True, emoji=False)
        monkeypatch.setattr(console_module, "stdout_console", console)
        monkeypatch.setattr(render, "stdout_console", console)
    capsys.readouterr()
    RENDERERS[command](report)
    return ANSI.sub("", capsys.readouterr().out)


@pytest.mark.parametrize("terminal", [False, True], ids=["piped", "terminal"])
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("command", sorted(RENDERERS))
def test_no_number_is_cut_or_wrapped(command: str, width: int, terminal: bool, reports: dict[str, Any],
                                     monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    report = reports[command]
    text = _printed(command, report, width, terminal, monkeypatch, capsys)
    assert "…" not in text
    checked = 0
    for columns, rows in _tables(command, report):
        assert rows, command
        for row in rows:
            for column in columns:
                if column.kind in (NUM, KEY):
                    cell = column.cell(row)
                    assert cell in text, (command, column.header, cell)
                    checked += 1
    for value in _numbers(command, report):
        assert num(value) in text, (command, value)
        checked += 1
    assert checked >= 3
    if not terminal:  # a pipe: the table at its natural width, whatever COLUMNS says
        assert text == _printed(command, report, 1000, False, monkeypatch, capsys)


def test_every_json_number_of_the_eval_tables_is_in_the_text(reports: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The property itself, over every numeric value of the rows eval prints (not only the cells)."""
    report = reports["eval"]
    text = _printed("eval", report, 40, True, monkeypatch, capsys)
    shown = {"loss", "perplexity", "word_perplexity", "kl_unigram", "kl_unigram_without_ln_bias"}
    values = [row[k] for row in report["rows"] for k in shown] + [
        b[k] for b in report["bias_effect"]["bins"] for k in ("tokens", "log10_p_with", "log10_p_without",
                                                              "log10_change", "log10_unigram")]
    assert len(values) > 20
    for value in values:
        assert num(value) in text, value


def test_empty_sections_are_a_sentence(reports: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    report = json.loads(json.dumps(reports["probe-bias"]))
    report["output_bias"] = {"present": False, "note": None}
    report["frequency_bins"] = []
    text = _printed("probe-bias", report, 80, False, monkeypatch, capsys)
    assert "3. output bias vs unigram (paper 000 app. B.5): the checkpoint has no output bias" in text
    assert "4. <b_LN, w_i> by log-frequency bin (paper 003 fig. 3): no bins" in text
    assert not any(re.fullmatch(r"│[^│]*│ *│ *│", line) for line in text.splitlines())  # no row of empty cells
    percent = f"{100 * -report['zipfian']['frequency_direction']['removed']:.4g}"
    assert "whitening removes -" not in text and (percent in text or "whitening removes" in text)


def test_whitening_wording_fits_either_sign() -> None:
    assert probe_bias.whitening_sentence(0.842) == "whitening removes 84.20 % of the frequency direction's share"
    assert probe_bias.whitening_sentence(-0.102) == ("whitening raises the frequency direction's share by 10.20 % "
                                                     "(removes none of it)")


def test_the_number_format() -> None:
    assert num(62741597770.738) == "6.2742e10" and num(0.90005) == "0.90005" and num(-0.000199464) == "-0.00019946"
    assert num(12345) == "12,345" and num(None) == "-" and num(1e-5) == "1.0000e-5" and num(999999.7) == "1.0000e6"
    assert num(float("nan")) == "nan" and num(float("-inf")) == "-inf" and num(0.0) == "0"


@given(st.floats(min_value=-1e300, max_value=1e300).filter(lambda x: x != 0))
def test_num_keeps_five_significant_digits_in_one_word(x: float) -> None:
    text = num(x)
    assert " " not in text and "," not in text
    assert float(text) == pytest.approx(x, rel=1e-4)
    mantissa = text.split("e")[0].lstrip("-").replace(".", "").lstrip("0")
    assert len(mantissa) >= 5  # at least SIG significant digits shown (trailing zeros kept)


@given(st.integers(min_value=-10**15, max_value=10**15))
def test_num_writes_integers_exactly(n: int) -> None:
    assert int(num(n).replace(",", "")) == n


def test_generate_json_holds_the_samples_through_a_real_process(reports: dict[str, Any], nb_lm: Path,  # noqa: F811
                                                                sp_model: Path) -> None:
    paths = reports["_paths"]
    proc = run_nb("generate", nb_lm, "--prompts", paths["heldout"], "-t", sp_model, "--scale-ln-bias", "0,1",
                  "--prompt-words", "3", "--max-new-tokens", "5", "--max-prompts", "2", "--json")
    assert proc.returncode == 0, proc.stderr.decode()
    report = json.loads(proc.stdout)
    samples = report["samples"]
    assert report["samples_per_prompt"] == 1 and len(samples) == 2 * report["prompt_count"] == 4
    assert [s["arm"] for s in samples] == ["lambda 0"] * 2 + ["lambda 1"] * 2
    for sample in samples:
        assert {"arm", "lambda", "prompt", "prompt_index", "seed", "text", "tokens", "eos"} <= set(sample)
        assert sample["prompt"] and len(sample["prompt"].split()) == 3 and isinstance(sample["text"], str)


def test_generate_report_keys_and_attributes_agree(nb_lm: Path, sp_model: Path, reports: dict[str, Any]) -> None:  # noqa: F811
    import nbcli

    g = nbcli.generate(nb_lm, reports["_paths"]["heldout"], sp_model, prompt_words=3, max_new_tokens=4,
                       max_prompts=2, samples=2, device="cpu")
    assert g.samples == g["samples"] == g.to_dict()["samples"] and len(g.samples) == 4
    assert g.samples_per_prompt == g["samples_per_prompt"] == 2
    assert g.tables() == ["rows", "samples"] and len(g.to_records("samples")) == 4


def test_a_report_field_cannot_shadow_a_key() -> None:
    from nbcli.api import CountReport

    with pytest.raises(TypeError, match="counts"):
        CountReport({"counts": 1}, counts=None)


def test_csv_and_tsv_to_a_file_and_to_stdout(reports: dict[str, Any], nb_lm: Path, sp_model: Path,  # noqa: F811
                                             tmp_path: Path) -> None:
    paths = reports["_paths"]
    args = ["eval", nb_lm, "--corpus", paths["heldout"], "-t", sp_model, "--scale-ln-bias", "1,0"]
    proc = run_nb(*args, "--csv", "-", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr.decode()
    rows = list(csv.DictReader(io.StringIO(proc.stdout.decode())))
    assert [r["arm"] for r in rows] == ["lambda 1", "lambda 0"]
    assert not (tmp_path / "-").exists()  # `-` is stdout, never a file
    report = _json(*args)
    assert [float(r["perplexity"]) for r in rows] == [r["perplexity"] for r in report["rows"]]  # full precision
    result = invoke(*args, "--tsv", tmp_path / "t.tsv", "--csv", tmp_path / "c.csv", "--table", "rows")
    assert result.exit_code == 0, result.stderr
    assert "lambda 1" in result.stdout  # the text report too
    tsv = list(csv.DictReader((tmp_path / "t.tsv").open(), delimiter="\t"))
    assert tsv == list(csv.DictReader((tmp_path / "c.csv").open())) and len(tsv) == 2
    # generate's samples as a table; plot-by-frequency's bins with their series' label
    proc = run_nb("plot-by-frequency", paths["eval_json"], "--label", "x", "--tsv", "-")
    assert proc.returncode == 0, proc.stderr.decode()
    bins = list(csv.DictReader(io.StringIO(proc.stdout.decode()), delimiter="\t"))
    assert len(bins) == len(reports["eval"]["by_frequency"]["bins"]) and {b["series.label"] for b in bins} == {"x"}


@pytest.mark.parametrize("extra, fragments", [
    (["--csv", "-", "--json"], ["--json and --csv - all write to stdout"]),
    (["--csv", "-", "--tsv", "-"], ["--csv - and --tsv - all write to stdout"]),
    (["--csv", "OUT", "--table", "nope"], ["no table 'nope'", "its tables: rows"]),
])
def test_table_option_errors(extra: list[str], fragments: list[str], reports: dict[str, Any], nb_lm: Path,  # noqa: F811
                             sp_model: Path, tmp_path: Path) -> None:
    extra = [str(tmp_path / "o.csv") if x == "OUT" else x for x in extra]
    result = invoke("eval", nb_lm, "--corpus", reports["_paths"]["heldout"], "-t", sp_model, *extra)
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, *fragments)
    assert not (tmp_path / "o.csv").exists()


def test_count_unigrams_tsv_to_stdout(reports: dict[str, Any], sp_model: Path, tmp_path: Path) -> None:
    proc = run_nb("count-unigrams", reports["_paths"]["heldout"], "-t", sp_model, "-o", tmp_path / "c.safetensors",
                  "--tsv", "-", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr.decode()
    lines = proc.stdout.decode().splitlines()
    assert lines[1] == "id\tpiece\tcount\tlogprob" and len(lines) == 2 + reports["count-unigrams"]["vocab_size"]
    assert (tmp_path / "c.safetensors").is_file() and not (tmp_path / "-").exists()
    result = invoke("count-unigrams", reports["_paths"]["heldout"], "-t", sp_model, "-o", tmp_path / "d.safetensors",
                    "--tsv", "-", "--json")
    assert result.exit_code == 1 and not (tmp_path / "d.safetensors").exists()


def test_to_records_and_to_pandas(reports: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from nbcli.api import EvalReport
    from nbcli.errors import NbError

    report = EvalReport(reports["eval"])
    assert report.tables() == ["rows", "bias_effect.bins", "by_frequency.bins"]
    records = report.to_records()
    assert [r["arm"] for r in records] == ["lambda 1", "lambda 0.5", "lambda 0"]
    assert records[0]["perplexity"] == reports["eval"]["rows"][0]["perplexity"]
    assert len(report.to_records("by_frequency.bins")) == len(reports["eval"]["by_frequency"]["bins"])
    with pytest.raises(NbError, match="no table 'x' in this result; its tables: rows, bias_effect.bins, by_frequency.bins"):
        report.to_records("x")
    monkeypatch.setitem(sys.modules, "pandas", None)  # not installed
    with pytest.raises(NbError, match="to_pandas\\(\\) needs pandas"):
        report.to_pandas()
    made: list[Any] = []
    fake = types.SimpleNamespace(DataFrame=types.SimpleNamespace(from_records=lambda r: made.append(r) or "frame"))
    monkeypatch.setitem(sys.modules, "pandas", fake)
    assert report.to_pandas("bias_effect.bins") == "frame" and made == [report.to_records("bias_effect.bins")]
