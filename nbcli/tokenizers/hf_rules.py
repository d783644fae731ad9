"""Hugging Face `tokenizer.json`: each family's chunk rule (`hf_segmenter` picks one).

Families (pre-tokenizer and normaliser as the hub files write them):

* `ByteLevelChunks`: GPT-2/RoBERTa, `ByteLevel` with its own regex.
* `SplitRegexChunks`: Llama-3 / GPT-4 (cl100k) / Qwen2 / o200k, `Split` with a known regex, then
  `ByteLevel(use_regex=false)`.
* `WhitespaceChunks`: BERT WordPiece (`BertNormalizer`, `BertPreTokenizer`) and other pre-tokenizers
  that split on (and drop) whitespace.
* `MetaspaceChunks`: `Metaspace(split=true)` (T5/ALBERT-style converted SentencePiece).
* `MetaspaceRuns` / `PrependRuns`: converted Llama/Mistral BPE, `Metaspace(split=false)` or the older
  `Prepend("▁")` + `Replace(" ", "▁")` normaliser: the whole text is one BPE word.

Anything else counts whole documents, and `hf_segmenter` says why. Loading is `nbcli.tokenizers.hf`.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from nbcli.tokenizers.segment import (
    DIGIT, LETTER, LITERAL_METASPACE, NON_ASCII_WS, PUNCT, SPACES, WS, WS_NOT_CONTROL, ByteRule, EncodeFn,
    PatternSegmenter, SpaceRunSegmenter, Spans, ascii_pairs_absent, cut_parts, encode_two_ways, pair_table,
)

# Normalisers that map each character on its own (or compose only with following combining marks,
# which never start at whitespace), so normalise(document) == concat(normalise(chunk)).
_LOCAL_NORMALIZERS = {"NFC", "NFD", "NFKC", "NFKD", "Lowercase", "StripAccents", "BertNormalizer"}
_SPLITTING = {"Whitespace", "WhitespaceSplit", "BertPreTokenizer"}  # split on whitespace and drop it
_ONLY_SPLIT = {"Punctuation", "Digits"}  # only cut further inside pre-tokens


def _chunk_pattern(whitespace: str) -> re.Pattern[str]:
    """Chunks = a whitespace run (possibly empty) followed by a non-whitespace run, or trailing space."""
    return re.compile(f"[{whitespace}]*[^{whitespace}]+|[{whitespace}]+")


PREFIX_SPACE_CHUNK = _chunk_pattern(WS)
# The same chunks on the bytes of text blocks (`segment.line_spans`): ASCII whitespace of WS (a
# newline ends a line, CR never reaches the byte path), or of WS_NOT_CONTROL.
WS_BYTES = ByteRule(b"\t\x0b\x0c\r ", b"\t\x0b\x0c\r ", False, NON_ASCII_WS)
WS_NOT_CONTROL_BYTES = ByteRule(b"\t\r ", b"\t\r ", False, NON_ASCII_WS)
# Cuts inside chunks between ASCII classes (`segment.ByteRule.class_cuts`; the apostrophe is in no
# class for the byte-level families): each family's docstring proves its set.
L, N, P = LETTER, DIGIT, PUNCT
GPT2_CLASS_CUTS = ((L, N), (N, L), (L, P), (P, L), (N, P), (P, N))
SPLIT_REGEX_CLASS_CUTS = ((L, N), (N, L), (L, P), (N, P), (P, N))
BERT_CLASS_CUTS = ((L, P), (N, P), (P, P), (P, L), (P, N))


class ByteLevelChunks(PatternSegmenter):
    """GPT-2 byte-level BPE: `ByteLevel` splitting with its regex
    ``'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+``.

    Chunks: a whitespace run and the non-whitespace run after it (`PREFIX_SPACE_CHUNK`).
    Proof. No alternative matches a non-whitespace character followed by whitespace, so every
    position where whitespace follows non-whitespace ends a match; the regex has no look-behind,
    so matching a chunk alone from that position gives the document's matches, and the only
    look-ahead, ``(?!\\S)``, never reaches past a chunk's end (a chunk ends with non-whitespace). Each
    pre-token is byte-mapped and BPE-encoded on its own. With `add_prefix_space` (applied once to
    the whole text) a chunk is cut only before a run that starts with " ", so a later chunk gets no
    second prefix; a run starting with a tab or newline stays with the chunk before it.

    Without `add_prefix_space`, the byte path also cuts between ASCII letters, digits and
    punctuation (`GPT2_CLASS_CUTS`; the apostrophe, which starts the contractions, in no class).
    Proof. A match holding a letter is a contraction or `` ?\\p{L}+``, both ending at a non-letter;
    one holding a digit is `` ?\\p{N}+``; one holding punctuation is `` ?[^\\s\\p{L}\\p{N}]+``, which
    ends before a letter or digit. So every match ends at such a class change, and a regex without
    look-behind, whose one look-ahead concerns whitespace, matches each side alone the same way:
    no earlier alternative can match a prefix of the text that it could not match in the whole.
    """

    name = "bytelevel"

    @staticmethod
    def pattern_for(add_prefix_space: bool) -> re.Pattern[str]:
        if not add_prefix_space:
            return PREFIX_SPACE_CHUNK
        return re.compile(f"[{WS}]*[^{WS}]+(?:(?! )[{WS}]+[^{WS}]*)*|[{WS}]+")


# The Split regexes of known byte-level BPE families (as their tokenizer.json files write them).
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
O200K_REGEX = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
               r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+"
               r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
KNOWN_SPLIT_REGEXES = {LLAMA3_REGEX: "Llama-3/cl100k", QWEN2_REGEX: "Qwen2", O200K_REGEX: "o200k"}


class SplitRegexChunks(PatternSegmenter):
    """Llama-3 / Qwen2 / o200k byte-level BPE: `Split` (Isolated) with one of `KNOWN_SPLIT_REGEXES`,
    then `ByteLevel(use_regex=false)`; no normaliser, or NFC.

    Chunks: a whitespace run and the non-whitespace run after it, except that a run starting with
    CR or LF after a character that is not a letter or number stays in the chunk before it.
    Proof. Of the alternatives, only `` ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*`` (``[\\r\\n/]*`` in o200k) matches
    non-whitespace followed by whitespace, and only when a non-letter, non-number character is
    followed by CR/LF. Every other position where whitespace follows non-whitespace ends a match.
    ``[^\\r\\n\\p{L}\\p{N}]?\\p{L}+`` attaches one space or punctuation to the *next* word, which lies
    inside the next chunk. As for GPT-2, no look-behind and a look-ahead that stays inside a chunk
    make a chunk's matches the document's. ByteLevel then maps each pre-token alone (its
    add_prefix_space acts per pre-token). NFC composes a character only with following combining
    marks (never whitespace), so it is chunk-local; where NFC turns a letter or number into a form
    ending in a mark (e.g. U+0958), `nfc_exceptions` keeps the run after it joined too.

    The byte path also cuts between ASCII classes (`SPLIT_REGEX_CLASS_CUTS`: letter|digit,
    digit|letter, letter|punctuation, digit|punctuation, punctuation|digit; the apostrophe in no
    class). Proof. Matches holding a letter (``[^\\r\\n\\p{L}\\p{N}]?\\p{L}+``, o200k's cased forms,
    contractions) end at the first character that is neither a letter nor a mark, unless a
    contraction (an apostrophe) follows; ``\\p{N}{1,3}`` ends at a non-digit; punctuation
    (`` ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*``) ends before a digit and cannot be part of a letter match
    followed by a digit. Punctuation before a letter is *not* a cut: the letter alternative takes one
    such character. NFC composes only non-ASCII characters after the cut. As for GPT-2, each side
    then matches alone as in the whole.
    """

    name = "split-regex"

    @staticmethod
    def pattern_for(nfc: bool) -> Any:
        import regex

        joiner = f"[^\\p{{L}}\\p{{N}}{WS}]"  # the last character of ` ?[^\\s\\p{L}\\p{N}]+`
        if nfc and nfc_exceptions():
            joiner = f"(?:{joiner}|[{''.join(nfc_exceptions())}])"
        return regex.compile(f"[{WS}]*[^{WS}]+(?:(?<={joiner})[\\r\\n][{WS}]*[^{WS}]*)*|[{WS}]+")


@functools.lru_cache(maxsize=1)
def nfc_exceptions() -> list[str]:
    """Letters and numbers whose NFC form ends in a character that is neither (composition
    exclusions such as U+0958 DEVANAGARI LETTER QA -> KA + NUKTA)."""
    import sys
    import unicodedata

    def word_char(ch: str) -> bool:
        return unicodedata.category(ch)[0] in "LN"

    out = []
    for code in range(sys.maxunicode + 1):
        ch = chr(code)
        if word_char(ch):
            nfc = unicodedata.normalize("NFC", ch)
            if nfc != ch and not word_char(nfc[-1]):
                out.append(re.escape(ch))
    return out


class WhitespaceChunks(PatternSegmenter):
    """Pre-tokenizers that split on whitespace and drop it (BERT's `BertPreTokenizer`, `Whitespace`,
    `WhitespaceSplit`, with `Punctuation`/`Digits`), after character-local normalisers.

    Chunks: a whitespace run and the non-whitespace run after it. Proof. Whitespace always separates
    pre-tokens and is dropped, and the model (WordPiece, BPE, unigram) encodes each pre-token on its
    own, so cutting at whitespace changes no pre-token. BertNormalizer(clean_text) deletes control
    characters, joining the text around them, so control characters do not count as whitespace
    here (`WS_NOT_CONTROL`).

    With `BertPreTokenizer` alone, the byte path also cuts before and after each ASCII punctuation
    character (`BERT_CLASS_CUTS`, the apostrophe included): BERT isolates every punctuation
    character as a pre-token of its own, whatever surrounds it.
    """

    name = "whitespace"


class MetaspaceChunks(PatternSegmenter):
    """`Metaspace(split=true)`: every space becomes "▁" and starts a new pre-token.

    Chunks: one space (or literal "▁") and the text up to the next one. Proof. The pre-tokens are
    exactly these pieces with " " replaced by "▁"; the model encodes each alone. The prepend scheme
    ("always", "first") adds "▁" only to text not starting with "▁": a later chunk starts with one,
    and the first chunk is the document's start.
    """

    name = "metaspace"
    PATTERN = re.compile(f"[^{SPACES}]+|[{SPACES}][^{SPACES}]*")


class MetaspaceRuns(SpaceRunSegmenter):
    """`Metaspace(split=false)` + BPE (converted Llama/Mistral): the whole text is one BPE word.

    Chunks: cut before each run of spaces, encoded as they are. Proof. No vocabulary piece holds "▁"
    after a non-"▁" character (checked at load), so no merge ever spans such a position and BPE
    (merges by rank, then position) treats both sides independently: the ids are those of the sides
    encoded alone. A later chunk starts with "▁", so the prepend scheme adds nothing to it; the first
    chunk is the document's start. Unknown characters cannot fuse across the cut: "▁" is in the
    vocabulary (checked).

    On the byte path chunks are cut further between printable ASCII pairs that are both tokens and
    that no vocabulary token holds (`bpe_cut_table`): every merge makes a vocabulary token, so none
    spans the pair, and BPE again treats both sides apart (neither side is unknown, so no fusing). A
    continuing part is encoded by the same tokenizer with `prepend_scheme="never"` (`continuation`),
    as its characters stand inside the word.
    """

    name = "metaspace-runs"

    def __init__(self, encode: EncodeFn, reason: str, cut_table: np.ndarray | None = None,
                 continuation: Callable[[], EncodeFn] | None = None) -> None:
        super().__init__(encode, reason, drop_first_space=False)
        self._pairs = pair_table(cut_table) if continuation is not None else False
        self._make_continuation = continuation
        self._continuation: EncodeFn | None = None

    def encode(self, chunks: list[str], variant: np.ndarray | None = None) -> list[list[int]]:
        """Ids of chunks as they are; parts continuing a word (`variant`) without the prepended "▁"."""
        if variant is None or not variant.any():
            return self._encode(chunks)
        if self._continuation is None:
            assert self._make_continuation is not None
            self._continuation = self._make_continuation()
        return encode_two_ways(chunks, variant, self._encode, self._continuation)

    def prepare(self) -> None:
        super().prepare()
        if self._pairs is not False and self._continuation is None and self._make_continuation is not None:
            self._continuation = self._make_continuation()

    def spans(self, data: bytes) -> Spans:
        starts, ends, _ = super().spans(data)
        if self._pairs is False or len(data) < 2:
            return starts, ends, np.zeros(starts.shape[0], dtype=bool)
        return cut_parts(np.frombuffer(data, dtype=np.uint8), starts, ends, self._pairs)


class PrependRuns(SpaceRunSegmenter):
    """The older converted Llama form: normaliser `Prepend("▁")` + `Replace(" ", "▁")`, no
    pre-tokenizer, BPE over the whole text.

    Chunks: " " + document, cut before each run of spaces, each chunk encoded without its first
    space (the Prepend restores it). Proof: as `MetaspaceRuns` (no piece spans non-"▁" | "▁"), with the
    prepended "▁" in the place of the dropped space; a trailing run stays with the chunk before it.
    Added tokens (<s>, </s>, ...) cut the text into segments *before* normalisation, and each segment
    gets its own prepended "▁", so a document holding one is one chunk (encoded whole).
    """

    name = "prepend-runs"

    def __init__(self, encode: EncodeFn, reason: str, added: list[str]) -> None:
        super().__init__(encode, reason, drop_first_space=True, bytes_ok=not added)
        self.added = re.compile("|".join(map(re.escape, sorted(added, key=len, reverse=True)))) if added else None

    def split(self, documents: list[str]) -> list[str]:
        if self.added is None:
            return super().split(documents)
        search, find = self.added.search, self.pattern.findall
        return list(itertools.chain.from_iterable(
            [" " + d] if search(d) else find(" " + d) for d in documents))


def pipeline_components(node: Any, key: str) -> list[dict[str, Any]]:
    if not isinstance(node, dict):
        return []
    if node.get("type") == "Sequence":
        return [c for child in node.get(key, []) for c in pipeline_components(child, key)]
    return [node]


def bpe_cut_table(vocab: dict[str, int]) -> np.ndarray:
    """[128, 128] bool, True at (a, b) when the printable ASCII characters a and b are tokens and no
    vocabulary token holds the pair ab."""
    spans = ascii_pairs_absent(list(vocab))
    known = np.array([0x21 <= code < 0x7F and chr(code) in vocab for code in range(128)])
    return spans & known[:, None] & known[None, :]


def _no_piece_spans_space(vocab: dict[str, int]) -> str | None:
    """The first piece holding "▁" (or " ") after another character, or None."""
    for piece in vocab:
        if " " in piece or "\u2581" in piece.lstrip("\u2581"):
            return piece
    return None


def _with_class_cuts(rule: ByteRule, cuts: tuple[tuple[int, int], ...], config: dict[str, Any],
                     norm_kinds: list[Any], apostrophe_is_punct: bool = False) -> ByteRule:
    """`rule` cutting chunks between the ASCII classes `cuts` as well. The tokenizer finds added
    tokens in the raw text before pre-tokenizing, so a line holding one's text goes to the str path;
    where a normalised added token could match text other than its own (a normaliser runs first),
    the rule stays as it is."""
    added = [a for a in config.get("added_tokens") or [] if isinstance(a, dict) and a.get("content")]
    if norm_kinds and any(a.get("normalized", True) for a in added):
        return rule
    bail = rule.bail + tuple(str(a["content"]).encode("utf-8") for a in added)
    return dataclasses.replace(rule, bail=bail, class_cuts=cuts, apostrophe_is_punct=apostrophe_is_punct)


def _class_cut_note(rule: ByteRule) -> str:
    """What `method_reason` adds for a rule that also cuts between ASCII classes."""
    if not rule.class_cuts:
        return ""
    return ("; also where ASCII letters, digits and punctuation meet and the pre-tokenizer always "
            "splits (lines holding an added token's text whole)")


_WHOLE = "; encoding whole documents"


def hf_segmenter(config: dict[str, Any], vocab: dict[str, int], encode: EncodeFn,
                 encoder_for: Callable[[dict[str, Any]], EncodeFn] | None = None) -> tuple[Any, str]:
    """The segmenter for this tokenizer.json and why, or (None, why not): whole documents. Each
    family's conditions are one function below (`_prepend_runs` ... `_whitespace_split`).

    `encoder_for(config)` makes the encoder of a variant of the tokenizer (continuing parts)."""
    model = config.get("model", {})
    if model.get("dropout"):
        return None, "BPE dropout makes encodings random" + _WHOLE
    for added in config.get("added_tokens", []):
        content = added.get("content", "")
        if added.get("rstrip") or any(ch.isspace() for ch in content):
            return None, f"added token {content!r} absorbs or contains whitespace" + _WHOLE
    norms = pipeline_components(config.get("normalizer"), "normalizers")
    pres = pipeline_components(config.get("pre_tokenizer"), "pretokenizers")
    kinds = [p.get("type") for p in pres]
    norm_kinds = [n.get("type") for n in norms]

    if norm_kinds == ["Prepend", "Replace"] and not pres and _is_llama_prepend(norms):
        return _prepend_runs(config, vocab, encode)
    for kind in norm_kinds:
        if kind not in _LOCAL_NORMALIZERS:
            return None, f"normaliser {kind} is not character-local" + _WHOLE
    if not pres:
        return None, "no pre-tokenizer splits on whitespace" + _WHOLE
    if kinds == ["Metaspace"]:
        return _metaspace(pres[0], config, vocab, encode, encoder_for, norm_kinds)
    if len(pres) == 2 and kinds == ["Split", "ByteLevel"] and not pres[1].get("use_regex", True):
        return _split_regex(pres[0], config, encode, norm_kinds)
    if "ByteLevel" in kinds:
        return _byte_level(kinds, pres[0], config, encode, norm_kinds)
    if any(k in _SPLITTING for k in kinds) and all(k in _SPLITTING | _ONLY_SPLIT for k in kinds):
        return _whitespace_split(kinds, norms, config, encode, norm_kinds)
    return None, f"pre-tokenizer(s) {', '.join(map(str, kinds))} may join across whitespace" + _WHOLE


def _is_llama_prepend(norms: list[dict[str, Any]]) -> bool:
    """Whether the normalisers are the converted Llama form `Prepend("▁")` + `Replace(" ", "▁")`."""
    prepend, replace = norms
    return (prepend.get("prepend") == "\u2581" and replace.get("pattern") == {"String": " "}
            and replace.get("content") == "\u2581")


def _prepend_runs(config: dict[str, Any], vocab: dict[str, int], encode: EncodeFn) -> tuple[Any, str]:
    """`PrependRuns`, when its whole-text BPE may be cut before space runs."""
    why = _space_run_bpe_check(config.get("model", {}), vocab)
    if why:
        return None, why + _WHOLE
    return PrependRuns(encode, "Prepend('▁') + Replace(' ', '▁') BPE (converted Llama form): "
                               "cut before each run of spaces",
                       [a.get("content", "") for a in config.get("added_tokens", []) if a.get("content")]), ""


def _metaspace(meta: dict[str, Any], config: dict[str, Any], vocab: dict[str, int], encode: EncodeFn,
               encoder_for: Callable[[dict[str, Any]], EncodeFn] | None, norm_kinds: list[Any]) -> tuple[Any, str]:
    """`MetaspaceChunks` for `Metaspace(split=true)`, `MetaspaceRuns` for `split=false` BPE."""
    if meta.get("replacement", "\u2581") != "\u2581":
        return None, "Metaspace with a replacement other than '▁'" + _WHOLE
    if meta.get("split", True):
        return MetaspaceChunks(MetaspaceChunks.PATTERN, encode,
                               "Metaspace(split=true): each space starts a pre-token",
                               ByteRule(b"", b" ", False, LITERAL_METASPACE)), ""
    if norm_kinds:
        return None, "Metaspace(split=false) after a normaliser" + _WHOLE
    why = _space_run_bpe_check(config.get("model", {}), vocab)
    if why:
        return None, why + _WHOLE
    continuation = None
    if encoder_for is not None:
        never = {**config, "pre_tokenizer": {**meta, "prepend_scheme": "never", "add_prefix_space": False}}
        continuation = functools.partial(encoder_for, never)
    return MetaspaceRuns(encode, "Metaspace(split=false) BPE: no piece spans a space run's start; "
                                 "cut before each run of spaces, and between ASCII pairs no token holds",
                         bpe_cut_table(vocab), continuation), ""


def _split_regex(split: dict[str, Any], config: dict[str, Any], encode: EncodeFn,
                 norm_kinds: list[Any]) -> tuple[Any, str]:
    """`SplitRegexChunks` for a known `Split` regex followed by `ByteLevel(use_regex=false)`."""
    regex_text = (split.get("pattern") or {}).get("Regex")
    family = KNOWN_SPLIT_REGEXES.get(regex_text or "")
    if family is None:
        return None, "Split with an unrecognised regex (cuts are proven for known regexes only)" + _WHOLE
    if split.get("behavior") != "Isolated" or split.get("invert"):
        return None, "Split regex not Isolated or inverted" + _WHOLE
    if norm_kinds not in ([], ["NFC"]):
        return None, f"normaliser {', '.join(norm_kinds)} before a Split regex" + _WHOLE
    # On the byte path lines hold no CR or LF, so the one joining case never arises there.
    rule = _with_class_cuts(WS_BYTES, SPLIT_REGEX_CLASS_CUTS, config, norm_kinds)
    return SplitRegexChunks(SplitRegexChunks.pattern_for(norm_kinds == ["NFC"]), encode,
                            f"{family} Split regex + ByteLevel: pre-tokens never join across a "
                            "whitespace run, except punctuation + CR/LF" + _class_cut_note(rule), rule), ""


def _byte_level(kinds: list[Any], level: dict[str, Any], config: dict[str, Any], encode: EncodeFn,
                norm_kinds: list[Any]) -> tuple[Any, str]:
    """`ByteLevelChunks` for GPT-2's `ByteLevel` with its regex (then only Punctuation/Digits)."""
    if kinds[0] != "ByteLevel" or any(k not in _ONLY_SPLIT for k in kinds[1:]):
        return None, f"pre-tokenizers {', '.join(map(str, kinds))} around ByteLevel" + _WHOLE
    if not level.get("use_regex", True):
        return None, "ByteLevel without its regex and without a Split regex before it" + _WHOLE
    prefix = bool(level.get("add_prefix_space", True))
    rule = (ByteRule(WS_BYTES.run, b" ", False, NON_ASCII_WS) if prefix
            else _with_class_cuts(WS_BYTES, GPT2_CLASS_CUTS, config, norm_kinds))
    return ByteLevelChunks(ByteLevelChunks.pattern_for(prefix), encode,
                           "ByteLevel (GPT-2) regex: pre-tokens never cross a non-space/space "
                           "boundary" + _class_cut_note(rule), rule), ""


def _whitespace_split(kinds: list[Any], norms: list[dict[str, Any]], config: dict[str, Any], encode: EncodeFn,
                      norm_kinds: list[Any]) -> tuple[Any, str]:
    """`WhitespaceChunks` for pre-tokenizers that split on whitespace and drop it."""
    clean = any(n.get("type") == "BertNormalizer" and n.get("clean_text", True) for n in norms)
    rule = WS_NOT_CONTROL_BYTES if clean else WS_BYTES
    if kinds == ["BertPreTokenizer"]:
        rule = _with_class_cuts(rule, BERT_CLASS_CUTS, config, norm_kinds, apostrophe_is_punct=True)
    return WhitespaceChunks(_chunk_pattern(WS_NOT_CONTROL if clean else WS), encode,
                            f"{', '.join(map(str, kinds))}: whitespace separates pre-tokens"
                            + _class_cut_note(rule), rule), ""


def _space_run_bpe_check(model: dict[str, Any], vocab: dict[str, int]) -> str | None:
    """Why a whole-text BPE cannot be cut before space runs, or None when it can."""
    if model.get("type") != "BPE":
        return f"{model.get('type')} model over the whole text (only BPE is proven)"
    if model.get("ignore_merges"):
        return "BPE ignore_merges over the whole text (a chunk may be a whole vocabulary piece)"
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return "BPE with subword prefix/suffix over the whole text"
    if "\u2581" not in vocab:
        return "'▁' not in the vocabulary (unknown characters could fuse across a cut)"
    piece = _no_piece_spans_space(vocab)
    if piece is not None:
        return f"piece {piece!r} spans the start of a space run"
    return None
