"""eval_report and generation_report: the whole `nb eval` / `nb generate` studies as core functions."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nbcli.errors import OutputError
from nbcli.decoding.sampling import parse_decoding
from nbcli.lm.generation import OUT_NAMES, GenerationOptions, generation_report, write_outputs
from nbcli.lm.evaluation import eval_report
from tests.conftest import english_like_lines


@pytest.fixture(scope="module")
def heldout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("heldout") / "heldout.txt"
    path.write_text("\n".join(english_like_lines(6, seed=4, unicode=False)) + "\n", encoding="utf-8")
    return path


class Bar:
    """A ProgressBar that records its total and every advance."""

    def __init__(self) -> None:
        self.total: int | None = None
        self.advanced = 0

    @contextlib.contextmanager
    def __call__(self, total: int) -> Iterator[Callable[[int], None]]:
        self.total = total

        def advance(n: int) -> None:
            self.advanced += n

        yield advance


def test_eval_report_rows_per_lambda_and_progress(nb_lm: Path, sp_model: Path, heldout: Path) -> None:
    bar = Bar()
    report = eval_report(nb_lm, [str(heldout)], sp_model, "1,0", smoothing_k=0.5, device="cpu", progress_bar=bar)
    assert [row["lambda"] for row in report["rows"]] == [1.0, 0.0]
    tokens = report["rows"][0]["tokens"]
    assert bar.total == bar.advanced == 2 * tokens  # every token once per arm
    assert report["unigram"] == {"source": "held-out corpus", "smoothing": "add-k:0.5"}
    assert report["corpus"] == [str(heldout)] and report["documents"] == 6 and report["eos_scored"] is True
    one, zero = report["rows"]
    assert one["kl_unigram_without_ln_bias"] == pytest.approx(zero["kl_unigram"], abs=1e-6)
    assert report["model"]["architecture"] == "nb" and report["warnings"] == []


def test_generation_report_writes_its_outputs(nb_lm: Path, sp_model: Path, heldout: Path, tmp_path: Path) -> None:
    bar = Bar()
    opts = GenerationOptions(parse_decoding("greedy"), max_new_tokens=4, samples=2, seed=1)
    report, records = generation_report(nb_lm, [str(heldout)], sp_model, opts, "0,1", prompt_words=2, max_prompts=3,
                                        device="cpu", out=tmp_path / "out", progress_bar=bar)
    assert report["prompt_count"] == 3 and [r["lambda"] for r in report["rows"]] == [0.0, 1.0]
    assert bar.total == bar.advanced == 3 * 2 * 2 == len(records)
    assert report["decoding"] == "greedy" and report["samples_per_prompt"] == 2 and report["kv_cache"] is True
    assert report["samples"] is records  # every continuation, in the report (--json) itself
    assert report["plot"] is None and "--eval-corpus" in report["plot_note"]
    assert report["outputs"] == [str(tmp_path / "out" / name) for name in OUT_NAMES[:2]]
    lines = (tmp_path / "out" / "samples.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == json.loads(json.dumps(records))
    table = json.loads((tmp_path / "out" / "table.json").read_text())
    assert table["rows"] == json.loads(json.dumps(report["rows"])) and "samples" not in table  # samples.jsonl has them


def test_generation_report_checks_out_before_model_work(sp_model: Path, heldout: Path, tmp_path: Path) -> None:
    taken = tmp_path / "file"
    taken.write_text("x")
    opts = GenerationOptions(parse_decoding("greedy"))
    with pytest.raises(OutputError, match="not a directory"):  # the checkpoint is never opened
        generation_report(tmp_path / "missing.safetensors", [str(heldout)], sp_model, opts, out=taken)


def test_write_outputs_is_one_commit_and_json_safe(tmp_path: Path) -> None:
    report = {"eval_corpus": None, "rows": [{"perplexity": float("nan")}], "model": {"path": "m"}, "nb_version": "0"}
    written = write_outputs(tmp_path / "o", report, [{"text": "a", "score": float("inf")}])
    assert written == report["outputs"] == [str(tmp_path / "o" / "samples.jsonl"), str(tmp_path / "o" / "table.json")]
    assert json.loads((tmp_path / "o" / "samples.jsonl").read_text()) == {"text": "a", "score": "inf"}
    assert json.loads((tmp_path / "o" / "table.json").read_text())["rows"] == [{"perplexity": None}]
    assert not (tmp_path / "o" / OUT_NAMES[2]).exists()


def test_eval_and_generate_read_the_documents_count_unigrams_counts(nb_lm: Path, sp_model: Path,
                                                                    tmp_path: Path) -> None:
    """Issue #28: form feeds, U+2028, U+0085 and CRLF end no document in eval or generate either."""
    from nbcli.counting import CountOptions, count_corpus
    from nbcli.tokenizers import load_tokenizer

    corpus = tmp_path / "odd.txt"
    corpus.write_bytes("".join(f"the model {i}\x0cbias\u2028of the\x85model{' x' * (i % 4)}\r\n"
                               for i in range(9)).encode() + b"\n  \nlast one here\n")
    counted = count_corpus([str(corpus)], load_tokenizer(sp_model), CountOptions(), workers=1)
    assert counted.documents == 11  # nine lines, the whitespace-only line, the last
    report = eval_report(nb_lm, [str(corpus)], sp_model, "1", device="cpu")
    assert report["documents"] == counted.documents and report["rows"][0]["tokens"] == counted.total_tokens
    opts = GenerationOptions(parse_decoding("greedy"), max_new_tokens=1, samples=1, seed=0)
    generated, _ = generation_report(nb_lm, [str(corpus)], sp_model, opts, "1", prompt_words=2, device="cpu")
    assert generated["prompt_count"] == counted.documents - 1  # all but the whitespace-only one have > 2 words
