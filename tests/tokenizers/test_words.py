"""`-t words:min-freq=K[,lower]`: word vocabularies built from training data (nbcli.tokenizers.words)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbcli.errors import TokenizerError
from nbcli.tokenizers import load_tokenizer, tokenizer_files
from nbcli.tokenizers.words import SPECIALS, parse_words_spec, split_words

# Letters (with precomposed accents), digits, punctuation and symbols, spaces and newlines.
ALPHABET = "abcAB\u00e9\u00c9019_.,!?'$-\u00ab \n\t"
TEXTS = st.lists(st.text(alphabet=ALPHABET, max_size=40), min_size=1, max_size=12)


def hand_count(texts: list[str], lower: bool) -> Counter[str]:
    """The word rule written independently: runs of word characters, every other non-space alone."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(re.findall(r"\w+|[^\w\s]", text.lower() if lower else text))
    return counts


@settings(max_examples=60, deadline=None)
@given(texts=TEXTS, k=st.integers(1, 4), lower=st.booleans())
def test_vocabulary_is_exactly_the_words_seen_at_least_k_times(texts: list[str], k: int, lower: bool) -> None:
    spec = f"words:min-freq={k}" + (",lower" if lower else "")
    counts = hand_count(texts, lower)
    if not any(c >= k for w, c in counts.items() if w not in SPECIALS):
        with pytest.raises(TokenizerError, match="no word"):
            load_tokenizer(spec, texts=lambda: iter(texts))
        return
    tok = load_tokenizer(spec, texts=lambda: iter(texts))
    pieces = tok.pieces()
    assert pieces[:4] == list(SPECIALS)
    kept = set(pieces[4:])
    assert len(kept) == len(pieces) - 4                       # no word twice
    assert all(counts[w] >= k for w in kept)                  # every kept word has count >= K
    assert {w for w, c in counts.items() if c >= k and w not in SPECIALS} <= kept   # every such word kept
    # ids by count, descending
    assert [counts[w] for w in pieces[4:]] == sorted((counts[w] for w in pieces[4:]), reverse=True)


@settings(max_examples=40, deadline=None)
@given(texts=TEXTS, lower=st.booleans())
def test_encoding_splits_as_counted_and_unknowns_are_unk(texts: list[str], lower: bool) -> None:
    texts = [*texts, "x x"]   # one word seen twice: the vocabulary is never empty
    tok = load_tokenizer("words:min-freq=2" + (",lower" if lower else ""), texts=lambda: iter(texts))
    vocab = set(tok.pieces())
    for text in texts:
        words = hand_count([text], lower)
        expected = [w if w in vocab else "<unk>" for w in re.findall(r"\w+|[^\w\s]", text.lower() if lower else text)]
        assert [tok.piece(i) for i in tok.encode(text)] == expected
        assert sum(words.values()) == len(expected)
        assert split_words(text, lower) == re.findall(r"\w+|[^\w\s]", text.lower() if lower else text)


def test_specials_roles_and_fingerprint_are_those_of_any_tokenizer_json(tmp_path: Path) -> None:
    texts = ["The cat sat .", "the cat ran !", "The dog sat ."]
    tok = load_tokenizer("words:min-freq=2", texts=lambda: iter(texts))
    assert (tok.unk_id, tok.pad_id, tok.bos_id, tok.eos_id) == (0, 1, 2, 3)
    assert tok.kind == "tokenizer.json" and tok.special_ids == frozenset({0, 1, 2, 3})
    assert "The" in tok.pieces() and "the" not in tok.pieces()     # count 1 each side of the case rule
    lowered = load_tokenizer("words:min-freq=2,lower", texts=lambda: iter(texts))
    assert "the" in lowered.pieces() and "The" not in lowered.pieces()
    saved = tmp_path / "tokenizer.json"
    saved.write_bytes(tok.serialized())
    again = load_tokenizer(saved)
    assert again.fingerprint == tok.fingerprint and again.pieces() == tok.pieces()
    assert json.loads(saved.read_bytes())["model"]["type"] == "WordLevel"
    assert tok.decode(tok.encode("The cat sat .")) == "The cat sat ."


def test_transformers_loads_the_file(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    tok = load_tokenizer("words:min-freq=1,lower", texts=lambda: iter(["Hello , world !"]))
    (tmp_path / "tokenizer.json").write_bytes(tok.serialized())
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"))
    assert fast("HELLO world ?", add_special_tokens=False)["input_ids"] == tok.encode("HELLO world ?")


@pytest.mark.parametrize("spec", ["words:", "words:min-freq=0", "words:min-freq=x", "words:min-freq=2,upper",
                                  "words:minfreq=2", "words:min-freq=99999999999999999999", "words:min-freq=-1"])
def test_bad_specs_are_one_line_errors(spec: str) -> None:
    with pytest.raises(TokenizerError, match="words:min-freq=K"):
        parse_words_spec(spec)


def test_a_vocabulary_without_a_word_is_refused() -> None:
    with pytest.raises(TokenizerError, match="no word of the training data occurs 3 time"):
        load_tokenizer("words:min-freq=3", texts=lambda: iter(["a b a", "c"]))
    with pytest.raises(TokenizerError, match="no word"):
        load_tokenizer("words:min-freq=1", texts=lambda: iter(["", "  \n"]))
    assert load_tokenizer("words:min-freq=2", texts=lambda: iter(["a b a", "c"])).pieces()[4:] == ["a"]


def test_without_training_texts_it_says_only_train_takes_it() -> None:
    with pytest.raises(TokenizerError, match="only nb train"):
        load_tokenizer("words:min-freq=2")
    assert tokenizer_files("words:min-freq=2") == []


def test_other_commands_refuse_the_spec_in_one_line(tmp_path: Path) -> None:
    from tests.cli.helpers import assert_one_line_error, run_nb

    corpus = tmp_path / "c.txt"
    corpus.write_text("a b c\n", encoding="utf-8")
    proc = run_nb("count-unigrams", corpus, "-t", "words:min-freq=2", "-o", tmp_path / "c.safetensors")
    assert proc.returncode == 1 and not (tmp_path / "c.safetensors").exists()
    assert_one_line_error(proc.stderr.decode(), "words:min-freq=2", "only nb train")
