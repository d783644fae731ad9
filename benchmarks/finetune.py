"""Fine-tuning throughput on CPU: `nbcli.finetune_classifier` (nb train --task classification) against
a plain PyTorch loop (transformers' AutoModelForSequenceClassification, AdamW, the same linear
schedule, the same batches) over the same small BERT built here (no download). Target: >= 1.0x.

    python3 benchmarks/finetune.py [--steps 30] [--hidden 128]

Prints a table and writes benchmarks/out/finetune.json. Tokens are real (unpadded) tokens.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT, load_average, machine, print_rows, write_json  # noqa: E402

WORDS = ("the of and to in a is that for it as was with be by on not he this are or his from at which but have an "
         "they you were her she there been one all we their has would when if so no will frequency token model bias "
         "unigram transformer embedding layer norm attention guidance corpus").split()


def build(directory: Path, hidden: int) -> None:
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {w: i for i, w in enumerate(specials + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.add_special_tokens(specials)
    tok.save(str(directory / "tokenizer.json"))
    config = transformers.BertConfig(vocab_size=len(vocab), hidden_size=hidden, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=4 * hidden, max_position_embeddings=128)
    transformers.BertForMaskedLM(config).save_pretrained(directory)


def plain_loop(folder: Path, train: Path, steps: int, batch: int, lr: float) -> float:
    """tokens/s of a plain loop: the same examples in the same order, padded per batch."""
    import torch
    import transformers
    from tokenizers import Tokenizer

    from nbcli.train.data import TrainSampler
    from nbcli.tasks.finetune import learning_rate

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    rows = [json.loads(line) for line in train.read_text().splitlines()]
    encoded = [tok.encode(r["sentence1"], r["sentence2"]) for r in rows]
    labels = sorted({r["label"] for r in rows})
    y = [labels.index(r["label"]) for r in rows]
    torch.manual_seed(0)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder, num_labels=len(labels))
    model.train()
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}], lr=lr)
    tokens, began = 0, time.perf_counter()
    sampler = TrainSampler(len(rows), 0)   # the order nb's update loop takes them in
    for step in range(steps):
        picked = sampler.blocks(step * batch, batch)
        T = max(len(encoded[i].ids) for i in picked)
        ids = torch.zeros(batch, T, dtype=torch.long)
        types = torch.zeros(batch, T, dtype=torch.long)
        mask = torch.zeros(batch, T, dtype=torch.long)
        for r, i in enumerate(picked):
            n = len(encoded[i].ids)
            ids[r, :n] = torch.tensor(encoded[i].ids)
            types[r, :n] = torch.tensor(encoded[i].type_ids)
            mask[r, :n] = 1
        for g in opt.param_groups:
            g["lr"] = learning_rate(step, steps, lr, 0.06)
        out = model(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=torch.tensor([y[i] for i in picked]))
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        tokens += int(mask.sum())
    return tokens / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=128)
    args = parser.parse_args()
    import torch

    import nbcli

    torch.set_num_threads(1)
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "bert").mkdir()
        build(root / "bert", args.hidden)
        train = root / "train.jsonl"
        train.write_text("".join(json.dumps({"sentence1": " ".join(rng.choices(WORDS, k=rng.randint(8, 40))),
                                             "sentence2": " ".join(rng.choices(WORDS, k=rng.randint(4, 20))),
                                             "label": rng.choice(["entailment", "neutral", "contradiction"])}) + "\n"
                                 for _ in range(512)))
        baseline = plain_loop(root / "bert", train, args.steps, args.batch, 2e-5)
        report = nbcli.finetune_classifier(train, root / "run", init=root / "bert", text_field="sentence1",
                                           pair_field="sentence2", steps=args.steps, batch_size=args.batch)
        ours = report["tokens_per_s"]
    result = {"nb_tokens_per_s": ours, "plain_tokens_per_s": baseline, "ratio": ours / baseline,
              "steps": args.steps, "batch": args.batch, "hidden": args.hidden, "threads": 1,
              "load_average": load_average(), "machine": machine()}
    print_rows([("nb finetune tokens/s", f"{ours:,.0f}"), ("plain PyTorch loop tokens/s", f"{baseline:,.0f}"),
                ("ratio (target >= 1.0x)", f"{ours / baseline:.2f}x")])
    write_json(OUT / "finetune.json", result)


if __name__ == "__main__":
    main()
