"""Tiny transformers encoders (BERT, RoBERTa, DistilBERT) saved as model folders with their own
tokenizer.json, built in the test (no network, no downloaded weights), and tiny labelled corpora."""

from __future__ import annotations

from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from tests.conftest import english_like_lines

WORDS = ("the of and to in a is that for it as was with be by on not he this are or his from at which but have an "
         "they you were her she there been one all we their has would when if so no will frequency token model bias "
         "unigram transformer embedding layer norm attention guidance corpus").split()


def bert_tokenizer() -> Tokenizer:
    """A WordPiece tokenizer.json with BERT's [CLS] a [SEP] b [SEP] post-processor."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    pieces = sorted(set(WORDS) | {c for w in WORDS for c in w} | {f"##{c}" for w in WORDS for c in w} | set(".,?!"))
    vocab = {p: i for i, p in enumerate(specials + pieces)}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    for name in specials:
        tok.add_special_tokens([name])
    return tok


def roberta_tokenizer() -> Tokenizer:
    """A byte-level BPE tokenizer.json (trained on generated lines) with RoBERTa's post-processor."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(english_like_lines(300, unicode=False), trainer)
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), add_prefix_space=False)
    return tok


ENC = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32)


def encoder_folder(directory: Path, family: str, seed: int = 0) -> Path:
    """A tiny random `family` encoder (bert | roberta | distilbert) saved with its tokenizer.json."""
    torch.manual_seed(seed)
    tok = roberta_tokenizer() if family == "roberta" else bert_tokenizer()
    V = tok.get_vocab_size()
    if family == "bert":
        config = transformers.BertConfig(vocab_size=V, max_position_embeddings=64, **ENC)
    elif family == "roberta":
        config = transformers.RobertaConfig(vocab_size=V, max_position_embeddings=66, pad_token_id=1, bos_token_id=0,
                                            eos_token_id=2, **ENC)
    else:
        config = transformers.DistilBertConfig(vocab_size=V, dim=16, n_layers=2, n_heads=2, hidden_dim=32,
                                               max_position_embeddings=64, pad_token_id=0)
    model = transformers.AutoModelForMaskedLM.from_config(config)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory, safe_serialization=True)
    tok.save(str(directory / "tokenizer.json"))
    return directory


def write_corpus(path: Path, rows: list[tuple[str, str | None, str]], form: str) -> Path:
    """Labelled rows (text, pair, label) as `form`: tsv (GLUE, header), csv, jsonl or parquet."""
    import csv
    import json

    names = ["sentence1", "sentence2", "label"] if rows[0][1] is not None else ["sentence", "label"]
    records = [dict(zip(names, [r[0], r[1], r[2]] if r[1] is not None else [r[0], r[2]])) for r in rows]
    if form == "tsv":
        path.write_text("\t".join(names) + "\n" + "".join("\t".join(rec[n] for n in names) + "\n" for rec in records))
    elif form == "csv":
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, names)
            writer.writeheader()
            writer.writerows(records)
    elif form == "jsonl":
        path.write_text("".join(json.dumps(rec) + "\n" for rec in records))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(records), path)
    return path
