"""Continuations of held-out prompts per arm, and the columns of paper 003 table 2.

Prompts are the first `prompt_words` whitespace-separated words of each held-out document (app. B:
"the first 10 words of each sequence"), kept verbatim; documents with no word after the prompt are
skipped. Each prompt is fed after the context marker eval uses (EOS, else BOS), and continued until
EOS or `max_new_tokens` (or the model's context, whichever comes first).

Seeding: sample s of prompt p draws its uniforms from its own generator seeded with
SeedSequence([seed, p, s]), so a sample does not depend on batching, on the KV cache, or on the other
arms; every arm uses the same seeds (common random numbers: the arms differ only in the model).
Rows are batched by prompt length, so no row is padded.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nbcli.errors import ConfigError, CorpusError
from nbcli.figure_style import FigureOptions

if TYPE_CHECKING:
    import torch

    from nbcli.lm.arms import ProgressBar
    from nbcli.decoding.sampling import Decoding
    from nbcli.lm.runner import Runner
    from nbcli.tokenizers import Tokenizer

_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Prompt:
    index: int        # document number among the prompts file's documents
    text: str         # the first prompt_words words, verbatim
    human: str        # the rest of the document (the human continuation, for MAUVE)


def make_prompts(documents: Sequence[str], prompt_words: int, limit: int | None = None) -> list[Prompt]:
    """The first `prompt_words` words of each document that has more words than that."""
    if prompt_words < 1:
        raise ConfigError(f"--prompt-words must be >= 1, got {prompt_words}")
    prompts = []
    for i, doc in enumerate(documents):
        words = list(_WORD.finditer(doc))
        if len(words) <= prompt_words:
            continue
        end = words[prompt_words - 1].end()
        prompts.append(Prompt(i, doc[:end], doc[end:].strip()))
        if limit is not None and len(prompts) >= limit:
            break
    if not prompts:
        raise CorpusError(f"no document has more than {prompt_words} words to make a prompt from")
    return prompts


def row_seed(seed: int, prompt: int, sample: int) -> int:
    """The seed of one sample (a function of the three numbers only)."""
    return int(np.random.SeedSequence([seed, prompt, sample]).generate_state(1, dtype=np.uint64)[0] >> 1)


@dataclass
class GenerationOptions:
    decoding: Decoding
    max_new_tokens: int = 256
    samples: int = 1
    seed: int = 0
    batch_size: int = 16
    use_cache: bool = True
    stop_at_eos: bool = True   # False: always max_new_tokens (throughput benchmarks)


@dataclass
class Sample:
    prompt_index: int
    sample: int
    seed: int
    prompt: str
    tokens: list[int]
    eos: bool
    text: str = ""
    words: list[str] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("words")
        return out


def generate(runner: Runner, tokenizer: Tokenizer, prompts: Sequence[Prompt], opts: GenerationOptions,
             adjust: torch.Tensor | None = None, progress: Callable[[int], None] | None = None) -> list[Sample]:
    """Sample continuations (opts.samples per prompt); `adjust` [V] is subtracted from the logits
    before the decoding rule (logit adjustment). Returned in (prompt, sample) order."""
    import torch

    start = tokenizer.eos_id if tokenizer.eos_id is not None else tokenizer.bos_id
    eos = tokenizer.eos_id if opts.stop_at_eos else None
    encoded = tokenizer.encode_batch([p.text for p in prompts])
    rows = [(p, s, ([start] if start is not None else []) + ids)
            for p, ids in zip(prompts, encoded) for s in range(opts.samples)]
    by_length: dict[int, list[tuple[Prompt, int, list[int]]]] = {}
    for row in rows:
        by_length.setdefault(len(row[2]), []).append(row)
    out: dict[tuple[int, int], Sample] = {}
    shift = None if adjust is None else adjust.to(runner.device)
    for length, group in sorted(by_length.items()):
        cap = opts.max_new_tokens if runner.context is None else min(opts.max_new_tokens, runner.context - length)
        if cap < 1:
            raise ConfigError(f"prompt {group[0][0].index} is {length} tokens, no room left in the model's "
                              f"context of {runner.context}; use fewer --prompt-words")
        for b in range(0, len(group), opts.batch_size):
            batch = group[b:b + opts.batch_size]
            seeds = [row_seed(opts.seed, p.index, s) for p, s, _ in batch]
            tokens = _continue(runner, torch.tensor([ids for _, _, ids in batch]), cap, opts, seeds, eos, shift)
            for (p, s, _), seed, toks in zip(batch, seeds, tokens):
                ended = eos is not None and eos in toks
                toks = toks[:toks.index(eos)] if ended else toks
                out[(p.index, s)] = Sample(p.index, s, seed, p.text, toks, ended)
                if progress is not None:
                    progress(1)
    samples = [out[(p.index, s)] for p in prompts for s in range(opts.samples)]
    for sample in samples:
        sample.text = tokenizer.decode(sample.tokens)
    return samples


STOP_CHECK = 16
"""Tokens between two EOS checks of the decoding loop (each check is one host-device sync)."""


def draw_uniforms(seeds: list[int], count: int) -> torch.Tensor:
    """[B, count] uniforms in [0, 1): row i the first `count` draws of its own CPU generator seeded
    with seeds[i] (one block draw per row, the same numbers as `count` single draws in turn)."""
    import torch

    return torch.stack([torch.rand(count, generator=torch.Generator().manual_seed(seed)) for seed in seeds])


def _continue(runner: Runner, ids: torch.Tensor, cap: int, opts: GenerationOptions, seeds: list[int],
              eos: int | None, shift: torch.Tensor | None) -> list[list[int]]:
    """Up to `cap` new tokens for each row of ids [B, T] (all rows stop once every row saw EOS).

    The loop stays on the device: the uniforms of every step are drawn before it and copied over
    once, the tokens are written into a device tensor copied back once at the end, and whether
    every row has ended is read back only every STOP_CHECK tokens (one sync each, instead of 2-3
    per token). A batch may so run up to STOP_CHECK - 1 tokens past its last EOS; `generate` cuts
    each row at its first EOS, so the returned tokens are the same."""
    import torch

    B, device = ids.shape[0], runner.device
    ids = ids.to(device)
    uniforms = draw_uniforms(seeds, cap).to(device) if opts.decoding.stochastic else None   # [B, cap]
    done = torch.zeros(B, dtype=torch.bool, device=device)
    new = torch.empty(B, cap, dtype=torch.long, device=device)
    made = cap
    if opts.use_cache:
        logits, state = runner.prefill(ids, room=cap)
    else:
        logits = runner.logits(ids)[:, -1]
    for t in range(cap):
        if shift is not None:
            logits = logits - shift
        token = opts.decoding.choose(logits, None if uniforms is None else uniforms[:, t])
        new[:, t] = token
        if eos is not None:
            done |= token == eos
            if (t + 1) % STOP_CHECK == 0 and t + 1 < cap and bool(done.all()):
                made = t + 1
                break
        if t + 1 < cap:
            if opts.use_cache:
                logits = runner.step(state, token)
            else:
                logits = runner.logits(torch.cat([ids, new[:, :t + 1]], 1))[:, -1]
    return new[:, :made].tolist()


def mauve_score(human: Sequence[str], generated: Sequence[str], featurizer: str | None,
                device: str) -> tuple[float | None, str]:
    """MAUVE (Pillutla et al. 2021) of generated vs human continuations when mauve-text is installed
    and a featurizer model is named; otherwise None and why."""
    try:
        import mauve  # type: ignore[import-not-found]
    except ImportError:
        return None, "absent: mauve-text is not installed (pip install 'nbcli[mauve]')"
    if not featurizer:
        return None, "absent: no featurizer named (--mauve-featurizer MODEL, e.g. a local gpt2-large)"
    out = mauve.compute_mauve(p_text=list(human), q_text=list(generated), featurize_model_name=featurizer,
                              device_id=0 if device.startswith("cuda") else -1, verbose=False)
    return float(out.mauve), f"featurizer {featurizer}"


def summarise(samples: Sequence[Sample]) -> dict[str, Any]:
    """Diversity (D_1..D_4, D over NLTK words, paper 003 eqs. 5-6), mean length, EOS rate."""
    from nbcli.lm.diversity import diversity_report, word_tokenize

    for sample in samples:
        sample.words = word_tokenize(sample.text)
    n = len(samples)
    return {**diversity_report([s.words for s in samples]),
            "mean_tokens": sum(len(s.tokens) for s in samples) / n,
            "mean_words": sum(len(s.words) for s in samples) / n,
            "eos_rate": sum(s.eos for s in samples) / n, "samples": n}


def generation_study(runner: Runner, tokenizer: Tokenizer, arms: Sequence[Any], base: Any, prompts: Sequence[Prompt],
                     opts: GenerationOptions, *, log_prior: torch.Tensor | None = None, eval_scored: Any = None,
                     eval_batch_size: int = 8, featurizer: str | None = None,
                     progress: Callable[[int], None] | None = None,
                     ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """Per arm: generate, summarise, and (with `eval_scored`) the perplexity of human text under the
    same arm. Returns (table rows, sample records, warnings); the model is restored afterwards."""
    from nbcli.lm.arms import each_arm
    from nbcli.lm.perplexity import evaluate

    rows: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    warnings: list[str] = []
    humans = [p.human for p in prompts for _ in range(opts.samples)]
    for arm, adjust in each_arm(runner, arms, base, log_prior, warnings):
        samples = generate(runner, tokenizer, prompts, opts, adjust, progress)
        row = {**arm.as_dict(), **summarise(samples), "perplexity": None}
        if eval_scored is not None:
            row["perplexity"] = evaluate(runner, eval_scored, batch_size=eval_batch_size, adjust=adjust).perplexity
        row["mauve"], row["mauve_note"] = mauve_score(humans, [s.text for s in samples], featurizer, str(runner.device))
        rows.append(row)
        records += [{**arm.as_dict(), **s.record()} for s in samples]
    return rows, records, warnings


OUT_NAMES = ("samples.jsonl", "table.json", "diversity_vs_perplexity.png")
"""What `nb generate --out DIR` writes into DIR (the figure as --figure-format says: `out_names`)."""


def out_names(fmt: str = "png") -> tuple[str, ...]:
    """OUT_NAMES with the figure in format `fmt` (pdf, svg, png)."""
    return (*OUT_NAMES[:2], f"diversity_vs_perplexity.{fmt}")


def generation_report(checkpoint: Path, prompts: Sequence[str], tokenizer: Path, opts: GenerationOptions,
                      lambdas: str | None = None, *, prompt_words: int = 10, max_prompts: int | None = None,
                      eval_corpus: Sequence[str] | None = None, tau: float | None = None, counts: Path | None = None,
                      smoothing_k: float = 1.0, remove_direction: bool = False, featurizer: str | None = None,
                      arch: str = "auto", mapping: dict[str, str] | None = None, device: str = "auto",
                      dtype: str = "auto", tf32: bool = True, out: Path | None = None, progress_bar: ProgressBar | None = None,
                      allow_vocab_mismatch: bool = False, figure_format: str = "png",
                      looks: FigureOptions | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The whole `nb generate` study (paper 003 sec. 3.3, table 2): prompts from `prompts`, the arms
    (`lambdas`, and logit adjustment by `tau` with `counts`), `opts.samples` continuations per
    prompt and arm, each arm's perplexity of `eval_corpus`. With `out`, its OUT_NAMES are written
    there (`write_outputs`, the figure as `figure_format` drawn with `looks`; checked before any model
    work). Returns (the `--json` report, whose `samples` is every sample's record with its prompt and
    arm; those records again); `progress_bar` is given the number of samples. Tokenizer and counts are checked
    against the model by nb's one policy (nbcli.checkpoint.vocab; `allow_vocab_mismatch` relaxes its
    identity rule only). `dtype` and `tf32`: the forward passes' precision (nbcli.precision: bf16
    autocast, TF32 on CUDA)."""
    from nbcli.lm.arms import no_progress, open_study
    from nbcli.lm.diversity import word_tokenize
    from nbcli.corpus import ReadStats, read_documents
    from nbcli.lm.perplexity import tokenize_documents
    from nbcli.outputs import guard_outputs, model_inputs

    if out is not None:
        model_path = checkpoint if isinstance(checkpoint, (str, PathLike)) else None  # None: a model in memory
        guard_outputs([out / name for name in out_names(figure_format)],
                      [*model_inputs(model_path), tokenizer, counts, *prompts, *(eval_corpus or [])],
                      folder=out, option="--out")
    word_tokenize("check.")  # NLTK present? (a one-line error before any model work)
    study = open_study(checkpoint, tokenizer, lambdas, remove_direction=remove_direction, tau=tau, counts=counts,
                       smoothing_k=smoothing_k, arch=arch, mapping=mapping, device=device, dtype=dtype, tf32=tf32,
                       allow_vocab_mismatch=allow_vocab_mismatch)
    try:
        runner = study.runner
        prompt_read, eval_read = ReadStats(), ReadStats()
        chosen = make_prompts(read_documents(prompts, stats=prompt_read), prompt_words, max_prompts)
        scored = (tokenize_documents(read_documents(eval_corpus, stats=eval_read), study.tokenizer, runner.vocab_size)
                  if eval_corpus else None)
        with (progress_bar or no_progress)(len(chosen) * opts.samples * len(study.arms)) as progress:
            rows, records, warnings = generation_study(
                runner, study.tokenizer, study.arms, study.base, chosen, opts, log_prior=study.log_prior,
                eval_scored=scored, featurizer=featurizer, progress=progress)
    finally:
        study.runner.close()
    report = {**study.provenance(), "prompts": list(prompts), "prompt_count": len(chosen),
              "eval_corpus": None if eval_corpus is None else list(eval_corpus), "decoding": opts.decoding.spec,
              "prompt_words": prompt_words, "max_new_tokens": opts.max_new_tokens,
              "samples_per_prompt": opts.samples, "seed": opts.seed, "kv_cache": opts.use_cache, "rows": rows,
              "warnings": [*prompt_read.notes(", ".join(prompts)), *eval_read.notes(", ".join(eval_corpus or [])),
                           *study.warnings, *warnings], "outputs": [], "samples": records}
    if out is not None:
        report["outputs"] = write_outputs(out, report, records, figure_format, looks)
    return report, records


def write_outputs(out: Path, report: dict[str, Any], records: list[dict[str, Any]], figure_format: str = "png",
                  looks: FigureOptions | None = None) -> list[str]:
    """`nb generate --out`: `out_names(figure_format)` into `out` (made if missing), committed together
    (OutputSet) or not at all: samples.jsonl (every record), table.json (the report less its
    `samples`, which samples.jsonl holds), and the diversity vs perplexity figure when the report has
    an eval corpus and matplotlib is installed. Sets the report's `plot` (and `plot_note` when absent)
    and `outputs`; returns the paths written."""
    import importlib.util
    import json

    from nbcli import plots
    from nbcli.atomic import OutputSet
    from nbcli.figure_style import corpus_label, model_label, provenance
    from nbcli.jsonsafe import json_ready

    out.mkdir(parents=True, exist_ok=True)
    written = [str(out / "samples.jsonl"), str(out / "table.json")]
    plot = out / out_names(figure_format)[2]
    with OutputSet() as outputs:
        outputs.open(out / "samples.jsonl").write(
            "".join(json.dumps(json_ready(r), ensure_ascii=False) + "\n" for r in records).encode())
        if report["eval_corpus"] and importlib.util.find_spec("matplotlib") is not None:
            plots.plot_diversity_vs_perplexity(
                plot, report["rows"], title=f"{model_label(report['model']['path'])}: diversity of continuations "
                f"({report['decoding']}) vs perplexity of {corpus_label(report['eval_corpus'])}",
                metadata=provenance("generate", model=report["model"]["path"], prompts=",".join(report["prompts"]),
                                    eval_corpus=",".join(report["eval_corpus"])),
                outputs=outputs, options=looks)
            written.append(str(plot))
            report["plot"] = str(plot)
        else:
            report["plot"] = None
            report["plot_note"] = ("absent: needs --eval-corpus (perplexity axis)" if not report["eval_corpus"]
                                   else "absent: matplotlib is not installed (pip install 'nbcli[plot]')")
        report["outputs"] = written
        table = {k: v for k, v in report.items() if k != "samples"}
        outputs.open(out / "table.json").write(
            (json.dumps(json_ready(table), indent=2, ensure_ascii=False) + "\n").encode())
    return written
