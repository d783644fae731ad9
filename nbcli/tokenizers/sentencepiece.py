"""SentencePiece `.model` files: reading the proto, and the families' chunk rules.

* BPE with the default settings (`split_by_whitespace`, `add_dummy_prefix`, `remove_extra_whitespaces`):
  `SentencePieceWords`, chunks between ASCII spaces, cut further between ASCII pairs no piece joins.
* BPE with the Llama-2/Mistral settings (`remove_extra_whitespaces=false`,
  `allow_whitespace_only_pieces`, identity normaliser): `SentencePieceSpaceRuns`, cut before each run
  of spaces, and further between ASCII pairs no piece joins.
* Unigram models with the default settings: `SentencePieceWords`' chunks under a per-line
  certificate (`nbcli.tokenizers.unigram`).
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from nbcli.tokenizers.segment import (
    SpaceRunSegmenter, Spans, ascii_pairs_absent, cut_parts, encode_two_ways, pair_table, with_cr,
)

_CUT_NORMALIZERS = {"nmt_nfkc", "nfkc", "identity"}
PIECES, TRAINER_SPEC, NORMALIZER_SPEC = 1, 2, 3  # ModelProto fields
# In pieces joined by NUL: a space, or a "▁" after another character of the same piece (any other
# character when runs collapse, any but "▁" when a run of spaces forms a word).
_SPANNING_COLLAPSED = re.compile("[ ]|[^\0]\u2581")
_SPANNING_RUNS = re.compile("[ ]|[^\0\u2581]\u2581")
UNKNOWN, CONTROL, BYTE = 2, 3, 6  # SentencePiece.Type


class _BPECuts:
    """Cuts inside chunks between ASCII pairs that no vocabulary piece contains (SentencePiece BPE).

    No BPE merge can span such a pair, and merges are ordered by score then position (shifting
    positions changes nothing), so ``encode(left + right) == encode(left) + continuation(right)``
    where a continuing part is encoded without the dummy prefix (a proto copy with
    add_dummy_prefix=false): its characters start as they would inside the word.
    """

    def __init__(self, sp: Any, data: bytes) -> None:
        self._sp = sp
        self._data = data
        self._cuts: Any = None
        self._pair_table: Any = None
        self._continuation: Any = None

    def encode_continuations(self, texts: list[str]) -> list[list[int]]:
        """Token ids of parts that continue a chunk (SentencePiece without the dummy prefix)."""
        if self._continuation is None:
            import sentencepiece as spm

            self._continuation = spm.SentencePieceProcessor(model_proto=without_dummy_prefix(self._data))
        return self._continuation.encode(texts, num_threads=1)

    def encode_parts(self, chunks: list[str], variant: np.ndarray) -> list[list[int]]:
        """Ids of parts, each as it is: with the dummy prefix, or without where `variant` (continuing)."""
        return encode_two_ways(chunks, variant, lambda texts: self._sp.encode(texts, num_threads=1),
                               self.encode_continuations)

    def cut_table(self) -> Any:
        """A [128, 128] bool table, True at (a, b) when no vocabulary piece contains the ASCII pair ab
        and both are known single-character pieces; None where cutting inside chunks is not proven.

        Restricted to BPE (see the class docstring), printable ASCII on both sides (unknown
        characters in a run are merged into one <unk>), and NFKC/identity normalisers, which leave
        printable ASCII alone and have no rule spanning two ASCII characters.
        """
        if self._cuts is None:
            self._cuts = _sentencepiece_cuts(self._data, self._sp)
        return self._cuts if self._cuts is not False else None

    def prepare(self) -> None:
        """Build the pair table and the continuation model now (see `Segmenter.prepare`)."""
        if self._pair_table is None:
            self._pair_table = pair_table(self.cut_table())
        if self._pair_table is not False:
            self.encode_continuations([])

    def cut(self, data: bytes, starts: np.ndarray, ends: np.ndarray) -> Spans:
        """Chunks [starts, ends) of `data` cut where `cut_table` allows; variant marks continuing parts."""
        if self._pair_table is None:
            self._pair_table = pair_table(self.cut_table())
        if self._pair_table is not False and len(data) > 1:
            return cut_parts(np.frombuffer(data, dtype=np.uint8), starts, ends, self._pair_table)
        return starts, ends, np.zeros(starts.shape[0], dtype=bool)


class SentencePieceWords(_BPECuts):
    """SentencePiece BPE with the default settings: chunks are the text between ASCII spaces.

    Proof. With `remove_extra_whitespaces` the normaliser drops leading and trailing spaces and
    collapses runs, and with `add_dummy_prefix` the text starts with one "▁": the normalised document
    is "▁" + the chunks joined by "▁". `split_by_whitespace` makes every "▁"-led run a word, BPE never
    merges across words, and no piece holds "▁" after its first character (checked at load), so the
    document's ids are the concatenation of each chunk encoded alone, its dummy prefix playing the
    space before it. Empty chunks (from runs of spaces) encode to nothing.

    Chunks are cut further between ASCII pairs that no vocabulary piece contains (`_BPECuts`).
    """

    name = "sp"
    line_bail = with_cr(None)  # only ASCII spaces cut: every other line goes on the bytes

    def __init__(self, sp: Any, data: bytes, reason: str) -> None:
        super().__init__(sp, data)
        self.reason = reason

    def split(self, documents: list[str]) -> list[str]:
        # In JSONL documents may hold '\n'; it stays inside its chunk, so only ASCII spaces cut.
        return " ".join(documents).split(" ")

    def encode(self, chunks: list[str], variant: np.ndarray | None = None) -> list[list[int]]:
        return self._sp.encode(chunks, num_threads=1) if variant is None else self.encode_parts(chunks, variant)

    def spans(self, data: bytes) -> Spans:
        """Chunks are the maximal runs of bytes other than b' ' and b'\\n' (UTF-8 never uses these
        bytes inside a multi-byte character, so they are `split`'s chunks), cut further where
        `cut_table` allows; variant marks parts after such a cut (encoded without the dummy prefix)."""
        b = np.frombuffer(data, dtype=np.uint8)
        edge = np.ones(b.shape[0] + 2, dtype=np.int8)
        edge[1:-1] = (b == 32) | (b == 10)
        change = np.flatnonzero(np.diff(edge))  # separator -> chunk, chunk -> separator, alternating
        return self.cut(data, change[0::2], change[1::2])


class SentencePieceSpaceRuns(SpaceRunSegmenter):
    """SentencePiece BPE with the Llama-2/Mistral settings: `remove_extra_whitespaces=false`,
    `allow_whitespace_only_pieces`, identity normaliser, dummy prefix (split_digits and byte_fallback
    only act inside words).

    Proof. The normalised document is "▁" + the text with every space (and literal "▁") as "▁".
    SentencePiece's SplitIntoWords starts a word at every "▁" (with allow_whitespace_only_pieces: at
    the first "▁" of a run, the run and the characters after it forming one word), so in both cases
    the first "▁" of every run starts a word, and BPE never merges across words. Reading the document as
    " " + text and cutting before each run of spaces gives exactly these words; a chunk encoded
    without its first space gets that "▁" back from the dummy prefix, so it forms the same single word.
    A trailing run is kept with the chunk before it: encoded together they still form the same two
    words. Checked at load: BPE, identity normaliser, no piece holds "▁" after a non-"▁" character.

    On the byte path a chunk's span leaves out the space the dummy prefix restores (a line's first
    chunk has none), so every part is encoded as it is, and chunks are cut further between ASCII
    pairs no piece contains (`_BPECuts`: the pairs are printable, never spaces, so each cut lies
    inside one word).
    """

    name = "sp-space-runs"

    def __init__(self, sp: Any, data: bytes, reason: str) -> None:
        super().__init__(lambda chunks: sp.encode(chunks, num_threads=1), reason, drop_first_space=True)
        self._cuts = _BPECuts(sp, data)

    def encode(self, chunks: list[str], variant: np.ndarray | None = None) -> list[list[int]]:
        """`split`'s chunks (variant None) lose their first space; the byte path's parts are encoded as
        they are, without the dummy prefix where `variant` (a part continuing a word)."""
        if variant is None:
            return super().encode(chunks)
        return self._cuts.encode_parts(chunks, variant)

    def prepare(self) -> None:
        super().prepare()
        self._cuts.prepare()

    def spans(self, data: bytes) -> Spans:
        starts, ends, line_first = super().spans(data)
        return self._cuts.cut(data, starts + ~line_first, ends)  # past the space the dummy prefix restores


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _proto_fields(buf: bytes) -> dict[int, list[int | bytes]]:
    """Decode one protobuf message level into {field number: [values]} (wire types 0, 1, 2, 5).
    One-byte keys and lengths (nearly all of a model's 32k+ pieces) skip the general varint reader."""
    fields: dict[int, list[int | bytes]] = {}
    pos = 0
    while pos < len(buf):
        key = buf[pos]
        if key < 0x80:
            pos += 1
        else:
            key, pos = _read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 2:
            length = buf[pos]
            if length < 0x80:
                pos += 1
            else:
                length, pos = _read_varint(buf, pos)
            value, pos = buf[pos:pos + length], pos + length
        elif wire == 0:
            value, pos = _read_varint(buf, pos)
        elif wire == 1:
            value, pos = int.from_bytes(buf[pos:pos + 8], "little"), pos + 8
        elif wire == 5:
            value, pos = int.from_bytes(buf[pos:pos + 4], "little"), pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        values = fields.get(number)
        if values is None:
            fields[number] = [value]
        else:
            values.append(value)
    return fields


@dataclass(frozen=True)
class ModelSettings:
    """What nb reads of a SentencePiece ModelProto: the TrainerSpec and NormalizerSpec fields, and
    each piece's text and type (NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6)."""

    trainer: dict[int, list[int | bytes]]
    normalizer: dict[int, list[int | bytes]]
    piece_types: tuple[int, ...]
    pieces: tuple[str, ...] = ()

    @functools.cached_property
    def text_pieces(self) -> tuple[list[int], list[str]]:
        """The ids and texts of the pieces matched against text: not byte, control or unknown
        pieces (built once: the chunk rule and the cut table both ask)."""
        kinds = np.array(self.piece_types, dtype=np.int64)
        ids = np.flatnonzero((kinds != UNKNOWN) & (kinds != CONTROL) & (kinds != BYTE)).tolist()
        pieces = self.pieces
        return ids, [pieces[i] for i in ids]


@functools.lru_cache(maxsize=4)
def read_model_settings(data: bytes) -> ModelSettings:
    """Parse the model proto once (loading and the chunk rules both ask); ValueError, IndexError or
    TypeError where it is not a readable proto."""
    fast = _leading_pieces(data)
    if fast is not None:
        texts, types, rest = fast
        model = _proto_fields(data[rest:])
        if PIECES not in model:  # no piece after the leading run: the fast read is the whole list
            return ModelSettings(trainer=_proto_fields(model.get(TRAINER_SPEC, [b""])[-1]),  # type: ignore[arg-type]
                                 normalizer=_proto_fields(model.get(NORMALIZER_SPEC, [b""])[-1]),  # type: ignore[arg-type]
                                 piece_types=types, pieces=texts)
    model = _proto_fields(data)
    pieces = model.get(PIECES, [])
    # A piece's type (field 3, key byte 0x18) is written only when it is not NORMAL.
    types = tuple(1 if b"\x18" not in raw
                  else int(_proto_fields(raw).get(3, [1])[-1])  # type: ignore[arg-type, operator]
                  for raw in pieces)
    return ModelSettings(trainer=_proto_fields(model.get(TRAINER_SPEC, [b""])[-1]),  # type: ignore[arg-type]
                         normalizer=_proto_fields(model.get(NORMALIZER_SPEC, [b""])[-1]),  # type: ignore[arg-type]
                         piece_types=types, pieces=tuple(map(_piece_text, pieces)))  # type: ignore[arg-type]


def _leading_pieces(data: bytes) -> tuple[tuple[str, ...], tuple[int, ...], int] | None:
    """The texts and types of the pieces that open the proto as SentencePiece writes them, and the
    offset after them; None where the first piece is not in that form (the general parse reads it).

    SentencePiece writes each piece as `0a L (0a l text) [15 score] [18 type]` with one-byte
    lengths for nearly every piece. A Python loop only follows the chain of one-byte-length
    messages; numpy checks each is in that form and stops at the first that is not, so the general
    parser reads the rest (32k pieces in ~5 ms, where parsing each message took ~27 ms)."""
    offsets: list[int] = []
    pos, n = 0, len(data)
    while pos + 3 < n and data[pos] == 0x0A and data[pos + 1] < 0x80:
        offsets.append(pos)
        pos += 2 + data[pos + 1]
    if not offsets:
        return None
    b = np.frombuffer(data, dtype=np.uint8)
    last = n - 1
    at = np.array(offsets, dtype=np.int64)
    end = at + 2 + b[at + 1]
    text_end = at + 4 + b[at + 3]
    ok = (end <= n) & (b[at + 2] == 0x0A) & (b[at + 3] < 0x80) & (text_end <= end)
    after = text_end.copy()
    after += 5 * ((after < end) & (b[np.minimum(after, last)] == 0x15))  # score: a float
    typed = (after + 1 < end) & (b[np.minimum(after, last)] == 0x18)  # type: a one-byte varint
    kinds = np.where(typed, b[np.minimum(after + 1, last)], 1)
    after += 2 * typed
    ok &= (after == end) & (kinds < 0x80)
    count = int(np.argmin(ok)) if not ok.all() else len(offsets)
    if count == 0:
        return None
    texts = [data[s:e] for s, e in zip((at[:count] + 4).tolist(), text_end[:count].tolist())]
    joined = b"\n".join(texts)
    if joined.count(b"\n") == count - 1:  # no piece holds a newline: decode them in one call
        pieces = tuple(joined.decode("utf-8", "replace").split("\n"))
    else:
        pieces = tuple(text.decode("utf-8", "replace") for text in texts)
    return pieces, tuple(kinds[:count].tolist()), int(end[count - 1])

def _piece_text(raw: bytes) -> str:
    """SentencePiece.piece (field 1) of one piece message; nearly always its first field, with a
    one-byte length."""
    if raw[:1] == b"\x0a" and raw[1] < 0x80:
        text = raw[2:2 + raw[1]]
    else:
        text = _proto_fields(raw).get(1, [b""])[-1]  # type: ignore[assignment]
    return text.decode("utf-8", "replace") if isinstance(text, bytes) else ""


def text_pieces(settings: ModelSettings, sp: Any) -> tuple[list[int], list[str]]:
    """(id, piece) of the pieces matched against text: not byte, control or unknown pieces. Read
    from the proto (asking SentencePiece for 32k pieces took ~30 ms, and this is asked twice)."""
    if len(settings.pieces) == sp.get_piece_size():
        return settings.text_pieces
    pieces = tuple(sp.id_to_piece(list(range(sp.get_piece_size()))))
    kept = [(i, piece) for i, (piece, kind) in enumerate(zip(pieces, settings.piece_types))
            if kind not in (UNKNOWN, CONTROL, BYTE)]
    return [i for i, _ in kept], [piece for _, piece in kept]


def first_spanning_piece(pieces: tuple[list[int], list[str]], collapse: bool) -> tuple[int, str] | None:
    """The first (id, piece) that could span a word boundary: one holding a space, or a "▁" after
    its first character (`collapse`) or after a character other than "▁" (space runs form words).

    One regular-expression search over the pieces joined by NUL (~1 ms for 32k pieces, where a
    loop took ~10 ms at start-up); a loop where some piece holds a NUL itself."""
    ids, texts = pieces
    joined = "\0".join(texts)
    if joined.count("\0") == len(texts) - 1:
        found = (_SPANNING_COLLAPSED if collapse else _SPANNING_RUNS).search(joined)
        if found is None:
            return None
        index = joined.count("\0", 0, found.start())  # the match starts inside that piece
        return ids[index], texts[index]
    for i, piece in zip(ids, texts):
        if " " in piece or "\u2581" in piece.lstrip("\u2581") or (collapse and "\u2581" in piece[1:]):
            return i, piece
    return None


def _sentencepiece_cuts(data: bytes, sp: Any) -> Any:
    """The table of `SentencePieceWords.cut_table`, or False where cutting inside chunks is not proven."""
    settings = read_model_settings(data)
    trainer, normalizer = settings.trainer, settings.normalizer
    if trainer.get(3, [1])[-1] != 2:
        return False  # only BPE (unigram chunks are never cut inside, see nbcli.tokenizers.unigram)
    name = normalizer.get(1, [b"nmt_nfkc"])[-1]
    if not isinstance(name, bytes) or name.decode("utf-8", "replace") not in _CUT_NORMALIZERS:
        return False
    spans = ascii_pairs_absent(text_pieces(settings, sp)[1])
    known = np.zeros(128, dtype=bool)
    for code in range(0x21, 0x7F):
        token = sp.piece_to_id(chr(code))
        known[code] = not sp.is_unknown(token) and not sp.is_control(token)
    return spans & known[:, None] & known[None, :]


def without_dummy_prefix(data: bytes) -> bytes:
    """The SentencePiece model proto with NormalizerSpec.add_dummy_prefix = false.

    Appends a NormalizerSpec (field 3 of ModelProto) holding only field 3 = 0: protobuf merges a
    repeated embedded message into the one before it and the last value of a scalar field wins, so
    nothing else is touched (O(1), where walking the 32k+ pieces in Python took ~30 ms at start-up).
    """
    return data + b"\x1a\x02\x18\x00"


#: NormalizerSpec fields (number, name, default) and the TrainerSpec fields SentencePiece reads when
#: encoding (the rest only steer training: inputs, sizes, threads, sampling).
_NORMALIZER_FIELDS = ((1, "name", ""), (2, "precompiled_charsmap", b""), (3, "add_dummy_prefix", 1),
                      (4, "remove_extra_whitespaces", 1), (5, "escape_whitespaces", 1),
                      (6, "normalization_rule_tsv", ""))
_ENCODING_TRAINER_FIELDS = ((3, "model_type", 1), (21, "split_by_unicode_script", 1), (22, "split_by_whitespace", 1),
                            (23, "split_by_number", 1), (24, "treat_whitespace_as_suffix", 0),
                            (25, "split_digits", 0), (26, "allow_whitespace_only_pieces", 0),
                            (35, "byte_fallback", 0))


def _merged(messages: list[int | bytes], fields: tuple[tuple[int, str, Any], ...]) -> dict[str, Any]:
    """The named fields of an embedded message given (possibly) several times: protobuf merges them,
    the last value of a scalar winning; absent fields take their default."""
    values: dict[int, int | bytes] = {}
    for raw in messages:
        if isinstance(raw, bytes):
            values.update((number, found[-1]) for number, found in _proto_fields(raw).items())
    out: dict[str, Any] = {}
    for number, name, default in fields:
        value = values.get(number, default)
        if isinstance(default, str) and isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        elif isinstance(value, bytes):  # the charsmap: its digest stands for it
            value = hashlib.sha256(value).hexdigest()
        out[name] = value
    return out


def sentencepiece_identity(data: bytes) -> dict[str, Any]:
    """What decides a SentencePiece model's ids, independent of how the proto was written: each
    piece's text, score (as its float32 bits) and type in id order, the NormalizerSpec, and the
    TrainerSpec fields used when encoding (model type, whitespace and digit splitting, byte fallback).
    Training-only settings (input files, sizes, seeds) and the denormaliser (decoding) are left out, so
    a copy re-serialised by another writer (transformers' `save_pretrained`) has the same identity.
    ValueError, IndexError or TypeError where `data` is not a readable proto."""
    model = _proto_fields(data)
    pieces = []
    for raw in model.get(PIECES, []):
        fields = _proto_fields(raw)  # type: ignore[arg-type]
        text = fields.get(1, [b""])[-1]
        pieces.append([text.decode("utf-8", "replace") if isinstance(text, bytes) else "",
                       fields.get(2, [0])[-1], fields.get(3, [1])[-1]])
    return {"family": "sentencepiece", "pieces": pieces,
            "normalizer": _merged(model.get(NORMALIZER_SPEC, []), _NORMALIZER_FIELDS),
            "trainer": _merged(model.get(TRAINER_SPEC, []), _ENCODING_TRAINER_FIELDS)}


def special_ids(data: bytes, sp: Any) -> frozenset[int]:
    """Ids of the control and unknown pieces (never text), from the piece types of the proto
    (one pass, where asking SentencePiece piece by piece takes ~25 ms for 32k pieces)."""
    try:
        types = read_model_settings(data).piece_types
    except (ValueError, IndexError, TypeError):
        types = ()
    if len(types) != sp.get_piece_size():
        return frozenset(i for i in range(sp.get_piece_size()) if sp.is_control(i) or sp.is_unknown(i))
    return frozenset(i for i, kind in enumerate(types) if kind in (UNKNOWN, CONTROL))
