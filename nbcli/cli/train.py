"""`nb train`: train nb's reference Transformer with the papers' initialisations and losses."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from nbcli.cli.base import NbCommand
from nbcli.cli.options import (
    DOCUMENTS_HELP, AllowVocabMismatchOption, JsonOption, RescaleNorm, SmoothingOption, TokenizerOption,
    corpus_option, out_dir_option, rescale_w_option, seed_option, shuffle_mode_option, standardise_option,
)

EPILOG = """\
[bold]Examples[/bold]

  nb train --corpus corpus.txt -t openai-community/gpt2 --out runs/g --embedding-init pretrained:openai-community/gpt2
  nb train --corpus corpus.txt -t spm.model --out runs/unigram --bias-init unigram
  nb train --corpus corpus.txt -t spm.model --out runs/zero --bias-init zero --steps 500 --eval-every 25
  nb train --corpus corpus.txt -t spm.model --out runs/ag --objective mlm --ag-fraction 0.5 --ag-alpha 100
  nb train --corpus corpus.txt -t spm.model --out runs/ag --preset roberta-8 --ag-fraction 0.5 --ag-alpha auto
  nb train --corpus corpus.txt -t spm.model --out runs/away --unigram-reg-lambda 0.5 --unigram-reg-steps 100
  nb train --corpus corpus.txt -t spm.model --out runs/u --bias-init unigram --stop-at 100
  nb train --corpus corpus.txt -t spm.model --out runs/u --bias-init unigram --resume
  torchrun --standalone --nproc-per-node 8 -m nbcli train --corpus data/ -t spm.model --out runs/gpt2 \\
      --preset gpt2-124m --batch-size 480 --grad-accum 2 --compile
"""

# Bounds that keep every derived count (tokens seen, positions, step numbers) inside int64 and every
# allocation representable; values beyond them are usage errors rather than overflows or hangs.
MAX_STEPS = 10**12
MAX_SEQUENCES = 2**24
MAX_SEQ_LEN = 2**20

PresetName = Literal["tiny", "small", "gpt2-124m", "roberta-8"]


def train(
    corpus: Annotated[list[str], corpus_option(
        "Training text: files, directories, globs (repeatable). " + DOCUMENTS_HELP)],
    tokenizer: TokenizerOption,
    out: Annotated[Path, out_dir_option(
        "Run directory (config, log.jsonl, step-N.safetensors, training state, summary.json).", short=False)],
    objective: Annotated[Optional[Literal["clm", "mlm"]], typer.Option(
        "--objective", help="clm: causal LM (decoder-only). mlm: RoBERTa-style masked LM, 15% of tokens "
        "selected, 80% <mask> / 10% random / 10% kept. Default: the preset's (clm except roberta-8).",
        show_default=False)] = None,
    preset: Annotated[PresetName, typer.Option(
        "--preset", help="tiny (2x4x128, T=128; seconds on CPU), small (4x8x256), gpt2-124m (12x12x768, T=1024), "
        "roberta-8 (paper 001 table 10: 8x12x768, T=512, mlm, batch 120, lr 1e-4, linear decay). Vocabulary size "
        "always comes from the tokenizer.")] = "tiny",
    steps: Annotated[int, typer.Option("--steps", min=1, max=MAX_STEPS, help="Optimizer updates.")] = 200,
    batch_size: Annotated[Optional[int], typer.Option(
        "--batch-size", min=1, max=MAX_SEQUENCES, show_default=False,
        help="Sequences per update over all GPUs and micro-steps (default: preset's).")] = None,
    grad_accum: Annotated[int, typer.Option("--grad-accum", min=1, max=MAX_SEQUENCES,
                                            help="Micro-steps per update.")] = 1,
    seq_len: Annotated[Optional[int], typer.Option("--seq-len", min=2, max=MAX_SEQ_LEN, show_default=False,
                                                   help="Tokens per sequence T (default: preset's).")] = None,
    lr: Annotated[Optional[float], typer.Option("--lr", show_default=False,
                                                help="Peak learning rate (AdamW; default: preset's).")] = None,
    lr_schedule: Annotated[Optional[Literal["cosine", "linear"]], typer.Option(
        "--lr-schedule", show_default=False, help="Decay after warm-up: cosine to 10% (GPT-2 presets) or "
        "linear to 0 (roberta-8, as RoBERTa and paper 001's release). Default: the preset's.")] = None,
    warmup: Annotated[Optional[int], typer.Option("--warmup", min=0, max=MAX_STEPS, show_default=False,
                                                  help="Linear warm-up steps (default: preset's).")] = None,
    label_smoothing: Annotated[float, typer.Option("--label-smoothing", metavar="A", help="Label smoothing of the cross-entropy (0 = none, as in the papers).")] = 0.0,
    dropout: Annotated[float, typer.Option("--dropout", metavar="P", help="Dropout probability (0 = none; the papers' small runs use none).")] = 0.0,
    untie: Annotated[bool, typer.Option(
        "--untie-embeddings", help="Give the output layer its own W (`head.weight`) instead of tying it to "
        "the input embedding.")] = False,
    bias_init: Annotated[Literal["unigram", "zero", "none"], typer.Option(
        "--bias-init", help="Output bias b (paper 000): unigram = smoothed log-unigram of the training tokens "
        "(counted while tokenising), zero, or none (no bias parameter).")] = "zero",
    smoothing: SmoothingOption = "add-k:1",
    rescale_w: Annotated[Optional[RescaleNorm], rescale_w_option(
        "Scale W so its norm equals ||b|| (paper 000 sec. 4.1; same function as patch-checkpoint). "
        "Needs --bias-init unigram and --untie-embeddings.")] = None,
    ag_patterns: Annotated[Optional[str], typer.Option(
        "--ag-patterns", metavar="LIST", show_default=False,
        help="Attention-guidance patterns (paper 001 app. A.2) given to guided heads 0, 1, ... in order, the "
        "last one filling the rest: next,prev,first,delim,period. Default (sec. 4.5): next, prev, then first "
        "(causal: prev, then first; [Next] is refused in a causal model).")] = None,
    ag_fraction: Annotated[float, typer.Option(
        "--ag-fraction", metavar="LAMBDA", help="Fraction of heads per layer guided (0 = no guidance; the "
        "paper uses 0.5).")] = 0.0,
    ag_alpha: Annotated[str, typer.Option(
        "--ag-alpha", metavar="A0|auto", help="Initial AG weight alpha_0 in --ag-reduction's units (paper 001: "
        "100 for small models, 10 for 12-16 layers), or auto: alpha_0 = L_LM / L_AG at step 0 (sec. 4.5's rule, "
        "'comparable at the beginning of training'). Loss = L_LM + alpha_t L_AG (eq. 4).")] = "100",
    ag_reduction: Annotated[Literal["mse", "frobenius"], typer.Option(
        "--ag-reduction", help="Units of L_AG. mse (the paper's released code): sum over layers and pattern "
        "groups of nn.MSELoss, i.e. ||H - P||_F^2 summed over the group's maps / (B k T^2), a group of k heads "
        "averaged. frobenius: eq. 2-3 as printed, ||H - P||_F^2 summed over guided heads, batch mean "
        "(k T^2 times larger per group).")] = "mse",
    ag_hold_steps: Annotated[int, typer.Option(
        "--ag-hold-steps", metavar="S", min=0, help="Hold alpha at alpha_0 for S steps, then decay linearly "
        "to 0 (the released code: 20000). 0 = decay from step 0, as the paper's text says.")] = 0,
    ag_decay_steps: Annotated[int, typer.Option(
        "--ag-decay-steps", metavar="S", min=0, max=MAX_STEPS,
        help="Step at which alpha reaches 0 (0 = --steps).")] = 0,
    unigram_reg_lambda: Annotated[float, typer.Option(
        "--unigram-reg-lambda", metavar="L", help="Regularise away from the unigram distribution (paper 000 "
        "app. B.3, fig. 9): minimise KL(p || p_theta) - L KL(omega(p) || p_theta) for the first "
        "--unigram-reg-steps updates, then the standard objective. p: the one-hot next token (the first term "
        "is the cross-entropy); omega(p): the unigram of the training tokens, add-k smoothed by --smoothing "
        "(the --bias-init unigram distribution); both terms per predicted token, in nats. The logged loss "
        "stays the cross-entropy; log.jsonl adds unigram_reg_on, unigram_kl (the mean KL(omega || p_theta)) and "
        "unigram_reg_weighted (-L times it). 0 = off.")] = 0.0,
    unigram_reg_steps: Annotated[int, typer.Option(
        "--unigram-reg-steps", metavar="S", min=0, max=MAX_STEPS,
        help="Updates 0 .. S-1 use --unigram-reg-lambda's objective; from update S on, the standard one "
        "(fig. 9's 'regularisation steps'; needs --unigram-reg-lambda, at most --steps).")] = 0,
    embedding_init: Annotated[str, typer.Option(
        "--embedding-init", metavar="normal|xavier|pretrained:FILE[:TENSOR]",
        help="Input embedding init (paper 002): N(0, 0.02), Xavier uniform, or a [V, d] tensor of a "
        "safetensors file (default tensor: the file's input-embedding role).")] = "normal",
    embedding_standardise: Annotated[Optional[str], standardise_option("--embedding-standardise")] = None,
    embedding_whiten: Annotated[bool, typer.Option(
        "--embedding-whiten", help="Zipfian-whiten the initial embedding (Yokoi et al. 2024): v' = Sigma^(-1/2)"
        "(v - mu) under the add-k unigram (--smoothing) of the training counts, after --embedding-init and "
        "before --embedding-standardise (whitened coordinates have unit weighted variance: add "
        "--embedding-standardise xavier for Xavier's scale).")] = False,
    embedding_shuffle: Annotated[bool, typer.Option(
        "--embedding-shuffle", help="Shuffle the embedding (paper 002 Pre-trained_Shuffled, sec. 3.4; the "
        "patch-checkpoint function, seeded by --seed).")] = False,
    shuffle_mode: Annotated[Literal["rows", "rows-columns", "elements"], shuffle_mode_option()] = "rows",
    eval_every: Annotated[int, typer.Option("--eval-every", metavar="K", min=1, max=MAX_STEPS,
                                            help="Evaluate every K steps (and at the end).")] = 50,
    eval_batches: Annotated[int, typer.Option("--eval-batches", min=1, max=MAX_SEQUENCES,
                                              help="Validation batches per evaluation.")] = 8,
    val_fraction: Annotated[float, typer.Option(
        "--val-fraction", help="Every round(1/F)-th document is held out for validation.")] = 0.05,
    save_every: Annotated[int, typer.Option(
        "--save-every", min=0, max=MAX_STEPS,
        help="Checkpoint and save a resumable state every N steps (0 = only at the end; step 0, the initial "
             "model, is always saved).")] = 0,
    stop_at: Annotated[Optional[int], typer.Option(
        "--stop-at", min=1, max=MAX_STEPS, show_default=False,
        help="Stop (checkpoint and state saved) after this many steps while the LR/AG schedules still follow "
        "--steps; continue later with --resume.")] = None,
    device: Annotated[Literal["auto", "cpu", "cuda"], typer.Option(
        "--device", help="auto: CUDA when present (bf16 autocast), else CPU (float32).")] = "auto",
    dtype: Annotated[Literal["auto", "float32", "bfloat16"], typer.Option(
        "--dtype", help="Autocast precision (auto: bfloat16 on CUDA, float32 on CPU).")] = "auto",
    compile_model: Annotated[bool, typer.Option("--compile", help="torch.compile the model.")] = False,
    seed: Annotated[int, seed_option("Seed for init, data order, masks and dropout")] = 0,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue the run in DIR from its last saved state (same options required).")] = False,
    allow_vocab_mismatch: AllowVocabMismatchOption = False,
    as_json: JsonOption = False,
) -> None:
    """Train nb's reference Transformer (pre-LN, learned positions) and record what the papers measure.

    Writes DIR/log.jsonl (per step: loss before the update, lr, tokens_per_s, mfu on CUDA, ag_loss/ag_alpha;
    unigram_reg_on/unigram_kl with --unigram-reg-lambda; eval steps add val_loss, kl_unigram, kl_uniform,
    bias_kl_unigram, bias_norm), step-N.safetensors checkpoints in nb's layout (step 0: the initial model;
    readable by probe-bias and patch-checkpoint) and summary.json with the final validation loss and the area under the validation-loss curve (ALC, paper 000 sec. 4.2).
    Under torchrun it trains with DDP. A new run that fails or is interrupted before its first saved
    state (train-state.json: at --save-every or the end) removes what it wrote, so the same command can
    simply run again; once a state is saved, DIR stays and --resume continues from it.
    """
    from nbcli.cli.console import print_report, step_progress
    from nbcli.counts import parse_smoothing
    from nbcli.train.config import build_config
    from nbcli.train.guidance import parse_alpha, parse_patterns
    from nbcli.train.loop import train as run_training

    cfg = build_config(
        preset, objective=objective, steps=steps, batch_size=batch_size, grad_accum=grad_accum, seq_len=seq_len,
        lr=lr, warmup=warmup, label_smoothing=label_smoothing, dropout=dropout, tie_embeddings=not untie,
        bias_init=bias_init, smoothing_k=parse_smoothing(smoothing), rescale_w=rescale_w,
        ag_patterns=parse_patterns(ag_patterns), ag_fraction=ag_fraction,
        ag_alpha=_alpha_or_auto(parse_alpha(ag_alpha)), ag_reduction=ag_reduction, ag_hold_steps=ag_hold_steps,
        ag_decay_steps=ag_decay_steps, lr_schedule=lr_schedule, unigram_reg_lambda=unigram_reg_lambda,
        unigram_reg_steps=unigram_reg_steps, embedding_init=embedding_init,
        embedding_standardise=embedding_standardise, embedding_whiten=embedding_whiten,
        embedding_shuffle=embedding_shuffle,
        embedding_shuffle_mode=shuffle_mode,
        eval_every=eval_every, eval_batches=eval_batches, val_fraction=val_fraction, save_every=save_every,
        device=device, dtype=dtype, compile=compile_model, seed=seed)
    total = min(cfg.steps, stop_at) if stop_at else cfg.steps
    with step_progress("training", total) as progress:
        def on_step(step: int, record: dict[str, object]) -> None:
            if "loss" in record:
                progress(1, status=f"loss {record['loss']:.3f}  {record['tokens_per_s']:,.0f} tok/s")

        result = run_training(cfg, corpus, tokenizer, out, resume=resume, stop_at=stop_at, on_step=on_step,
                              on_warning=_print_warning, allow_vocab_mismatch=allow_vocab_mismatch)
    print_report(result.as_dict(), as_json, _render)


def _print_warning(message: str) -> None:
    from nbcli.cli.console import stderr_console

    stderr_console().print(f"[yellow]warning:[/] {message}", markup=True, highlight=False)


def _alpha_or_auto(value: float | None) -> float | str:
    return "auto" if value is None else value


def _render(summary: dict[str, object]) -> None:
    from rich.table import Table

    from nbcli.cli.console import esc, stdout_console

    table = Table(title=f"nb train: {esc(summary['out'])}", show_header=False)
    rows = [("steps", summary["steps"]), ("device", summary["device"]), ("parameters", f"{summary['parameters']:,}"),
            ("final val loss", summary["final_val_loss"]), ("ALC (val loss)", summary["alc"]),
            ("unigram entropy / log V", f"{summary['unigram_entropy']:.3f} / {summary['log_v']:.3f} nats"),
            ("tokens/s", f"{summary['tokens_per_s']:,.0f}"), ("checkpoint", summary["checkpoint"])]
    if summary.get("ag_alpha0") is not None:
        rows.insert(5, ("AG alpha_0", summary["ag_alpha0"]))
    for key, value in rows:
        table.add_row(key, f"{value:.4f}" if isinstance(value, float) else esc(value))
    stdout_console().print(table)


def register(app: typer.Typer) -> None:
    app.command("train", epilog=EPILOG, cls=NbCommand)(train)
