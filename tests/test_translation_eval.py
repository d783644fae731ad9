"""`nb eval --task translation` scoring (nbcli.translation_eval): the pairs of every corpus form the
reader knows give the same scores, equal to sacreBLEU's on the sentences read here independently;
hypotheses from a file or from a translate function; bad inputs are one error each."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbcli.analysis.translation import score_translations
from nbcli.errors import ConfigError, CorpusError, InputError
from nbcli.translation_eval import eval_translation, read_hypotheses

SOURCES = ["Das ist ein Haus .", "Ein Hund läuft nach Hause .", "Wir sehen uns morgen .", "Danke !"]
TARGETS = ["This is a house .", "A dog runs home .", "See you tomorrow .", "Thank you !"]
HYPS = ["This is a house .", "A dog is running home .", "", "Thanks !"]


def corpus_forms(tmp_path: Path) -> dict[str, str]:
    """The test set as aligned files, TSV and JSONL (the Hugging Face translation schema)."""
    (tmp_path / "test.de").write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    (tmp_path / "test.en").write_text("\n".join(TARGETS) + "\n", encoding="utf-8")
    (tmp_path / "test.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in zip(SOURCES, TARGETS)), encoding="utf-8")
    (tmp_path / "test.jsonl").write_text("".join(json.dumps({"translation": {"de": s, "en": t}}) + "\n"
                                                 for s, t in zip(SOURCES, TARGETS)), encoding="utf-8")
    return {"aligned": str(tmp_path / "test"), "tsv": str(tmp_path / "test.tsv"), "jsonl": str(tmp_path / "test.jsonl")}


def test_every_corpus_form_gives_sacrebleus_scores(tmp_path: Path) -> None:
    hyps = tmp_path / "hyps.txt"
    hyps.write_text("\n".join(HYPS) + "\n", encoding="utf-8")
    expected = score_translations(HYPS, TARGETS)
    for form, corpus in corpus_forms(tmp_path).items():
        report = eval_translation([corpus], "de", "en", hyps=hyps)
        assert report["pairs"] == 4 and report["hypotheses"] == str(hyps), form
        for key in ("bleu", "chrf", "bleu_signature", "chrf_signature", "bleu_details"):
            assert report[key] == expected[key], (form, key)
    assert 0 < expected["bleu"] < 100 and "tok:13a" in expected["bleu_signature"]


def test_hypotheses_from_a_translate_function(tmp_path: Path) -> None:
    """The seam a model's decoder plugs into: source sentences in, hypotheses out, in order."""
    corpus = corpus_forms(tmp_path)["aligned"]
    seen: list[list[str]] = []

    def translate(sources: list[str]) -> list[str]:
        seen.append(sources)
        return [dict(zip(SOURCES, HYPS))[s] for s in sources]

    report = eval_translation([corpus], "de", "en", translate=translate, model={"path": "m.safetensors"})
    assert seen == [SOURCES] and report["model"] == {"path": "m.safetensors"} and report["hypotheses"] is None
    assert report["bleu"] == score_translations(HYPS, TARGETS)["bleu"]
    with pytest.raises(InputError, match="3 translations for 4 pairs"):
        eval_translation([corpus], "de", "en", translate=lambda s: s[:3])


def test_bad_inputs_are_one_error_each(tmp_path: Path) -> None:
    corpus = corpus_forms(tmp_path)["aligned"]
    hyps = tmp_path / "short.txt"
    hyps.write_text("only one\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"--hyps .*short\.txt: 1 lines for the 4 pairs of .*test"):
        eval_translation([corpus], "de", "en", hyps=hyps)
    with pytest.raises(ConfigError, match="a model .* or a hypotheses file"):
        eval_translation([corpus], "de", "en")
    with pytest.raises(ConfigError, match="not both"):
        eval_translation([corpus], "de", "en", hyps=hyps, translate=list)
    with pytest.raises(ConfigError, match="--src-lang and --tgt-lang"):
        eval_translation([corpus], None, "en", hyps=hyps)
    with pytest.raises(ConfigError, match="both 'de'"):
        eval_translation([corpus], "de", "de", hyps=hyps)
    (tmp_path / "empty.de").write_text("")
    (tmp_path / "empty.en").write_text("")
    with pytest.raises(CorpusError, match="no de-en pairs"):
        eval_translation([str(tmp_path / "empty")], "de", "en", hyps=hyps)
    (tmp_path / "bad.en").write_text("only\n")
    (tmp_path / "bad.de").write_text("one\ntwo\n")
    with pytest.raises(CorpusError, match="bad"):  # misaligned files: the reader's error
        eval_translation([str(tmp_path / "bad")], "de", "en", hyps=hyps)


line_text = st.text(alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=12)


@given(st.lists(line_text, max_size=20), st.sampled_from(["\n", "\r\n"]))
def test_hypotheses_come_back_as_written(tmp_path_factory: pytest.TempPathFactory, lines: list[str],
                                         ending: str) -> None:
    """Every line in order, empty ones kept (a model may output nothing), by the corpus line rule."""
    path = tmp_path_factory.mktemp("lines") / "hyps.txt"
    path.write_bytes("".join(line + ending for line in lines).encode("utf-8"))
    assert read_hypotheses(path) == (lines, 0)


def test_hypotheses_compressed_invalid_utf8_and_not_one_file(tmp_path: Path) -> None:
    path = tmp_path / "h.txt.gz"
    path.write_bytes(gzip.compress("a\n\nb\fc\nlast".encode()))
    assert read_hypotheses(path) == (["a", "", "b\fc", "last"], 0)  # form feed stays inside its line
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\nbad \xff here\n")
    assert read_hypotheses(bad) == (["ok", "bad \ufffd here"], 1)  # replaced and counted, as in the corpus
    corpus = corpus_forms(tmp_path)["aligned"]
    bad.write_bytes(b"This is a house .\nA dog \xff\n\nThanks !\n")
    report = eval_translation([corpus], "de", "en", hyps=bad)
    assert report["warnings"] == [f"--hyps {bad}: 1 line(s) held invalid UTF-8 (replaced by U+FFFD)"]
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "a.txt").write_text("x\n")
    with pytest.raises(CorpusError, match="--hyps .*expected one text file"):
        read_hypotheses(tmp_path / "folder")  # a folder of files is not one text file
