"""Word-level classification and tagging from scratch (issue 33): `-t words:min-freq=K[,lower]` counted on the
training records only and saved in the run; `--embedding-init pretrained:VECTORS` matched by word in
`encoder_from_scratch`, with its coverage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from nbcli.errors import ConfigError
from nbcli.tasks.data import DataSpec
from nbcli.tasks.encoders import encoder_from_scratch
from nbcli.tasks.finetune import FinetuneConfig, finetune
from nbcli.tasks.inference import load_classifier, predict_file
from nbcli.tokenizers import load_tokenizer
from nbcli.tokenizers.words import SPECIALS
from tests.tasks.builders import write_corpus
from tests.tokenizers.test_words import hand_count

TRAIN = [("The cat sat.", "A dog ran", "pos"), ("the Dog sat", "a cat, a dog", "neg"), ("Cats ran", "zebra", "pos"),
         ("the end", "THE END", "neg")]
VALID = [("valid valid valid words", "words only here", "pos"), ("here here", "only", "neg")]


def expected_vocabulary(texts: list[str], k: int, lower: bool) -> list[str]:
    """Specials, then the words counted at least k times by count (descending), ties by code points."""
    counts = hand_count(texts, lower)
    return list(SPECIALS) + sorted((w for w, c in counts.items() if c >= k), key=lambda w: (-counts[w], w))


def saved_vocabulary(run: Path) -> list[str]:
    vocab = json.loads((run / "tokenizer.json").read_text())["model"]["vocab"]
    return sorted(vocab, key=vocab.get)


def test_classification_vocabulary_is_the_training_files_hand_count(tmp_path) -> None:
    train = write_corpus(tmp_path / "train.csv", TRAIN, "csv")
    valid = write_corpus(tmp_path / "valid.tsv", VALID, "tsv")
    cfg = FinetuneConfig(data=DataSpec(text_field="sentence1", pair_field="sentence2", max_len=16),
                         tokenizer="words:min-freq=2,lower", steps=1, batch_size=2, lr=1e-3)
    finetune(cfg, [str(train)], {"dev": str(valid)}, tmp_path / "run")
    texts = [t for text, pair, _ in TRAIN for t in (text, pair)]
    vocabulary = saved_vocabulary(tmp_path / "run")
    assert vocabulary == expected_vocabulary(texts, 2, True)
    assert "the" in vocabulary and "sat" in vocabulary and "cats" not in vocabulary   # pair text counted, once-only out
    assert not {"valid", "words", "here", "only"} & set(vocabulary)                   # never the validation file's
    loaded = load_classifier(tmp_path / "run")                                        # the run's own, no -t
    assert loaded.tokenizer.pieces() == vocabulary
    assert len(predict_file(loaded, [str(valid)])) == len(VALID)


def test_tagging_vocabulary_counts_the_conll_tokens(tmp_path) -> None:
    sentences = [[("Paris", "B-LOC"), ("is", "O"), ("big", "O")], [("paris", "B-LOC"), ("is", "O")],
                 [("New-York", "B-LOC"), ("is", "O"), ("big", "O")]]
    train = tmp_path / "train.conll"
    train.write_text("\n\n".join("\n".join(f"{w} {t}" for w, t in s) for s in sentences) + "\n")
    valid = tmp_path / "valid.conll"
    valid.write_text("Rome B-LOC\nRome B-LOC\nRome O\n")
    cfg = FinetuneConfig(data=DataSpec(task="tagging", max_len=16), tokenizer="words:min-freq=2", steps=1,
                         batch_size=2, lr=1e-3)
    finetune(cfg, [str(train)], {"dev": str(valid)}, tmp_path / "run")
    tokens = [w for s in sentences for w, _ in s]
    assert saved_vocabulary(tmp_path / "run") == expected_vocabulary(tokens, 2, False)
    assert "Rome" not in saved_vocabulary(tmp_path / "run")


def test_init_with_a_word_vocabulary_is_refused() -> None:
    with pytest.raises(ConfigError, match="no --init"):
        FinetuneConfig(init="some/encoder", tokenizer="words:min-freq=1")
    with pytest.raises(ConfigError, match="--d-model and --n-head"):
        FinetuneConfig(init="some/encoder", tokenizer="tok.json", d_model=300)


def write_glove(path: Path, rows: dict[str, list[float]]) -> Path:
    path.write_text("".join(f"{w} {' '.join(repr(x) for x in v)}\n" for w, v in rows.items()), encoding="utf-8")
    return path


@pytest.mark.parametrize("missing", ["xavier", "mean"])
def test_encoder_from_scratch_takes_the_vectors_of_its_words(tmp_path, missing) -> None:
    gen = torch.Generator().manual_seed(3)
    vectors = {w: [round(float(x), 4) for x in torch.randn(6, generator=gen)]
               for w in ["the", "cat", "dog", "Sat", "zebra", "unused"]}
    glove = write_glove(tmp_path / "v.txt", vectors)
    tok = load_tokenizer("words:min-freq=1", texts=lambda: iter(["the cat sat", "The dog ran ran"]))
    coverage: dict = {}
    model = encoder_from_scratch(tok, "classification", 2, preset="tiny", seq_len=16, dropout=0.0,
                                 embedding_init=f"pretrained:{glove}", positions="learned", pooling="first", seed=0,
                                 d_model=6, n_head=3, missing=missing, coverage=coverage)
    emb = model.encoder.tok_emb.weight.detach()
    assert emb.shape == (tok.vocab_size + 1, 6)          # + the MLM <mask> row the encoder appends
    pieces = tok.pieces()
    words = pieces[len(SPECIALS):]
    # the case rule: the same string, else its lower-cased form ("sat" has none: "Sat" is not its lower form)
    hits = {i: vectors[w] if w in vectors else vectors[w.lower()] for i, w in enumerate(pieces)
            if i >= len(SPECIALS) and (w in vectors or w.lower() in vectors)}
    assert set(pieces[i] for i in hits) == {"the", "The", "cat", "dog"}
    for i, v in hits.items():
        assert torch.equal(emb[i], torch.tensor(v, dtype=torch.float32))
    others = [i for i in range(tok.vocab_size) if i not in hits]
    if missing == "mean":   # the mean of the vectors read: those of the vocabulary's words and lower forms
        kept = torch.tensor([vectors[w] for w in ("the", "cat", "dog")], dtype=torch.float64).mean(0).float()
        assert all(torch.allclose(emb[i], kept) for i in others)
    else:
        assert all(not torch.equal(emb[i], emb[others[0]]) for i in others[1:])
    assert (coverage["vocabulary"], coverage["words"], coverage["matched"]) == (tok.vocab_size, len(words), 4)
    assert coverage["matched_lowercased"] == 1 and coverage["initialised"] == tok.vocab_size - 4
    assert coverage["matched_fraction"] == pytest.approx(4 / len(words)) and coverage["missing"] == missing


def test_vector_dimension_must_be_the_models(tmp_path) -> None:
    glove = write_glove(tmp_path / "v.txt", {"the": [1.0, 2.0, 3.0]})
    tok = load_tokenizer("words:min-freq=1", texts=lambda: iter(["the cat"]))
    with pytest.raises(ConfigError, match="dimension 3 but the model's d_model is 4"):
        encoder_from_scratch(tok, "classification", 2, preset="tiny", seq_len=16, dropout=0.0,
                             embedding_init=f"pretrained:{glove}", positions="learned", pooling="first", seed=0,
                             d_model=4, n_head=2)


def test_a_run_saved_before_the_word_options_still_resumes(tmp_path) -> None:
    """config.json without embedding_missing, d_model, n_head (runs made before them): their defaults."""
    train = write_corpus(tmp_path / "train.csv", TRAIN, "csv")
    cfg = FinetuneConfig(data=DataSpec(text_field="sentence1", pair_field="sentence2", max_len=16),
                         tokenizer="words:min-freq=1", steps=2, batch_size=2, lr=1e-3)
    finetune(cfg, [str(train)], {}, tmp_path / "run", stop_at=1)
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    for key in ("embedding_missing", "d_model", "n_head"):
        del config[key]
    (tmp_path / "run" / "config.json").write_text(json.dumps(config))
    assert finetune(cfg, [str(train)], {}, tmp_path / "run", resume=True).resumed_from == 1
    with pytest.raises(ConfigError, match="d_model"):
        finetune(FinetuneConfig(**{**cfg.__dict__, "d_model": 64}), [str(train)], {}, tmp_path / "run", resume=True)
