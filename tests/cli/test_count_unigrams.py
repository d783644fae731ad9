"""`nb count-unigrams` and `nb merge-counts` through CliRunner and through a real `nb` process."""

from __future__ import annotations

import gzip
import json
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import english_like_lines
from nbcli.counts import read_counts
from nbcli.tokenizers import load_tokenizer
from tests import forked_nb
from tests.cli.helpers import assert_one_line_error, invoke, run_nb


@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(english_like_lines(400, seed=5)) + "\n")
    return path


def test_count_writes_file_with_provenance(tmp_path: Path, sp_model: Path, corpus: Path) -> None:
    out = tmp_path / "counts.safetensors"
    tsv = tmp_path / "counts.tsv"
    result = invoke("count-unigrams", corpus, "-t", sp_model, "-o", out, "--tsv", tsv, "--json", "-j", "2")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    counts = read_counts(out)
    assert report["tokens"] == counts.total == int(counts.metadata["nb.total_tokens"])
    assert report["documents"] == 400 == int(counts.metadata["nb.documents"])
    meta = counts.metadata
    assert meta["nb.format"] == "unigram-counts/1"
    assert meta["nb.tokenizer"] == sp_model.name
    assert meta["nb.tokenizer_sha256"] == load_tokenizer(sp_model).sha256
    assert int(meta["nb.vocab_size"]) == counts.vocab_size
    assert json.loads(meta["nb.inputs"]) == [{"file": str(corpus), "bytes": corpus.stat().st_size, "format": "text"}]
    assert json.loads(meta["nb.options"])["eos"] is True
    assert int(meta["nb.bytes_read"]) == corpus.stat().st_size
    assert meta["nb.version"].startswith("nb ") and meta["nb.created"]
    rows = tsv.read_text().splitlines()
    assert rows[1] == "id\tpiece\tcount\tlogprob" and len(rows) == 2 + counts.vocab_size
    assert all(np.isfinite(float(r.split("\t")[3])) for r in rows[2:])
    assert abs(report["entropy_bits"] * np.log(2) - report["entropy_nats"]) < 1e-9
    assert len(report["top"]) == 10
    assert not list(tmp_path.glob("*.nbtmp"))


def test_human_summary(tmp_path: Path, sp_model: Path, corpus: Path) -> None:
    result = invoke("count-unigrams", corpus, "-t", sp_model, "-o", tmp_path / "c.safetensors", "-j", "1")
    assert result.exit_code == 0, result.output
    for label in ("tokens", "documents", "distinct types", "vocabulary coverage", "nats", "bits",
                  "top 10 pieces", "MB/s", "tokens/s"):
        assert label in result.stdout


def test_human_summary_fits_a_log_file(tmp_path: Path, sp_model: Path, corpus: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Piped (no terminal), the summary is no wider than 100 characters: the why of EOS and of the
    method are notes wrapped under the table, each word of them still there (its table was ~230
    characters wide with them inside). The output's path is printed whole (to be copied), so the run
    writes to a short relative one: a worker's tmp_path alone can pass 100 characters."""
    monkeypatch.chdir(tmp_path)
    args = ["count-unigrams", corpus, "-t", sp_model, "-j", "1"]
    result = invoke(*args, "-o", "c.safetensors")
    report = json.loads(invoke(*args, "-o", "d.safetensors", "--json").stdout)
    assert result.exit_code == 0, result.output
    assert len(report["method_reason"]) > 100                       # a reason that would not fit
    assert max(len(line) for line in result.stdout.splitlines()) <= 100
    flowed = " ".join(result.stdout.split())
    for reason in (report["eos_reason"], report["method_reason"]):
        assert " ".join(reason.split()) in flowed


def test_stdin_and_subprocess_are_quiet(tmp_path: Path, sp_model: Path, corpus: Path) -> None:
    out = tmp_path / "c.safetensors"
    proc = run_nb("count-unigrams", "-", "-t", sp_model, "-o", out, "--json", input=corpus.read_bytes())
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == b""  # no progress bar when stderr is not a terminal
    direct = invoke("count-unigrams", corpus, "-t", sp_model, "-o", tmp_path / "d.safetensors", "-j", "1")
    assert direct.exit_code == 0
    np.testing.assert_array_equal(read_counts(out).counts, read_counts(tmp_path / "d.safetensors").counts)


def test_merge_counts(tmp_path: Path, sp_model: Path, corpus: Path) -> None:
    lines = corpus.read_text().splitlines(keepends=True)
    (tmp_path / "a.txt").write_text("".join(lines[:150]))
    (tmp_path / "b.txt").write_text("".join(lines[150:]))
    for name in ("a", "b"):
        assert invoke("count-unigrams", tmp_path / f"{name}.txt", "-t", sp_model, "-o",
                      tmp_path / f"{name}.safetensors", "-j", "1").exit_code == 0
    assert invoke("count-unigrams", corpus, "-t", sp_model, "-o", tmp_path / "all.safetensors", "-j", "1").exit_code == 0
    merged = invoke("merge-counts", tmp_path / "a.safetensors", tmp_path / "b.safetensors",
                    "-o", tmp_path / "m.safetensors", "--json")
    assert merged.exit_code == 0, merged.output
    np.testing.assert_array_equal(read_counts(tmp_path / "m.safetensors").counts,
                                  read_counts(tmp_path / "all.safetensors").counts)


def test_merge_refuses_other_tokenizer(tmp_path: Path, sp_model: Path, hf_bytelevel_json: Path, corpus: Path) -> None:
    assert invoke("count-unigrams", corpus, "-t", sp_model, "-o", tmp_path / "a.safetensors").exit_code == 0
    assert invoke("count-unigrams", corpus, "-t", hf_bytelevel_json, "-o", tmp_path / "b.safetensors").exit_code == 0
    result = invoke("merge-counts", tmp_path / "a.safetensors", tmp_path / "b.safetensors", "-o", tmp_path / "m.safetensors")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "b.safetensors")
    assert not (tmp_path / "m.safetensors").exists()


def _bad_cases(tmp_path: Path, sp_model: Path, corpus: Path) -> list[tuple[list[str | Path], tuple[str, ...]]]:
    empty_dir = tmp_path / "nothing"
    empty_dir.mkdir()
    (tmp_path / "empty.txt").write_text("\n\n")
    blob = gzip.compress(corpus.read_bytes() * 20)
    (tmp_path / "trunc.txt.gz").write_bytes(blob[: len(blob) // 2])
    (tmp_path / "bad.txt").write_bytes(b"ok\nbad \xff\n")
    (tmp_path / "bad.jsonl").write_text('{"text": "a"}\n{oops\n')
    (tmp_path / "notatok.model").write_bytes(b"garbage" * 100)
    return [
        (["count-unigrams", tmp_path / "missing.txt", "-t", sp_model], ("missing.txt", "no such file")),
        (["count-unigrams", empty_dir, "-t", sp_model], ("nothing", "no corpus files")),
        (["count-unigrams", tmp_path / "empty.txt", "-t", sp_model], ("empty.txt", "empty corpus")),
        (["count-unigrams", tmp_path / "trunc.txt.gz", "-t", sp_model], ("trunc.txt.gz", "truncated")),
        (["count-unigrams", tmp_path / "bad.txt", "-t", sp_model, "--strict"], ("bad.txt:2", "UTF-8")),
        (["count-unigrams", tmp_path / "bad.jsonl", "-t", sp_model, "--format", "jsonl"], ("bad.jsonl:2", "JSON")),
        (["count-unigrams", corpus, "-t", tmp_path / "notatok.model"], ("notatok.model", "not a tokenizer")),
        (["count-unigrams", corpus, "-t", sp_model, "--smoothing", "kneser-ney"], ("--smoothing",)),
    ]


def test_bad_inputs_one_line_error_no_output(tmp_path: Path, sp_model: Path, corpus: Path) -> None:
    for args, fragments in _bad_cases(tmp_path, sp_model, corpus):
        out = tmp_path / "out.safetensors"
        result = invoke(*args, "-o", out, "-j", "2")
        assert result.exit_code == 1, (args, result.output)
        assert_one_line_error(result.stderr, *fragments)
        assert not out.exists(), args
        assert not list(tmp_path.glob(".*.nbtmp")), args


def test_output_in_missing_directory(tmp_path: Path, sp_model: Path, corpus: Path) -> None:
    """The one output rule: missing folders are made; a file in the way is one line, nothing written."""
    proc = run_nb("count-unigrams", corpus, "-t", sp_model, "-o", tmp_path / "no" / "such" / "c.safetensors")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "no" / "such" / "c.safetensors").is_file()
    proc = run_nb("count-unigrams", corpus, "-t", sp_model, "-o", corpus / "c.safetensors")
    assert proc.returncode == 1
    assert_one_line_error(proc.stderr.decode(), "is not a directory")


def test_subprocess_bad_input_has_no_traceback(tmp_path: Path, sp_model: Path) -> None:
    proc = run_nb("count-unigrams", tmp_path / "missing.txt", "-t", sp_model, "-o", tmp_path / "c.safetensors")
    assert proc.returncode == 1
    assert_one_line_error(proc.stderr.decode(), "missing.txt")


def test_usage_error_exit_2(sp_model: Path) -> None:
    assert run_nb("count-unigrams", "--no-such-option").returncode == 2


def test_skip_bad_lines_and_utf8_warnings(tmp_path: Path, sp_model: Path) -> None:
    (tmp_path / "bad.jsonl").write_text('{"text": "a b"}\n{oops\n{"text": "c"}\n')
    result = invoke("count-unigrams", tmp_path / "bad.jsonl", "-t", sp_model, "--format", "jsonl",
                    "--skip-bad-lines", "-o", tmp_path / "c.safetensors", "--json")
    assert result.exit_code == 0
    report = json.loads(result.stdout)
    assert report["skipped_lines"] == 1
    assert "skipped 1 bad line(s)" in result.stderr
    assert [f"warning: {w}" for w in report["warnings"]] == result.stderr.splitlines()  # the core's warnings


def _wait_until_idle(pid: int, quiet_s: float = 1.0, limit_s: float = 90.0) -> None:
    """Until process `pid` has slept (state S, blocked on its input) for `quiet_s` seconds in a row:
    it has imported, installed its handlers and consumed the input written so far."""
    start = quiet_since = time.monotonic()
    while time.monotonic() - start < limit_s:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        now = time.monotonic()
        if state != "S":
            quiet_since = now
        elif now - quiet_since >= quiet_s and now - start >= 1.0:
            return
        time.sleep(0.05)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_leaves_no_output(tmp_path: Path, sp_model: Path, workers: str) -> None:
    """stdin stays open, so the count cannot finish before the interrupt arrives."""
    out = tmp_path / "c.safetensors"
    proc = forked_nb.Popen(["nb", "count-unigrams", "-", "-t", str(sp_model), "-o", str(out), "-j", workers],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None
    proc.stdin.write(("\n".join(english_like_lines(2000, seed=2)) + "\n").encode())
    proc.stdin.flush()
    _wait_until_idle(proc.pid)  # started, read what there is and waits for more (a fixed sleep lost the race under load)
    proc.send_signal(signal.SIGINT)
    try:
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr
    assert stderr.decode().strip() == "nb: interrupted; no output written"
    assert not out.exists()
    assert not list(tmp_path.glob(".*.nbtmp"))


def test_quickstart_subprocess_json(tmp_path: Path) -> None:
    out = tmp_path / "q.safetensors"
    proc = run_nb("quickstart", "-o", out, "--json", "-j", "1")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["documents"] > 4000 and report["tokens"] == read_counts(out).total


def test_method_and_reason_reported(tmp_path: Path, sp_model: Path, sp_unigram_model: Path, corpus: Path) -> None:
    """BPE counts by chunks; a unigram model by whole documents unless --unigram-certificate asks
    for its chunks under the per-line certificate; --no-chunk-cache forces whole documents; the
    summary says why, and the counts are the same every way."""
    reports = {}
    for name, model, extra in (("bpe", sp_model, ()), ("unigram", sp_unigram_model, ()),
                               ("unigram-certified", sp_unigram_model, ("--unigram-certificate",)),
                               ("forced", sp_model, ("--no-chunk-cache",)),
                               ("unigram-forced", sp_unigram_model, ("--no-chunk-cache", "--unigram-certificate"))):
        result = invoke("count-unigrams", str(corpus), "-t", str(model), "-o", str(tmp_path / f"{name}.safetensors"),
                        "--json", *extra)
        assert result.exit_code == 0, result.output
        reports[name] = json.loads(result.stdout)
    assert reports["bpe"]["method"] == "chunked (sp)"
    assert reports["unigram"]["method"] == "whole documents"
    assert "--unigram-certificate" in reports["unigram"]["method_reason"]
    assert reports["unigram-certified"]["method"] == "chunked (sp-unigram-certified)"
    assert "certificate" in reports["unigram-certified"]["method_reason"]
    assert read_counts(tmp_path / "unigram-certified.safetensors").metadata["nb.method"] == \
        "chunked (sp-unigram-certified)"
    for forced in ("forced", "unigram-forced"):
        assert reports[forced]["method"] == "whole documents"
        assert reports[forced]["method_reason"] == "--no-chunk-cache"
    for other in ("unigram", "unigram-forced"):
        assert reports["unigram-certified"]["tokens"] == reports[other]["tokens"]
        assert (read_counts(tmp_path / "unigram-certified.safetensors").counts
                == read_counts(tmp_path / f"{other}.safetensors").counts).all()
    # The counts file records the method used, not the option asked for.
    for name, chunked in (("bpe", True), ("unigram", False), ("unigram-certified", True), ("forced", False),
                          ("unigram-forced", False)):
        meta = read_counts(tmp_path / f"{name}.safetensors").metadata
        options = json.loads(meta["nb.options"])
        assert options["chunked"] is chunked, name
        assert options["chunk_cache"] is (not name.endswith("forced"))
        assert options["unigram_certificate"] is name.startswith("unigram-")
        assert meta["nb.method"] == reports[name]["method"]


def test_hub_bert_tokenizer_json(tmp_path: Path, hf_bert_hub_json: Path, hf_bert_json: Path, corpus: Path) -> None:
    """A BERT tokenizer.json as the hub ships it (padding and truncation on, [CLS] $A [SEP]): same
    counts as the file without them, no EOS by default, and the summary says what was changed."""
    runs = {}
    for name, tok, extra in (("hub", hf_bert_hub_json, ()), ("plain", hf_bert_json, ("--no-eos",)),
                             ("hub-eos", hf_bert_hub_json, ("--eos",))):
        out = tmp_path / f"{name}.safetensors"
        result = invoke("count-unigrams", corpus, "-t", tok, "-o", out, "--json", "-j", "1", *extra)
        assert result.exit_code == 0, result.output
        runs[name] = (json.loads(result.stdout), read_counts(out))
    hub, plain, with_eos = runs["hub"], runs["plain"], runs["hub-eos"]
    np.testing.assert_array_equal(hub[1].counts, plain[1].counts)
    assert hub[0]["eos"] is False and "[CLS] $A [SEP]" in hub[0]["eos_reason"]
    assert hub[0]["eos_token"] == {"piece": "[SEP]", "id": load_tokenizer(hf_bert_json).eos_id}
    assert any("padding" in a for a in hub[0]["tokenizer_adjustments"])
    assert any("truncation (max_length 8)" in a for a in hub[0]["tokenizer_adjustments"])
    assert json.loads(hub[1].metadata["nb.tokenizer_adjustments"]) == hub[0]["tokenizer_adjustments"]
    assert plain[0]["tokenizer_adjustments"] == []
    sep = hub[0]["eos_token"]["id"]
    assert with_eos[1].counts[sep] - hub[1].counts[sep] == 400 and with_eos[0]["eos_reason"] == "--eos/--no-eos"
    human = invoke("count-unigrams", corpus, "-t", hf_bert_hub_json, "-o", tmp_path / "h.safetensors", "-j", "1")
    assert human.exit_code == 0, human.output
    text = " ".join(human.stdout.split())
    assert f"EOS per document │ no ([SEP], id {sep})" in text
    assert "padding" in text and "switched off" in text


@pytest.mark.parametrize("fixture", ["hf_qwen2_json", "sp_llama2_model"])
def test_terminal_progress_with_forked_workers(tmp_path: Path, fixture: str, request: pytest.FixtureRequest) -> None:
    """On a terminal (a pty) the progress display runs while two workers count: they are forked
    before its thread starts, the run ends (no worker stuck on an inherited lock), the tokenizer
    library prints no fork warning, and the counts equal one process's."""
    import os
    import pty

    tok = request.getfixturevalue(fixture)
    corpus = tmp_path / "big.txt"
    corpus.write_text("\n".join(english_like_lines(4000, seed=9)) * 8 + "\n")
    master, slave = pty.openpty()
    out = tmp_path / "tty.safetensors"
    env = {**os.environ, "COLUMNS": "100", "TERM": "xterm"}
    env.pop("TOKENIZERS_PARALLELISM", None)
    proc = subprocess.Popen(["nb", "count-unigrams", str(corpus), "-t", str(tok), "-o", str(out), "-j", "2"],
                            stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert proc.wait(timeout=max(1.0, deadline - time.monotonic())) == 0, seen[-2000:]
    assert b"huggingface/tokenizers" not in seen and b"Traceback" not in seen, seen[-2000:]
    assert invoke("count-unigrams", corpus, "-t", tok, "-o", tmp_path / "one.safetensors", "-j", "1").exit_code == 0
    np.testing.assert_array_equal(read_counts(out).counts, read_counts(tmp_path / "one.safetensors").counts)


def test_unigram_certificate_with_another_family_says_it_does_not_apply(tmp_path: Path, sp_model: Path,
                                                                        corpus: Path) -> None:
    result = invoke("count-unigrams", str(corpus), "-t", str(sp_model), "-o", str(tmp_path / "c.safetensors"),
                    "--unigram-certificate")
    assert result.exit_code == 0, result.output
    warning = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "--unigram-certificate applies to SentencePiece unigram models" in warning[0]
    assert "chunked (sp)" in warning[0]


def test_jsonl_by_name_and_format_recorded(tmp_path: Path, sp_model: Path) -> None:
    """A .jsonl file is counted as JSONL without --format (as train and eval read it); --format text
    overrides the name; the counts file records the format each file was read in (issue #28)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    docs = english_like_lines(60, seed=9)
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    (tmp_path / "d.txt").write_text("".join(d + "\n" for d in docs))
    pq.write_table(pa.table({"text": docs}), tmp_path / "d.parquet")
    reports = {}
    for name, extra in (("d.txt", ()), ("d.jsonl", ()), ("d.jsonl", ("--format", "jsonl")), ("d.parquet", ()),
                        ("d.jsonl", ("--format", "text"))):
        out = tmp_path / f"{name}{''.join(extra)}.safetensors"
        result = invoke("count-unigrams", tmp_path / name, "-t", sp_model, "-o", out, "--json", "-j", "1", *extra)
        assert result.exit_code == 0, result.output
        fmt = json.loads(read_counts(out).metadata["nb.inputs"])[0]["format"]
        reports[(name, *extra)] = (read_counts(out).counts, fmt, json.loads(result.stdout)["formats"])
    reference = reports[("d.txt",)][0]
    for key in [("d.jsonl",), ("d.jsonl", "--format", "jsonl"), ("d.parquet",)]:
        np.testing.assert_array_equal(reports[key][0], reference)
    assert [reports[k][1] for k in reports] == ["text", "jsonl", "jsonl", "parquet", "text"]
    assert reports[("d.parquet",)][2] == ["parquet"]
    raw = reports[("d.jsonl", "--format", "text")][0]
    assert raw.sum() > reference.sum()  # the JSON syntax counted as text: what --format text asks for


def test_tsv_counted_by_its_header(tmp_path: Path, sp_model: Path, corpus: Path) -> None:
    lines = corpus.read_text().splitlines()
    (tmp_path / "c.tsv").write_text("label\tsentence\n" + "".join(f"{i % 2}\t{line}\n" for i, line in enumerate(lines)))
    tsv = invoke("count-unigrams", tmp_path / "c.tsv", "--field", "sentence", "-t", sp_model,
                 "-o", tmp_path / "t.safetensors", "--json", "-j", "2")
    text = invoke("count-unigrams", corpus, "-t", sp_model, "-o", tmp_path / "x.safetensors", "--json", "-j", "1")
    assert tsv.exit_code == 0 and text.exit_code == 0, tsv.output
    np.testing.assert_array_equal(read_counts(tmp_path / "t.safetensors").counts,
                                  read_counts(tmp_path / "x.safetensors").counts)
    missing = invoke("count-unigrams", tmp_path / "c.tsv", "-t", sp_model, "-o", tmp_path / "m.safetensors")
    assert missing.exit_code != 0 and not (tmp_path / "m.safetensors").exists()
    assert_one_line_error(missing.stderr, "c.tsv: no column 'text' in the header (label, sentence)")
    process = run_nb("count-unigrams", tmp_path / "c.tsv", "-t", sp_model, "-o", tmp_path / "m.safetensors")
    assert process.returncode == 1 and not (tmp_path / "m.safetensors").exists()
    assert_one_line_error(process.stderr.decode(), "c.tsv: no column 'text' in the header")
