"""The generated hostile cases, by family. Each family crosses a generator of broken inputs
(tests/fuzz/inputs.py) with every command that reads that kind of input.

Shared valid inputs are placeholders filled at run time: {SP} (SentencePiece model), {HF}
(tokenizer.json), {CORPUS} (text), {CKPT} (nb checkpoint, V = 40), {COUNTS} (counts, V = 40),
{DIR} (the case's own directory, where broken inputs and any output go).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator

from tests.fuzz import inputs
from tests.fuzz.harness import Case

TRAIN_FAST = ("--steps", "2", "--seq-len", "16", "--batch-size", "2", "--eval-every", "1", "--eval-batches", "1",
              "--device", "cpu")


def _const(data: dict[str, bytes]) -> Callable[[], dict[str, bytes]]:
    return lambda: data


def _lazy(make: Callable[[], Iterator[tuple[str, bytes]]]) -> Callable[[], dict[str, bytes]]:
    return functools.cache(lambda: dict(make()))


# -- safetensors headers --------------------------------------------------------------------------

@functools.cache
def checkpoint_variants() -> dict[str, bytes]:
    blob = inputs.valid_checkpoint()
    out = dict(inputs.header_mutations(blob, "tok_emb.weight"))
    out.update(inputs.header_bitflips(blob, 16, seed=9))
    return out


@functools.cache
def counts_variants() -> dict[str, bytes]:
    blob = inputs.valid_counts()
    out = dict(inputs.header_mutations(blob, "counts"))
    out.update(inputs.header_bitflips(blob, 8, seed=11))
    out.update(inputs.counts_mutations())
    return out


CHECKPOINT_IDS = [
    "empty-file", "seven-bytes", "length-zero", "length-max", "length-past-end", "length-short", "truncated-data",
    "no-data", "header-not-json", "header-json-list", "header-json-null", "header-json-number", "header-json-string",
    "header-bom", "header-invalid-utf8", "header-deep-array", "header-deep-object", "header-deep-1000",
    "header-nan-literal", "header-trailing-garbage", "header-nul-inside", "offset-5000-digits", "shape-5000-digits",
    "offset-float-1e400", "dtype-list", "dtype-object", "dtype-int", "dtype-null", "dtype-unknown", "dtype-lower",
    "dtype-true", "shape-negative", "shape-float", "shape-string", "shape-nested", "shape-huge", "shape-object",
    "shape-bool", "shape-null", "offsets-reversed", "offsets-negative", "offsets-one", "offsets-three",
    "offsets-beyond", "offsets-strings", "offsets-float", "offsets-2^64", "offsets-null", "entry-list",
    "entry-string", "overlap", "meta-list", "meta-string", "meta-int", "meta-nested", "meta-int-value",
    "meta-null-value", "meta-config-not-json", "meta-config-list", "meta-config-deep", "meta-config-huge-int",
    "meta-config-surrogate", "meta-documents-text", "meta-documents-negative", "meta-total-float",
    "meta-vocab-huge", "name-surrogate", "duplicate-name",
]
BITFLIPS = 16
COUNTS_ONLY_IDS = ["dtype-float32", "dtype-float64", "dtype-float16", "dtype-bool", "dtype-bfloat16",
                   "dtype-float8_e4m3fn", "dtype-float8_e5m2", "uint64-max", "uint64-2^63", "negative", "matrix",
                   "scalar", "no-counts-tensor", "no-format", "documents-text", "documents-float",
                   "bytes-read-negative", "total-huge", "vocab-text"]
FOREIGN_OK = {"no-format"}  # probe-bias accepts counts of other tools (with a warning)
COUNTS_IDS = [i for i in CHECKPOINT_IDS if not i.startswith("meta-config")] + COUNTS_ONLY_IDS


def _variant(table: Callable[[], dict[str, bytes]], key: str, name: str) -> Callable[[], dict[str, bytes]]:
    return lambda: {name: table()[key]}


def _bitflip(table: Callable[[], dict[str, bytes]], index: int, name: str) -> Callable[[], dict[str, bytes]]:
    return lambda: {name: [v for k, v in table().items() if k.startswith("bitflip-")][index]}


# Every broken file meets every command that reads it under the fuzz_slow marker; the default suite
# crosses each with the first command of its family and samples the others (the same reader runs).
FAST_EVERY = {"inspect": 1, "patch": 2, "probe": 4, "merge": 1, "set-bias": 2, "eval": 8, "generate": 8,
              "transplant": 8}


def header_cases() -> Iterator[Case]:
    m = "m.safetensors"
    commands = {
        "inspect": ("inspect", "{DIR}/" + m),
        "patch": ("patch-checkpoint", "{DIR}/" + m, "--scale-ln-bias", "0.5", "-o", "{DIR}/out.safetensors"),
        "probe": ("probe-bias", "{DIR}/" + m, "-c", "{COUNTS}"),
        "eval": ("eval", "{DIR}/" + m, "--corpus", "{CORPUS}", "-t", "{SP}"),
        "generate": ("generate", "{DIR}/" + m, "--prompts", "{CORPUS}", "-t", "{SP}"),
        "transplant": ("transplant-embeddings", "{DIR}/" + m, "--source-tokenizer", "{SP}", "--target-tokenizer",
                       "{HF}", "-o", "{DIR}/out.safetensors"),
    }
    for i, key in enumerate(CHECKPOINT_IDS):
        for cmd, args in commands.items():
            yield Case(f"{cmd}-{key}", args, _variant(checkpoint_variants, key, m), (m,), "header",
                       fast=i % FAST_EVERY[cmd] == 0)
    for index in range(BITFLIPS):
        for cmd, args in commands.items():
            yield Case(f"{cmd}-bitflip{index}", args, _bitflip(checkpoint_variants, index, m), (m,), "header",
                       fast=index % FAST_EVERY[cmd] == 0)


def counts_cases() -> Iterator[Case]:
    c = "c.safetensors"
    commands = {
        "merge": ("merge-counts", "{DIR}/" + c, "{COUNTS}", "-o", "{DIR}/out.safetensors"),
        "probe": ("probe-bias", "{CKPT}", "-c", "{DIR}/" + c),
        "set-bias": ("patch-checkpoint", "{CKPT}", "--set-output-bias", "{DIR}/" + c, "-o", "{DIR}/out.safetensors"),
    }
    for i, key in enumerate(COUNTS_IDS):
        for cmd, args in commands.items():
            if cmd == "probe" and key in FOREIGN_OK:
                continue
            yield Case(f"{cmd}-{key}", args, _variant(counts_variants, key, c), (c,), "counts",
                       fast=i % FAST_EVERY[cmd] == 0)
    for index in range(8):
        for cmd, args in commands.items():
            yield Case(f"{cmd}-bitflip{index}", args, _bitflip(counts_variants, index, c), (c,), "counts",
                       fast=index % FAST_EVERY[cmd] == 0)
    # merging valid files whose sum does not fit in int64
    near = inputs.valid_counts(dtype="uint64", fill=2**62)
    yield Case("merge-overflow", ("merge-counts", "{DIR}/a.safetensors", "{DIR}/b.safetensors", "{DIR}/c.safetensors",
                                  "-o", "{DIR}/out.safetensors"),
               _const({"a.safetensors": near, "b.safetensors": near, "c.safetensors": near}), ("b.safetensors",),
               "counts")
    yield Case("merge-vocab-mismatch", ("merge-counts", "{COUNTS}", "{DIR}/" + c, "-o", "{DIR}/out.safetensors"),
               lambda: {c: inputs.valid_counts(vocab=41)}, (c,), "counts")
    yield Case("merge-missing", ("merge-counts", "{COUNTS}", "{DIR}/absent.safetensors", "-o", "{DIR}/out.safetensors"),
               dict, ("absent.safetensors",), "counts")
    yield Case("probe-too-long", ("probe-bias", "{CKPT}", "-c", "{DIR}/" + c),
               lambda: {c: inputs.valid_counts(vocab=5000)}, (c,), "counts")
    yield Case("set-bias-too-long", ("patch-checkpoint", "{CKPT}", "--set-output-bias", "{DIR}/" + c,
                                     "-o", "{DIR}/out.safetensors"),
               lambda: {c: inputs.valid_counts(vocab=5000)}, (c,), "counts")


# -- sharded checkpoints ---------------------------------------------------------------------------

@functools.cache
def _shards() -> tuple[dict[str, bytes], dict[str, str]]:
    return inputs.sharded(inputs.valid_checkpoint())


@functools.cache
def index_variants() -> dict[str, bytes]:
    files, weight_map = _shards()
    return dict(inputs.index_mutations(sorted(files), weight_map))


INDEX_IDS = ["not-json", "list", "no-weight-map", "weight-map-list", "weight-map-int-values", "deep", "deep-metadata",
             "huge-int", "surrogate-name", "path-traversal", "absolute-path", "missing-shard", "wrong-shard",
             "ghost-tensor", "tensor-not-indexed", "pickle-shard", "bom-then-garbage", "invalid-utf8",
             "weight-map-empty", "index-duplicate-name"]


def index_cases() -> Iterator[Case]:
    index = "model.safetensors.index.json"

    def files(key: str) -> Callable[[], dict[str, bytes]]:
        return lambda: {**{f"ck/{k}": v for k, v in _shards()[0].items()}, f"ck/{index}": index_variants()[key]}

    for key in INDEX_IDS:
        named = ("pytorch_model.bin",) if key == "pickle-shard" else (index,)
        yield Case(f"inspect-{key}", ("inspect", "{DIR}/ck"), files(key), named, "index")
        named = ("pytorch_model.bin",) if key == "pickle-shard" else (index,)
        yield Case(f"patch-{key}", ("patch-checkpoint", "{DIR}/ck", "--scale-ln-bias", "0.5", "-o", "{DIR}/out"),
                   files(key), named, "index")
    yield Case("inspect-shard-broken", ("inspect", "{DIR}/ck"),
               lambda: {**{f"ck/{k}": v for k, v in _shards()[0].items()},
                        "ck/model-00002-of-00002.safetensors": b"\x10" + b"\x00" * 7 + b"{oops",
                        f"ck/{index}": json.dumps({"weight_map": _shards()[1]}).encode()},
               ("model-00002-of-00002.safetensors",), "index")


# -- corpora ---------------------------------------------------------------------------------------

CORPUS_TEXT = ("The quick brown fox jumps over the lazy dog.\n" * 40).encode()


def corpus_cases() -> Iterator[Case]:
    for key, name, data in inputs.corpus_mutations(CORPUS_TEXT):
        files = _const({name: data})
        yield Case(f"count-{key}", ("count-unigrams", "{DIR}/" + name, "-t", "{SP}", "-o", "{DIR}/out.safetensors",
                                    "-j", "1"), files, (name,), "corpus")
        yield Case(f"train-{key}", ("train", "--corpus", "{DIR}/" + name, "-t", "{SP}", "--out", "{DIR}/run",
                                    *TRAIN_FAST), files, (name,), "corpus")
    for key, data in inputs.jsonl_mutations():
        files = _const({"c.jsonl": data})
        yield Case(f"count-jsonl-{key}", ("count-unigrams", "{DIR}/c.jsonl", "--format", "jsonl", "--strict", "-t",
                                          "{SP}", "-o", "{DIR}/out.safetensors", "-j", "1"),
                   files, ("c.jsonl:2",), "corpus")
        if key != "invalid-utf8":  # train reads like count-unigrams without --strict (U+FFFD)
            yield Case(f"train-jsonl-{key}", ("train", "--corpus", "{DIR}/c.jsonl", "-t", "{SP}", "--out",
                                              "{DIR}/run", *TRAIN_FAST), files, ("c.jsonl:2",), "corpus")
    # A document over NB_MAX_LINE_MB (here 1 MB: a 17 MB fixture is not needed to reach the limit)
    # is refused where it cannot be counted in pieces: whole-document encoding, JSONL, a compressed
    # stream. (With a chunk rule a plain file's long line is counted in pieces: tests/counting.)
    long_line = b"short line\n" + b"word " * 240_000 + b"\n"
    small_lines = (("NB_MAX_LINE_MB", "1"),)
    count_long = ("count-unigrams", "-t", "{SP}", "-o", "{DIR}/out.safetensors", "-j", "1")
    yield Case("count-long-line-whole-documents", (*count_long, "{DIR}/c.txt", "--no-chunk-cache"),
               _const({"c.txt": long_line}), ("c.txt:2", "NB_MAX_LINE_MB"), "corpus", env=small_lines)
    yield Case("count-long-line-jsonl", (*count_long, "{DIR}/c.jsonl", "--format", "jsonl"),
               _const({"c.jsonl": b'{"text": "a"}\n{"text": "' + b"word " * 240_000 + b'"}\n'}),
               ("c.jsonl:2", "NB_MAX_LINE_MB"), "corpus", env=small_lines)
    yield Case("count-long-line-gzip-stream", (*count_long, "{DIR}/c.txt.gz"),
               _lazy(lambda: iter([("c.txt.gz", __import__("gzip").compress(long_line))])),
               ("c.txt.gz", "NB_MAX_LINE_MB"), "corpus", env=small_lines)
    yield Case("count-bad-max-line-setting", (*count_long, "{DIR}/c.txt"), _const({"c.txt": b"a b\n"}),
               ("NB_MAX_LINE_MB",), "corpus", env=(("NB_MAX_LINE_MB", "-3"),))
    bad_utf8 = _const({"c.txt": b"good line\n\xff\xfe bad line\n"})
    yield Case("count-invalid-utf8-strict", ("count-unigrams", "{DIR}/c.txt", "--strict", "-t", "{SP}", "-o",
                                             "{DIR}/out.safetensors", "-j", "1"), bad_utf8, ("c.txt:2",), "corpus")
    for cmd, args in {"count": ("count-unigrams", "{IN}", "-t", "{SP}", "-o", "{DIR}/out.safetensors", "-j", "1"),
                      "train": ("train", "--corpus", "{IN}", "-t", "{SP}", "--out", "{DIR}/run", *TRAIN_FAST)}.items():
        for key, where, files, name in [("missing", "{DIR}/absent.txt", {}, "absent.txt"),
                                        ("glob-nothing", "{DIR}/*.nothing", {}, "*.nothing"),
                                        ("dir-no-text", "{DIR}/d", {"d/x.bin": b"\x00"}, "d"),
                                        ("empty", "{DIR}/e.txt", {"e.txt": b""}, "e.txt" if cmd == "train" else "")]:
            if key == "empty" and cmd == "count":
                continue  # counting an empty file is valid (zero tokens)
            yield Case(f"{cmd}-{key}", tuple(a.replace("{IN}", where) for a in args), _const(files), (name,), "corpus")


def _absent_remote_protocol() -> str:
    """A URL protocol whose fsspec package is not installed here (hf, https, s3, gs in turn)."""
    import importlib.util

    for protocol, module in (("hf", "huggingface_hub"), ("https", "aiohttp"), ("s3", "s3fs"), ("gs", "gcsfs")):
        if importlib.util.find_spec(module) is None:
            return protocol
    raise AssertionError("every remote protocol's package is installed: pick another one for this case")


def columnar_cases() -> Iterator[Case]:
    count = ("count-unigrams", "{IN}", "-t", "{SP}", "-o", "{DIR}/out.safetensors", "-j", "1")

    def args(where: str, *extra: str) -> tuple[str, ...]:
        return tuple(a.replace("{IN}", where) for a in count) + extra

    for key, name, data in inputs.columnar_mutations():
        yield Case(f"count-{key}", args("{DIR}/" + name), _const({name: data}), (name,), "columnar")
    yield Case("count-schema-change", args("{DIR}/*.parquet"), _lazy(lambda: iter(inputs.schema_change().items())),
               ("b.parquet", "id"), "columnar")
    yield Case("count-column-not-string", args("{DIR}/c.parquet"),
               _lazy(lambda: iter(inputs.non_string_column().items())), ("c.parquet", "text", "int64"), "columnar")
    yield Case("count-column-missing", args("{DIR}/c.parquet", "--field", "body"),
               _lazy(lambda: iter(inputs.non_string_column().items())), ("c.parquet", "body"), "columnar")
    yield Case("count-remote-unreachable", args("ftp://127.0.0.1:9/corpus/c.parquet"), dict,
               ("ftp://127.0.0.1:9/corpus/c.parquet",), "columnar")
    protocol = _absent_remote_protocol()
    yield Case("count-remote-without-extra", args(f"{protocol}://bucket/corpus/*.parquet"), dict,
               (f"{protocol}://", "nbcli["), "columnar")
    yield Case("count-remote-missing", args("memory://nb-fuzz-absent/c.parquet"), dict,
               ("memory://nb-fuzz-absent/c.parquet",), "columnar")


# -- tokenizers ------------------------------------------------------------------------------------

@functools.cache
def tokenizer_variants(hf: bytes) -> dict[str, tuple[str, bytes]]:
    return {key: (name, data) for key, name, data in inputs.tokenizer_mutations(hf)}


TOKENIZER_IDS = ["empty", "random-bytes", "text", "json-list", "json-no-model", "json-model-list", "json-bad",
                 "json-deep", "json-deep-object", "json-huge-int", "json-nan", "json-surrogate", "json-invalid-utf8",
                 "json-truncated", "wordlevel-missing-unk", "added-token-bad-id", "directory-without-json"]
HF_BYTES: dict[str, bytes] = {}  # filled by the session fixture (the tiny tokenizer.json)


def tokenizer_cases() -> Iterator[Case]:
    def files(key: str) -> Callable[[], dict[str, bytes]]:
        return lambda: dict([tokenizer_variants(HF_BYTES["hf"])[key]])

    def where(key: str) -> str:
        return "tokdir" if key == "directory-without-json" else ("tok.model" if key in ("empty", "random-bytes", "text")
                                                                  else "tokenizer.json")

    for key in TOKENIZER_IDS:
        name = where(key)
        yield Case(f"count-{key}", ("count-unigrams", "{CORPUS}", "-t", "{DIR}/" + name, "-o",
                                    "{DIR}/out.safetensors", "-j", "1"), files(key), (name,), "tokenizer")
        yield Case(f"train-{key}", ("train", "--corpus", "{CORPUS}", "-t", "{DIR}/" + name, "--out", "{DIR}/run",
                                    *TRAIN_FAST), files(key), (name,), "tokenizer")


# -- option values ---------------------------------------------------------------------------------

def option_cases() -> Iterator[Case]:
    count = ("count-unigrams", "{CORPUS}", "-t", "{SP}", "-o", "{DIR}/out.safetensors")
    train = ("train", "--corpus", "{CORPUS}", "-t", "{SP}", "--out", "{DIR}/run", *TRAIN_FAST)
    patch = ("patch-checkpoint", "{CKPT}", "-o", "{DIR}/out.safetensors")
    probe = ("probe-bias", "{CKPT}", "-c", "{COUNTS}")
    big = "9" * 30
    table: list[tuple[tuple[str, ...], tuple[str, ...], str]] = []
    for value in ("-1", big, "abc", "", "1.5", str(2**31), "nan"):
        table.append((count, ("-j", value), "--workers"))
    for value in ("-1", str(2**63), big, "x", "1e3", "-9223372036854775809"):
        table.append((train, ("--seed", value), "--seed"))
        table.append((patch, ("--shuffle-embeddings", "--seed", value), "--seed"))
    for option, values in {"--lr": ("inf", "nan", "-1", "0", "-inf", "x"),
                           "--ag-alpha": ("inf", "nan", "-1"),
                           "--label-smoothing": ("1", "-0.1", "nan", "inf"),
                           "--dropout": ("1", "-0.5", "nan"),
                           "--val-fraction": ("0", "0.5", "nan", "-1", "inf"),
                           "--ag-fraction": ("2", "-0.1", "nan"),
                           "--steps": ("0", "-5", big),
                           "--seq-len": ("1", "0", big),
                           "--batch-size": ("0", big),
                           "--grad-accum": ("0", "3"),
                           "--eval-every": ("0",), "--warmup": ("-1",),
                           "--smoothing": ("add-k:nan", "add-k:-1", "add-k:inf", "add-k:x", "laplace", ""),
                           "--embedding-init": ("pretrained:", "pretrained:{DIR}/absent.safetensors", "uniform"),
                           "--ag-patterns": ("next,sideways", "next"),
                           "--unigram-reg-lambda": ("nan", "inf", "-1", "-inf", "x"),
                           "--unigram-reg-steps": ("-1", big, "1"),   # 1 alone: it needs --unigram-reg-lambda
                           "--objective": ("gan",), "--preset": ("huge",)}.items():
        for value in values:
            table.append((train, (option, value), option))
    for option, values in {"--scale-ln-bias": ("nan", "inf", "-inf", "x", "1e999", ""),
                           "--smoothing": ("add-k:nan", "add-k:-2"),
                           "--standardise-embeddings": ("gaussian", "mean=0", "mean=x,std=1", "mean=0,std=-1",
                                                        "mean=nan,std=1", "match:", "match:{DIR}/absent.safetensors:w"),
                           "--map": ("output_weight", "nonsense=tok_emb.weight", "output_weight=absent"),
                           "--arch": ("gpt5",), "--rescale-w": ("l1",), "--shuffle-mode": ("diagonal",),
                           "--bias-name": ("tok_emb.weight",),
                           "--zipfian-whiten-embeddings": ("{DIR}/absent.safetensors",)}.items():
        for value in values:
            extra = (("--scale-ln-bias", "0.5") if option in ("--map", "--arch", "--smoothing")
                     else ("--set-output-bias", "{COUNTS}") if option == "--bias-name" else ())
            table.append((patch, (option, value, *extra), option))
    stats = ("embedding-stats", "{CKPT}")
    for option, values in {"--inits": ("glove", "", "xavier,,"), "--seed": ("-1", big),
                           "--shuffle-mode": ("diagonal",), "--plot": ("{DIR}/x.jpg",), "--arch": ("gpt5",)}.items():
        for value in values:
            table.append((stats, (option, value), option))
    for option, values in {"--bins": ("0", "-1", "100000", big), "--smoothing": ("add-k:nan", "x"),
                           "--map": ("final_ln_bias=absent",), "--arch": ("gpt5",)}.items():
        for value in values:
            table.append((probe, (option, value), option))
    evaluate = ("eval", "{CKPT}", "--corpus", "{CORPUS}", "-t", "{SP}")
    for option, values in {"--bias-effect-positions": ("some", ""), "--bias-effect-space": ("logit",),
                           "--bins": ("0", "-1", big), "--bias-effect-plot": ("{DIR}/x.jpg",),
                           "--by-frequency-plot": ("{DIR}/x.png",)}.items():
        for value in values:
            table.append((evaluate, (option, value), option))
    translation = ("eval", "--task", "translation", "{CKPT}", "--corpus", "{CORPUS}", "--src-lang", "de",
                   "--tgt-lang", "en")
    table.append((translation, ("--by-frequency", "{COUNTS}", "--by-frequency-plot", "{DIR}/x.jpg"),
                  "--by-frequency-plot"))
    table.append((translation, ("--by-frequency-plot", "{DIR}/x.png"), "--by-frequency-plot"))
    table.append((translation, ("--by-frequency", "{COUNTS}", "--by-frequency-plot", "{COUNTS}"), "--by-frequency-plot"))
    table.append((("eval", "--task", "translation", "--corpus", "{CORPUS}", "--src-lang", "de", "--tgt-lang", "en",
                   "--hyps", "{CORPUS}", "--by-frequency", "{COUNTS}"), (), "--by-frequency"))
    table.append((("plot-by-frequency", "{CORPUS}"), (), "not an nb eval --json report"))
    table.append((("plot-by-frequency", "{COUNTS}"), (), "not an nb eval --json report"))
    table.append((("plot-by-frequency", "{DIR}/absent.json"), (), "absent.json"))
    table.append((("plot-by-frequency", "{CORPUS}", "-o", "{DIR}/x.jpg"), (), "-o"))
    table.append((("plot-by-frequency", "{CORPUS}", "--label", "a", "--label", "b"), (), "--label"))
    table.append((count, ("--format", "xml"), "--format"))
    table.append((count, ("--smoothing", "add-k:-1"), "--smoothing"))
    table.append((("merge-counts", "{COUNTS}"), (), "--output"))
    table.append((("patch-checkpoint", "{CKPT}", "--scale-ln-bias", "0.5"), (), "-o"))
    table.append((("patch-checkpoint", "{CKPT}", "-o", "{DIR}/out.safetensors"), (), "no operation"))
    table.append((("quickstart", "-j", "-3"), (), "--workers"))
    table.append((("quickstart", "-o", "{CORPUS}/out.safetensors"), (), "not a directory"))  # a file where a folder goes
    maps = ("attention-maps", "{DIR}", "-t", "{SP}", "--sentence", "a b.")
    table.append((maps, (), "no step-N.safetensors"))
    for option, values in {"--at": ("101%", "-1", "x", ""), "--metric": ("l2",), "-o": ("{DIR}/x.jpg",),
                           "--checkpoint": ("{DIR}/absent.safetensors",)}.items():
        for value in values:
            table.append((maps, (option, value), option))
    for value in ("9.9", "a.b", "0-1", "assigned"):
        table.append((maps, ("--checkpoint", "{CKPT}", "--heads", value), "--heads"))
    table.append((maps, ("--checkpoint", "{CORPUS}"), "corpus"))
    table.append((("nonsense-command",), (), "nonsense-command"))
    for i, (base, extra, name) in enumerate(table):
        named = [a.split("{DIR}/")[-1].split(":")[0] for a in extra if "{DIR}/" in a] or [name]
        if extra[:1] == ("--bias-name",):
            named = ["tok_emb.weight"]
        yield Case(f"{i:03d}-{base[0]}{''.join(extra)}"[:80], (*base, *extra), dict, tuple(named), "options")


# -- file names with markup, newlines, control characters --------------------------------------

HOSTILE_NAMES = ["[/INST].safetensors", "[/]x[bold].safetensors", "a\nb.safetensors", "tab\tname.safetensors",
                 "\x1b[31mred.safetensors", "[link=x]y[/link].safetensors", ":smile:.safetensors",
                 "\u2028sep.safetensors", "back\\slash\\.safetensors", "[bold].safetensors\\"]


def name_cases() -> Iterator[Case]:
    broken = b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}"
    for i, name in enumerate(HOSTILE_NAMES):
        files = _const({name: broken})
        yield Case(f"inspect-name{i}", ("inspect", "{DIR}/" + name), files, (name,), "names")
        yield Case(f"patch-name{i}", ("patch-checkpoint", "{DIR}/" + name, "--scale-ln-bias", "0.5", "-o",
                                      "{DIR}/out.safetensors"), files, (name,), "names")
        yield Case(f"merge-name{i}", ("merge-counts", "{DIR}/" + name, "-o", "{DIR}/out.safetensors"), files,
                   (name,), "names")
        yield Case(f"count-name{i}", ("count-unigrams", "{DIR}/" + name + ".gz", "-t", "{SP}", "-o",
                                      "{DIR}/out.safetensors", "-j", "1"),
                   _const({name + ".gz": b"\x1f\x8b" + broken}), (name,), "names")


# -- train: resume from a damaged run, diverging runs -------------------------------------------

RUN_FILES: dict[str, bytes] = {}  # a run stopped at step 2 of 4 (`RUN_STEPS --stop-at 2`), filled by a fixture
RUN_STEPS = ("--steps", "4", "--save-every", "1")


def _run_with(name: str, data: bytes | None) -> Callable[[], dict[str, bytes]]:
    def files() -> dict[str, bytes]:
        out = {f"run/{k}": v for k, v in RUN_FILES.items()}
        if data is None:
            out.pop(f"run/{name}")
        else:
            out[f"run/{name}"] = data
        return out
    return files


def resume_cases() -> Iterator[Case]:
    resume = ("train", "--corpus", "{CORPUS}", "-t", "{SP}", "--out", "{DIR}/run", *TRAIN_FAST, *RUN_STEPS,
              "--resume")
    state = {"format": "nb-train-state/1", "step": 2, "sequences": 4, "checkpoint": "step-2.safetensors",
             "data_sha256": "0" * 64}
    big = "9" * 5000
    damaged = {
        "train-state.json": [b"{oops", b"[]", b"null", inputs.deep(100_000).encode(),
                             f'{{"format": "nb-train-state/1", "step": {big}}}'.encode(),
                             json.dumps({**state, "step": "2"}).encode(), json.dumps({**state, "step": -1}).encode(),
                             json.dumps({**state, "checkpoint": "../../etc/passwd"}).encode(),
                             json.dumps({**state, "checkpoint": 5}).encode(), b'{"format": NaN}', b"\xff\xfe"],
        "config.json": [b"{oops", b"[1]", inputs.deep(100_000).encode(), b'{"steps": "many"}', b'{"bogus_key": 1}',
                        f'{{"seed": {big}}}'.encode(), b'{"embedding_init": 5}', b'{"preset": ["tiny"]}'],
        "log.jsonl": [b'{"step": 0, "loss": 1.0}\n{oops\n', b'[1]\n', b'{"step": "0"}\n', b'{"loss": 1}\n',
                      inputs.deep(100_000).encode() + b"\n", b'{"step": 0, "val_loss": "x"}\n', b"\xff\n"],
        "train-state.safetensors": [b"", b"{oops}", inputs.safetensors_bytes({"__metadata__": ["x"]})],
        "step-2.safetensors": [b"\x00" * 16],
    }
    for name, variants in damaged.items():
        for i, data in enumerate(variants):
            yield Case(f"resume-{name}-{i}", resume, _run_with(name, data), (name,), "resume", timeout=180)
    # plot-run reads the same log: a damaged one is refused, and no figure (nor the -o folder) is left
    plot = ("plot-run", "{DIR}/run", "-o", "{DIR}/figures")
    logs = [*damaged["log.jsonl"], b'{"step": 0, "val_loss": 1.7e308}\n{"step": 1, "val_loss": 0.5}\n',
            b'{"step": 1e400}\n',
            b'{"step": 0, "val_loss": 1.0}\n' * 3 + b'{"step": 1, "val_loss": [1]}\n',
            b'{"step": 1' + b"0" * 40 + b'}\n', b'{"step": -3}\n', b'{"step": 1, "val_loss": 1' + b"0" * 400 + b'}\n']
    for i, data in enumerate(logs):
        yield Case(f"plot-run-log-{i}", plot, _run_with("log.jsonl", data), ("log.jsonl",), "resume",
                   fast=i % 3 == 0)
    yield Case("resume-no-state", resume, _run_with("train-state.json", None), ("train-state.json",), "resume")


def train_cases() -> Iterator[Case]:
    import numpy as np
    from safetensors.numpy import save

    def embedding(value: float, rows: int, cols: int = 128) -> Callable[[], dict[str, bytes]]:
        return lambda: {"emb.safetensors": save({"w": np.full((rows, cols), value, dtype=np.float32)})}

    base = ("train", "--corpus", "{CORPUS}", "-t", "{SP}", "--out", "{DIR}/run", *TRAIN_FAST)
    yield Case("diverge-lr", (*base, "--lr", "1e38"), dict, ("step",), "train")
    yield Case("pretrained-empty-file", (*base, "--embedding-init", "pretrained:{DIR}/emb.safetensors"),
               lambda: {"emb.safetensors": b""}, ("emb.safetensors",), "train")
    for key, value in (("nan", float("nan")), ("inf", float("inf"))):
        yield Case(f"pretrained-{key}", (*base, "--embedding-init", "pretrained:{DIR}/emb.safetensors"),
                   embedding(value, 500), ("emb.safetensors",), "train")
    yield Case("pretrained-rows", (*base, "--embedding-init", "pretrained:{DIR}/emb.safetensors"),
               embedding(0.1, 7), ("emb.safetensors",), "train")
    yield Case("pretrained-standardise-constant", (*base, "--embedding-init", "pretrained:{DIR}/emb.safetensors",
                                                   "--embedding-standardise", "xavier"),
               embedding(0.5, 500), ("emb.safetensors",), "train")
    yield Case("whiten-constant-embedding", (*base, "--embedding-init", "pretrained:{DIR}/emb.safetensors",
                                             "--embedding-whiten"),
               embedding(0.5, 500), ("embedding-whiten",), "train")
    yield Case("unigram-reg-past-steps", (*base, "--unigram-reg-lambda", "0.5", "--unigram-reg-steps", "3"), dict,
               ("--unigram-reg-steps",), "train")
    yield Case("unigram-reg-lambda-huge", (*base, "--unigram-reg-lambda", "1e300", "--unigram-reg-steps", "2"),
               dict, ("step",), "train")
    yield Case("ag-alpha-huge", (*base, "--objective", "mlm", "--ag-fraction", "0.5", "--ag-alpha", "1e300"),
               dict, ("step",), "train")


def patch_cases() -> Iterator[Case]:
    """Operations that cannot apply to a valid checkpoint's tensors (empty, wrong shape, malformed config)."""
    import torch
    from safetensors.torch import save

    def ckpt(tensors: dict[str, torch.Tensor], meta: dict[str, str] | None = None) -> Callable[[], dict[str, bytes]]:
        return lambda: {"m.safetensors": save(tensors, metadata=meta or {"nb.format": "nb-model/1"})}

    out = ("-o", "{DIR}/out.safetensors")
    empty = {"tok_emb.weight": torch.zeros(0, 8), "pos_emb.weight": torch.zeros(4, 8), "ln_f.weight": torch.ones(8),
             "ln_f.bias": torch.ones(8)}
    yield Case("standardise-empty", ("patch-checkpoint", "{DIR}/m.safetensors", "--standardise-embeddings", "xavier",
                                     *out), ckpt(empty), ("m.safetensors", "tok_emb.weight"), "patch")
    yield Case("whiten-constant", ("patch-checkpoint", "{DIR}/m.safetensors", "--zipfian-whiten-embeddings",
                                   "{COUNTS}", *out),
               ckpt({**empty, "tok_emb.weight": torch.ones(40, 8)}), ("m.safetensors", "tok_emb.weight"), "patch")
    yield Case("whiten-empty", ("patch-checkpoint", "{DIR}/m.safetensors", "--zipfian-whiten-embeddings",
                                "{COUNTS}", *out), ckpt(empty), ("m.safetensors", "tok_emb.weight"), "patch")
    yield Case("standardise-constant", ("patch-checkpoint", "{DIR}/m.safetensors", "--standardise-embeddings",
                                        "xavier", *out),
               ckpt({**empty, "tok_emb.weight": torch.ones(40, 8)}), ("m.safetensors", "tok_emb.weight"), "patch")
    yield Case("remove-direction-transposed", ("patch-checkpoint", "{DIR}/m.safetensors", "--remove-frequency-direction",
                                               *out),
               ckpt({**empty, "tok_emb.weight": torch.randn(40, 8), "head.weight": torch.randn(16, 40),
                     "ln_f.bias": torch.randn(16)}, {"nb.format": "nb-model/1",
                                                     "nb.config": json.dumps({"tie_embeddings": False})}),
               ("m.safetensors",), "patch")
    yield Case("remove-direction-zero", ("patch-checkpoint", "{DIR}/m.safetensors", "--remove-frequency-direction",
                                         *out),
               ckpt({**empty, "tok_emb.weight": torch.randn(40, 8), "ln_f.bias": torch.zeros(8)}),
               ("m.safetensors", "ln_f.bias"), "patch")
    yield Case("untie-bad-config", ("patch-checkpoint", "{DIR}/m.safetensors", "--untie", *out),
               ckpt({**empty, "tok_emb.weight": torch.randn(40, 8)},
                    {"nb.format": "nb-model/1", "nb.config": "{not json"}), ("m.safetensors", "nb.config"), "patch")
    yield Case("untie-config-list", ("patch-checkpoint", "{DIR}/m.safetensors", "--untie", *out),
               ckpt({**empty, "tok_emb.weight": torch.randn(40, 8)},
                    {"nb.format": "nb-model/1", "nb.config": "[]"}), ("m.safetensors", "nb.config"), "patch")
    yield Case("rescale-zero-w", ("patch-checkpoint", "{DIR}/m.safetensors", "--rescale-w", "fro", "--untie", *out),
               ckpt({**empty, "tok_emb.weight": torch.zeros(40, 8), "head.bias": torch.ones(40)}),
               ("m.safetensors",), "patch")
    yield Case("nan-embedding", ("patch-checkpoint", "{DIR}/m.safetensors", "--standardise-embeddings", "xavier", *out),
               ckpt({**empty, "tok_emb.weight": torch.full((40, 8), float("nan"))}), ("m.safetensors",), "patch")


# -- outputs that cannot be written: checked before anything is written or renamed ----------------

LONG = "n" * 300  # a file name longer than NAME_MAX (255 bytes)


def output_cases() -> Iterator[Case]:
    """Output paths that cannot take the output: an existing directory, a name too long."""
    count = ("count-unigrams", "{CORPUS}", "-t", "{SP}", "-j", "1")
    yield Case("count-tsv-is-a-directory", (*count, "-o", "{DIR}/c.safetensors", "--tsv", "{DIR}/tsvdir"),
               _const({"tsvdir/keep": b""}), ("tsvdir", "is a directory"), "outputs")
    yield Case("count-out-is-a-directory", (*count, "-o", "{DIR}/outdir"), _const({"outdir/keep": b""}),
               ("outdir", "is a directory"), "outputs")
    yield Case("merge-out-is-a-directory", ("merge-counts", "{COUNTS}", "-o", "{DIR}/outdir"),
               _const({"outdir/keep": b""}), ("outdir", "is a directory"), "outputs")
    long = (LONG[:40], "longer than the file system allows")
    shards = lambda: {f"ck/{k}": v for k, v in _shards()[0].items()} | {  # noqa: E731
        "ck/model.safetensors.index.json": json.dumps({"weight_map": _shards()[1]}).encode()}
    for key, args, files in [
        ("count", (*count, "-o", "{DIR}/" + LONG + ".safetensors"), dict),
        ("count-tsv", (*count, "-o", "{DIR}/c.safetensors", "--tsv", "{DIR}/" + LONG + ".tsv"), dict),
        ("merge", ("merge-counts", "{COUNTS}", "-o", "{DIR}/" + LONG + ".safetensors"), dict),
        ("patch", ("patch-checkpoint", "{CKPT}", "--scale-ln-bias", "0.5", "-o", "{DIR}/" + LONG + ".safetensors"), dict),
        ("patch-sharded", ("patch-checkpoint", "{DIR}/ck", "--scale-ln-bias", "0.5", "-o", "{DIR}/" + LONG), shards),
        ("patch-sharded-inside", ("patch-checkpoint", "{DIR}/ck", "--scale-ln-bias", "0.5", "-o",
                                  "{DIR}/" + LONG + "/out"), shards),
        ("probe-plot", ("probe-bias", "{CKPT}", "-c", "{COUNTS}", "--plot", "{DIR}/" + LONG), dict),
        ("train", ("train", "--corpus", "{CORPUS}", "-t", "{SP}", "--out", "{DIR}/" + LONG, *TRAIN_FAST), dict),
        ("transplant", ("transplant-embeddings", "{CKPT}", "--source-tokenizer", "{SP}", "--target-tokenizer", "{HF}",
                        "-o", "{DIR}/" + LONG + ".safetensors"), dict),
    ]:
        yield Case(f"long-name-{key}", args, files, long, "outputs")


def probe_cases() -> Iterator[Case]:
    """Weights nb cannot compute with: one error line, no numpy warning before it."""
    import torch
    from safetensors.torch import load, save

    def ckpt(value: float, everywhere: bool) -> Callable[[], dict[str, bytes]]:
        def make() -> dict[str, bytes]:
            blob = inputs.valid_checkpoint()
            tensors = load(blob)
            if everywhere:
                tensors["tok_emb.weight"] = torch.full_like(tensors["tok_emb.weight"], value)
            else:
                tensors["tok_emb.weight"][3, 2] = value
            meta = {"nb.format": "nb-model/1", "nb.config": json.dumps({"tie_embeddings": True, "objective": "clm",
                                                                        "vocab_size": inputs.V})}
            return {"m.safetensors": save(tensors, metadata=meta)}
        return make

    for key, value, everywhere in [("inf", float("inf"), False), ("nan", float("nan"), False),
                                   ("overflow", 3e38, True)]:
        yield Case(f"probe-nonfinite-{key}", ("probe-bias", "{DIR}/m.safetensors", "-c", "{COUNTS}", "--plot",
                                              "{DIR}/plots"),
                   ckpt(value, everywhere), ("m.safetensors", "tok_emb.weight"), "probe")


def task_cases() -> Iterator[Case]:
    """The labelled and parallel inputs of `nb train --task classification|tagging|translation`, word
    vocabularies and word vectors, each broken the way a real file breaks (tests/fuzz/test_tasks_fuzz.py
    runs generated ones; these are the classes it found, kept in the suite)."""
    fast = ("--steps", "1", "--batch-size", "2", "--device", "cpu")
    tsv = b"sentence\tlabel\nthe cat sat\t1\na dog ran far\t0\nhello world\t1\n"
    tagging = ("train", "--task", "tagging", "-t", "words:min-freq=1", "--out", "{DIR}/run", *fast, "--corpus")
    yield Case("tagging-tsv-of-sentences", (*tagging, "{DIR}/t.tsv"), _const({"t.tsv": tsv}), ("t.tsv:2",), "tasks")
    yield Case("tagging-json-lines-as-text", (*tagging, "{DIR}/t.txt"),
               _const({"t.txt": b'{"tokens": ["EU", "rejects"], "ner_tags": [3, 0]}\n'}), ("t.txt:1",), "tasks")
    yield Case("tagging-record-lengths-differ", (*tagging, "{DIR}/t.jsonl"),
               _const({"t.jsonl": b'{"tokens": ["EU", "rejects"], "ner_tags": [3]}\n'}), ("t.jsonl:1",), "tasks")
    conllu = (b"# text = du vin\n1-2\tdu\t_\t_\t_\t_\t_\t_\t_\t_\n1\tde\tde\tADP\t_\t_\t_\t_\t_\t_\n"
              b"2\tle\tle\tDET\t_\t_\t_\t_\t_\t_\n3\tvin\tvin\tNOUN\t_\t_\t_\t_\t_\t_\n")
    yield Case("tagging-conllu-numbered-by-column-0", (*tagging, "{DIR}/t.conllu"), _const({"t.conllu": conllu}),
               ("t.conllu:",), "tasks")
    classification = ("train", "--task", "classification", "-t", "words:min-freq=1", "--out", "{DIR}/run", *fast,
                      "--text-field", "sentence", "--corpus")
    yield Case("classification-blank-label", (*classification, "{DIR}/c.tsv"),
               _const({"c.tsv": tsv + b"no label here\t \n"}), ("c.tsv:5",), "tasks")
    yield Case("classification-repeated-label-names", (*classification, "{DIR}/c.tsv", "--label-names", "a,b,a"),
               _const({"c.tsv": tsv}), ("--label-names",), "tasks")
    words = ("train", "--corpus", "{CORPUS}", "--out", "{DIR}/run", *TRAIN_FAST, "-t")
    yield Case("words-min-freq-overflow", (*words, "words:min-freq=99999999999999999999"), dict,
               ("words:min-freq",), "tasks")
    yield Case("words-no-word-kept", (*words, "words:min-freq=1000000"), dict, ("no word",), "tasks")
    questions = b": capital\nathens greece baghdad iraq\n"
    for name, data, where in [("v.txt", b"", "v.txt:1"), ("v.txt", b"hello world\n", "v.txt:1"),
                              ("v.bin", b"\x00\x01garbage", "v.bin:1")]:
        yield Case(f"analogy-broken-{name}-{len(data)}", ("analogy", "{DIR}/" + name, "--questions", "{DIR}/q.txt"),
                   _const({name: data, "q.txt": questions}), (where,), "tasks")
    pairs = _const({"p.de": b"ein haus\nzwei katzen\n", "p.en": b"a house\n"})
    yield Case("translation-unaligned-sides", ("train", "--task", "translation", "--corpus", "{DIR}/p", "--src-lang",
                                               "de", "--tgt-lang", "en", "-t", "words:min-freq=1", "--out",
                                               "{DIR}/run", *fast), pairs, ("p.de:2",), "tasks")


def _truncated_encoder() -> dict[str, bytes]:
    """A BERT encoder folder (tests/tasks/builders.py) whose model.safetensors is cut at 2,000 bytes."""
    import tempfile
    from pathlib import Path

    from tests.tasks.builders import encoder_folder

    with tempfile.TemporaryDirectory() as tmp:
        folder = encoder_folder(Path(tmp) / "enc", "bert")
        files = {f"enc/{p.name}": p.read_bytes() for p in folder.iterdir() if p.is_file()}
    files["enc/model.safetensors"] = files["enc/model.safetensors"][:2000]
    return files


def hostile_cases() -> Iterator[Case]:
    """Issue 42's hostile inputs, by class: a word-vector header that would allocate terabytes, JSON
    nested past the limit in files nb reads for labels, a truncated encoder checkpoint for --init, and
    errors that must name the file (labels all null or fractions, a word vocabulary the data cannot
    make). Length options that are not finite (nb translate / nb export, which need a trained run) are
    in tests/cli/test_hostile_inputs.py."""
    import gzip

    fast = ("--steps", "1", "--batch-size", "2", "--device", "cpu")
    questions = b": capital\nathens greece baghdad iraq\n"
    for header in (b"3 1000000000000", b"4000000 4000000"):
        data = header + b"\nthe 0.1 0.2\n"
        for name, blob in (("v.vec", data), ("v.vec.gz", gzip.compress(data, mtime=0))):
            yield Case(f"analogy-header-{header.decode().replace(' ', 'x')}-{name}",
                       ("analogy", "{DIR}/" + name, "--questions", "{DIR}/q.txt"),
                       _const({name: blob, "q.txt": questions}), (name,), "hostile")
    yield Case("pretrained-vectors-header-terabytes",
               ("train", "--corpus", "{CORPUS}", "-t", "words:min-freq=1", "--out", "{DIR}/run", *TRAIN_FAST,
                "--embedding-init", "pretrained:{DIR}/v.vec"),
               _const({"v.vec": b"3 1000000000000\nthe 0.1 0.2\n"}), ("v.vec:1",), "hostile")
    rows = b'{"text": "the cat", "label": "neg"}\n{"text": "the dog", "label": "pos"}\n'
    deep = b"[" * 100_000 + b"]" * 100_000
    classification = ("train", "--task", "classification", "-t", "words:min-freq=1", "--out", "{DIR}/run", *fast,
                      "--corpus")
    yield Case("label-names-deep-json", (*classification, "{DIR}/c.jsonl", "--label-names", "{DIR}/names.json"),
               _const({"c.jsonl": rows, "names.json": deep}), ("names.json",), "hostile")
    yield Case("dataset-info-deep-json", (*classification, "{DIR}/d/c.jsonl"),
               _const({"d/c.jsonl": rows, "d/dataset_info.json": deep}), ("dataset_info.json",), "hostile")
    yield Case("labels-all-null-or-fractions", (*classification, "{DIR}/c.jsonl"),
               _const({"c.jsonl": b'{"text": "the cat", "label": 0.5}\n{"text": "a dog", "label": null}\n'}),
               ("c.jsonl", "no labels"), "hostile")
    yield Case("words-no-word-kept-names-the-file",
               ("train", "--task", "classification", "-t", "words:min-freq=9", "--out", "{DIR}/run", *fast, "--corpus",
                "{DIR}/c.jsonl"), _const({"c.jsonl": rows}), ("c.jsonl", "words:min-freq=9"), "hostile")
    yield Case("init-truncated-safetensors",
               ("train", "--task", "classification", "--init", "{DIR}/enc", "--out", "{DIR}/run", *fast, "--corpus",
                "{DIR}/c.jsonl"), lambda: {**_truncated_encoder(), "c.jsonl": rows}, ("model.safetensors",), "hostile")


FAST_FAMILIES: dict[str, Callable[[], Iterator[Case]]] = {
    "header": header_cases, "counts": counts_cases, "index": index_cases, "corpus": corpus_cases,
    "columnar": columnar_cases,
    "tokenizer": tokenizer_cases, "options": option_cases, "names": name_cases, "resume": resume_cases,
    "train": train_cases, "patch": patch_cases, "outputs": output_cases, "probe": probe_cases,
    "tasks": task_cases, "hostile": hostile_cases,
}


def all_cases() -> list[Case]:
    return [case for family in FAST_FAMILIES.values() for case in family()]
