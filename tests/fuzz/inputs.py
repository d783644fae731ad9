"""Generators of hostile inputs: safetensors headers, counts files, corpora, tokenizer files, index files.

Every generator is deterministic (seeded), so a failing case id names the same bytes on every run.
The valid files they start from are tiny (V = 40, d = 8) and built once per session.
"""

from __future__ import annotations

import bz2
import functools
import gzip
import io
import json
import lzma
import random
import struct
from collections.abc import Callable, Iterator

V, D = 40, 8
BOM = b"\xef\xbb\xbf"


def safetensors_bytes(header: object, data: bytes = b"", length: int | None = None) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    n = len(raw) if length is None else length
    return struct.pack("<Q", n) + raw + data


@functools.cache
def valid_checkpoint() -> bytes:
    """An nb-layout checkpoint (tied, with output bias) made by the safetensors library."""
    import torch
    from safetensors.torch import save

    g = torch.Generator().manual_seed(0)
    tensors = {"tok_emb.weight": torch.randn(V, D, generator=g), "pos_emb.weight": torch.randn(6, D, generator=g),
               "ln_f.weight": torch.ones(D), "ln_f.bias": torch.randn(D, generator=g), "head.bias": torch.zeros(V)}
    meta = {"nb.format": "nb-model/1", "nb.config": json.dumps({"tie_embeddings": True, "objective": "clm",
                                                                "vocab_size": V})}
    return save(tensors, metadata=meta)


@functools.cache
def valid_counts(vocab: int = V, dtype: str = "int64", fill: int | None = None,
                 metadata: tuple[tuple[str, str], ...] = ()) -> bytes:
    import numpy as np
    from safetensors.numpy import save

    counts = np.arange(1, vocab + 1, dtype=np.int64) * 3 if fill is None else np.full(vocab, fill, dtype=np.uint64)
    meta = {"nb.format": "unigram-counts/1", "nb.vocab_size": str(vocab), "nb.documents": "7",
            "nb.total_tokens": str(int(counts.sum())) if fill is None else "0", **dict(metadata)}
    return save({"counts": counts.astype(dtype)}, metadata=meta)


def split(blob: bytes) -> tuple[dict, bytes]:
    """(header dict, data buffer) of a safetensors file."""
    (n,) = struct.unpack("<Q", blob[:8])
    return json.loads(blob[8:8 + n]), blob[8 + n:]


def with_header(blob: bytes, edit: Callable[[dict], object]) -> bytes:
    header, data = split(blob)
    return safetensors_bytes(edit(header), data)


def _set(path: tuple[str, ...], value: object) -> Callable[[dict], dict]:
    def edit(header: dict) -> dict:
        node = header
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return header
    return edit


def deep(n: int, open_: str = "[", close: str = "]") -> str:
    return open_ * n + close * n


def header_mutations(blob: bytes, first: str) -> Iterator[tuple[str, bytes]]:
    """(id, bytes) of broken variants of a valid safetensors file whose first tensor is `first`."""
    header, data = split(blob)
    raw = json.dumps(header).encode()
    # structure of the file
    yield "empty-file", b""
    yield "seven-bytes", b"\x01" * 7
    yield "length-zero", struct.pack("<Q", 0) + raw + data
    yield "length-max", struct.pack("<Q", 2**64 - 1) + raw + data
    yield "length-past-end", struct.pack("<Q", len(raw) + len(data) + 1) + raw + data
    yield "length-short", struct.pack("<Q", len(raw) - 1) + raw + data
    yield "truncated-data", safetensors_bytes(header, data[: len(data) // 2])
    yield "no-data", safetensors_bytes(header)
    # the JSON itself
    for name, text in [("not-json", b"{not json"), ("json-list", b"[]"), ("json-null", b"null"), ("json-number", b"1"),
                       ("json-string", b'"x"'), ("bom", BOM + raw), ("invalid-utf8", raw[:-1] + b"\xff}"),
                       ("deep-array", f'{{"a": {deep(100_000)}}}'.encode()),
                       ("deep-object", ('{"a":' * 50_000 + "1" + "}" * 50_000).encode()),
                       ("deep-1000", f'{{"__metadata__": {{}}, "x": {deep(1000)}}}'.encode()),
                       ("nan-literal", raw.replace(b'"shape"', b'"nan": NaN, "shape"', 1)),
                       ("trailing-garbage", raw + b"xyz"), ("nul-inside", raw[:5] + b"\x00" + raw[5:])]:
        yield f"header-{name}", struct.pack("<Q", len(text)) + text + data
    big = "9" * 5000
    yield "offset-5000-digits", safetensors_bytes(
        raw.replace(b'"data_offsets": [0', f'"data_offsets": [{big}'.encode(), 1), data)
    yield "shape-5000-digits", safetensors_bytes(raw.replace(b'"shape": [', f'"shape": [{big}, '.encode(), 1), data)
    yield "offset-float-1e400", safetensors_bytes(raw.replace(b'"data_offsets": [0', b'"data_offsets": [1e400', 1), data)
    # one tensor's entry
    for name, value in [("dtype-list", ["F32"]), ("dtype-object", {"a": 1}), ("dtype-int", 4), ("dtype-null", None),
                        ("dtype-unknown", "F128"), ("dtype-lower", "f32"), ("dtype-true", True)]:
        yield name, with_header(blob, _set((first, "dtype"), value))
    for name, value in [("shape-negative", [-1, D]), ("shape-float", [V + 0.5, D]), ("shape-string", ["40", D]),
                        ("shape-nested", [[V], D]), ("shape-huge", [2**62, 2**62]), ("shape-object", {"a": 1}),
                        ("shape-bool", [True, D]), ("shape-null", None)]:
        yield name, with_header(blob, _set((first, "shape"), value))
    for name, value in [("offsets-reversed", [8, 0]), ("offsets-negative", [-8, 0]), ("offsets-one", [0]),
                        ("offsets-three", [0, 4, 8]), ("offsets-beyond", [0, 10**12]), ("offsets-strings", ["0", "4"]),
                        ("offsets-float", [0.0, 4.0]), ("offsets-2^64", [2**64, 2**64 + 4]), ("offsets-null", None)]:
        yield name, with_header(blob, _set((first, "data_offsets"), value))
    yield "entry-list", with_header(blob, _set((first,), [1, 2]))
    yield "entry-string", with_header(blob, _set((first,), "F32"))
    yield "overlap", with_header(blob, lambda h: {**h, "dup": dict(h[first])})
    # metadata
    for name, value in [("meta-list", ["a"]), ("meta-string", "x"), ("meta-int", 1), ("meta-nested", {"a": {"b": "c"}}),
                        ("meta-int-value", {"a": 1}), ("meta-null-value", {"a": None}),
                        ("meta-config-not-json", {"nb.format": "nb-model/1", "nb.config": "{oops"}),
                        ("meta-config-list", {"nb.format": "nb-model/1", "nb.config": "[1, 2]"}),
                        ("meta-config-deep", {"nb.format": "nb-model/1", "nb.config": deep(5000)}),
                        ("meta-config-huge-int", {"nb.format": "nb-model/1", "nb.config": '{"vocab_size": ' + big + "}"}),
                        ("meta-config-surrogate", {"nb.format": "nb-model/1", "nb.config": '{"a": "\\ud800"}'}),
                        ("meta-documents-text", {"nb.documents": "many"}), ("meta-documents-negative", {"nb.documents": "-1"}),
                        ("meta-total-float", {"nb.total_tokens": "1e3"}), ("meta-vocab-huge", {"nb.vocab_size": big})]:
        yield name, with_header(blob, _set(("__metadata__",), value))
    # names
    yield "name-surrogate", safetensors_bytes(raw.replace(f'"{first}"'.encode(), b'"\\udc80"', 1), data)
    # a tensor named twice (json.loads keeps the last entry, another reader may keep the first)
    twice = json.dumps({first: {**header[first], "shape": [1]}}).encode()[1:-1] + b", "
    yield "duplicate-name", safetensors_bytes(b"{" + twice + raw[1:], data)


def header_bitflips(blob: bytes, count: int, seed: int) -> Iterator[tuple[str, bytes]]:
    """Single-bit flips in the header (length prefix and JSON) that the safetensors library itself
    refuses (a flip that leaves a valid file, e.g. inside a tensor name, is not a hostile case)."""
    import tempfile

    from safetensors import safe_open

    rng = random.Random(seed)
    (n,) = struct.unpack("<Q", blob[:8])
    made = 0
    with tempfile.TemporaryDirectory() as tmp:
        probe = f"{tmp}/p.safetensors"
        seen: set[tuple[int, int]] = set()
        while made < count:
            pos = rng.randrange(8 + n)
            bit = rng.randrange(8)
            if (pos, bit) in seen:
                continue
            seen.add((pos, bit))
            mutated = bytearray(blob)
            mutated[pos] ^= 1 << bit
            with open(probe, "wb") as handle:
                handle.write(mutated)
            try:
                with safe_open(probe, framework="numpy") as f:
                    for key in f.keys():
                        f.get_slice(key)
                continue  # still valid: not a hostile case
            except Exception:
                pass
            made += 1
            yield f"bitflip-{pos}-{bit}", bytes(mutated)


def counts_mutations() -> Iterator[tuple[str, bytes]]:
    """Counts files nb must refuse (dtype, shape, values, metadata)."""
    import numpy as np
    from safetensors.numpy import save

    meta = {"nb.format": "unigram-counts/1", "nb.vocab_size": str(V)}
    for dtype in ("float32", "float64", "float16", "bool"):
        yield f"dtype-{dtype}", save({"counts": np.ones(V, dtype=dtype)}, metadata=meta)
    import torch
    from safetensors.torch import save as save_torch

    for dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
        yield f"dtype-{str(dtype).split('.')[-1]}", save_torch({"counts": torch.ones(V, dtype=dtype)}, metadata=meta)
    yield "uint64-max", save({"counts": np.full(V, 2**64 - 1, dtype=np.uint64)}, metadata=meta)
    yield "uint64-2^63", save({"counts": np.full(V, 2**63, dtype=np.uint64)}, metadata=meta)
    yield "negative", save({"counts": -np.arange(V, dtype=np.int64)}, metadata=meta)
    yield "matrix", save({"counts": np.ones((V, 2), dtype=np.int64)}, metadata=meta)
    yield "scalar", save({"counts": np.array(3, dtype=np.int64)}, metadata=meta)
    yield "no-counts-tensor", save({"count": np.ones(V, dtype=np.int64)}, metadata=meta)
    yield "no-format", save({"counts": np.ones(V, dtype=np.int64)}, metadata={"x": "y"})
    yield "documents-text", valid_counts(metadata=(("nb.documents", "lots"),))
    yield "documents-float", valid_counts(metadata=(("nb.documents", "1.5"),))
    yield "bytes-read-negative", valid_counts(metadata=(("nb.bytes_read", "-5"),))
    yield "total-huge", valid_counts(metadata=(("nb.total_tokens", "9" * 5000),))
    yield "vocab-text", valid_counts(metadata=(("nb.vocab_size", "forty"),))


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def _zstd(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(write_checksum=True).compress(data)  # so a flipped byte is detectable


def corpus_mutations(text: bytes) -> Iterator[tuple[str, str, bytes]]:
    """(id, file name, bytes) of corpora that must be refused. Plain-text problems need --strict
    (the default replaces invalid UTF-8); the caller adds it."""
    gz = _gzip(text)
    yield "gzip-random", "c.txt.gz", b"\x1f\x8b\x08\x00" + bytes(random.Random(1).randrange(256) for _ in range(200))
    yield "gzip-truncated", "c.txt.gz", gz[: len(gz) // 2]
    yield "gzip-bad-crc", "c.txt.gz", gz[:-8] + bytes(b ^ 0xFF for b in gz[-8:-4]) + gz[-4:]
    body = bytearray(gz)
    body[len(body) // 2] ^= 0x55
    yield "gzip-flipped", "c.txt.gz", bytes(body)
    yield "gzip-not-gzip", "c.txt.gz", b"plain text, not gzip\n"
    yield "gzip-empty-member-then-junk", "c.txt.gz", _gzip(b"") + b"junk"
    bz = bz2.compress(text)
    yield "bz2-truncated", "c.txt.bz2", bz[: len(bz) // 2]
    yield "bz2-junk", "c.txt.bz2", b"BZh9" + b"\x00" * 64
    xz = lzma.compress(text)
    yield "xz-truncated", "c.txt.xz", xz[: len(xz) // 2]
    yield "xz-junk", "c.txt.xz", b"\xfd7zXZ\x00" + b"\x01" * 64
    zst = _zstd(text)
    yield "zst-truncated", "c.txt.zst", zst[: len(zst) // 2]
    yield "zst-junk", "c.txt.zst", b"\x28\xb5\x2f\xfd" + b"\xff" * 64
    zb = bytearray(zst)
    zb[len(zb) // 2] ^= 0xFF
    yield "zst-flipped", "c.txt.zst", bytes(zb)


def jsonl_mutations() -> Iterator[tuple[str, bytes]]:
    """JSONL corpora (field `text`) with one bad line after a good one."""
    good = b'{"text": "a good line"}\n'
    big = "9" * 5000
    for name, line in [("not-json", b"{oops"), ("list", b'["text"]'), ("string", b'"text"'), ("null", b"null"),
                       ("missing-field", b'{"body": "x"}'), ("field-number", b'{"text": 5}'),
                       ("field-null", b'{"text": null}'), ("field-list", b'{"text": ["a"]}'),
                       ("deep", f'{{"text": "x", "meta": {deep(100_000)}}}'.encode()),
                       ("deep-field", f'{{"text": {deep(3000)}}}'.encode()),
                       ("huge-int", f'{{"text": "x", "n": {big}}}'.encode()),
                       ("huge-int-field", f'{{"text": {big}}}'.encode()),
                       ("lone-surrogate", b'{"text": "a \\ud800 b"}'),
                       ("lone-low-surrogate", b'{"text": "\\udc00"}'),
                       ("nan", b'{"text": "x", "score": NaN}'), ("infinity", b'{"text": Infinity}'),
                       ("invalid-utf8", b'{"text": "\xff\xfe"}'), ("nul", b'{"text": "a"\x00}'),
                       ("truncated", b'{"text": "abc')]:
        yield name, good + line + b"\n" + good


def tokenizer_mutations(hf_json: bytes) -> Iterator[tuple[str, str, bytes]]:
    """(id, file name, bytes) of tokenizer files nb must refuse."""
    config = json.loads(hf_json)
    big = "9" * 5000
    yield "empty", "tok.model", b""
    yield "random-bytes", "tok.model", bytes(random.Random(2).randrange(256) for _ in range(300))
    yield "text", "tok.model", b"this is not a tokenizer\n"
    yield "json-list", "tokenizer.json", b"[1, 2]"
    yield "json-no-model", "tokenizer.json", b'{"version": "1.0"}'
    yield "json-model-list", "tokenizer.json", b'{"model": []}'
    yield "json-bad", "tokenizer.json", b'{"model": {'
    yield "json-deep", "tokenizer.json", f'{{"model": {deep(100_000)}}}'.encode()
    yield "json-deep-object", "tokenizer.json", ('{"model":' * 20_000 + "1" + "}" * 20_000).encode()
    yield "json-huge-int", "tokenizer.json", hf_json.replace(b'"vocab": {', f'"vocab": {{"zz": {big}, '.encode(), 1)
    yield "json-nan", "tokenizer.json", hf_json.replace(b'"dropout": null', b'"dropout": NaN', 1)
    yield "json-surrogate", "tokenizer.json", hf_json.replace(b'"vocab": {', b'"vocab": {"\\ud800": 999999, ', 1)
    yield "json-invalid-utf8", "tokenizer.json", hf_json.replace(b'"vocab": {', b'"vocab": {"\xff": 1, ', 1)
    yield "json-truncated", "tokenizer.json", hf_json[: len(hf_json) // 2]
    wordlevel = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
                 "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None, "decoder": None,
                 "model": {"type": "WordLevel", "vocab": {"a": 0, "b": 1}, "unk_token": "[UNK]"}}
    yield "wordlevel-missing-unk", "tokenizer.json", json.dumps(wordlevel).encode()
    bad_ids = dict(config)
    bad_ids["added_tokens"] = [{"id": "x", "content": "<z>", "special": True, "single_word": False, "lstrip": False,
                                "rstrip": False, "normalized": False}]
    yield "added-token-bad-id", "tokenizer.json", json.dumps(bad_ids).encode()
    yield "directory-without-json", "tokdir/readme.txt", b"nothing here"


def index_mutations(shard_names: list[str], weight_map: dict[str, str]) -> Iterator[tuple[str, bytes]]:
    """model.safetensors.index.json variants nb must refuse (the shards themselves are valid)."""
    big = "9" * 5000
    first = next(iter(weight_map))
    yield "not-json", b"{oops"
    yield "list", b"[]"
    yield "no-weight-map", b'{"metadata": {}}'
    yield "weight-map-list", b'{"weight_map": []}'
    yield "weight-map-int-values", json.dumps({"weight_map": {k: 1 for k in weight_map}}).encode()
    yield "deep", f'{{"weight_map": {deep(100_000)}}}'.encode()
    yield "deep-metadata", f'{{"metadata": {deep(100_000)}, "weight_map": {json.dumps(weight_map)}}}'.encode()
    yield "huge-int", f'{{"metadata": {{"total_size": {big}}}, "weight_map": {json.dumps(weight_map)}}}'.encode()
    yield "surrogate-name", json.dumps({"weight_map": {**weight_map, "\ud800": shard_names[0]}}).encode()
    yield "path-traversal", json.dumps({"weight_map": {**weight_map, first: "../" + shard_names[0]}}).encode()
    yield "absolute-path", json.dumps({"weight_map": {**weight_map, first: "/etc/passwd"}}).encode()
    yield "missing-shard", json.dumps({"weight_map": {**weight_map, first: "model-9-of-9.safetensors"}}).encode()
    yield "wrong-shard", json.dumps({"weight_map": {**weight_map, first: shard_names[-1] if weight_map[first] != shard_names[-1] else shard_names[0]}}).encode()
    yield "ghost-tensor", json.dumps({"weight_map": {**weight_map, "ghost.weight": shard_names[0]}}).encode()
    yield "tensor-not-indexed", json.dumps({"weight_map": {k: v for k, v in weight_map.items() if k != first}}).encode()
    yield "pickle-shard", json.dumps({"weight_map": {**weight_map, first: "pytorch_model.bin"}}).encode()
    yield "bom-then-garbage", BOM + b"{oops"
    yield "invalid-utf8", b'{"weight_map": {"\xff": "x"}}'
    yield "weight-map-empty", b'{"metadata": {"total_size": 0}, "weight_map": {}}'
    mapped = json.dumps(weight_map)
    yield "index-duplicate-name", ('{"weight_map": {' + json.dumps(first) + ": " + json.dumps(shard_names[0]) + ", "
                             + mapped[1:] + "}").encode()


def sharded(blob: bytes, shards: int = 2) -> tuple[dict[str, bytes], dict[str, str]]:
    """Split a valid single-file checkpoint into shards: ({file: bytes}, weight_map)."""
    from safetensors.torch import load, save

    tensors = load(blob)
    names = list(tensors)
    files: dict[str, bytes] = {}
    weight_map: dict[str, str] = {}
    for i in range(shards):
        shard = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[i::shards]}
        files[shard] = save(part, metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, shard))
    return files, weight_map


def gz_member(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as handle:
        handle.write(data)
    return buf.getvalue()


def _parquet(table: object, row_group_size: int = 10) -> bytes:
    import pyarrow.parquet as pq

    out = io.BytesIO()
    pq.write_table(table, out, row_group_size=row_group_size)
    return out.getvalue()


def _text_table(n: int = 40, **extra: object) -> object:
    import pyarrow as pa

    return pa.table({"text": ["The quick brown fox jumps over the lazy dog."] * n, **extra})


def columnar_mutations() -> Iterator[tuple[str, str, bytes]]:
    """(id, file name, bytes) of parquet and Arrow files that must be refused: bad magic at either
    end, a broken footer (length, thrift), truncation, junk."""
    import pyarrow.ipc as ipc

    p = _parquet(_text_table())
    footer = struct.unpack("<I", p[-8:-4])[0]
    yield "parquet-truncated", "c.parquet", p[: len(p) // 2]
    yield "parquet-bad-magic", "c.parquet", b"PAR0" + p[4:]
    yield "parquet-bad-footer-magic", "c.parquet", p[:-4] + b"PAR0"
    yield "parquet-footer-length-huge", "c.parquet", p[:-8] + struct.pack("<I", 0xFFFFFFF0) + b"PAR1"
    yield "parquet-footer-length-zero", "c.parquet", p[:-8] + struct.pack("<I", 0) + b"PAR1"
    yield "parquet-footer-garbage", "c.parquet", p[: -8 - footer] + b"\x5a" * footer + p[-8:]
    yield "parquet-only-magic", "c.parquet", b"PAR1"
    yield "parquet-empty-file", "c.parquet", b""
    yield "parquet-unnamed-truncated", "shard-00000", p[: len(p) - 3]  # known by its magic, not its name
    yield "parquet-named-txt-truncated", "c.txt", p[: len(p) - 3]
    yield "parquet-gzipped", "c.parquet.gz", _gzip(p)  # parquet needs random access: never read as text
    stream, file = io.BytesIO(), io.BytesIO()
    table = _text_table()
    with ipc.new_stream(stream, table.schema) as writer:
        writer.write_table(table, max_chunksize=10)
    with ipc.new_file(file, table.schema) as writer:
        writer.write_table(table, max_chunksize=10)
    s, f = stream.getvalue(), file.getvalue()
    yield "arrow-stream-truncated", "data-00000-of-00001.arrow", s[: len(s) // 2]
    yield "arrow-stream-junk", "data-00000-of-00001.arrow", b"\xff\xff\xff\xff" + b"\x01" * 64
    yield "arrow-file-truncated", "c.arrow", f[: len(f) // 2]
    yield "arrow-file-bad-footer", "c.arrow", f[:-6] + b"ARROW0"


def schema_change() -> dict[str, bytes]:
    """Two shards of one glob whose schemas differ (the second has `id` as strings)."""
    import pyarrow as pa

    return {"a.parquet": _parquet(_text_table(id=pa.array(range(40), pa.int64()))),
            "b.parquet": _parquet(_text_table(id=pa.array([str(i) for i in range(40)])))}


def non_string_column() -> dict[str, bytes]:
    import pyarrow as pa

    return {"c.parquet": _parquet(pa.table({"text": pa.array(range(40), pa.int64())}))}
