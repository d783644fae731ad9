"""Token-per-line CoNLL (nbcli/corpus/conll.py through records.iter_conll / iter_sentences): the real
layouts read (CoNLL-2003, WNUT-17, CoNLL-U, GermEval-2014, Windows line endings, trailing spaces, lines
of spaces), and every file that is not CoNLL is a one-line CorpusError naming FILE:LINE, never a
silent parse (a GLUE TSV of sentences, JSON lines, a CSV, a numbered layout read by column 0)."""

from __future__ import annotations

import json
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from nbcli.corpus import iter_conll, iter_sentences
from nbcli.errors import CorpusError


def sentences_of(path: Path, **kwargs: object) -> list[tuple[tuple[str, ...], tuple[str, ...], int]]:
    return [(s.tokens, s.tags, s.origin.line) for s in iter_conll([str(path)], **kwargs)]  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Real layouts that must read

CONLL2003 = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER
"""

WNUT17 = "@paulwalk\tO\nIt\tO\n's\tO\n#\tO\nthe\tO\nEmpire\tB-location\n\n#\tO\nchristmas\tO\n\nok\tO\n"

CONLLU = """# newdoc id = weblog-1
# sent_id = 1
# text = Al - Zaman : American forces killed Shaikh
1\tAl\tAl\tPROPN\tNNP\tNumber=Sing\t0\troot\t0:root\tSpaceAfter=No
2\t-\t-\tPUNCT\tHYPH\t_\t1\tpunct\t1:punct\tSpaceAfter=No
3\tZaman\tZaman\tPROPN\tNNP\tNumber=Sing\t1\tflat\t1:flat\t_

# sent_id = 2
# text = Vámonos al mar
1-2\tVámonos\t_\t_\t_\t_\t_\t_\t_\t_
1\tVamos\tir\tVERB\t_\t_\t0\troot\t_\t_
2\tnos\tnosotros\tPRON\t_\t_\t1\tobj\t_\t_
3-4\tal\t_\t_\t_\t_\t_\t_\t_\t_
3\ta\ta\tADP\t_\t_\t5\tcase\t_\t_
4\tel\tel\tDET\t_\t_\t5\tdet\t_\t_
4.1\tfoo\tfoo\tNOUN\t_\t_\t_\t_\t1:dep\t_
5\tmar\tmar\tNOUN\t_\t_\t1\tobl\t_\t_
"""

GERMEVAL = """#\thttp://de.wikipedia.org/wiki/Manfred_Korfmann [2009-10-17]
1\tAufgrund\tO\tO
2\tseiner\tO\tO
3\tDeutschland\tB-LOC\tO

#\thttp://de.wikipedia.org/wiki/Fred [2009-10-17]
1\tFred\tB-PER\tO
2\tlebt\tO\tO
"""


def test_conll2003_reads_with_docstart_and_four_columns(tmp_path: Path) -> None:
    (tmp_path / "eng.train").write_text(CONLL2003)
    assert sentences_of(tmp_path / "eng.train") == [
        (("EU", "rejects", "German"), ("B-ORG", "O", "B-MISC"), 3),
        (("Peter", "Blackburn"), ("B-PER", "I-PER"), 7)]
    assert [s[1] for s in sentences_of(tmp_path / "eng.train", tag_column=1)][0] == ("NNP", "VBZ", "JJ")


def test_wnut17_hash_tokens_are_tokens(tmp_path: Path) -> None:
    (tmp_path / "wnut17train.conll").write_text(WNUT17)
    got = sentences_of(tmp_path / "wnut17train.conll")
    assert got == [(("@paulwalk", "It", "'s", "#", "the", "Empire"), ("O",) * 5 + ("B-location",), 1),
                   (("#", "christmas"), ("O", "O"), 8), (("ok",), ("O",), 11)]
    (tmp_path / "hash-first.conll").write_text("#\tO\n#christmas\tB-X\n\nok\tO\n")   # before the width is known
    assert sentences_of(tmp_path / "hash-first.conll") == [(("#", "#christmas"), ("O", "B-X"), 1), (("ok",), ("O",), 4)]


def test_conllu_comments_multiword_tokens_and_empty_nodes(tmp_path: Path) -> None:
    (tmp_path / "en.conllu").write_text(CONLLU)
    got = sentences_of(tmp_path / "en.conllu", token_column=1, tag_column=3)
    assert got == [(("Al", "-", "Zaman"), ("PROPN", "PUNCT", "PROPN"), 4),
                   (("Vamos", "nos", "a", "el", "mar"), ("VERB", "PRON", "ADP", "DET", "NOUN"), 11)]
    with pytest.raises(CorpusError, match=r"en\.conllu:4: column 0 numbers the tokens .*CoNLL-U FORM and UPOS: 1 "
                                          r"and 3") as err:
        sentences_of(tmp_path / "en.conllu")
    assert "\n" not in str(err.value)
    # A `# text` comment of exactly ten words is still a comment: a TAB file's token lines hold TABs
    (tmp_path / "ten.conllu").write_text("# text = one two three four five six seven eight\n" + CONLLU.split("\n", 3)[3])
    assert sentences_of(tmp_path / "ten.conllu", token_column=1, tag_column=3)[0][0] == ("Al", "-", "Zaman")
    # ten columns whose column 0 is the token: `3-4` and `8.1` are words there
    (tmp_path / "wide.conll").write_text("3-4 a b c d e f g h O\n8.1 a b c d e f g h B-X\n")
    assert sentences_of(tmp_path / "wide.conll") == [(("3-4", "8.1"), ("O", "B-X"), 1)]


def test_germeval_comments_and_numbered_tokens(tmp_path: Path) -> None:
    (tmp_path / "NER-de-train.tsv").write_text(GERMEVAL)
    assert sentences_of(tmp_path / "NER-de-train.tsv", token_column=1, tag_column=2) == [
        (("Aufgrund", "seiner", "Deutschland"), ("O", "O", "B-LOC"), 2), (("Fred", "lebt"), ("B-PER", "O"), 7)]
    with pytest.raises(CorpusError, match=r"NER-de-train\.tsv:2: column 0 numbers the tokens"):
        sentences_of(tmp_path / "NER-de-train.tsv")
    # a comment of four words is one field at TABs: still a comment
    (tmp_path / "spaced.tsv").write_text("#\thttp://x.org/a b [2009-10-17]\n" + GERMEVAL)
    assert sentences_of(tmp_path / "spaced.tsv", token_column=1, tag_column=2)[0][0] == ("Aufgrund", "seiner",
                                                                                          "Deutschland")
    # column 0 given explicitly: the numbers are read as asked
    assert sentences_of(tmp_path / "NER-de-train.tsv", token_column=0)[0][0] == ("1", "2", "3")


def test_windows_endings_trailing_spaces_blank_lines_of_spaces_and_bom(tmp_path: Path) -> None:
    plain = sentences_of(_write(tmp_path / "a.conll", CONLL2003))
    crlf = CONLL2003.replace("\n", "\r\n")
    assert sentences_of(_write(tmp_path / "b.conll", crlf)) == plain
    spaced = "\n".join(line + "  \t " if line else " \t  " for line in CONLL2003.split("\n"))
    assert sentences_of(_write(tmp_path / "c.conll", spaced)) == plain
    (tmp_path / "d.conll").write_bytes(b"\xef\xbb\xbf" + crlf.encode())
    assert sentences_of(tmp_path / "d.conll") == plain


def _write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode())
    return path


# ---------------------------------------------------------------------------------------------
# Files that are not CoNLL: one line naming FILE:LINE and what was expected

GLUE = "sentence\tlabel\nthe cat sat on the mat\t1\na dog\t0\n"
HF_JSONL = '{"tokens": ["EU", "rejects"], "ner_tags": [3, 0]}\n{"tokens": ["Peter"], "ner_tags": [1]}\n'


@pytest.mark.parametrize("name, content, where", [
    ("train.tsv", GLUE, r"train\.tsv:2: 7 column\(s\), but the first token line \(\S+train\.tsv:1\) has 2: not "
                        r"token-per-line CoNLL.*a TSV of sentences\? JSON lines\?"),
    ("train.txt", HF_JSONL, r"train\.txt:1: a JSON object, not token-per-line CoNLL"),
    ("train.conll", "# a comment\n" + "[1, 2]\n", r"train\.conll:2: a JSON array"),
    ("mixed.conll", "EU B-ORG\nrejects O\nPeter NNP B-PER\n", r"mixed\.conll:3: 3 column\(s\), but .* has 2"),
    ("notag.conll", "EU\nrejects O\n", r"notag\.conll:1: 1 column\(s\): the token 'EU' has no tag"),
    ("inside.conll", "EU\tO\n# mid sentence\n", r"inside\.conll:2: 3 column\(s\)"),
    ("train.csv", "tokens,ner_tags\nEU,3\n", r"train\.csv: a CSV file, not token-per-line CoNLL text"),
    ("train.jsonl", HF_JSONL, r"train\.jsonl: JSON lines, not token-per-line CoNLL text.*'tokens', 'ner_tags'"),
])
def test_not_conll_is_one_line_error(tmp_path: Path, name: str, content: str, where: str) -> None:
    (tmp_path / name).write_text(content)
    with pytest.raises(CorpusError, match=where) as err:
        list(iter_conll([str(tmp_path / name)]))
    assert "\n" not in str(err.value)


def test_iter_sentences_refuses_names_for_conll_and_reads_columns(tmp_path: Path) -> None:
    (tmp_path / "u.conllu").write_text(CONLLU)
    with pytest.raises(CorpusError, match=r"u\.conllu: CoNLL text has columns, not named fields: give the token "
                                          r"column's 0-based number, not 'tokens'"):
        list(iter_sentences([str(tmp_path / "u.conllu")], token_field="tokens"))
    got = list(iter_sentences([str(tmp_path / "u.conllu")], token_field=1, tag_field=3))
    assert [s.tags for s in got] == [("PROPN", "PUNCT", "PROPN"), ("VERB", "PRON", "ADP", "DET", "NOUN")]


# ---------------------------------------------------------------------------------------------
# Properties: well-formed CoNLL reads back exactly; a line of another width is refused by number

TOKEN = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Cf", "Zs", "Zl", "Zp")), min_size=1,
                max_size=6).filter(lambda t: not t.startswith("#") and t != "-DOCSTART-")
TAG = st.sampled_from(["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-MISC"])
SENTENCES = st.lists(st.lists(st.tuples(TOKEN, TAG), min_size=1, max_size=6), min_size=1, max_size=6)


def _conll(sentences: list[list[tuple[str, str]]], width: int, sep: str, ending: str, docstart: bool) -> str:
    lines = ["-DOCSTART- -X- -X- O", ""] if docstart else []
    for sentence in sentences:
        lines += [sep.join([token, *(["X"] * (width - 2)), tag]) for token, tag in sentence] + [""]
    return ending.join(lines) + ending


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sentences=SENTENCES, width=st.integers(2, 10), sep=st.sampled_from([" ", "\t", "  ", " \t"]),
       ending=st.sampled_from(["\n", "\r\n"]), docstart=st.booleans())
def test_written_conll_reads_back_identically(tmp_path: Path, sentences, width, sep, ending, docstart) -> None:
    path = _write(tmp_path / "p.conll", _conll(sentences, width, sep, ending, docstart))
    got = list(iter_conll([str(path)], token_column=0))
    assert [(s.tokens, s.tags) for s in got] == [(tuple(t for t, _ in s), tuple(g for _, g in s)) for s in sentences]
    starts = [3 if docstart else 1]
    for sentence in sentences[:-1]:
        starts.append(starts[-1] + len(sentence) + 1)
    assert [s.origin.line for s in got] == starts


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sentences=SENTENCES, width=st.integers(2, 6), data=st.data())
def test_a_line_of_another_width_is_refused_with_its_number(tmp_path: Path, sentences, width, data) -> None:
    """Any token line rewritten with another column count: the error names that line (the first token
    line sets the width, so when it is the one changed, the next token line is named)."""
    lines = _conll(sentences, width, "\t", "\n", False).split("\n")[:-1]
    token_lines = [i for i, line in enumerate(lines) if line]
    assume(len(token_lines) >= 2)
    index = data.draw(st.sampled_from(token_lines))
    other = data.draw(st.integers(1, 9).filter(lambda w: w != width))
    token = lines[index].split("\t")[0]
    lines[index] = "\t".join([token, *(["X"] * (other - 1))]) if other > 1 else token
    path = _write(tmp_path / "bad.conll", "\n".join(lines) + "\n")
    with pytest.raises(CorpusError) as err:
        list(iter_conll([str(path)], token_column=0))
    message = str(err.value)
    assert "\n" not in message
    if index == token_lines[0]:
        expected = f"{path}:1: 1 column(s)" if other == 1 else \
            f"{path}:{token_lines[1] + 1}: {width} column(s), but the first token line ({path}:1) has {other}"
    else:
        expected = f"{path}:{index + 1}: {other} column(s), but the first token line ({path}:1) has {width}"
    assert message.startswith(expected), (message, expected)


@settings(max_examples=40)
@given(words=st.lists(st.lists(st.text(alphabet=string.ascii_letters, min_size=1, max_size=5), min_size=1,
                               max_size=8), min_size=2, max_size=8))
def test_a_tsv_of_sentences_is_never_read(words) -> None:
    """A GLUE-style TSV (header, then sentence TAB label) is refused unless every sentence has one word
    (the only case where it is indistinguishable from two-column CoNLL)."""
    import tempfile

    lines = ["sentence\tlabel"] + [f"{' '.join(w)}\t{i % 2}" for i, w in enumerate(words)]
    with tempfile.TemporaryDirectory() as folder:
        path = _write(Path(folder) / "train.tsv", "\n".join(lines) + "\n")
        if all(len(w) == 1 for w in words):
            assert len(list(iter_conll([str(path)]))) == 1
            return
        first = next(i for i, w in enumerate(words) if len(w) != 1)
        with pytest.raises(CorpusError, match=rf"train\.tsv:{first + 2}: {len(words[first]) + 1} column"):
            list(iter_conll([str(path)]))


def test_json_lines_in_a_text_file_name_the_records_reader(tmp_path: Path) -> None:
    path = _write(tmp_path / "data.txt", json.dumps({"tokens": ["a"], "ner_tags": ["O"]}) + "\n")
    with pytest.raises(CorpusError, match=r"data\.txt:1: a JSON object.*read as records when named \.jsonl"):
        list(iter_sentences([str(path)]))


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sentences=st.lists(st.lists(st.tuples(TOKEN.filter(lambda t: " " not in t), TAG), min_size=2, max_size=6),
                          min_size=1, max_size=4), data=st.data())
def test_conllu_multiword_and_empty_node_lines_never_hide_the_numbering(tmp_path: Path, sentences, data) -> None:
    """A CoNLL-U file whose sentences hold multiword-token (`k-(k+1)`) and empty-node (`k.1`) lines
    anywhere, the first sentence too (a French or Spanish file opening with `du`, `al`): read by
    column 0 it is refused with the first sentence's line (its column 0 numbers the tokens, it holds
    no word; was: the IDs trained silently as tokens and `_` as the one tag); read by FORM and UPOS
    it gives the words alone."""
    lines = ["# text = x"]
    for sentence in sentences:
        extra = data.draw(st.sets(st.integers(0, len(sentence) - 1), max_size=2))
        for k, (token, tag) in enumerate(sentence, 1):
            if k - 1 in extra and k < len(sentence):
                lines.append("\t".join([f"{k}-{k + 1}", token + "x", *(["_"] * 8)]))
            lines.append("\t".join([str(k), token, token, tag, *(["_"] * 6)]))
            if k - 1 in extra and k == len(sentence):
                lines.append("\t".join([f"{k}.1", token, token, tag, *(["_"] * 6)]))
        lines.append("")
    path = _write(tmp_path / "u.conllu", "\n".join(lines) + "\n")
    with pytest.raises(CorpusError, match=rf"u\.conllu:2: column 0 numbers the tokens 1, 2"):
        list(iter_conll([str(path)]))
    got = list(iter_conll([str(path)], token_column=1, tag_column=3))
    assert [(s.tokens, s.tags) for s in got] == [(tuple(t for t, _ in s), tuple(g for _, g in s)) for s in sentences]


def test_text_to_tag_needs_no_tag_column(tmp_path: Path) -> None:
    """Unlabelled (nb predict): one token a line is CoNLL; a tagged file gives its tokens alone; a
    labelled read still refuses a file without tags, and a line of other columns is still refused."""
    (tmp_path / "new.conll").write_text("But\nwhy\n\n-DOCSTART-\n\nEU\nrejects\n")
    got = [(s.tokens, s.tags) for s in iter_sentences([str(tmp_path / "new.conll")], labelled=False)]
    assert got == [(("But", "why"), ()), (("EU", "rejects"), ())]
    (tmp_path / "tagged.conll").write_text("EU B-ORG\nrejects O\n")
    assert [s.tokens for s in iter_sentences([str(tmp_path / "tagged.conll")], labelled=False)] == [("EU", "rejects")]
    with pytest.raises(CorpusError, match=r"new\.conll:1: 1 column\(s\): the token 'But' has no tag"):
        list(iter_sentences([str(tmp_path / "new.conll")]))
    (tmp_path / "mixed.conll").write_text("EU\nrejects O\n")
    with pytest.raises(CorpusError, match=r"mixed\.conll:2: 2 column\(s\), but the first token line"):
        list(iter_sentences([str(tmp_path / "mixed.conll")], labelled=False))
    with pytest.raises(CorpusError, match=r"new\.conll:1: 1 column\(s\), no column 2 \(the token\)"):
        list(iter_sentences([str(tmp_path / "new.conll")], token_field=2, labelled=False))
