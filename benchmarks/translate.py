#!/usr/bin/env python3
"""Benchmark `nb translate`'s decoder (issue 29) against transformers' `generate` on the exported model.

One run, CPU, same model, same inputs, same work:

1. Model: nb's encoder-decoder at the `iwslt` preset's shape (6+6 layers, d 512, FFN 1024, 4 heads,
   shared embeddings) over the bundled sample tokenizer (botchan BPE, 2k pieces), randomly initialised
   (`--layers` and `--d-model` shrink it); its run directory written as `nb train --task translation`
   writes one, then `nb export` to a Marian folder loaded with AutoModelForSeq2SeqLM.
2. Inputs: the first --sentences lines of the bundled sample corpus (one sentence a line).
3. For greedy and beam 5 (lenpen 1): nb's `translate_texts` (batches of --batch-size sentences of similar
   length, KV cache, cross-attention keys/values once) vs `generate(num_beams=K, length_penalty=1,
   early_stopping=True)` over the same batches of the same ids; every sentence makes exactly
   --new-tokens tokens (a random model rarely says EOS; both stop at the same limit). Target: nb's time
   <= transformers'; the outputs are checked identical token for token.

    python3 benchmarks/translate.py            # table on stdout, JSON in benchmarks/out/translate.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT, load_average, log, machine, print_rows, write_json  # noqa: E402


def build_run(folder: Path, layers: int, d_model: int, ffn: int, heads: int) -> Path:
    import shutil

    import torch

    from nbcli.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
    from nbcli.samples import SAMPLE_TOKENIZER
    from nbcli.tokenizers import load_tokenizer
    from nbcli.train.state import save_model

    tok = load_tokenizer(SAMPLE_TOKENIZER)
    cfg = Seq2SeqConfig(src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size, eos_id=tok.eos_id,
                        decoder_start_id=tok.bos_id, pad_id=tok.eos_id, src_eos_id=tok.eos_id, encoder_layers=layers,
                        decoder_layers=layers, d_model=d_model, d_ff=ffn, n_head=heads, share_embeddings="all")
    torch.manual_seed(0)
    run = folder / "run"
    run.mkdir()
    save_model(run / "step-0.safetensors", Seq2SeqTransformer(cfg), {
        "nb.format": "nb-model/1", "nb.config": cfg.to_json(), "nb.step": "0",
        "nb.src_tokenizer_sha256": tok.sha256, "nb.tgt_tokenizer_sha256": tok.sha256})
    for side in ("source", "target"):
        shutil.copy(SAMPLE_TOKENIZER, run / f"{side}-tokenizer.model")
    return run


def sentences(n: int) -> list[str]:
    import gzip

    from nbcli.samples import SAMPLE_CORPUS

    with gzip.open(SAMPLE_CORPUS, "rt", encoding="utf-8") as handle:
        lines = [line.strip() for line in handle if 20 < len(line.strip()) < 160]
    return lines[:n]


def synchronize(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--ffn", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--device", default="cpu", help="cpu, cuda (benchmarks/gpu.py) or auto")
    parser.add_argument("--out", type=Path, default=OUT / "translate.json")
    args = parser.parse_args()

    import torch
    import transformers
    from transformers.utils import logging as hf_logging

    from nbcli.export import export_translation
    from nbcli.padding import pad_rows
    from nbcli.translate import load_translation_model, source_ids, translate_texts

    hf_logging.set_verbosity_error()
    texts = sentences(args.sentences)
    results: dict[str, Any] = {"machine": machine(torch=torch.__version__, transformers=transformers.__version__,
                                                  threads=torch.get_num_threads()),
                               "load_before": load_average(), "settings": vars(args) | {"out": str(args.out)}}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        run = build_run(Path(tmp), args.layers, args.d_model, args.ffn, args.heads)
        export_translation(run, Path(tmp) / "hf")
        tm = load_translation_model(run, device=args.device)
        device = next(tm.model.parameters()).device
        hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(Path(tmp) / "hf").to(device).eval()
        ids = source_ids(tm, texts)
        order = sorted(range(len(texts)), key=lambda i: len(ids[i]))   # nb's batching: similar lengths together
        for beam in (1, 5):
            log(f"beam {beam}: nb ...")
            synchronize(device)
            t0 = time.perf_counter()
            ours = translate_texts(tm, texts, beam=beam, lenpen=1.0, batch_size=args.batch_size, max_len_a=0,
                                   max_len_b=args.new_tokens)
            synchronize(device)
            nb_s = time.perf_counter() - t0
            log(f"beam {beam}: transformers ...")
            theirs = [""] * len(texts)
            t0 = time.perf_counter()
            with torch.no_grad():
                for start in range(0, len(order), args.batch_size):
                    chunk = order[start:start + args.batch_size]
                    padded = pad_rows([ids[i] for i in chunk], tm.cfg.pad_id)
                    src, mask = padded.ids.to(device), padded.mask.to(device)
                    out = hf.generate(input_ids=src, attention_mask=mask.long(),
                                      num_beams=beam, length_penalty=1.0, early_stopping=True, do_sample=False,
                                      max_new_tokens=args.new_tokens)
                    for i, row in zip(chunk, out.tolist()):
                        row = row[1:]
                        row = row[:row.index(tm.cfg.eos_id)] if tm.cfg.eos_id in row else row
                        theirs[i] = tm.target_tokenizer.decode([t for t in row if t != tm.cfg.pad_id])
            synchronize(device)
            hf_s = time.perf_counter() - t0
            same = sum(a == b for a, b in zip(ours, theirs))
            results[f"beam{beam}"] = {"nb_s": nb_s, "transformers_s": hf_s, "ratio": nb_s / hf_s,
                                      "identical": same, "sentences": len(texts)}
            rows.append((f"beam {beam}: nb / transformers", f"{nb_s:.2f} s / {hf_s:.2f} s = {nb_s / hf_s:.2f}x; "
                         f"identical outputs {same}/{len(texts)}"))
    results["load_after"] = load_average()
    rows.append(("load average before / after", f"{results['load_before'][0]:.2f} / {results['load_after'][0]:.2f}"))
    rows.append(("model", f"{args.layers}+{args.layers} layers, d {args.d_model}, FFN {args.ffn}, {args.heads} heads, "
                 f"{args.sentences} sentences x {args.new_tokens} tokens, batch {args.batch_size}, "
                 f"{torch.get_num_threads()} threads"))
    print_rows(rows)
    write_json(args.out, results)


if __name__ == "__main__":
    main()
