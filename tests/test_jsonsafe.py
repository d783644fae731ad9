"""The one safe JSON reader: the same values as json.loads where JSON is sane, one-line refusals otherwise."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbcli.errors import CheckpointError, CorpusError
from nbcli.jsonsafe import (MAX_DEPTH, JsonProblem, check_text, jsonl_field, load_bytes, load_file, metadata_count,
                            metadata_object, parse)

SANE = st.recursive(
    st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(blacklist_categories=("Cs",))),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20)


@given(SANE)
def test_same_value_as_json_loads(value: object) -> None:
    text = json.dumps(value)
    assert parse(text) == json.loads(text)


@given(st.binary(max_size=200))
def test_any_bytes_parse_or_refuse_in_one_line(data: bytes) -> None:
    try:
        load_bytes(data, "f.json", error=CorpusError)
    except CorpusError as err:
        assert "\n" not in str(err) and str(err).startswith("f.json: ")


@pytest.mark.parametrize("text, problem", [
    ("[" * 100_000 + "]" * 100_000, "nested more than"),
    ('{"a":' * 50_000 + "1" + "}" * 50_000, "nested more than"),
    ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "nested more than"),
    ("9" * 5000, "integer of 5000 digits"),
    ('{"n": -' + "1" * 31 + "}", "integer of 31 digits"),
    ("NaN", "NaN is not a JSON value"),
    ('{"a": Infinity}', "Infinity is not a JSON value"),
    ('"\\ud800"', "lone surrogate U+D800"),
    ('{"k\\udc00": 1}', "lone surrogate U+DC00"),
    ("{oops", "line 1 column 2"),
])
def test_refusals_are_one_line(text: str, problem: str) -> None:
    with pytest.raises(JsonProblem, match=re.escape(problem)) as err:
        parse(text)
    assert "\n" not in str(err.value)


def test_surrogate_pairs_and_depth_limit_are_fine() -> None:
    assert parse('"\\ud83d\\ude42"') == "\U0001f642"
    assert parse("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    assert parse("NaN", allow_nan=True) != parse("NaN", allow_nan=True)  # NaN where asked (log.jsonl)


def test_files_bom_size_cap_and_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "index.json"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"a": 1}')
    assert load_file(path) == {"a": 1}
    with pytest.raises(CheckpointError, match="header is not JSON"):
        load_bytes(b"\xef\xbb\xbf{}", "m.safetensors", error=CheckpointError, what="header", bom=False)
    path.write_bytes(b"[" + b"1," * 100 + b"1]")
    with pytest.raises(CheckpointError, match=r"index.json: index of 203 bytes exceeds the 100-byte limit"):
        load_file(path, error=CheckpointError, what="index", max_bytes=100)
    path.write_bytes(b'{"\xff": 1}')
    with pytest.raises(CheckpointError, match="index.json: index is not UTF-8"):
        load_file(path, error=CheckpointError, what="index")
    with pytest.raises(FileNotFoundError):
        load_file(tmp_path / "absent.json")


def test_jsonl_field() -> None:
    assert jsonl_field('\ufeff{"text": "a"}', "text") == ("a", None)
    assert jsonl_field('{"text": "a", "deep": ' + "[" * 300 + "]" * 300 + "}", "text") == ("a", None)
    for line, problem in [('{"text": 5}', "is int, not a string"), ("[1]", "not a JSON object"),
                          ('{"body": "x"}', "no field 'text'"), ('{"text": "\\ud800"}', "lone surrogate"),
                          ('{"text": ' + "[" * 100_000, "not valid JSON")]:
        text, why = jsonl_field(line, "text")
        assert text is None and problem in why


def test_metadata_values() -> None:
    meta = {"nb.config": '{"a": 1}', "bad": "{", "list": "[]", "n": "12", "neg": "-1", "x": "1e3"}
    assert metadata_object(meta, "nb.config", "m") == {"a": 1}
    assert metadata_object(meta, "absent", "m") is None
    with pytest.raises(CheckpointError, match="m: metadata bad is not valid JSON"):
        metadata_object(meta, "bad", "m", error=CheckpointError)
    with pytest.raises(CheckpointError, match="metadata list is a JSON list, expected an object"):
        metadata_object(meta, "list", "m", error=CheckpointError)
    assert metadata_count(meta, "n", "m") == 12 and metadata_count(meta, "absent", "m") == 0
    for key in ("neg", "x", "bad"):
        with pytest.raises(CheckpointError, match="expected a non-negative integer"):
            metadata_count(meta, key, "m", error=CheckpointError)
    assert check_text("plain") is None


# Pieces of JSON text where the byte-level checks of large texts (`_TextFacts`) could go wrong:
# brackets and quotes inside strings, escaped quotes and backslashes before them, surrogate
# escapes paired, lone or after an escaped backslash, long digit runs inside and outside strings.
_STRING_PARTS = ["a", "[", "]", "{", "}", "\\\"", "\\\\", "\\\\\\\"", "\\ud83d\\ude00", "\\ud83d", "\\ude00",
                 "\\\\ud83d", "\\\\\\ud800", "\\ud800\\ud800\\udc00", "7" * 31, "1e5", "é", "\\u0041"]
_json_string = st.lists(st.sampled_from(_STRING_PARTS), max_size=6).map(lambda parts: '"' + "".join(parts) + '"')
_json_number = st.sampled_from(["0", "-12", "1.5e3", "7" * 31, "-" + "9" * 40, "1." + "0" * 400, "2E-7"])
_json_text = st.recursive(
    _json_string | _json_number | st.sampled_from(["true", "null"]),
    lambda inner: st.lists(inner, max_size=4).map(lambda xs: "[" + ",".join(xs) + "]")
    | st.lists(st.tuples(_json_string, inner), max_size=4).map(
        lambda kvs: "{" + ",".join(f"{k}:{v}" for k, v in kvs) + "}"),
    max_leaves=30)


def _outcome(text: str, max_depth: int) -> tuple[str, object]:
    try:
        return "value", parse(text, max_depth=max_depth)
    except JsonProblem as err:
        return "problem", re.sub(r"U\+[0-9A-F]{4}", "U+?", str(err))  # which lone surrogate is named may differ


def _text_nesting(text: str) -> int:
    """The most brackets open at once outside strings, by a plain character loop."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


@given(_json_text.map(lambda t: "[" * 3 + t + "]" * 3), st.integers(1, 12))
def test_byte_level_checks_of_large_texts_decide_as_the_walk(text: str, max_depth: int) -> None:
    """Texts over _WALK_BYTES are checked on their bytes (nesting, literal lengths, lone surrogates):
    the same value, or the same refusal, as walking the parsed value; except that a text nesting
    deeper than allowed is always refused (the walk accepts it where a duplicate key dropped the
    deeper value), and for its depth where a string would also be refused (the walk names the string;
    a too-long literal is named by both, the parser meets it first)."""
    import nbcli.jsonsafe as jsonsafe

    walked = _outcome(text, max_depth)
    original = jsonsafe._WALK_BYTES
    jsonsafe._WALK_BYTES = 0
    try:
        on_bytes = _outcome(text, max_depth)
    finally:
        jsonsafe._WALK_BYTES = original
    too_deep = ("problem", f"nested more than {max_depth} levels deep")
    if _text_nesting(text) > max_depth:  # refused, even where a duplicate key hid the depth from the walk
        assert on_bytes[0] == "problem" and on_bytes in (too_deep, walked), (on_bytes, walked)
    else:
        assert on_bytes == walked


def test_duplicate_keys_do_not_hide_nesting_in_a_large_text() -> None:
    import nbcli.jsonsafe as jsonsafe

    text = '[[[{"":[],"":""}]]]' + " " * jsonsafe._WALK_BYTES  # nests 5 deep; the parse keeps 4
    with pytest.raises(JsonProblem, match="nested more than 4 levels"):
        parse(text, max_depth=4)


def test_a_large_tokenizer_like_text_is_checked_on_its_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    import nbcli.jsonsafe as jsonsafe

    vocab = {f"tok{i}\\\"[{{": i for i in range(20000)}
    text = json.dumps({"model": {"vocab": vocab, "merges": [["a", "b"]] * 20000}, "x": "\ud83d\ude00"})
    assert len(text) > jsonsafe._WALK_BYTES
    monkeypatch.setattr(jsonsafe, "_depth_and_strings", lambda *a, **k: pytest.fail("walked"))
    assert parse(text, max_depth=4) == json.loads(text)  # {model: {merges: [[a, b]]}}: 4 levels
    with pytest.raises(JsonProblem, match="nested more than 4 levels"):
        parse(text.replace('[["a", "b"]', '[[["a"], "b"]', 1), max_depth=4)
