"""Fine-tuning throughput: `nb train --task classification`'s function (`nbcli.tasks.finetune.finetune`)
against a plain PyTorch loop (transformers' AutoModelForSequenceClassification, AdamW with nb's groups,
the same linear schedule, the same batches in the same order) over the same BERT built here (no
download). Target: >= 1.0x.

    python3 benchmarks/finetune.py [--steps 30] [--hidden 128]            # CPU, one thread
    python3 benchmarks/finetune.py --device cuda --dtype bfloat16 --hidden 768 --layers 12 --heads 12 \
        --max-words 80 --steps 40 --warm 10 --threads 0                   # BERT-base on a GPU (benchmarks/gpu.py)

Both loops run on --device under --dtype autocast (bfloat16: bf16 autocast, as nb's --dtype), with
TF32 matmuls on CUDA and AdamW fused there (nb's `make_optimizer`); the plain loop copies its batches
from pinned memory and waits for the device at the end of each step, as nb's update loop does. Tokens
are real (unpadded) tokens. nb_tokens_per_s / plain_tokens_per_s: over every update (nb: its updates'
own time, evaluation and saving excluded; plain: the loop's wall time); *_median_tokens_per_s: the
median over the updates from --warm on (what a long run sees, the first updates' warm-up left out).
Prints a table and writes --out (default benchmarks/out/finetune.json).
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


def build(directory: Path, hidden: int, layers: int = 2, heads: int = 4) -> None:
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
    config = transformers.BertConfig(vocab_size=len(vocab), hidden_size=hidden, num_hidden_layers=layers,
                                     num_attention_heads=heads, intermediate_size=4 * hidden,
                                     max_position_embeddings=128)
    transformers.BertForMaskedLM(config).save_pretrained(directory)


def examples(path: Path, n: int, max_words: int, seed: int = 0) -> Path:
    """n sentence pairs of random words (the first up to `max_words`, the second up to half that) as JSONL."""
    rng = random.Random(seed)
    path.write_text("".join(json.dumps({"sentence1": " ".join(rng.choices(WORDS, k=rng.randint(max_words // 5,
                                                                                               max_words))),
                                        "sentence2": " ".join(rng.choices(WORDS, k=rng.randint(max_words // 10,
                                                                                               max_words // 2))),
                                        "label": rng.choice(["entailment", "neutral", "contradiction"])}) + "\n"
                            for _ in range(n)))
    return path


def plain_loop(folder: Path, train: Path, steps: int, batch: int, lr: float, device: str = "cpu",
               dtype: str = "float32") -> list[tuple[int, float]]:
    """(tokens, seconds) of each step of a plain loop: the same examples in the same order, padded per batch."""
    import torch
    import transformers
    from tokenizers import Tokenizer

    from nbcli.train.data import TrainSampler
    from nbcli.tasks.finetune import learning_rate

    dev = torch.device(device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    rows = [json.loads(line) for line in train.read_text().splitlines()]
    encoded = [tok.encode(r["sentence1"], r["sentence2"]) for r in rows]
    labels = sorted({r["label"] for r in rows})
    y = [labels.index(r["label"]) for r in rows]
    torch.manual_seed(0)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder, num_labels=len(labels)).to(dev)
    model.train()
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}], lr=lr,
                            fused=dev.type == "cuda")
    amp = torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=dtype == "bfloat16")

    def on_device(t: torch.Tensor) -> torch.Tensor:
        return t.pin_memory().to(dev, non_blocking=True) if dev.type == "cuda" else t

    times = []
    sampler = TrainSampler(len(rows), 0)   # the order nb's update loop takes them in
    for step in range(steps):
        began = time.perf_counter()
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
        tokens = int(mask.sum())
        for g in opt.param_groups:
            g["lr"] = learning_rate(step, steps, lr, 0.06)
        with amp:
            out = model(input_ids=on_device(ids), attention_mask=on_device(mask), token_type_ids=on_device(types),
                        labels=on_device(torch.tensor([y[i] for i in picked])))
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        times.append((tokens, time.perf_counter() - began))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--examples", type=int, default=512)
    parser.add_argument("--max-words", type=int, default=40, help="longest first sentence of a pair, in words")
    parser.add_argument("--warm", type=int, default=0, help="updates left out of the medians (warm-up)")
    parser.add_argument("--device", default="cpu", help="cpu | cuda")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    parser.add_argument("--out", type=Path, default=OUT / "finetune.json")
    args = parser.parse_args()
    import statistics

    import torch

    from nbcli.tasks.data import DataSpec
    from nbcli.tasks.finetune import FinetuneConfig, finetune

    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "bert").mkdir()
        build(root / "bert", args.hidden, args.layers, args.heads)
        train = examples(root / "train.jsonl", args.examples, args.max_words)
        plain = plain_loop(root / "bert", train, args.steps, args.batch, 2e-5, args.device, args.dtype)
        records: list[dict] = []
        cfg = FinetuneConfig(data=DataSpec(text_field="sentence1", pair_field="sentence2"), init=str(root / "bert"),
                             steps=args.steps, batch_size=args.batch, device=args.device, dtype=args.dtype)
        result = finetune(cfg, [str(train)], {}, root / "run", on_step=lambda step, r: records.append(dict(r)))
    ours = result.tokens_per_s
    baseline = sum(t for t, _ in plain) / sum(s for _, s in plain)
    ours_median = statistics.median(r["tokens_per_s"] for r in records if "tokens_per_s" in r and r["step"] >= args.warm)
    plain_median = statistics.median(t / s for t, s in plain[args.warm:])
    data = {"nb_tokens_per_s": ours, "plain_tokens_per_s": baseline, "ratio": ours / baseline,
            "nb_median_tokens_per_s": ours_median, "plain_median_tokens_per_s": plain_median,
            "median_ratio": ours_median / plain_median, "steps": args.steps, "warm": args.warm, "batch": args.batch,
            "hidden": args.hidden, "layers": args.layers, "heads": args.heads, "max_words": args.max_words,
            "device": args.device, "dtype": args.dtype, "threads": torch.get_num_threads(),
            "nb_tokens": result.tokens, "plain_tokens": sum(t for t, _ in plain),
            "load_average": load_average(), "machine": machine(torch=torch.__version__)}
    print_rows([("nb finetune tokens/s", f"{ours:,.0f}"), ("plain PyTorch loop tokens/s", f"{baseline:,.0f}"),
                ("ratio (target >= 1.0x)", f"{ours / baseline:.2f}x"),
                (f"median from update {args.warm}: nb / plain", f"{ours_median:,.0f} / {plain_median:,.0f} = "
                                                                  f"{ours_median / plain_median:.2f}x")])
    write_json(args.out, data)


if __name__ == "__main__":
    main()
