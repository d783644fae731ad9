"""Language direction of translation data and runs (issue 42): a .tsv has no language names, so its column
order is explicit (source first, --columns tgt,src, or a header row naming the languages) and flags that
cannot be honoured are refused; nb eval and nb translate refuse input in other languages than the run's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nbcli.errors import ConfigError
from tests.cli.helpers import assert_one_line_error, invoke


def _tsv(path: Path, corpus: Path, split: str, order: tuple[str, str], header: bool = False) -> Path:
    columns = [(corpus / f"{split}.{lang}").read_text(encoding="utf-8").splitlines() for lang in order]
    rows = ([list(order)] if header else []) + [list(r) for r in zip(*columns)]
    path.write_text("".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_a_target_first_tsv_reads_as_the_aligned_files_with_columns_tgt_src(tmp_path: Path,
                                                                              parallel_corpus: Path) -> None:
    from nbcli.tasks.translation_data import tokenize_pairs
    from nbcli.tokenizers import load_tokenizer

    tok = load_tokenizer(parallel_corpus / "joint.model")
    en_de = _tsv(tmp_path / "train.tsv", parallel_corpus, "train", ("en", "de"))       # English TAB German
    prefix = tokenize_pairs([str(parallel_corpus / "train")], None, tok, tok, "de", "en", 64, 0.1)
    flipped = tokenize_pairs([str(en_de)], None, tok, tok, "de", "en", 64, 0.1, columns="tgt,src")
    first = tokenize_pairs([str(en_de)], None, tok, tok, "de", "en", 64, 0.1)          # documented: source first
    assert flipped.fingerprint == prefix.fingerprint and flipped.val_refs == prefix.val_refs
    assert first.fingerprint != prefix.fingerprint
    header = _tsv(tmp_path / "header.tsv", parallel_corpus, "train", ("en", "de"), header=True)
    named = tokenize_pairs([str(header)], None, tok, tok, "de", "en", 64, 0.1)         # the header says it
    assert named.fingerprint == prefix.fingerprint
    with pytest.raises(ConfigError, match="names its columns en, de"):
        tokenize_pairs([str(header)], None, tok, tok, "de", "en", 64, 0.1, columns="src,tgt")


def test_train_refuses_columns_it_cannot_honour(tmp_path: Path, parallel_corpus: Path) -> None:
    header = _tsv(tmp_path / "header.tsv", parallel_corpus, "train", ("en", "de"), header=True)
    base = ("train", "translation", "--src-lang", "de", "--tgt-lang", "en", "-t", parallel_corpus / "joint.model",
            "--steps", "1", "--d-model", "16")
    for corpus, columns, fragments in (
            (header, "src,tgt", ("--columns src,tgt", "names its columns en, de")),
            (parallel_corpus / "train", "tgt,src", ("--columns tgt,src", "whose names say which side")),
    ):
        result = invoke(*base, "--corpus", corpus, "--columns", columns, "--out", tmp_path / "run")
        assert result.exit_code == 1, result.output
        assert_one_line_error(result.stderr, *fragments)
        assert not (tmp_path / "run").exists()


def test_eval_checks_the_runs_languages_and_honours_columns(tmp_path: Path, translation_run: Path,
                                                            parallel_corpus: Path) -> None:
    valid = parallel_corpus / "valid"
    base = ("eval", translation_run, "--task", "translation", "--beam", "1")
    result = invoke(*base, "--corpus", valid, "--src-lang", "en", "--tgt-lang", "de")       # the reverse direction
    assert result.exit_code == 1, result.output
    assert_one_line_error(result.stderr, "en->de", "translates de->en")
    result = invoke(*base, "--corpus", valid, "--json")                                   # the run's languages
    assert result.exit_code == 0, result.output
    reference = json.loads(result.stdout)
    assert (reference["src_lang"], reference["tgt_lang"], reference["pairs"]) == ("de", "en", 40)
    en_de = _tsv(tmp_path / "valid.tsv", parallel_corpus, "valid", ("en", "de"))
    result = invoke(*base, "--corpus", en_de, "--columns", "tgt,src", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["bleu"] == reference["bleu"]
    result = invoke("eval", "--task", "translation", "--corpus", valid, "--src-lang", "de", "--tgt-lang", "en",
                    "--hyps", parallel_corpus / "valid.en", "--columns", "tgt,src")
    assert result.exit_code == 1, result.output
    assert_one_line_error(result.stderr, "--columns tgt,src", "whose names say which side")


def test_translate_refuses_input_in_the_runs_target_language(tmp_path: Path, translation_run: Path,
                                                             parallel_corpus: Path) -> None:
    english = tmp_path / "test.en"
    english.write_bytes((parallel_corpus / "valid.en").read_bytes())
    for args, fragments in (((), ("test.en", "named for en", "de->en")),
                            (("--src-lang", "en"), ("en->en", "translates de->en")),
                            (("--tgt-lang", "de"), ("de->de", "translates de->en"))):
        result = invoke("translate", translation_run, "-i", english, "-o", tmp_path / "out.de", *args)
        assert result.exit_code == 1, result.output
        assert_one_line_error(result.stderr, *fragments)
        assert not (tmp_path / "out.de").exists()
    result = invoke("translate", translation_run, "-i", english, "-o", tmp_path / "out.txt", "--src-lang", "de",
                    "--beam", "1")                                                      # said to be German: translated
    assert result.exit_code == 0, result.output
