"""nbcli.vectors.reader: the same vectors in every format and compression read back equal; the
detection rule; limit/vocabulary; each error a one-line InputError naming FILE:LINE (or the record)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from nbcli.errors import ConfigError, InputError
from nbcli.vectors.reader import read_vectors
from tests.vectors.writers import FORMATS, random_vectors, to_bytes, write

EXPECTED_FORMAT = {"glove": "glove", "word2vec": "word2vec", "vec": "word2vec", "word2vec-binary": "word2vec-binary"}


@pytest.mark.parametrize("compress", [None, "gzip", "bz2"])
@pytest.mark.parametrize("kind", FORMATS)
def test_every_format_reads_the_same_matrix(tmp_path: Path, kind: str, compress: str | None) -> None:
    words, x = random_vectors()
    # a misleading name: the content decides (a .txt that is gzip, a .gz that is not)
    path = write(tmp_path / ("vectors.txt" if compress else "vectors.gz"), kind, words, x, compress)
    wv = read_vectors(path)
    assert wv.words == words
    assert wv.vectors.dtype == np.float32
    np.testing.assert_array_equal(wv.vectors, x)  # repr(float32 -> float) round-trips exactly
    assert wv.format == EXPECTED_FORMAT[kind]
    assert wv.compression == compress
    assert wv.index == {w: i for i, w in enumerate(words)}


@pytest.mark.parametrize("kind", FORMATS)
def test_limit_and_vocabulary_keep_what_they_say(tmp_path: Path, kind: str) -> None:
    words, x = random_vectors()
    path = write(tmp_path / "v", kind, words, x)
    first = read_vectors(path, limit=5)
    assert first.words == words[:5]
    np.testing.assert_array_equal(first.vectors, x[:5])
    wanted = {words[3], words[10], "naïve", "absent"}
    some = read_vectors(path, vocabulary=wanted)
    assert some.words == [w for w in words if w in wanted]
    np.testing.assert_array_equal(some.vectors, x[[words.index(w) for w in some.words]])
    assert read_vectors(path, vocabulary=wanted, limit=2).words == some.words[:2]


def test_a_glove_840b_word_with_spaces_reads_whole(tmp_path: Path) -> None:
    path = tmp_path / "glove.txt"
    path.write_bytes(b"the 1 2 3\n. . . 4 5 6\nat name@domain.com 7 8 9\n")
    wv = read_vectors(path)
    assert wv.words == ["the", ". . .", "at name@domain.com"]
    np.testing.assert_array_equal(wv.vectors, np.arange(1, 10, dtype=np.float32).reshape(3, 3))


def test_grows_past_its_first_allocation(tmp_path: Path) -> None:
    words = [f"w{i}" for i in range(70000)]
    x = np.arange(70000 * 2, dtype=np.float32).reshape(-1, 2)
    path = tmp_path / "big.txt"
    path.write_bytes(b"".join(f"{w} {a:.0f} {b:.0f}\n".encode() for w, (a, b) in zip(words, x)))
    wv = read_vectors(path)
    assert len(wv.words) == 70000
    np.testing.assert_array_equal(wv.vectors, x)


def error_of(path: Path, **kw: object) -> str:
    with pytest.raises(InputError) as err:
        read_vectors(path, **kw)  # type: ignore[arg-type]
    message = str(err.value)
    assert "\n" not in message
    return message


def test_duplicate_word_names_both_lines_or_keeps_the_first(tmp_path: Path) -> None:
    path = tmp_path / "dup.txt"
    path.write_bytes(b"a 1 2\nb 3 4\na 5 6\n")
    message = error_of(path)
    assert f"{path}:3:" in message and "duplicate word 'a'" in message and f"{path}:1" in message
    wv = read_vectors(path, duplicates="keep-first")
    assert wv.words == ["a", "b"] and wv.duplicates_skipped == 1
    np.testing.assert_array_equal(wv.vectors[0], [1, 2])


@pytest.mark.parametrize("content, line, fragment", [
    (b"a 1 2 3\nb 1 2\nc 1 2 3\n", 2, "2 numbers, expected 3"),
    (b"a 1 2 3\nb 1 2 3 4\n", 2, "4 numbers, expected 3"),
    (b"2 3\na 1 2 3\nb 1 2 x\n", 3, "'x' is not a number"),
    (b"a 1 2\nb 1 nan\n", 2, "NaN or infinite"),
    (b"a 1 2\n\xff\xfe 1 2\n", 2, "invalid UTF-8"),
    (b"3 2\na 1 2\nb 1 2\n", 4, "ends after 2 rows; its header says 3"),
    (b"1 2\na 1 2\nb 1 2\n", 3, "more rows than the header's 1"),
    (b"a 1 2\n\nb 1 2\n", 2, "blank line"),
])
def test_text_errors_name_file_and_line(tmp_path: Path, content: bytes, line: int, fragment: str) -> None:
    path = tmp_path / "bad.txt"
    path.write_bytes(content)
    message = error_of(path)
    assert message.startswith(f"{path}:{line}:"), message
    assert fragment in message


def test_binary_truncation_and_bad_utf8(tmp_path: Path) -> None:
    words, x = random_vectors(5, 4)
    data = to_bytes("word2vec-binary", words, x)
    path = tmp_path / "v.bin"
    path.write_bytes(data[:-7])  # inside the last vector
    message = error_of(path)
    assert message.startswith(f"{path}: record 5 (byte ") and "truncated" in message
    path.write_bytes(data[:data.index(words[3].encode())])  # a record missing entirely
    assert "record 4" in error_of(path) and "header says 5" in error_of(path)
    # word2vec.c cuts long words inside a UTF-8 character: escaped, still distinct, counted
    bad = data.replace("日本".encode(), "日本".encode()[:4] + b"!")
    path.write_bytes(bad)
    wv = read_vectors(path)
    assert wv.escaped_words == 1 and wv.words[-1] == "日\\xe6!"
    np.testing.assert_array_equal(wv.vectors, x)


def test_what_is_not_a_vector_file(tmp_path: Path) -> None:
    path = tmp_path / "model.bin"
    path.write_bytes(b"\x00\x01\x02binary\n")
    assert "not a word-vector file" in error_of(path)
    assert "not found" in error_of(tmp_path / "missing.txt")
    gz = tmp_path / "cut.txt.gz"
    import gzip
    gz.write_bytes(gzip.compress(b"a 1 2\n" * 1000)[:-20])
    assert "truncated" in error_of(gz)
    with pytest.raises(ConfigError):
        read_vectors(gz, limit=0)
    with pytest.raises(InputError, match="no `N D` header"):
        read_vectors(write(tmp_path / "g.txt", "glove", *random_vectors(3, 2)), format="word2vec")


_word = st.text(st.characters(blacklist_categories=("Cs", "Zs", "Zl", "Zp", "Cc")), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(_word, min_size=1, max_size=12, unique=True), d=st.integers(1, 5),
       header=st.booleans(), seed=st.integers(0, 2**16), data=st.data())
def test_text_parser_round_trips(tmp_path: Path, words: list[str], d: int, header: bool, seed: int,
                                 data: st.DataObject) -> None:
    """Any words without whitespace, any dimension, any float32 values: written as GloVe or word2vec
    text (with random extra spaces or tabs between the fields), read back exactly."""
    words = [w for w in words if w.split() == [w]] or ["x"]
    if len(words) == 1 and header is False and d == 1 and words[0].isdigit():
        words = ["x"]  # "7 0.5" alone would be a header line: the documented ambiguity
    x = np.random.default_rng(seed).standard_normal((len(words), d)).astype(np.float32)
    seps = [data.draw(st.sampled_from([b" ", b"  ", b"\t", b" \t"])) for _ in words]
    body = b"".join(w.encode() + sep + sep.join(repr(float(v)).encode() for v in row) + b"\n"
                    for w, row, sep in zip(words, x, seps))
    path = tmp_path / "h.txt"
    path.write_bytes((f"{len(words)} {d}\n".encode() if header else b"") + body)
    wv = read_vectors(path)
    assert wv.words == words
    np.testing.assert_array_equal(wv.vectors, x)


def test_unicode_errors_as_gensim_on_its_own_file() -> None:
    """gensim's pang_lee_polarity_fasttext.vec holds 5 words that are not UTF-8 (one is the byte 0x97):
    strict (the default) refuses it after the whole read, naming the line, the count and the choices;
    replace and ignore read the words gensim's load_word2vec_format(unicode_errors=) reads (was: refused
    at the first, no choice)."""
    gensim = pytest.importorskip("gensim.models", reason="gensim is in the test extras (pyproject)")
    import gensim.test.utils as gensim_data

    path = gensim_data.datapath("pang_lee_polarity_fasttext.vec")
    with pytest.raises(InputError) as err:
        read_vectors(path)
    message = str(err.value)
    assert message.startswith(f"{path}:150: invalid UTF-8 in the word at byte 0; 5 word(s) of ") and "\n" not in message
    assert "unicode_errors 'replace', 'ignore' or 'backslashreplace' (--unicode-errors)" in message
    for rule in ("replace", "ignore"):
        kv = gensim.KeyedVectors.load_word2vec_format(path, unicode_errors=rule)
        wv = read_vectors(path, unicode_errors=rule)
        assert wv.words == list(kv.index_to_key) and wv.escaped_words == 5 and wv.unicode_errors == rule
        np.testing.assert_allclose(wv.vectors, kv.vectors, rtol=1e-6)


def test_unicode_errors_counts_every_bad_word_and_binary_keeps_escaping(tmp_path: Path) -> None:
    path = tmp_path / "v.txt"
    path.write_bytes(b"a 1 2\n\xff 1 2\nb 1 2\nc\xfe 1 2\n")
    assert error_of(path) == (f"{path}:2: invalid UTF-8 in the word at byte 0; 2 word(s) of {path} are not UTF-8: "
                              "read them with unicode_errors 'replace', 'ignore' or 'backslashreplace' "
                              "(--unicode-errors), as gensim's load_word2vec_format(unicode_errors=) does")
    assert read_vectors(path, unicode_errors="backslashreplace").words == ["a", "\\xff", "b", "c\\xfe"]
    assert read_vectors(path, unicode_errors="ignore").words == ["a", "", "b", "c"]   # as gensim's "ignore"
    with pytest.raises(ConfigError, match="--unicode-errors must be one of strict, replace, ignore"):
        read_vectors(path, unicode_errors="surrogateescape")  # type: ignore[arg-type]
    words, x = random_vectors(5, 4)
    binary = tmp_path / "v.bin"
    binary.write_bytes(to_bytes("word2vec-binary", words, x).replace("日本".encode(), "日本".encode()[:4] + b"!"))
    assert read_vectors(binary).escaped_words == 1
    with pytest.raises(InputError, match=r"v\.bin: record 5 \(byte \d+\): invalid UTF-8 in the word at byte 3; 1 "):
        read_vectors(binary, unicode_errors="strict")
