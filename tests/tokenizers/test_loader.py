"""The tokenizer loader and the exactness of chunked encoding on adversarial text."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from nbcli.counting import BlockCounter, CountOptions
from nbcli.errors import TokenizerError
from nbcli.samples import SAMPLE_TOKENIZER
from nbcli.tokenizers import load_tokenizer
from nbcli.tokenizers.hf_rules import PREFIX_SPACE_CHUNK

# Characters chosen to break naive whitespace splitting: ASCII and Unicode spaces, tabs, CR, control
# separators Python calls whitespace but Unicode does not, spacing accents that NFKC turns into
# space + combining mark, combining marks, full-width forms, ligatures, zero-width characters, and
# characters outside the vocabulary (byte fallback).
ADVERSARIAL = [
    " ", " ", " ", "  ", "\t", "\r", "\u00a0", "\u3000", "\u2003", "\u2009", "\u202f", "\u205f",
    "\x1c", "\x1f", "\x0b", "\x0c", "\x85", "\u200b", "\ufeff", "\u00a8", "\u00b4", "\u0301", "\u0308",
    "e\u0301", "ｆｕｌｌ", "ﾊﾝｶｸ", "ﬁ", "㎏", "①", "Ⅻ", "🙂", "𝔘", "漢字", "ا", "ß", "İ", "Σ",
    "the", "model", "bias", "frequency", "The", "unigram", "token", ".", ",", "'s", "'", "-", "--",
    "123", "4.5", "$", "\\", "<s>", "</s>", "<|endoftext|>", "[CLS]",
]
adversarial_text = st.lists(st.sampled_from(ADVERSARIAL), min_size=0, max_size=25).map("".join)
# ASCII punctuation next to letters, digits, user-defined symbols and non-ASCII: where chunks are cut
# further (SentencePieceWords.cut_table).
PUNCTUATED = ADVERSARIAL + list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + [
    "<br>", "::", "a.b", "...", "\u2581", "a\u2581b", "\\Ab*a\"cus\\,", "e.g.", "(i)", "x=1;", "~~", "é,", ",é", "🙂.", "a~b",
]
punctuated_text = st.lists(st.sampled_from(PUNCTUATED), min_size=0, max_size=25).map("".join)


def test_loads_sentencepiece(sp_model: Path) -> None:
    tok = load_tokenizer(sp_model)
    assert tok.kind == "sentencepiece"
    assert tok.vocab_size == 500
    assert tok.eos_id is not None and tok.bos_id is not None
    assert tok.chunk_rule == "sp"
    assert tok.eos_id in tok.special_ids
    assert tok.piece(tok.eos_id) == "</s>"
    assert len(tok.sha256) == 64


def test_loads_hf_bytelevel(hf_bytelevel_json: Path) -> None:
    tok = load_tokenizer(hf_bytelevel_json)
    assert tok.kind == "tokenizer.json"
    assert tok.chunk_rule == "bytelevel"
    assert tok.eos_id == tok.bos_id is not None  # <|endoftext|> serves as both, as in GPT-2
    assert load_tokenizer(hf_bytelevel_json.parent).sha256 == tok.sha256  # a directory works too


def test_not_a_tokenizer(tmp_path: Path) -> None:
    junk = tmp_path / "junk.model"
    junk.write_bytes(b"\x00\x01 this is not a tokenizer" * 10)
    with pytest.raises(TokenizerError, match="junk.model: not a tokenizer"):
        load_tokenizer(junk)
    fake_json = tmp_path / "tokenizer.json"
    fake_json.write_text('{"hello": 1}')
    with pytest.raises(TokenizerError, match="tokenizer.json"):
        load_tokenizer(fake_json)
    with pytest.raises(TokenizerError, match="not found"):
        load_tokenizer(tmp_path / "missing.model")


def test_bom_vocab_files_and_model_folders(tmp_path: Path, hf_bytelevel_json: Path, sp_model: Path) -> None:
    """A tokenizer.json with a UTF-8 BOM loads; encoder.json/vocab.json get one clear line; a model
    folder gives its tokenizer.json, else its tokenizer.model, else names what it looked for."""
    import json

    bom = tmp_path / "bom" / "tokenizer.json"
    bom.parent.mkdir()
    bom.write_bytes(b"\xef\xbb\xbf" + hf_bytelevel_json.read_bytes())
    plain = load_tokenizer(hf_bytelevel_json)
    tok = load_tokenizer(bom)
    assert tok.kind == "tokenizer.json" and tok.encode("the model") == plain.encode("the model")
    assert tok.sha256 != plain.sha256  # the hash is of the file's bytes
    vocab = tmp_path / "encoder.json"
    vocab.write_text(json.dumps({"model": 0, "the": 1, "!": 2}))  # GPT-2's encoder.json has "model"
    with pytest.raises(TokenizerError, match=r"encoder.json: not a tokenizer.json .*encoder.json or vocab.json"):
        load_tokenizer(vocab)
    folder = tmp_path / "model"
    folder.mkdir()
    with pytest.raises(TokenizerError, match="holds none of tokenizer.json, tokenizer.model"):
        load_tokenizer(folder)
    (folder / "tokenizer.model").write_bytes(sp_model.read_bytes())
    assert load_tokenizer(folder).kind == "sentencepiece"
    (folder / "tokenizer.json").write_bytes(hf_bytelevel_json.read_bytes())
    assert load_tokenizer(folder).kind == "tokenizer.json"


def test_padding_and_truncation_switched_off(hf_bert_hub_json: Path, hf_bert_json: Path) -> None:
    hub, plain = load_tokenizer(hf_bert_hub_json), load_tokenizer(hf_bert_json)
    text = ["the model bias of the unigram frequency token is not a layer norm attention guidance", "a"]
    assert hub.encode_batch(text) == plain.encode_batch(text)
    assert len(hub.encode(text[0])) > 8 and len(hub.adjustments) == 2 and plain.adjustments == ()
    assert hub.eos_default is False and plain.eos_default is True


def test_sentencepiece_settings_disable_chunking(tmp_path: Path, sample_lines: list[str]) -> None:
    from conftest import train_sentencepiece

    no_split = train_sentencepiece(tmp_path, sample_lines, 500, split_by_whitespace=False)
    tok = load_tokenizer(no_split)
    assert tok.chunk_rule is None
    assert "split_by_whitespace" in tok.method_reason


def test_hf_metaspace_prepend_falls_back(tmp_path: Path, sample_lines: list[str]) -> None:
    from tokenizers import Tokenizer, models, normalizers, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.train_from_iterator(sample_lines, trainers.BpeTrainer(vocab_size=300, show_progress=False))
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    assert load_tokenizer(path).chunk_rule is None


def library_encoder(path: Path):  # type: ignore[no-untyped-def]
    """The tokenizer library's own encoding of one document (no template specials, no padding, no
    truncation), independent of nb's loader."""
    if path.suffix == ".json":
        from tokenizers import Tokenizer as HFTokenizer

        hf = HFTokenizer.from_file(str(path))
        hf.no_padding()
        hf.no_truncation()
        return lambda text: hf.encode(text, add_special_tokens=False).ids
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(path))
    return sp.encode


def _chunked_equals_full(path: Path, lines: list[str], chunked: bool = True) -> None:
    tok = load_tokenizer(path)
    assert (tok.chunk_rule is not None) == chunked
    data = "\n".join(lines).encode("utf-8") + b"\n"
    fast = BlockCounter(tok, CountOptions(eos=False, unigram_certificate=True)).count_block("adv.txt", data, 1, 0)
    slow = BlockCounter(tok, CountOptions(eos=False, chunked=False)).count_block("adv.txt", data, 1, 0)
    # Independent reference: the tokenizer library directly, one document at a time.
    encode = library_encoder(Path(path))
    reference = np.zeros(tok.vocab_size, dtype=np.int64)
    documents = ("\n".join(lines) + "\n").replace("\r\n", "\n").split("\n")  # CRLF or LF ends a line
    for line in (doc for doc in documents if doc):
        for i in encode(line):
            reference[i] += 1
    np.testing.assert_array_equal(slow.counts, reference)
    np.testing.assert_array_equal(fast.counts, reference)


TOKENIZER_FIXTURES = ["sp_model", "sp_bpe_punct_model", "sp_unigram_model", "hf_bytelevel_json", "hf_bert_json",
                      "hf_bert_hub_json"]
BPE_FIXTURES = ["sp_model", "sp_bpe_punct_model"]


@pytest.mark.parametrize("fixture", TOKENIZER_FIXTURES)
@settings(max_examples=100, deadline=None)
@given(lines=st.lists(adversarial_text, min_size=1, max_size=8))
def test_chunked_counting_is_exact_on_adversarial_text(fixture: str, lines: list[str], request: pytest.FixtureRequest) -> None:
    _chunked_equals_full(request.getfixturevalue(fixture), lines)


@pytest.mark.parametrize("fixture", TOKENIZER_FIXTURES)
@settings(max_examples=100, deadline=None)
@given(lines=st.lists(punctuated_text, min_size=1, max_size=8))
def test_chunked_counting_is_exact_on_punctuated_text(fixture: str, lines: list[str], request: pytest.FixtureRequest) -> None:
    _chunked_equals_full(request.getfixturevalue(fixture), lines)


@settings(max_examples=30, deadline=None)
@given(lines=st.lists(punctuated_text, min_size=1, max_size=8))
def test_unigram_models_count_under_the_certificate(sp_unigram_model: Path, lines: list[str]) -> None:
    """Unigram Viterbi ties depend on float sums over the whole line (3 in 200,000 lines of real
    English segment differently as chunks), so unigram lines are counted from their chunks only
    under the per-line certificate (nbcli.tokenizers.certificate), and whole without the cache."""
    tok = load_tokenizer(sp_unigram_model)
    assert tok.chunk_rule == "sp-unigram-certified" and "certificate" in tok.method_reason
    _chunked_equals_full(sp_unigram_model, lines)


def _parts(chunk: str, cuts: np.ndarray) -> list[str]:
    """`chunk` cut wherever the table allows (an independent, per-character reading of the rule)."""
    parts, start = [], 0
    for i in range(1, len(chunk)):
        a, b = ord(chunk[i - 1]), ord(chunk[i])
        if a < 128 and b < 128 and cuts[a, b]:
            parts.append(chunk[start:i])
            start = i
    return parts + [chunk[start:]]


@pytest.mark.parametrize("fixture", [*BPE_FIXTURES, "bundled"])
@settings(max_examples=200, deadline=None)
@given(chunk=punctuated_text.map(lambda t: "".join(t.split())).filter(bool))
def test_cut_parts_encode_to_the_whole_chunk(fixture: str, chunk: str, request: pytest.FixtureRequest) -> None:
    """encode(chunk) == encode(first part) + encode_continuations(later parts), ids in order."""
    tok = load_tokenizer(SAMPLE_TOKENIZER if fixture == "bundled" else request.getfixturevalue(fixture))
    cuts = tok.segmenter.cut_table()
    assert cuts is not None and cuts.shape == (128, 128)
    parts = _parts(chunk, cuts)
    joined = tok.encode(parts[0]) + [i for ids in tok.segmenter.encode_continuations(parts[1:]) for i in ids]
    assert joined == tok.encode(chunk)


def test_subchunk_cuts_only_where_proven(sp_model: Path, sp_unigram_model: Path, hf_bytelevel_json: Path,
                                         tmp_path: Path, sample_lines: list[str]) -> None:
    from conftest import train_sentencepiece

    cuts = load_tokenizer(sp_model).segmenter.cut_table()
    assert cuts is not None and cuts.any() and not cuts.all()
    assert not cuts[:0x21].any() and not cuts[:, :0x21].any() and not cuts[0x7F].any()  # printable only
    tok = load_tokenizer(sp_model)
    for i in range(tok.vocab_size):  # no piece joins a pair that may be cut
        piece = tok.piece(i)
        if i not in tok.special_ids and not re.fullmatch(r"<0x[0-9A-F]{2}>", piece):  # text pieces
            assert not any(ord(a) < 128 and ord(b) < 128 and cuts[ord(a), ord(b)]
                           for a, b in zip(piece, piece[1:])), piece
    assert load_tokenizer(sp_unigram_model).segmenter.cut_table() is None  # unigram chunks are never cut
    # Case folding maps ASCII letters, so pairs in the text are not the vocabulary's pairs.
    folded = train_sentencepiece(tmp_path, sample_lines, 500, normalization_rule_name="nmt_nfkc_cf")
    assert load_tokenizer(folded).segmenter.cut_table() is None
    assert not hasattr(load_tokenizer(hf_bytelevel_json).segmenter, "cut_table")


@settings(max_examples=100, deadline=None)
@given(lines=st.lists(adversarial_text, min_size=1, max_size=8))
def test_chunked_counting_is_exact_for_bundled_model(lines: list[str]) -> None:
    _chunked_equals_full(SAMPLE_TOKENIZER, lines)


@pytest.mark.parametrize("fixture", TOKENIZER_FIXTURES)
def test_chunked_counting_exact_on_fixed_hard_cases(fixture: str, request: pytest.FixtureRequest) -> None:
    cases = [
        "  leading and trailing  ", "runs   of    spaces", "a \t b\t\tc \t", "x\u00a0y \u3000 z\u2003w",
        "\u00a8 \u00b4x y\u00a8", " \u0301start", "ｆｕｌｌ ｗｉｄｔｈ　ｓｐａｃｅ", "e\u0301 e\u0301\u0301",
        "cr\rin the middle", "bytes 🙂 𝔘𝔫𝔦 漢字 ﬁne", "\x1c\x1d sep\x1f", "zero\u200bwidth \ufeffbom",
        "it's they're 'quoted' \"double\"", "   ", "\t", "end with space ",
    ]
    _chunked_equals_full(request.getfixturevalue(fixture), cases)


def test_prefix_space_chunks_cover_the_text() -> None:
    text = "  a  b\t c\u3000d \x1ce  "
    assert "".join(PREFIX_SPACE_CHUNK.findall(text)) == text


@pytest.mark.parametrize("fixture",
                         ["sp_model", "sp_unigram_model", "sp_bpe_punct_model", "sp_llama2_model", "bundled"])
def test_piece_types_read_from_the_proto_match_sentencepiece(fixture: str, request: pytest.FixtureRequest) -> None:
    import sentencepiece as spm

    from nbcli.tokenizers.sentencepiece import read_model_settings, special_ids

    path = SAMPLE_TOKENIZER if fixture == "bundled" else request.getfixturevalue(fixture)
    data = Path(path).read_bytes()
    sp = spm.SentencePieceProcessor(model_proto=data)
    types = read_model_settings(data).piece_types
    assert len(types) == sp.get_piece_size()
    for i, kind in enumerate(types):
        assert (kind == 2, kind == 3, kind == 5, kind == 6) == (
            sp.is_unknown(i), sp.is_control(i), sp.is_unused(i), sp.is_byte(i)), i
    assert special_ids(data, sp) == {i for i in range(sp.get_piece_size()) if sp.is_control(i) or sp.is_unknown(i)}
    assert {2, 3} <= set(types)  # the fixtures have <unk>, <s> and </s>
    assert list(read_model_settings(data).pieces) == sp.id_to_piece(list(range(sp.get_piece_size())))


@pytest.mark.parametrize("fixture", ["sp_model", "sp_llama2_model", "bundled"])
def test_the_continuation_copy_drops_only_the_dummy_prefix(fixture: str, request: pytest.FixtureRequest) -> None:
    import sentencepiece as spm

    from nbcli.tokenizers.sentencepiece import without_dummy_prefix

    path = SAMPLE_TOKENIZER if fixture == "bundled" else request.getfixturevalue(fixture)
    data = Path(path).read_bytes()
    sp, copy = (spm.SentencePieceProcessor(model_proto=d) for d in (data, without_dummy_prefix(data)))
    assert copy.get_piece_size() == sp.get_piece_size()
    for text in ["hello world", "the  cat", "abc"]:
        with_prefix = "".join(sp.encode(text, out_type=str))
        without = "".join(copy.encode(text, out_type=str))
        assert with_prefix.startswith("\u2581") and without == with_prefix[1:], (text, with_prefix, without)


@pytest.mark.parametrize("fixture", ["sp_model", "sp_unigram_model", "sp_llama2_model", "bundled"])
def test_fast_piece_read_equals_the_general_proto_parse(fixture: str, request: pytest.FixtureRequest) -> None:
    """`read_model_settings` reads the leading pieces in SentencePiece's own form with a fast loop;
    it must give what the general parser gives, also where a piece is in another form (a field
    order, a long length) and the general parser takes over part-way."""
    from nbcli.tokenizers import sentencepiece as spmod

    path = SAMPLE_TOKENIZER if fixture == "bundled" else request.getfixturevalue(fixture)
    data = Path(path).read_bytes()

    def general(blob: bytes) -> spmod.ModelSettings:
        model = spmod._proto_fields(blob)
        raw = model.get(spmod.PIECES, [])
        types = tuple(1 if b"\x18" not in r else int(spmod._proto_fields(r).get(3, [1])[-1]) for r in raw)
        return spmod.ModelSettings(trainer=spmod._proto_fields(model.get(spmod.TRAINER_SPEC, [b""])[-1]),
                                   normalizer=spmod._proto_fields(model.get(spmod.NORMALIZER_SPEC, [b""])[-1]),
                                   piece_types=types, pieces=tuple(map(spmod._piece_text, raw)))

    # A piece written with its score before its text (valid protobuf) in the middle of the list.
    odd = b"\x15\x00\x00\x80\xbf\x0a\x03abc"
    pos = 0
    for _ in range(5):
        pos += 2 + data[pos + 1]
    reordered = data[:pos] + b"\x0a" + bytes([len(odd)]) + odd + data[pos:]
    for blob in (data, reordered):
        spmod.read_model_settings.cache_clear()
        assert spmod.read_model_settings(blob) == general(blob)
    assert "abc" in spmod.read_model_settings(reordered).pieces


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=["a", "b", "\u2581", " ", "\0", "\n", "é"], max_size=4), max_size=8),
       st.booleans())
def test_first_spanning_piece_equals_the_piece_by_piece_check(texts: list[str], collapse: bool) -> None:
    from nbcli.tokenizers.sentencepiece import first_spanning_piece

    pieces = [(3 * i + 1, text) for i, text in enumerate(texts)]
    expected = next(((i, p) for i, p in pieces if " " in p or "\u2581" in p.lstrip("\u2581")
                     or (collapse and "\u2581" in p[1:])), None)
    assert first_spanning_piece(([i for i, _ in pieces], texts), collapse) == expected
