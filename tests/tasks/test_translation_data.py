"""Translation data (nbcli.tasks.translation_data): conventions, the four corpus forms, counts, splits,
long and empty pairs, batches."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from nbcli.errors import ConfigError, CorpusError
from nbcli.tasks.translation_data import collate, conventions, input_files, tokenize_pairs
from nbcli.tokenizers import load_tokenizer
from tests.conftest import reversed_words


@pytest.fixture(scope="module")
def tok(parallel_corpus: Path):  # noqa: ANN201
    return load_tokenizer(parallel_corpus / "joint.model")


def pairs_of(folder: Path, split: str) -> list[tuple[str, str]]:
    src = (folder / f"{split}.de").read_text(encoding="utf-8").splitlines()
    tgt = (folder / f"{split}.en").read_text(encoding="utf-8").splitlines()
    return list(zip(src, tgt))


def test_conventions_follow_the_target_tokenizer(tok) -> None:  # noqa: ANN001
    conv = conventions(tok, tok)
    assert (conv.src_eos_id, conv.eos_id, conv.decoder_start_id) == (tok.eos_id, tok.eos_id, tok.bos_id)
    assert conv.pad_id == tok.eos_id                              # SentencePiece's default has no pad piece


def test_tokenised_pairs_counts_and_split(parallel_corpus: Path, tok) -> None:  # noqa: ANN001
    data = tokenize_pairs([str(parallel_corpus / "train")], None, tok, tok, "de", "en", 64, 0.1)
    pairs = pairs_of(parallel_corpus, "train")
    train = [p for i, p in enumerate(pairs) if i % 10 != 9]
    val = [p for i, p in enumerate(pairs) if i % 10 == 9]
    assert len(data.train_src) == len(train) and len(data.val_src) == len(val) and data.documents == 600
    assert data.train_src[0].tolist() == tok.encode(train[0][0]) + [tok.eos_id]
    assert data.train_tgt[0].tolist() == tok.encode(train[0][1])
    assert data.val_refs == [t for _, t in val]
    expected = np.zeros(tok.vocab_size, np.int64)                 # target tokens + one EOS a sentence, training only
    for _, t in train:
        for i in tok.encode(t) + [tok.eos_id]:
            expected[i] += 1
    assert np.array_equal(data.counts, expected)
    assert int(data.src_counts.sum()) == sum(len(tok.encode(s)) + 1 for s, _ in train)


def test_long_pairs_are_skipped_and_counted(parallel_corpus: Path, tok) -> None:  # noqa: ANN001
    limit = 12
    data = tokenize_pairs([str(parallel_corpus / "train")], [str(parallel_corpus / "valid")], tok, tok, "de", "en",
                          limit, 0.1)
    pairs = pairs_of(parallel_corpus, "train") + pairs_of(parallel_corpus, "valid")
    long = sum(len(tok.encode(s)) + 1 > limit or len(tok.encode(t)) + 1 > limit for s, t in pairs)
    assert 0 < long < len(pairs)
    assert data.skipped_long == long
    assert len(data.train_src) + len(data.val_src) == len(pairs) - long
    assert max(data.train_src.lengths().max(), data.train_tgt.lengths().max() + 1) <= limit


def write_forms(folder: Path, pairs: list[tuple[str, str]]) -> dict[str, str]:
    """The same pairs as aligned files, TSV, Hugging Face JSONL and parquet (a translation struct)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (folder / "c.de").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    (folder / "c.en").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    (folder / "c.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    (folder / "c.jsonl").write_text("".join(json.dumps({"translation": {"de": s, "en": t}}) + "\n"
                                            for s, t in pairs), encoding="utf-8")
    pq.write_table(pa.table({"translation": [{"de": s, "en": t} for s, t in pairs]}), folder / "c.parquet")
    return {"aligned": str(folder / "c"), "tsv": str(folder / "c.tsv"), "jsonl": str(folder / "c.jsonl"),
            "parquet": str(folder / "c.parquet")}


def test_the_corpus_forms_give_identical_data(tmp_path: Path, parallel_corpus: Path, tok) -> None:  # noqa: ANN001
    forms = write_forms(tmp_path, pairs_of(parallel_corpus, "train")[:200])
    data = {name: tokenize_pairs([path], None, tok, tok, "de", "en", 64, 0.1) for name, path in forms.items()}
    prints = {d.fingerprint for d in data.values()}
    assert len(prints) == 1, {k: d.fingerprint for k, d in data.items()}
    first = data["aligned"]
    for d in data.values():
        assert np.array_equal(d.counts, first.counts) and d.val_refs == first.val_refs
    conv = conventions(tok, tok)
    batches = [collate(d.train_src, d.train_tgt, [3, 1, 4], conv, torch.device("cpu")) for d in data.values()]
    for b in batches[1:]:
        assert torch.equal(b.src, batches[0].src) and torch.equal(b.labels, batches[0].labels)


@pytest.mark.parametrize("writer,fragment", [
    (lambda f: ((f / "m.de").write_text("a b\nc d\n"), (f / "m.en").write_text("b a\n")), "m.en has only 1 lines"),
    (lambda f: ((f / "m.de").write_text("a b\nc d\n"), (f / "m.en").write_text("b a\n\n")), "m.de:2: empty target"),
    (lambda f: (f / "m.tsv").write_text("a b\tb a\n\tx\n"), "m.tsv:2: empty source"),
    (lambda f: (f / "m.jsonl").write_text(json.dumps({"translation": {"de": "a", "fr": "b"}}) + "\n"), "m.jsonl:1"),
])
def test_bad_pairs_are_one_line_errors_naming_the_line(tmp_path: Path, tok, writer, fragment: str) -> None:  # noqa: ANN001
    writer(tmp_path)
    name = next(p for p in tmp_path.iterdir()).name
    item = str(tmp_path / "m") if name.endswith((".de", ".en")) else str(tmp_path / name)
    with pytest.raises(CorpusError) as err:
        tokenize_pairs([item], None, tok, tok, "de", "en", 64, 0.5)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_no_validation_pair_is_an_error(tmp_path: Path, tok) -> None:  # noqa: ANN001
    (tmp_path / "one.tsv").write_text("a b\tb a\n")
    with pytest.raises(CorpusError, match="no validation pair"):
        tokenize_pairs([str(tmp_path / "one.tsv")], None, tok, tok, "de", "en", 64, 0.1)


def test_a_target_tokenizer_without_eos_is_refused(tok) -> None:  # noqa: ANN001
    with pytest.raises(ConfigError, match="no EOS"):
        conventions(tok, dataclasses.replace(tok, eos_id=None))
    no_bos = conventions(tok, dataclasses.replace(tok, bos_id=None))
    assert no_bos.decoder_start_id == tok.eos_id                 # fairseq: the decoder starts from EOS


def test_batches_put_start_eos_and_padding_in_their_places(parallel_corpus: Path, tok) -> None:  # noqa: ANN001
    data = tokenize_pairs([str(parallel_corpus / "train")], None, tok, tok, "de", "en", 64, 0.1)
    conv = conventions(tok, tok)
    b = collate(data.train_src, data.train_tgt, [0, 1], conv, torch.device("cpu"))
    for row in range(2):
        s, t = data.train_src[row].tolist(), data.train_tgt[row].tolist()
        assert b.src[row, :len(s)].tolist() == s and int(b.src_lengths[row]) == len(s)
        assert b.tgt_in[row, :len(t) + 1].tolist() == [conv.decoder_start_id] + t
        assert b.labels[row, :len(t) + 1].tolist() == t + [conv.eos_id]
        assert (b.labels[row, len(t) + 1:] == -100).all()
    if b.src_mask is not None:
        assert b.src_mask.sum(1).tolist() == b.src_lengths.tolist()


def test_input_files_of_a_prefix(parallel_corpus: Path) -> None:
    prefix = str(parallel_corpus / "train")
    assert input_files([prefix, "x.tsv"], "de", "en") == [prefix + ".de", prefix + ".en", "x.tsv"]
    assert reversed_words("a b c") == "c b a"
