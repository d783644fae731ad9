"""Session fixtures: tiny tokenizers and corpora built in temporary directories (never the network)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import settings

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


@pytest.fixture(autouse=True)
def _no_hash_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads or writes ~/.cache: the sha256 cache of patch-checkpoint is off (tests that
    check it turn it on in their own directory), and NB_CACHE_DIR points at a temporary one. The
    environment is inherited by `nb` subprocesses."""
    monkeypatch.setenv("NB_HASH_CACHE", "0")
    monkeypatch.setenv("NB_CACHE_DIR", str(tmp_path_factory.mktemp("nb-cache")))


@pytest.fixture(scope="session")
def sample_lines() -> list[str]:
    return english_like_lines(2000, seed=1)


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
