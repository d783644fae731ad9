"""The one tokenizer loader: a SentencePiece `.model` or a Hugging Face `tokenizer.json`.

Every command that needs a tokenizer calls `load_tokenizer`, which returns a `Tokenizer` with a small
common interface: ids, pieces, special ids, batched encoding, and (where it is provably exact) the
*chunk rule* that lets `nbcli.counts` encode each distinct whitespace-delimited chunk only once.

Chunk rules
-----------
Both libraries segment text into pre-tokens that never cross certain whitespace boundaries, and encode
each pre-token independently. If a line is cut at such boundaries into chunks, then
``encode(line) == concat(encode(chunk) for chunk in chunks)`` and a Zipfian corpus needs only one
encode per *distinct* chunk. Which cuts are safe depends on the tokenizer:

* ``"sp"`` (SentencePiece BPE, char or word models with ``split_by_whitespace``, ``add_dummy_prefix``
  and ``remove_extra_whitespaces``, the defaults): cut at ASCII spaces; each chunk is encoded as its own
  sentence (the dummy prefix plays the role of the space that preceded it).
* ``"prefix-space"`` (tokenizer.json with a ByteLevel/GPT-2, Whitespace or BERT pre-tokenizer and a
  character-local normaliser): cut before each whitespace run that follows a non-whitespace character;
  the first chunk of a document is encoded as is, every later chunk carries its leading whitespace.

Any other configuration returns ``chunk_rule = None`` and counting encodes whole documents.
For "sp" BPE models `Tokenizer.subchunk_cuts` also gives the ASCII character pairs that no piece
contains, where chunks are cut further (later parts encoded without the dummy prefix).
A unigram model's Viterbi search breaks ties (and near-ties) by float sums that include the score of
the text before a chunk, so a chunk alone can segment differently: on the count benchmark's corpus
with a 16k unigram model, 3 of 200,000 lines gave other counts (benchmarks/unigram_chunk_check.py).
Unigram models therefore get no chunk rule.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from nbcli.errors import TokenizerError
from nbcli.provenance import sha256_bytes

ChunkRule = Literal["sp", "prefix-space"]

# Unicode White_Space (what the `regex`/Oniguruma `\s` of tokenizers matches), without the
# characters Python's str.isspace adds (U+001C..U+001F), so a cut is never placed where the
# tokenizer sees no whitespace.
_WS = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
# BertNormalizer(clean_text) deletes control characters (category Cc other than \t \n \r), so
# the text on both sides of them joins up: they must not cut.
_WS_NOT_CONTROL = "\t\n\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"


def _chunk_pattern(whitespace: str) -> re.Pattern[str]:
    """Chunks = a whitespace run (possibly empty) followed by a non-whitespace run, or trailing space."""
    return re.compile(f"[{whitespace}]*[^{whitespace}]+|[{whitespace}]+")


PREFIX_SPACE_CHUNK = _chunk_pattern(_WS)


@dataclass
class Tokenizer:
    """A loaded tokenizer with the interface nb needs. Build it with `load_tokenizer`."""

    path: Path
    kind: Literal["sentencepiece", "tokenizer.json"]
    sha256: str
    vocab_size: int
    bos_id: int | None
    eos_id: int | None
    pad_id: int | None
    unk_id: int | None
    special_ids: frozenset[int]
    chunk_rule: ChunkRule | None
    chunk_rule_reason: str
    _impl: Any = field(repr=False)
    _data: bytes = field(repr=False)
    chunk_pattern: re.Pattern[str] = PREFIX_SPACE_CHUNK  # how "prefix-space" cuts a document
    # Whether one EOS per document belongs in the counts by default, and why (see `eos_default_for`).
    eos_default: bool = True
    eos_default_reason: str = ""
    # What the loader changed in the file's settings so that counting sees every token and nothing
    # added (e.g. padding and truncation switched off); shown in count summaries.
    adjustments: tuple[str, ...] = ()
    _cuts: Any = field(default=None, repr=False)  # subchunk_cuts() once computed (False: none)
    _continuation: Any = field(default=None, repr=False)  # processor without the dummy prefix

    @property
    def name(self) -> str:
        return self.path.name

    def piece(self, token_id: int) -> str:
        """The vocabulary string of `token_id`."""
        if self.kind == "sentencepiece":
            return self._impl.id_to_piece(token_id)
        token = self._impl.id_to_token(token_id)
        return "" if token is None else token

    def pieces(self) -> list[str]:
        return [self.piece(i) for i in range(self.vocab_size)]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text, without BOS/EOS or template special tokens."""
        if self.kind == "sentencepiece":
            return self._impl.encode(texts, num_threads=1)
        return [enc.ids for enc in self._impl.encode_batch(texts, add_special_tokens=False)]

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text])[0]

    def serialized(self) -> bytes:
        """The tokenizer file's bytes (to rebuild it in another process or on another machine)."""
        return self._data

    def subchunk_cuts(self) -> Any:
        """Where an "sp" chunk may be cut further: a [128, 128] bool numpy table, True at (a, b) when
        no vocabulary piece contains the ASCII pair ab; None when this does not apply.

        If no piece contains ab, no piece spans the boundary between a and b in a chunk, so BPE merges
        on either side never interact and ``encode("▁" + left + right) == encode("▁" + left) +
        encode_continuations([right])`` (the right part has no dummy prefix). Restricted to BPE models
        (merges are ordered by score, then position, so shifting positions changes nothing), to
        printable ASCII on both sides, both known single-character pieces (unknown characters in a
        run are merged into one <unk>), and to NFKC/identity normalisers, which leave printable ASCII
        alone and have no rule spanning two ASCII characters.
        """
        if self.chunk_rule != "sp" or self.kind != "sentencepiece":
            return None
        if self._cuts is None:
            self._cuts = _sentencepiece_cuts(self._data, self._impl)
        return self._cuts if self._cuts is not False else None

    def encode_continuations(self, texts: list[str]) -> list[list[int]]:
        """Token ids of chunk parts that continue a chunk (SentencePiece without the dummy prefix)."""
        if self._continuation is None:
            import sentencepiece as spm

            self._continuation = spm.SentencePieceProcessor(model_proto=_without_dummy_prefix(self._data))
        return self._continuation.encode(texts, num_threads=1)


# What `load_tokenizer` looks for in a directory (a Hugging Face model folder), in order.
DIRECTORY_CANDIDATES = ("tokenizer.json", "tokenizer.model")
_BOM = b"\xef\xbb\xbf"


def tokenizer_files(path: Path | str) -> list[Path]:
    """The files load_tokenizer(path) may read (a directory stands for its candidate files)."""
    path = Path(path)
    return [path, *(path / name for name in DIRECTORY_CANDIDATES)] if path.is_dir() else [path]


def load_tokenizer(path: Path | str) -> Tokenizer:
    """Load a SentencePiece `.model` or a Hugging Face `tokenizer.json` (or a model folder holding
    one of `DIRECTORY_CANDIDATES`); TokenizerError if none."""
    path = Path(path)
    if path.is_dir():
        for name in DIRECTORY_CANDIDATES:
            if (path / name).is_file():
                return load_tokenizer(path / name)
        raise TokenizerError(f"{path}: directory holds none of {', '.join(DIRECTORY_CANDIDATES)}")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TokenizerError(f"{path}: tokenizer file not found") from None
    except OSError as err:
        raise TokenizerError(f"{path}: cannot read tokenizer: {err.strerror}") from None
    return tokenizer_from_bytes(data, path)


def tokenizer_from_bytes(data: bytes, path: Path | str) -> Tokenizer:
    """Build a Tokenizer from a tokenizer file's bytes; `path` names it in errors and metadata.

    The sha256 is always that of the bytes given (a UTF-8 byte-order mark included)."""
    path = Path(path)
    body = data[len(_BOM):] if data.startswith(_BOM) else data
    if body.lstrip()[:1] == b"{":
        return _load_hf(data, body, path)
    return _load_sentencepiece(data, path)


# --------------------------------------------------------------------------------------------
# SentencePiece


def _load_sentencepiece(data: bytes, path: Path) -> Tokenizer:
    import sentencepiece as spm

    try:
        sp = spm.SentencePieceProcessor(model_proto=data)
    except RuntimeError:
        raise TokenizerError(
            f"{path}: not a tokenizer (neither a SentencePiece .model nor a tokenizer.json)"
        ) from None
    size = sp.get_piece_size()
    if size == 0:
        raise TokenizerError(f"{path}: SentencePiece model has an empty vocabulary")

    def opt(value: int) -> int | None:
        return value if value >= 0 else None

    special = frozenset(i for i in range(size) if sp.is_control(i) or sp.is_unknown(i))
    rule, reason = _sentencepiece_chunk_rule(data, sp)
    return Tokenizer(
        path=path, kind="sentencepiece", sha256=sha256_bytes(data), vocab_size=size,
        bos_id=opt(sp.bos_id()), eos_id=opt(sp.eos_id()), pad_id=opt(sp.pad_id()),
        unk_id=opt(sp.unk_id()), special_ids=special, chunk_rule=rule,
        chunk_rule_reason=reason, _impl=sp, _data=data,
        eos_default_reason="SentencePiece model: a language model predicts EOS at each document end",
    )


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
    """Decode one protobuf message level into {field number: [values]} (wire types 0, 1, 2, 5)."""
    fields: dict[int, list[int | bytes]] = {}
    pos = 0
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _read_varint(buf, pos)
        elif wire == 1:
            value, pos = int.from_bytes(buf[pos:pos + 8], "little"), pos + 8
        elif wire == 2:
            length, pos = _read_varint(buf, pos)
            value, pos = buf[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = int.from_bytes(buf[pos:pos + 4], "little"), pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        fields.setdefault(number, []).append(value)
    return fields


def _flag(fields: dict[int, list[int | bytes]], number: int, default: bool) -> bool:
    values = fields.get(number)
    return bool(values[-1]) if values else default


def _sentencepiece_chunk_rule(data: bytes, sp: Any) -> tuple[ChunkRule | None, str]:
    """Decide whether ASCII-space chunks can be encoded independently (see module docstring).

    Reads the model's TrainerSpec (field 2) and NormalizerSpec (field 3) from the protobuf.
    """
    try:
        model = _proto_fields(data)
        trainer = _proto_fields(model.get(2, [b""])[-1])  # type: ignore[arg-type]
        normalizer = _proto_fields(model.get(3, [b""])[-1])  # type: ignore[arg-type]
    except (ValueError, IndexError, TypeError):
        return None, "could not read the model's settings; encoding whole documents"
    checks = {
        "split_by_whitespace": _flag(trainer, 22, True),
        "add_dummy_prefix": _flag(normalizer, 3, True),
        "remove_extra_whitespaces": _flag(normalizer, 4, True),
        "escape_whitespaces": _flag(normalizer, 5, True),
        "not treat_whitespace_as_suffix": not _flag(trainer, 24, False),
    }
    failed = [name for name, ok in checks.items() if not ok]
    if failed:
        return None, f"SentencePiece setting(s) {', '.join(failed)} prevent chunked counting"
    if trainer.get(3, [1])[-1] == 1:  # TrainerSpec.model_type: UNIGRAM = 1 (the default), BPE = 2
        return None, ("unigram model: Viterbi ties are decided by float sums over the whole line, so a "
                      "chunk alone can segment differently (benchmarks/unigram_chunk_check.py); "
                      "encoding whole documents")
    for i in range(sp.get_piece_size()):
        piece = sp.id_to_piece(i)
        if "\u2581" in piece[1:] or " " in piece:
            return None, f"piece {i} ({piece!r}) spans a word boundary; encoding whole documents"
    return "sp", "split_by_whitespace with dummy prefix: each space-delimited chunk encodes alone"


_CUT_NORMALIZERS = {"nmt_nfkc", "nfkc", "identity"}


def _sentencepiece_cuts(data: bytes, sp: Any) -> Any:
    """The table of `Tokenizer.subchunk_cuts`, or False where cutting inside chunks is not proven."""
    import numpy as np

    model = _proto_fields(data)
    trainer = _proto_fields(model.get(2, [b""])[-1])  # type: ignore[arg-type]
    if trainer.get(3, [1])[-1] != 2:
        return False  # only BPE (unigram models have no chunk rule at all, see the module docstring)
    normalizer = _proto_fields(model.get(3, [b""])[-1])  # type: ignore[arg-type]
    name = normalizer.get(1, [b"nmt_nfkc"])[-1]
    if not isinstance(name, bytes) or name.decode("utf-8", "replace") not in _CUT_NORMALIZERS:
        return False
    spans = np.ones((128, 128), dtype=bool)
    for i in range(sp.get_piece_size()):
        if sp.is_byte(i) or sp.is_control(i) or sp.is_unknown(i):
            continue  # never matched against text
        piece = sp.id_to_piece(i)
        for a, b in zip(piece, piece[1:]):
            if a < "\x80" and b < "\x80":
                spans[ord(a), ord(b)] = False
    known = np.zeros(128, dtype=bool)
    for code in range(0x21, 0x7F):
        token = sp.piece_to_id(chr(code))
        known[code] = not sp.is_unknown(token) and not sp.is_control(token)
    return spans & known[:, None] & known[None, :]


def _without_dummy_prefix(data: bytes) -> bytes:
    """The SentencePiece model proto with NormalizerSpec.add_dummy_prefix = false.

    Appends field 3 = 0 to the NormalizerSpec message (field 3 of ModelProto): in protobuf the last
    value of a scalar field wins, so nothing else is touched.
    """
    out = bytearray()
    pos = 0
    seen = False
    while pos < len(data):
        start = pos
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, pos = _read_varint(data, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            length, body = _read_varint(data, pos)
            pos = body + length
            if number == 3:
                payload = data[body:pos] + b"\x18\x00"
                out += _varint(key) + _varint(len(payload)) + payload
                seen = True
                continue
        else:
            raise ValueError(f"unsupported wire type {wire}")
        out += data[start:pos]
    if not seen:
        out += b"\x1a\x02\x18\x00"  # a NormalizerSpec holding only add_dummy_prefix = false
    return bytes(out)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


# --------------------------------------------------------------------------------------------
# Hugging Face tokenizer.json

_SAFE_NORMALIZERS = {"NFC", "NFD", "NFKC", "NFKD", "Lowercase", "StripAccents", "BertNormalizer"}
_SAFE_PRE_TOKENIZERS = {"Whitespace", "WhitespaceSplit", "BertPreTokenizer", "Punctuation", "Digits"}


def _hf_chunk_rule(config: dict[str, Any]) -> tuple[ChunkRule | None, str, re.Pattern[str]]:
    def components(node: Any, key: str) -> list[dict[str, Any]]:
        if node is None:
            return []
        if node.get("type") == "Sequence":
            return [c for child in node.get(key, []) for c in components(child, key)]
        return [node]

    pattern = PREFIX_SPACE_CHUNK
    for norm in components(config.get("normalizer"), "normalizers"):
        if norm.get("type") not in _SAFE_NORMALIZERS:
            return None, f"normaliser {norm.get('type')} is not character-local; encoding whole documents", pattern
        if norm.get("type") == "BertNormalizer" and norm.get("clean_text", True):
            pattern = _chunk_pattern(_WS_NOT_CONTROL)
    pre = components(config.get("pre_tokenizer"), "pretokenizers")
    if not pre:
        return None, "no pre-tokenizer splits on whitespace; encoding whole documents", pattern
    splits_on_ws = False
    for node in pre:
        kind = node.get("type")
        if kind == "ByteLevel":
            if not node.get("use_regex", True):
                return None, "ByteLevel without its regex; encoding whole documents", pattern
            splits_on_ws = True
        elif kind in _SAFE_PRE_TOKENIZERS:
            splits_on_ws = splits_on_ws or kind in {"Whitespace", "WhitespaceSplit", "BertPreTokenizer"}
        else:
            return None, f"pre-tokenizer {kind} may join across whitespace; encoding whole documents", pattern
    if not splits_on_ws:
        return None, "no pre-tokenizer splits on whitespace; encoding whole documents", pattern
    for added in config.get("added_tokens", []):
        content = added.get("content", "")
        if added.get("rstrip") or any(ch.isspace() for ch in content):
            return None, f"added token {content!r} absorbs or contains whitespace; encoding whole documents", pattern
    return "prefix-space", "pre-tokens never cross a non-space/space boundary", pattern


def _special_by_name(vocab: dict[str, int], names: tuple[str, ...]) -> int | None:
    for name in names:
        if name in vocab:
            return vocab[name]
    return None


def _eos_default(config: dict[str, Any]) -> tuple[bool, str]:
    """Whether a model built on this tokenizer.json predicts EOS at document ends, from its
    post-processor (the template the library wraps each text in).

    A `[CLS] $A [SEP]` template (BertProcessing, RobertaProcessing, or a TemplateProcessing with
    special tokens on both sides of the text) marks a masked-LM encoder: it is given [SEP]/</s> as
    input and never predicts it, so no EOS per document by default. Anything else (no template,
    ByteLevel, `<s> $A`) is a causal LM, which predicts EOS at each document end.
    """
    def processors(node: Any) -> list[dict[str, Any]]:
        if not isinstance(node, dict):
            return []
        if node.get("type") == "Sequence":
            return [p for child in node.get("processors", []) for p in processors(child)]
        return [node]

    for proc in processors(config.get("post_processor")):
        kind = proc.get("type")
        if kind in ("BertProcessing", "RobertaProcessing"):
            return False, f"{kind} template: a masked-LM encoder never predicts its end token"
        if kind == "TemplateProcessing":
            items = proc.get("single", [])
            names = ["$A" if "Sequence" in item else item.get("SpecialToken", {}).get("id", "?")
                     for item in items if isinstance(item, dict)]
            if "$A" in names and 0 < names.index("$A") < len(names) - 1:
                return False, (f"template {' '.join(names)}: a masked-LM encoder never predicts "
                               "the end token at document ends")
    return True, "causal template: a language model predicts EOS at each document end"


def _load_hf(data: bytes, body: bytes, path: Path) -> Tokenizer:
    from tokenizers import Tokenizer as HFTokenizer

    try:
        text = body.decode("utf-8")
        config = json.loads(text)
    except (UnicodeDecodeError, ValueError):
        raise TokenizerError(f"{path}: not a tokenizer (invalid UTF-8 or JSON)") from None
    if not isinstance(config, dict) or not isinstance(config.get("model"), dict):
        raise TokenizerError(
            f"{path}: not a tokenizer.json (JSON without a \"model\" object; vocabulary files such as "
            "encoder.json or vocab.json are not enough: pass the tokenizer.json or the model folder)")
    try:
        tok = HFTokenizer.from_str(text)
    except Exception as err:  # tokenizers raises a bare Exception for schema errors
        if type(err) is not Exception:
            raise
        raise TokenizerError(f"{path}: not a valid tokenizer.json: {err}") from None
    # Counting needs every token of every document and nothing added.
    adjustments = []
    if config.get("padding"):
        tok.no_padding()
        strategy = config["padding"].get("strategy", "")
        adjustments.append(f"padding ({strategy if isinstance(strategy, str) else json.dumps(strategy)}, "
                           f"{config['padding'].get('pad_token', '?')}) switched off")
    if config.get("truncation"):
        tok.no_truncation()
        adjustments.append(f"truncation (max_length {config['truncation'].get('max_length', '?')}) switched off")
    vocab = tok.get_vocab(with_added_tokens=True)
    special = frozenset(a["id"] for a in config.get("added_tokens", []) if a.get("special"))
    bos = _special_by_name(vocab, ("<s>", "<|begin_of_text|>", "<bos>", "[CLS]", "<|endoftext|>"))
    eos = _special_by_name(vocab, ("</s>", "<|end_of_text|>", "<eos>", "[SEP]", "<|endoftext|>"))
    rule, reason, pattern = _hf_chunk_rule(config)
    eos_default, eos_reason = _eos_default(config)
    return Tokenizer(
        path=path, kind="tokenizer.json", sha256=sha256_bytes(data),
        vocab_size=tok.get_vocab_size(with_added_tokens=True), bos_id=bos, eos_id=eos,
        pad_id=_special_by_name(vocab, ("<pad>", "[PAD]", "<|pad|>")),
        unk_id=_special_by_name(vocab, ("<unk>", "[UNK]")), special_ids=special,
        chunk_rule=rule, chunk_rule_reason=reason, _impl=tok, _data=data, chunk_pattern=pattern,
        eos_default=eos_default, eos_default_reason=eos_reason, adjustments=tuple(adjustments),
    )
