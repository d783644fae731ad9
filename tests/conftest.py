"""Session fixtures: tiny tokenizers and corpora built in temporary directories (never the network)."""

from __future__ import annotations

from collections.abc import Iterator

import json
import os
import random
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# Under pytest-xdist (`-n auto` in pyproject.toml's addopts) each core runs a worker; torch, MKL and
# OpenMP would each start a thread per core in every worker (and in every `nb` process a test starts,
# which inherits this environment), so n workers would run n x n threads on n cores. One thread each.
# Set before any test module imports torch; NB_TEST_THREADS overrides (nothing here is timed).
if os.environ.get("PYTEST_XDIST_WORKER"):
    _threads = os.environ.get("NB_TEST_THREADS", "1")
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[_name] = _threads
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(_threads))

# PYTHONDONTWRITEBYTECODE (set on nb's CI and development machines) would have every test process
# rewrite the 330 test modules' assertions (~10 s a worker) and every `nb` process a test starts
# compile nbcli from source (~1.3 s each) on every run: the suite writes bytecode as Python does by
# default (__pycache__ is git-ignored), and the `nb` processes, which keep the variable, read it.
sys.dont_write_bytecode = False

# Timing varies on shared CI machines; correctness, not speed, is what property tests check.
settings.register_profile("nb", deadline=None)
settings.load_profile("nb")

WORDS = (
    "the of and to in a is that for it as was with be by on not he I this are or his from at which "
    "but have an they you were her she there been one all we their has would when if so no will "
    "frequency token model bias unigram transformer embedding layer norm attention guidance corpus"
).split()
UNICODE_WORDS = ["café", "naïve", "Zürich", "日本語", "Ελληνικά", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "emoji🙂", "ﬁne", "ｆｕｌｌ"]


def english_like_lines(n: int, seed: int = 0, unicode: bool = True) -> list[str]:
    """Zipf-ish generated sentences (for tokenizer training and counting tests)."""
    rng = random.Random(seed)
    weights = [1.0 / (rank + 1) for rank in range(len(WORDS))]
    lines = []
    for _ in range(n):
        words = rng.choices(WORDS, weights=weights, k=rng.randint(3, 14))
        if unicode and rng.random() < 0.2:
            words.insert(rng.randrange(len(words) + 1), rng.choice(UNICODE_WORDS))
        sentence = " ".join(words)
        lines.append(sentence[0].upper() + sentence[1:] + rng.choice([".", ".", "?", "!", ","]))
    return lines


def train_sentencepiece(directory: Path, lines: list[str], vocab_size: int, model_type: str = "bpe",
                        **extra: object) -> Path:
    import sentencepiece as spm

    prefix = directory / f"sp-{model_type}-{vocab_size}"
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(prefix), vocab_size=vocab_size,
        **{"model_type": model_type, "character_coverage": 1.0, "byte_fallback": True, "num_threads": 1,
           "minloglevel": 2, **extra},
    )
    return prefix.with_suffix(".model")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--quick", action="store_true",
                     help="leave out the tests marked slow (long end-to-end runs; CI runs them, and so does a "
                          "plain `python3 -m pytest -q`)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--quick"):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


_PREVIOUS_TEST: list[str] = [""]


@pytest.fixture(autouse=True)
def _signal_handlers_restored(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test starts with Ctrl-C as a fresh process has it (SIGINT's Python handler, SIGINT and
    SIGTERM unblocked) and leaves the handlers as it found them: `nb` subprocesses inherit a blocked
    or ignored SIGINT, and a Ctrl-C test must not depend on what ran before it in its xdist worker.
    A state found changed is reported as a warning naming the test before (to find who changed it)."""
    import signal
    import warnings

    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    if signal.SIGINT in blocked or signal.SIGTERM in blocked or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        warnings.warn(f"SIGINT/SIGTERM found blocked or handled otherwise ({signal.getsignal(signal.SIGINT)!r}) after "
                      f"{_PREVIOUS_TEST[0] or 'start-up'}; reset")
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT, signal.SIGTERM])
        signal.signal(signal.SIGINT, signal.default_int_handler)
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    _PREVIOUS_TEST[0] = request.node.nodeid
    for sig, handler in saved.items():
        if signal.getsignal(sig) is not handler and handler is not None:
            signal.signal(sig, handler)


@pytest.fixture(autouse=True)
def _no_hash_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads or writes ~/.cache: the sha256 cache of patch-checkpoint is off (tests that
    check it turn it on in their own directory), and NB_CACHE_DIR points at a temporary one. The
    environment is inherited by `nb` subprocesses."""
    monkeypatch.setenv("NB_HASH_CACHE", "0")
    monkeypatch.setenv("NB_LOG_SECONDS", "0")  # no timed progress lines off a terminal (tests that check them set it)
    monkeypatch.setenv("NB_CACHE_DIR", str(tmp_path_factory.mktemp("nb-cache")))
    # Nor the Hugging Face cache or the network: a repo id resolves in an empty cache, offline.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path_factory.mktemp("hf-home")))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)   # `datasets`' cache: under HF_HOME too


@pytest.fixture(scope="session")
def sample_lines() -> list[str]:
    return english_like_lines(2000, seed=1)


@pytest.fixture(scope="session")
def train_corpus(tmp_path_factory: pytest.TempPathFactory, sample_lines: list[str]) -> Path:
    """The sample lines as one text file (a document a line): the LM's training corpus in tests."""
    path = tmp_path_factory.mktemp("train-corpus") / "corpus.txt"
    path.write_text("\n".join(sample_lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def sp_model(tmp_path_factory: pytest.TempPathFactory, sample_lines: list[str]) -> Path:
    """A tiny SentencePiece BPE model (vocab 500, byte fallback, <s>/</s> present)."""
    return train_sentencepiece(tmp_path_factory.mktemp("sp"), sample_lines, 500)


@pytest.fixture(scope="session")
def sp_unigram_model(tmp_path_factory: pytest.TempPathFactory, sample_lines: list[str]) -> Path:
    return train_sentencepiece(tmp_path_factory.mktemp("spu"), sample_lines, 400, model_type="unigram")


@pytest.fixture(scope="session")
def sp_bpe_punct_model(tmp_path_factory: pytest.TempPathFactory, sample_lines: list[str]) -> Path:
    """A BPE model with pieces across punctuation, unknown characters (coverage < 1, no byte
    fallback) and user-defined symbols: the hard case for cutting chunks between ASCII characters."""
    import random

    rnd = random.Random(3)
    soup = ["".join(rnd.choice(PUNCTUATION_SOUP) for _ in range(rnd.randint(1, 20))) for _ in range(800)]
    return train_sentencepiece(tmp_path_factory.mktemp("spp"), sample_lines + soup, 600,
                               character_coverage=0.98, byte_fallback=False,
                               user_defined_symbols=["<br>", "::", "a.b"])


PUNCTUATION_SOUP = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~abcXYZ019"


@pytest.fixture(scope="session")
def hf_bytelevel_json(tmp_path_factory: pytest.TempPathFactory, sample_lines: list[str]) -> Path:
    """A tiny GPT-2-style byte-level BPE tokenizer.json with <|endoftext|>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(sample_lines, trainer=trainer)
    path = tmp_path_factory.mktemp("hf") / "tokenizer.json"
    tok.save(str(path))
    return path


@pytest.fixture(scope="session")
def hf_bert_json(tmp_path_factory: pytest.TempPathFactory, sample_lines: list[str]) -> Path:
    """A tiny BERT-style WordPiece tokenizer.json ([CLS]/[SEP], BertNormalizer)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=300, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                                        show_progress=False)
    tok.train_from_iterator(sample_lines, trainer=trainer)
    path = tmp_path_factory.mktemp("hfbert") / "tokenizer.json"
    tok.save(str(path))
    return path


@pytest.fixture(scope="session")
def hf_bert_hub_json(tmp_path_factory: pytest.TempPathFactory, hf_bert_json: Path) -> Path:
    """The BERT fixture as hub files ship it: [CLS] $A [SEP] template, padding on, truncation at 8."""
    from tokenizers import Tokenizer, processors

    tok = Tokenizer.from_file(str(hf_bert_json))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tok.enable_padding(pad_id=tok.token_to_id("[PAD]"), pad_token="[PAD]", length=64)
    tok.enable_truncation(max_length=8)
    path = tmp_path_factory.mktemp("hfbert-hub") / "tokenizer.json"
    tok.save(str(path))
    return path


# ---------------------------------------------------------------------------------------------
# One tiny tokenizer per family, built with that family's published settings (never downloaded).

# Raw text as it comes: indentation, runs of spaces, tabs, code, digits, trailing spaces.
RAW_DOC_LINES = [
    "def count(path):", "    with open(path) as f:", "        return sum(1 for _ in f)  # lines",
    "   * item one", "     continued   here", "\tTabbed\ttext\t", "x = 12345 + 678    ", "",
    "Title", "=====", "", ".. note::", "   Indented reST body, 2024-05-01, v1.2.3.", "| a | b |",
]


@pytest.fixture(scope="session")
def family_lines() -> list[str]:
    lines = english_like_lines(1500, seed=7)
    lines += [line for _ in range(30) for line in RAW_DOC_LINES if line]
    lines += ["    " + line + "  " for line in lines[:200]] + [line.replace(" ", "   ") for line in lines[200:400]]
    lines += ["漢字かな交じり文 🙂🎉 café naïve e\u0301 ٱلعربية", "数字 3.14159 and 2,718"] * 20
    return lines


@pytest.fixture(scope="session")
def sp_llama2_model(tmp_path_factory: pytest.TempPathFactory, family_lines: list[str]) -> Path:
    """SentencePiece BPE with the Llama-2/Mistral trainer flags (identity normaliser, no whitespace
    collapsing, whitespace-only pieces, split digits, byte fallback, dummy prefix)."""
    return train_sentencepiece(
        tmp_path_factory.mktemp("llama2"), family_lines, 700, normalization_rule_name="identity",
        remove_extra_whitespaces=False, allow_whitespace_only_pieces=True, split_digits=True,
        byte_fallback=True, character_coverage=0.9999, add_dummy_prefix=True, split_by_unicode_script=True,
        max_sentencepiece_length=16)


def _save(tok: object, directory: Path) -> Path:
    path = directory / "tokenizer.json"
    tok.save(str(path))  # type: ignore[attr-defined]
    return path


def _bytelevel_bpe(lines: list[str], pre_tokenizer: object, normalizer: object = None, **model: object) -> object:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(**model))
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    # Documents with line breaks, so merges like ".\n" and ":\n" exist (they join across a cut).
    paragraphs = ["\n".join(lines[i:i + 4]) + "\n" for i in range(0, 400, 4)] + ["\n".join(RAW_DOC_LINES)] * 20
    tok.train_from_iterator(lines + paragraphs, trainer=trainer)
    return tok


def _split_regex(regex: str) -> object:
    from tokenizers import Regex, pre_tokenizers

    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False, trim_offsets=True)])


@pytest.fixture(scope="session")
def hf_llama3_json(tmp_path_factory: pytest.TempPathFactory, family_lines: list[str]) -> Path:
    """Llama-3 form: Split(Llama-3 regex, Isolated) + ByteLevel(use_regex=false), ignore_merges,
    <|begin_of_text|> $A template."""
    from tokenizers import processors

    from nbcli.tokenizers.hf_rules import LLAMA3_REGEX

    tok = _bytelevel_bpe(family_lines, _split_regex(LLAMA3_REGEX), ignore_merges=True)
    tok.post_processor = processors.TemplateProcessing(  # type: ignore[attr-defined]
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", 0)])
    return _save(tok, tmp_path_factory.mktemp("llama3"))


@pytest.fixture(scope="session")
def hf_qwen2_json(tmp_path_factory: pytest.TempPathFactory, family_lines: list[str]) -> Path:
    """Qwen2 form: NFC normaliser, Split(Qwen2 regex) + ByteLevel(use_regex=false)."""
    from tokenizers import normalizers

    from nbcli.tokenizers.hf_rules import QWEN2_REGEX

    return _save(_bytelevel_bpe(family_lines, _split_regex(QWEN2_REGEX), normalizers.NFC()),
                 tmp_path_factory.mktemp("qwen2"))


@pytest.fixture(scope="session")
def hf_o200k_json(tmp_path_factory: pytest.TempPathFactory, family_lines: list[str]) -> Path:
    from nbcli.tokenizers.hf_rules import O200K_REGEX

    return _save(_bytelevel_bpe(family_lines, _split_regex(O200K_REGEX)), tmp_path_factory.mktemp("o200k"))


@pytest.fixture(scope="session")
def hf_gpt2_prefix_json(tmp_path_factory: pytest.TempPathFactory, family_lines: list[str]) -> Path:
    """GPT-2 form with add_prefix_space=true (as RoBERTa-style files may set it)."""
    from tokenizers import pre_tokenizers

    return _save(_bytelevel_bpe(family_lines, pre_tokenizers.ByteLevel(add_prefix_space=True)),
                 tmp_path_factory.mktemp("gpt2p"))


@pytest.fixture(scope="session")
def hf_metaspace_unigram_json(tmp_path_factory: pytest.TempPathFactory, family_lines: list[str]) -> Path:
    """Metaspace(split=true) + Unigram, the converted T5/ALBERT form (without the Precompiled map)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(family_lines, trainers.UnigramTrainer(
        vocab_size=400, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>", show_progress=False))
    return _save(tok, tmp_path_factory.mktemp("metaspace"))


def _llama_converted_bpe(lines: list[str]) -> object:
    """A BPE vocabulary learnt per space-led word (as SentencePiece learns it), with byte fallback."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    alphabet = [f"<0x{b:02X}>" for b in range(256)]
    tok.train_from_iterator(lines, trainers.BpeTrainer(
        vocab_size=700, special_tokens=["<unk>", "<s>", "</s>", *alphabet], show_progress=False,
        initial_alphabet=["\u2581"]))
    return tok


@pytest.fixture(scope="session")
def hf_metaspace_runs_json(tmp_path_factory: pytest.TempPathFactory, family_lines: list[str]) -> Path:
    """The converted Llama/Mistral tokenizer.json: Metaspace(prepend_scheme=first, split=false), BPE
    with byte fallback, <s> $A template."""
    tok = _llama_converted_bpe(family_lines)
    config = json.loads(tok.to_str())  # type: ignore[attr-defined]
    config["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                               "split": False}
    config["post_processor"] = {"type": "TemplateProcessing", "single": [
        {"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    path = tmp_path_factory.mktemp("metaruns") / "tokenizer.json"
    path.write_text(json.dumps(config, ensure_ascii=False))
    return path


@pytest.fixture(scope="session")
def hf_prepend_runs_json(tmp_path_factory: pytest.TempPathFactory, family_lines: list[str]) -> Path:
    """The older converted Llama form: Prepend("▁") + Replace(" ", "▁") normaliser, no pre-tokenizer."""
    tok = _llama_converted_bpe(family_lines)
    config = json.loads(tok.to_str())  # type: ignore[attr-defined]
    config["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    config["pre_tokenizer"] = None
    path = tmp_path_factory.mktemp("prepend") / "tokenizer.json"
    path.write_text(json.dumps(config, ensure_ascii=False))
    return path


def reversed_words(line: str) -> str:
    """The toy translation of the parallel-corpus fixture: the source's words in reverse order."""
    return " ".join(reversed(line.split()))


@pytest.fixture(scope="session")
def parallel_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with aligned train.de / train.en (600 pairs; the target is the source's words reversed),
    valid.de / valid.en (40 pairs) and joint.model, a SentencePiece BPE model of both sides (vocab 500)."""
    folder = tmp_path_factory.mktemp("parallel")
    lines = english_like_lines(640, seed=7, unicode=False)
    for split, part in (("train", lines[:600]), ("valid", lines[600:])):
        (folder / f"{split}.de").write_text("\n".join(part) + "\n", encoding="utf-8")
        (folder / f"{split}.en").write_text("\n".join(reversed_words(s) for s in part) + "\n", encoding="utf-8")
    model = train_sentencepiece(folder, lines + [reversed_words(s) for s in lines], 500)
    model.rename(folder / "joint.model")
    return folder


@pytest.fixture(scope="session")
def side_tokenizers(tmp_path_factory: pytest.TempPathFactory, parallel_corpus: Path) -> dict[str, Path]:
    """One SentencePiece BPE model per side of the parallel corpus: "de" (vocab 400, trained on
    train.de), "en" (vocab 360, train.en) and "en-400" (vocab 400, train.en: a target side as large as
    the source)."""
    folder = tmp_path_factory.mktemp("side-tokenizers")
    out = {}
    for name, side, size in (("de", "de", 400), ("en", "en", 360), ("en-400", "en", 400)):
        lines = (parallel_corpus / f"train.{side}").read_text(encoding="utf-8").splitlines()
        (folder / name).mkdir()
        out[name] = train_sentencepiece(folder / name, lines, size)
    return out


@pytest.fixture(scope="session")
def translation_run(tmp_path_factory: pytest.TempPathFactory, parallel_corpus: Path) -> Path:
    """A tiny `nb train --task translation` run directory (d 32, 4 updates; its best.safetensors,
    step-4.safetensors and tokenizers), for the commands that read one."""
    from nbcli.tasks.translation import build_translation_config, train_translation

    out = tmp_path_factory.mktemp("mt-run") / "run"
    cfg = build_translation_config("tiny", dict(src_lang="de", tgt_lang="en", d_ff=64, eval_sentences=8),
                                   d_model=32, steps=4, eval_every=2, eval_batches=1, batch_size=16,
                                   bias_init="unigram")
    train_translation(cfg, [str(parallel_corpus / "train")], parallel_corpus / "joint.model",
                      parallel_corpus / "joint.model", out, valid=[str(parallel_corpus / "valid")])
    return out


# ---------------------------------------------------------------------------------------------
# The fuzz figure (tests/fuzz/harness.py tallies each case in the process that ran it). Under
# pytest-xdist the cases run in the workers: each hands its tally to the controller when it ends,
# and the controller, which prints the summary, adds them up.

def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    harness = sys.modules.get("tests.fuzz.harness")
    if workeroutput is not None and harness is not None:
        workeroutput["nb_fuzz"] = json.dumps({"tally": harness.TALLY, "failures": harness.FAILURES})


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:  # pytest-xdist's hook, in the controller
    sent = getattr(node, "workeroutput", {}).get("nb_fuzz")
    if sent:
        from tests.fuzz.harness import FAILURES, TALLY

        data = json.loads(sent)
        for key, count in data["tally"].items():
            TALLY[key] = TALLY.get(key, 0) + count
        FAILURES.extend(data["failures"])


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ANN001 - pytest hook
    harness = sys.modules.get("tests.fuzz.harness")
    if harness is None or not harness.TALLY["cases"]:
        return
    figure = ", ".join(f"{key.replace('_', ' ')} {harness.TALLY[key]}" for key in harness.FIGURE_KEYS)
    terminalreporter.write_sep("-", "nb fuzz figure")
    terminalreporter.write_line(f"nb fuzz: {figure}")
    for line in harness.FAILURES[:50]:
        terminalreporter.write_line(f"  broke: {line}")
    target = os.environ.get("NB_FUZZ_FIGURE")
    if target:
        Path(target).write_text(json.dumps({**harness.TALLY, "failures": harness.FAILURES}, indent=2) + "\n")
