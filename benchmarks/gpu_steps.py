"""The steps of benchmarks/gpu.py, each run in its own process (`gpu.py --step NAME`): `Step` writes its
figures part by part to the step's result file, so a step cut short still reports the parts it
finished. What each step measures: gpu.py's docstring."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpu_baselines import gpt2_folder, hf_eval, hf_generate, nanogpt_run
from gpu_checks import (classification_update, count_syncs, dense_ag, lm_update, loss_paths, sync,
                        translation_update)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


class Step:
    """One step in this process: `run(name)` calls its method, which records each part's figures
    (`part`, `record`) in the result file as it completes; `summary` holds the headline figures."""

    def __init__(self, result: Path, work: Path, dry_run: bool) -> None:
        self.result, self.work, self.dry = result, work, dry_run
        self.parts: dict[str, Any] = {"summary": {}}

    def record(self, key: str, value: Any, **summary: Any) -> None:
        """Keep a part (and its headline figures) and rewrite the result file at once."""
        self.parts[key] = value
        self.parts["summary"].update(summary)
        self.result.write_text(json.dumps(self.parts, indent=1, default=str) + "\n")

    def run(self, name: str) -> None:
        steps: dict[str, Callable[[], None]] = {
            "train_lm": self.train_lm, "checks": self.checks, "probe_bias": self.probe_bias, "generate": self.generate,
            "train_translation": self.train_translation, "translate": self.translate, "finetune": self.finetune}
        import torch

        self.device = "cpu" if self.dry else "cuda"
        if not self.dry and not torch.cuda.is_available():
            raise SystemExit("gpu.py: no CUDA device visible (use --dry-run for the CPU path)")
        steps[name]()

    # -- 1. training ------------------------------------------------------------------------------
    def train_lm(self) -> None:
        from nbcli.train.config import build_config

        if self.dry:
            shape = dict(n_layer=2, n_head=2, d_model=64, seq_len=32, batch_size=4)
            vocab, steps, warm, compile_ = 300, 4, 1, False
        else:
            shape = {}
            vocab, steps, warm, compile_ = 50_257, 30, 8, True
        cfg = build_config("gpt2-124m", steps=steps, eval_every=steps + 1, eval_batches=1, save_every=0, seed=0,
                           device=self.device, compile=compile_, dtype="bfloat16" if not self.dry else "float32",
                           warmup=2, **shape)
        tokenizer, corpus, stream = word_corpus(self.work, vocab, cfg.seq_len * cfg.batch_size * (steps + 2),
                                                 words_per_doc=2 * cfg.seq_len)
        nb = self.part("nb", lambda: nb_train_run(cfg, corpus, tokenizer, self.work / "nb", warm),
                       lambda r: dict(nb_tokens_per_s=round(r["tokens_per_s"]), nb_mfu=r.get("mfu"),
                                      nb_peak_gib=r["peak_memory_gib"]))
        self.part("nanogpt", lambda: nanogpt_run(cfg, stream, vocab, steps, warm, compile_, self.device),
                  lambda r: dict(nanogpt_tokens_per_s=round(r["tokens_per_s"]), nanogpt_mfu=r.get("mfu"),
                                 nanogpt_peak_gib=r["peak_memory_gib"],
                                 **({"nb_over_nanogpt": round(nb["tokens_per_s"] / r["tokens_per_s"], 3)} if nb else {})))
        ag_cfg = dataclasses.replace(cfg, ag_fraction=0.5, ag_alpha=1.0)
        self.part("nb_ag", lambda: nb_train_run(ag_cfg, corpus, tokenizer, self.work / "nb-ag", warm),
                  lambda r: dict(ag_tokens_per_s=round(r["tokens_per_s"]), ag_mfu=r.get("mfu"),
                                 ag_peak_gib=r["peak_memory_gib"],
                                 **({"ag_slowdown": round(1 - r["tokens_per_s"] / nb["tokens_per_s"], 3)} if nb else {})))

    def part(self, key: str, run: Callable[[], dict[str, Any]],
             headline: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any] | None:
        """One part of a step: its figures, or its error recorded (the step's other parts still run)."""
        import traceback

        import torch

        try:
            result = run()
        except Exception as err:  # recorded, not fatal: the next part measures something else
            traceback.print_exc()
            self.record(key, {"error": f"{type(err).__name__}: {err}"[:2000]}, **{f"{key}_error": type(err).__name__})
            return None
        finally:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        self.record(key, result, **headline(result))
        return result

    # -- 2. the fixes only a GPU shows ---------------------------------------------------------------
    def checks(self) -> None:
        self.part("syncs", lambda: count_syncs(lm_update(self.device, self.dry), self.device),
                  lambda r: {"syncs_per_update": r["syncs"]})
        self.part("syncs_mlm_dense_ag", lambda: count_syncs(lm_update(self.device, self.dry, "mlm"), self.device),
                  lambda r: {"syncs_per_mlm_dense_ag_update": r["syncs"]})
        self.part("syncs_translation", lambda: count_syncs(translation_update(self.device, self.dry), self.device),
                  lambda r: {"syncs_per_translation_update": r["syncs"]})
        for encoder in ("nb", "bert"):
            self.part(f"syncs_classification_{encoder}",
                      lambda e=encoder: count_syncs(classification_update(self.device, self.dry, self.work, e),
                                                    self.device),
                      lambda r, e=encoder: {f"syncs_per_classification_update_{e}": r["syncs"]})
        self.part("loss_paths", lambda: loss_paths(self.device, self.dry),
                  lambda r: {"loss_peak_gib_summed_vs_logits": [r["summed"]["peak_gib"], r["logits"]["peak_gib"]],
                             "loss_rel_diff": r["rel_diff"], "vocab_padding_speedup": round(r["padding_speedup"], 3),
                             "loss_chunking_slowdown": round(r["chunking_slowdown"], 3)})
        self.part("dense_ag", lambda: dense_ag(self.device, self.dry),
                  lambda r: {"dense_ag_peak_gib_blockwise_vs_explicit": [r["blockwise"]["peak_gib"],
                                                                         r["explicit"]["peak_gib"]],
                             "dense_ag_rel_diff": r["rel_diff"]})

    # -- 3. probe-bias ----------------------------------------------------------------------------
    def probe_bias(self) -> None:
        """`nb probe-bias` through benchmarks/probe_bias.py (the command, start-up included); should the
        command not run there (the CLI's typer range, say), the same report through `nbcli.probe`."""
        case = "tiny" if self.dry else "llama"

        def command() -> dict[str, Any]:
            out = self.work / "probe.json"
            run_script(["probe_bias.py", "--only", case, "--repeat", "1" if self.dry else "2", "--report", "full",
                        "--device", self.device, "--dir", str(self.work), "--out", str(out)], in_process=self.dry)
            return json.loads(out.read_text())

        cli = self.part("probe_bias", command, lambda d: {
            "probe_bias_s": round(d["cases"][case]["full"]["this"]["best_seconds"], 2), "target_s": 5.0})
        if cli is None:
            self.part("probe_bias_api", lambda: probe_api(self.work, case, self.device),
                      lambda d: {"probe_bias_api_s": round(d["best_seconds"], 2), "target_s": 5.0})

    # -- 4. eval / generate -------------------------------------------------------------------------
    def generate(self) -> None:
        import torch

        import nbcli

        if self.dry:
            vocab, layers, d, heads, positions, rows, new, prompt_words = 300, 1, 32, 2, 64, 2, 4, 6
        else:
            vocab, layers, d, heads, positions, rows, new, prompt_words = 50_257, 12, 768, 12, 1024, 16, 128, 10
        tokenizer, corpus, _stream = word_corpus(self.work, vocab, rows * 3 * positions, words_per_doc=positions)
        hf_dir = gpt2_folder(self.work / "gpt2", vocab, layers, d, heads, positions)
        prompts = self.work / "prompts.txt"
        lines = corpus.read_text().splitlines()
        prompts.write_text("\n".join(lines[:rows]) + "\n")
        nbcli.generate(hf_dir, prompts, tokenizer, decoding="greedy", max_new_tokens=2, batch_size=rows,
                       prompt_words=prompt_words, max_prompts=rows, device=self.device)          # warm-up
        sync()
        t0 = time.perf_counter()
        report = nbcli.generate(hf_dir, prompts, tokenizer, decoding="greedy", max_new_tokens=new, batch_size=rows,
                                prompt_words=prompt_words, max_prompts=rows, device=self.device)
        sync()
        nb_s = time.perf_counter() - t0
        samples = report.samples
        nb_tokens = sum(len(s["tokens"]) if isinstance(s, dict) and "tokens" in s else new for s in samples)
        hf_s, hf_tokens = hf_generate(hf_dir, tokenizer, lines[:rows], prompt_words, new, self.device)
        self.record("generate", {"rows": rows, "new_tokens": new, "nb_s": nb_s, "transformers_s": hf_s,
                                 "nb_tokens": nb_tokens, "transformers_tokens": hf_tokens,
                                 "note": "nb's time includes its report (distinct-n, lengths); greedy both ways"},
                    generate_nb_over_hf_time=round(nb_s / hf_s, 3))
        eval_corpus = self.work / "eval.txt"
        eval_corpus.write_text("\n".join(lines[rows:rows * 3]) + "\n")
        nbcli.evaluate(hf_dir, eval_corpus, tokenizer, batch_size=8, device=self.device)          # warm-up
        sync()
        t0 = time.perf_counter()
        ev = nbcli.evaluate(hf_dir, eval_corpus, tokenizer, batch_size=8, device=self.device)
        sync()
        nb_eval_s = time.perf_counter() - t0
        plain_s, plain_tokens = hf_eval(hf_dir, tokenizer, eval_corpus, positions, 8, self.device)
        self.record("evaluate", {"nb_s": nb_eval_s, "plain_forward_s": plain_s, "tokens": plain_tokens,
                                 "nb_report": {k: v for k, v in ev.to_dict().items() if isinstance(v, (int, float, str))}},
                    eval_nb_over_plain_time=round(nb_eval_s / plain_s, 3))
        del torch

    # -- 5, 6. translation --------------------------------------------------------------------------
    def train_translation(self) -> None:
        out = self.work / "tt.json"
        size = (["--steps", "4", "--pairs", "200", "--repeats", "1"] if self.dry else
                ["--steps", "30", "--pairs", "4000", "--repeats", "2", "--preset", "base", "--dtype", "bfloat16",
                 "--ffn", "2048", "--threads", "0"])
        run_script(["train_translation.py", *size, "--device", self.device, "--out", str(out)], in_process=self.dry)
        data = json.loads(out.read_text())
        self.record("train_translation", data, nb_tokens_per_s=round(data["best"]["nb_tokens_per_s"]),
                    nb_over_torch_transformer=round(data["best"]["ratio"], 3))

    def translate(self) -> None:
        out = self.work / "tr.json"
        size = (["--sentences", "8", "--batch-size", "4", "--new-tokens", "6", "--layers", "1", "--d-model", "64",
                 "--ffn", "128"] if self.dry else ["--sentences", "128", "--batch-size", "32", "--new-tokens", "48"])
        run_script(["translate.py", *size, "--device", self.device, "--out", str(out)], in_process=self.dry)
        data = json.loads(out.read_text())
        self.record("translate", data, beam5_nb_over_hf_time=round(data["beam5"]["ratio"], 3),
                    greedy_nb_over_hf_time=round(data["beam1"]["ratio"], 3))

    # -- 7. classification fine-tuning -----------------------------------------------------------------
    def finetune(self) -> None:
        """benchmarks/finetune.py on the device: nb's classification fine-tuning against a plain PyTorch
        loop over the same transformers BERT (BERT-base shapes, bf16 autocast, sequences up to ~125 tokens)."""
        out = self.work / "ft.json"
        size = (["--steps", "4", "--examples", "48", "--batch", "8", "--hidden", "32", "--layers", "1", "--heads", "2",
                 "--max-words", "12", "--warm", "1"] if self.dry else
                ["--steps", "40", "--warm", "10", "--hidden", "768", "--layers", "12", "--heads", "12", "--max-words", "80",
                 "--dtype", "bfloat16"])
        run_script(["finetune.py", *size, "--threads", "0", "--device", self.device, "--out", str(out)],
                   in_process=self.dry)
        data = json.loads(out.read_text())
        self.record("finetune", data, finetune_nb_tokens_per_s=round(data["nb_median_tokens_per_s"]),
                    finetune_nb_over_plain=round(data["median_ratio"], 3),
                    finetune_nb_over_plain_all_updates=round(data["ratio"], 3))


# ---------------------------------------------------------------------------------------------
# The steps' pieces


def probe_api(work: Path, case: str, device: str) -> dict[str, Any]:
    """`nbcli.probe` (what `nb probe-bias` calls) on probe_bias.py's generated checkpoint of `case`:
    seconds of two runs in this process (the command's start-up not included)."""
    import nbcli

    sys.path.insert(0, str(HERE))
    from probe_bias import CASES

    spec = CASES[case]
    subprocess.run([sys.executable, str(HERE / "probe_bias.py"), "--generate", str(work), str(spec["vocab"]),
                    str(spec["d"]), str(spec["dtype"])], check=True, cwd=ROOT)
    ckpt = work / f"probe-{spec['vocab']}x{spec['d']}-{spec['dtype']}.safetensors"
    counts = work / f"counts-{spec['vocab']}.safetensors"
    seconds = []
    for _ in range(2):
        t0 = time.perf_counter()
        nbcli.probe(ckpt, counts, device=device)
        sync()
        seconds.append(time.perf_counter() - t0)
    return {"case": spec, "seconds": seconds, "best_seconds": min(seconds)}


def run_script(argv: list[str], in_process: bool = False) -> None:
    """A sibling benchmark script in a child process (its output goes to the step's log), or, for the
    dry run, in this process (`runpy`, sys.argv set for it): one torch import less per script."""
    if not in_process:
        subprocess.run([sys.executable, str(HERE / argv[0]), *argv[1:]], check=True, cwd=ROOT)
        return
    import runpy

    saved = sys.argv
    sys.argv = [str(HERE / argv[0]), *argv[1:]]
    try:
        runpy.run_path(str(HERE / argv[0]), run_name="__main__")
    finally:
        sys.argv = saved


def word_corpus(work: Path, vocab: int, tokens: int, words_per_doc: int = 1000) -> tuple[Path, Path, Any]:
    """A WordLevel tokenizer.json of `vocab` ids ("w0" .. and <|endoftext|> last) and a corpus of random
    words (one document a line, ~`tokens` tokens plus a validation share); also the training token
    stream as nb builds it (ids, EOS after each document) for the baseline loop."""
    import numpy as np
    from tokenizers import Tokenizer, models, pre_tokenizers

    work.mkdir(parents=True, exist_ok=True)
    path = work / "tokenizer.json"
    if not path.is_file():
        table = {f"w{i}": i for i in range(vocab - 1)}
        table["<|endoftext|>"] = vocab - 1
        tok = Tokenizer(models.WordLevel(table, unk_token="<|endoftext|>"))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tok.add_special_tokens(["<|endoftext|>"])
        tok.save(str(path))
    rng = np.random.default_rng(0)
    docs = max(40, int(tokens * 1.1) // words_per_doc + 2)   # every 20th: validation
    ids = rng.integers(0, vocab - 1, size=(docs, words_per_doc))
    corpus = work / "corpus.txt"
    corpus.write_text("\n".join(" ".join(f"w{i}" for i in row) for row in ids) + "\n")
    stream = np.concatenate([np.append(row, vocab - 1) for row in ids]).astype(np.int64)
    return path, corpus, stream


def nb_train_run(cfg: Any, corpus: Path, tokenizer: Path, out: Path, warm: int) -> dict[str, Any]:
    """`nb train`'s function on `cfg`: tokens/s and MFU (medians of its log records after `warm`
    updates), peak CUDA memory, wall seconds."""
    import statistics

    import torch

    from nbcli.tasks.language_model import train

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    records: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    result = train(cfg, [str(corpus)], tokenizer, out, on_step=lambda step, r: records.append(dict(r)))
    wall = time.perf_counter() - t0
    timed = [r for r in records if "tokens_per_s" in r and r["step"] >= warm]
    out_: dict[str, Any] = {
        "config": {k: cfg.to_dict()[k] for k in ("preset", "n_layer", "n_head", "d_model", "seq_len", "batch_size",
                                                 "steps", "compile", "dtype", "ag_fraction", "ag_alpha")},
        "parameters": result.parameters, "wall_s": wall, "timed_updates": len(timed),
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in timed),
        "tokens_per_s_all": [round(r["tokens_per_s"]) for r in records if "tokens_per_s" in r],
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None,
        "loss_first_last": [records[0].get("loss"), [r for r in records if "loss" in r][-1]["loss"]]}
    if timed and "mfu" in timed[0]:
        out_["mfu"] = round(statistics.median(r["mfu"] for r in timed), 4)
    return out_
