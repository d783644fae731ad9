"""The `checks` step of benchmarks/gpu.py (issue 34's fixes that only a GPU shows), and the timing
helpers every step shares (`sync`, `peak_run`).

* Host-device synchronisations of one training update, counted by torch.cuda.set_sync_debug_mode
  ("warn"): `lm_update` (the LM: CLM with one-hot guidance, MLM with the special ids and the dense
  [Delim]/[Period] patterns), `translation_update` (encoder [Delim] + [Prev], decoder [Period]) and
  `classification_update` (nb's encoder and a transformers BERT). Each counts the batches built on the
  host and copied, the labels counted, the micro-batches' forward and backward, the update and the
  task's token count; expected: 1, the `.tolist()` of the update's sums (a transformers encoder may add
  its own). Each warning's Python location comes back with it.
* `loss_paths`: the loss summed in the forward (chunked output layer) against logits + lm_loss.
* `dense_ag`: the dense AG pattern blockwise against the explicit [B, G, T, T] map.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def peak_run(fn: Callable[[], Any], device: str) -> tuple[Any, dict[str, Any]]:
    """fn() with its seconds and peak CUDA memory above what was allocated before (GiB; None on CPU)."""
    import torch

    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    t0 = time.perf_counter()
    out = fn()
    sync()
    seconds = time.perf_counter() - t0
    peak = (torch.cuda.max_memory_allocated() - base) / 2**30 if cuda else None
    return out, {"seconds": seconds, "peak_gib": peak}


# ---------------------------------------------------------------------------------------------
# Host-device synchronisations of one update


def count_syncs(update: Callable[[int], None], device: str) -> dict[str, Any]:
    """update(0) as a warm-up (allocations, kernels), then update(1) under
    torch.cuda.set_sync_debug_mode("warn"): how many synchronising CUDA operations it made (None on a
    CPU, which has no sync mode), with the Python file:line of the first 20 and their message."""
    import warnings

    import torch

    update(0)
    sync()
    if device != "cuda":
        update(1)
        return {"syncs": None, "where": [], "note": "None: a CPU has no sync debug mode"}
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            update(1)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    caught = [w for w in seen if "synchron" in str(w.message).lower()]
    return {"syncs": len(caught),
            "where": [f"{Path(w.filename).name}:{w.lineno}: {str(w.message).splitlines()[0][:120]}" for w in caught[:20]],
            "note": "expected 1: the .tolist() of the update's sums (step.py), before the finiteness check"}


def lm_update(device: str, dry: bool, objective: str = "clm") -> Callable[[int], None]:
    """One nb LM update (eager): the batches built (and masked, MLM), the labels counted, 2 micro-batches
    forward/backward with AG, the update. CLM: [Prev] and [First] heads; MLM: the special ids never
    masked and the dense [Delim] and [Period] patterns (their ids held once per device)."""
    import numpy as np
    import torch

    from nbcli.models.lm import ModelConfig, Transformer
    from nbcli.train.config import build_config
    from nbcli.train.data import BlockStream, TrainSampler
    from nbcli.train.guidance import Guidance
    from nbcli.train.runtime import Runtime
    from nbcli.train.step import count_labels, lm_forward, make_optimizer, micro_batches, optimizer_step

    V, T = (300, 32) if dry else (50_257, 512)
    mlm = objective == "mlm"
    cfg = build_config("tiny", n_layer=2, n_head=4, d_model=64 if dry else 256, seq_len=T, batch_size=4,
                       grad_accum=2, device=device, dtype="float32" if dry else "bfloat16", objective=objective)
    mcfg = ModelConfig(vocab_size=V, seq_len=T, n_layer=2, n_head=4, d_model=cfg.d_model, objective=objective,
                       mask_id=4 if mlm else None, special_ids=(0, 1, 2, 3, 4) if mlm else ())
    rt = Runtime(torch.device(device), amp_dtype=None if dry else torch.bfloat16)
    model = Transformer(mcfg).to(rt.device)
    opt = make_optimizer(model, cfg, rt.device)
    stream = BlockStream(np.random.default_rng(0).integers(0, V, 40 * (T + 1)).astype(np.int32), T, objective, 0,
                         "sync")
    sampler = TrainSampler(stream.n_blocks, 0)
    guidance = (Guidance(heads={0: "delim", 1: "period"}, delim_ids=(1, 2), period_ids=(7,)) if mlm
                else Guidance(heads={0: "prev", 1: "first"}))

    def update(step: int) -> None:
        batches = micro_batches(stream, sampler, cfg, mcfg, rt, step, step * cfg.batch_size)
        optimizer_step(model, model, opt, batches, count_labels(batches, rt), guidance, 1.0, step, cfg, mcfg, rt,
                       forward=lm_forward(not mlm, 0.0))

    return update


def translation_update(device: str, dry: bool) -> Callable[[int], None]:
    """One nb translation update (`nb train --task translation`'s pieces): 2 micro-batches of random
    pairs collated on the host, encoder AG ([Delim], [Prev]) and decoder AG ([Period]), the update, the
    tokens counted."""
    import numpy as np
    import torch

    from nbcli.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
    from nbcli.tasks.translation import Seq2SeqGuidance, build_translation_config, translation_forward
    from nbcli.tasks.translation_data import Conventions, Sentences, collate
    from nbcli.train.data import TrainSampler
    from nbcli.train.guidance import Guidance
    from nbcli.train.runtime import Runtime, host_sum
    from nbcli.train.step import count_labels, make_optimizer, optimizer_step

    V, d, L, H, B, longest = (300, 32, 1, 4, 8, 12) if dry else (32_000, 512, 6, 8, 64, 64)
    cfg = build_translation_config("base", None, d_model=d, n_layer=L, n_head=H, batch_size=B, grad_accum=2,
                                   device=device, dtype="float32" if dry else "bfloat16")
    conv = Conventions(src_eos_id=2, eos_id=2, decoder_start_id=1, pad_id=0)
    mcfg = Seq2SeqConfig(src_vocab_size=V, tgt_vocab_size=V, eos_id=2, decoder_start_id=1, pad_id=0, src_eos_id=2,
                         max_positions=256, encoder_layers=L, decoder_layers=L, n_head=H, d_model=d, d_ff=4 * d,
                         dropout=0.1, share_embeddings="all")
    rt = Runtime(torch.device(device), amp_dtype=None if dry else torch.bfloat16)
    torch.manual_seed(0)
    model = Seq2SeqTransformer(mcfg).to(rt.device)
    opt = make_optimizer(model, cfg, rt.device)
    rng = np.random.default_rng(0)
    sides = [Sentences.from_parts([rng.integers(3, V, rng.integers(4, longest)).astype(np.int32) for _ in range(8 * B)])
             for _ in range(2)]
    sampler = TrainSampler(len(sides[0]), 0)
    ids = dict(delim_ids=(2,), period_ids=(7,))
    guidance = Seq2SeqGuidance(encoder=Guidance(heads={0: "delim", 1: "prev"}, **ids),
                               decoder=Guidance(heads={0: "period"}, **ids))
    micro = B // cfg.grad_accum

    def update(step: int) -> None:
        batches = [collate(sides[0], sides[1], sampler.blocks(step * B + m * micro, micro), conv, rt.device)
                   for m in range(cfg.grad_accum)]
        optimizer_step(model, model, opt, batches, count_labels(batches, rt), guidance, 1.0, step, cfg, None, rt,
                       forward=translation_forward)  # type: ignore[arg-type]
        host_sum(sum(b.tokens for b in batches), rt)

    return update


def classification_update(device: str, dry: bool, work: Path, encoder: str) -> Callable[[int], None]:
    """One nb classification update (`nb train --task classification`'s pieces) of 2 micro-batches:
    batches padded on the host and copied, the labels counted, forward and backward through nb's
    encoder from scratch ("nb") or a transformers BERT folder ("bert", built by benchmarks/finetune.py),
    the update, the tokens counted."""
    import torch

    from finetune import build, examples
    from nbcli.tasks.data import DataSpec, encode_file, make_labels, padding_id, read_records
    from nbcli.tasks.encoders import encoder_from_scratch, open_encoder
    from nbcli.tasks.finetune import FinetuneConfig, classifier_forward, train_config
    from nbcli.tokenizers import load_tokenizer
    from nbcli.train.data import TrainSampler
    from nbcli.train.runtime import Runtime, host_sum
    from nbcli.train.step import count_labels, make_optimizer, optimizer_step

    hidden, layers, heads, B, words = (32, 1, 2, 8, 12) if dry else (256, 4, 4, 32, 80)
    folder = work / f"bert-{encoder}"
    folder.mkdir(parents=True, exist_ok=True)
    build(folder, hidden, layers, heads)
    train = examples(work / "sync-train.jsonl", 4 * B, words)
    tokenizer = load_tokenizer(folder)
    cfg = FinetuneConfig(data=DataSpec(text_field="sentence1", pair_field="sentence2"), batch_size=B, grad_accum=2,
                         device=device, dtype="float32" if dry else "bfloat16",
                         **(dict(init=str(folder)) if encoder == "bert" else dict(tokenizer=str(folder / "tokenizer.json"))))
    records = read_records(cfg.data, [str(train)])
    data = encode_file(cfg.data, tokenizer, records, make_labels(cfg.data, records, None, [str(train)]))
    torch.manual_seed(0)
    model = (open_encoder(str(folder), "classification", 3) if encoder == "bert" else
             encoder_from_scratch(tokenizer, "classification", 3, preset="tiny", seq_len=128, dropout=0.1,
                                  embedding_init="normal", positions="learned", pooling="first", seed=0))
    rt = Runtime(torch.device(device), amp_dtype=None if dry else torch.bfloat16)
    model = model.to(rt.device)
    tcfg = train_config(cfg, 10, 10)
    opt = make_optimizer(model, tcfg, rt.device)
    sampler, pad, micro = TrainSampler(len(data.items), 0), padding_id(tokenizer), B // cfg.grad_accum

    def update(step: int) -> None:
        batches = [data.batch(sampler.blocks(step * B + m * micro, micro), pad).to(rt.device)
                   for m in range(cfg.grad_accum)]
        optimizer_step(model, model, opt, batches, count_labels(batches, rt), None, 0.0, step, tcfg, None, rt,
                       forward=classifier_forward)
        host_sum(sum(b.tokens for b in batches), rt)

    return update


# ---------------------------------------------------------------------------------------------
# The loss and the dense AG pattern: memory and values


def loss_paths(device: str, dry: bool) -> dict[str, Any]:
    """Forward + backward of the gpt2-124m model (eager, bf16 autocast) with the loss summed in the
    forward (chunked output layer) vs logits + lm_loss: peak memory, seconds, the two losses."""
    import torch

    from nbcli.models.lm import ModelConfig, Transformer
    from nbcli.models.output import lm_loss

    V, T, B, L, d, H = (300, 32, 2, 1, 32, 2) if dry else (50_257, 1024, 16, 12, 768, 12)
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=V, seq_len=T, n_layer=L, n_head=H, d_model=d)).to(device)
    idx = torch.randint(0, V, (B, T), device=device)
    labels = torch.randint(0, V, (B, T), device=device)
    amp = torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda")

    def summed() -> float:
        with amp:
            loss, _ = model(idx, labels=labels)
        loss.backward()
        model.zero_grad(set_to_none=True)
        return float(loss)

    def logits() -> float:
        with amp:
            out, _ = model(idx)
        loss = lm_loss(out, labels, reduction="sum")
        loss.backward()
        model.zero_grad(set_to_none=True)
        return float(loss)

    summed()
    logits()                                                             # warm-up both
    a, summed_run = peak_run(summed, device)
    b, logits_run = peak_run(logits, device)
    model.loss_chunk_elements = 1 << 40                                  # one chunk: no recomputation
    summed()
    _, one_chunk_run = peak_run(summed, device)
    model.loss_chunk_elements = 1 << 25
    model.vocab_multiple = 1                                             # the output matmul over V rows, unpadded
    summed()
    c, unpadded_run = peak_run(summed, device)
    return {"shape": [B, T, V], "summed": summed_run, "logits": logits_run, "summed_one_chunk": one_chunk_run,
            "summed_unpadded": unpadded_run, "summed_loss": a, "logits_loss": b, "unpadded_loss": c,
            "rel_diff": abs(a - b) / abs(b), "padding_speedup": unpadded_run["seconds"] / summed_run["seconds"],
            "chunking_slowdown": summed_run["seconds"] / one_chunk_run["seconds"]}


def dense_ag(device: str, dry: bool) -> dict[str, Any]:
    """[Delim] row errors + backward, blockwise (guidance.dense_row_errors) vs the explicit map."""
    import torch

    from nbcli.analysis.patterns import pattern_matrix
    from nbcli.train.guidance import dense_row_errors, explicit_row_errors, guided_maps

    B, G, T, dh = (2, 2, 40, 8) if dry else (16, 6, 1024, 64)
    g = torch.Generator(device="cpu").manual_seed(0)
    q = torch.randn(B, G, T, dh, generator=g).to(device).requires_grad_(True)
    k = torch.randn(B, G, T, dh, generator=g).to(device).requires_grad_(True)
    ids = torch.randint(0, 50, (B, T), generator=g).to(device)
    lengths = torch.full((B,), T, device=device)
    P = pattern_matrix("delim", ids, lengths, True, delim_ids=(0, 1))

    def run(rows: Callable[[], Any]) -> float:
        value = rows().sum()
        value.backward()
        q.grad = k.grad = None
        return float(value)

    block = 16 if dry else 256                                          # several blocks either way
    blockwise, b_run = peak_run(lambda: run(lambda: dense_row_errors(q, k, P, lengths, True, block)), device)
    explicit, e_run = peak_run(lambda: run(lambda: explicit_row_errors(guided_maps(q, k, lengths, True), P, lengths)),
                               device)
    return {"shape": [B, G, T, dh], "blockwise": b_run, "explicit": e_run,
            "rel_diff": abs(blockwise - explicit) / abs(explicit)}
