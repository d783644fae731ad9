"""The options `nb train` shares across tasks, declared once (`nbcli.tasks.options`): what every run
has (data, run directory, size, schedule, device, seed) and the groups of the models with an output
layer over the vocabulary (the output bias of paper 000, attention guidance of paper 001, the unigram
regulariser of paper 000 app. B.3). A task lists the groups it takes (`Task.option_groups`) and
redeclares a field (by subclassing) where its wording or choices differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

from nbcli.resolve_datasets import DATASET_ID_HELP
from nbcli.tasks.options import MAX_SEED, MAX_SEQ_LEN, MAX_SEQUENCES, MAX_STEPS, REQUIRED, option
from nbcli.threads import MAX_THREADS, THREADS_HELP

DOCUMENTS_HELP = (
    "Each file is read in the format its name says, as count-unigrams reads it: text, one document per non-empty "
    "line (a line ends at LF or CRLF only); .jsonl .ndjson .json: the `text` field; .tsv .csv: the `text` column "
    "named by the header; parquet, Arrow and `datasets` folders: the `text` column; also compressed (.gz .bz2 .xz "
    ".zst).")
UNICODE_ERRORS_HELP = (
    "A word of the vectors that is not UTF-8: strict refuses the file, saying how many (the default for text; "
    "word2vec binary: backslashreplace); replace (U+FFFD), ignore (bad bytes dropped) or backslashreplace (\\xNN) "
    "read it, as gensim's unicode_errors.")
TOKENIZER_HELP = (
    "SentencePiece .model file, Hugging Face tokenizer.json, a model folder (its tokenizer.json, else its "
    "tokenizer.model), a Hub repo id org/name[@rev], or words:min-freq=K[,lower]: a word vocabulary of the training "
    "data's words seen at least K times, saved in the run (docs/vectors.md).")


@dataclass
class RunOptions:
    """Every task: data, run directory, size, schedule, device, seed, resume."""

    corpus: list[str] = option(REQUIRED, "--corpus", metavar="FILE", help=(
        "Training data: files, directories, globs, Hub dataset ids (repeatable). " + DOCUMENTS_HELP + " " +
        DATASET_ID_HELP))
    out: Path = option(REQUIRED, "--out", metavar="DIR", help=(
        "Run directory (config, log.jsonl, step-N.safetensors, training state, summary.json)."))
    tokenizer: Optional[str] = option(None, "--tokenizer", "-t", metavar="TOK", help=TOKENIZER_HELP)
    steps: Optional[int] = option(None, "--steps", min=1, max=MAX_STEPS, help="Optimizer updates (default 200).")
    batch_size: Optional[int] = option(None, "--batch-size", min=1, max=MAX_SEQUENCES, help=(
        "Sequences per update over all GPUs and micro-steps (default: preset's)."))
    grad_accum: int = option(1, "--grad-accum", min=1, max=MAX_SEQUENCES, help="Micro-steps per update.")
    seq_len: Optional[int] = option(None, "--seq-len", "--max-len", min=2, max=MAX_SEQ_LEN, help=(
        "Tokens per sequence T (default: preset's)."))
    lr: Optional[float] = option(None, "--lr", help="Peak learning rate (AdamW; default: preset's).")
    dropout: Optional[float] = option(None, "--dropout", metavar="P", help=(
        "Dropout probability. Default: the preset's (0 for the LM presets, the papers' small runs use none)."))
    embedding_init: str = option(
        "normal", "--embedding-init", metavar="normal|xavier|pretrained:FILE[:TENSOR]|pretrained:VECTORS", help=(
            "Input embedding init (paper 002): N(0, 0.02), Xavier uniform, a [V, d] tensor of a safetensors "
            "checkpoint (default tensor: the file's input-embedding role), or word vectors (GloVe, word2vec "
            "text/binary, fastText .vec, maybe compressed; told from a checkpoint by content): each whole-word piece "
            "takes the vector of its word, else of its lower-cased word; the other rows as --missing says; the "
            "coverage is reported (docs/vectors.md)."))
    missing: Literal["xavier", "mean", "neighbours"] = option("xavier", "--missing", help=(
        "--embedding-init pretrained:VECTORS: rows whose word has no vector (special tokens too): xavier "
        "U(+-sqrt(6/(V+d))) seeded by --seed, or the mean of the vectors read (transplant-embeddings' --missing; "
        "its neighbours needs a source tokenizer, so word vectors refuse it)."))
    unicode_errors: Optional[Literal["strict", "replace", "ignore", "backslashreplace"]] = option(
        None, "--unicode-errors", help="--embedding-init pretrained:VECTORS: " + UNICODE_ERRORS_HELP)
    d_model: Optional[int] = option(None, "--d-model", metavar="D", min=1, max=1 << 16, help=(
        "Model width (default: the preset's); word vectors need their dimension (GloVe: 300)."))
    n_head: Optional[int] = option(None, "--n-head", metavar="H", min=1, max=1024, help=(
        "Attention heads per layer, dividing --d-model (default: the preset's; paper 002: 10 for GloVe)."))
    n_layer: Optional[int] = option(None, "--n-layer", metavar="L", min=1, max=1024, help=(
        "Layers (translation: per side; default: the preset's; paper 002 app. A.2: 3)."))
    d_ff: Optional[int] = option(None, "--d-ff", metavar="F", min=1, max=1 << 20, help=(
        "Feed-forward width of every layer (default: the preset's; nb's LM and encoder presets 4 x --d-model; paper "
        "000 app. A: 256 for IWSLT, 512 for WMT; paper 002: unstated, 512 fits its Table 5 parameter counts)."))
    embedding_standardise: Optional[str] = option(
        None, "--embedding-standardise", metavar="xavier|match:FILE[:TENSOR]|mean=M,std=S", help=(
            "Standardise the input embedding, x* = (x - mean X) s / std X + m: xavier = m 0, s sqrt(2/(N+D)) "
            "(uniform Xavier's std for N x D; paper 002 eq. 1, Pre-trained_Xavier); match = another tensor's mean "
            "and sample std (eq. 4, Xavier_Pre-trained; without TENSOR: FILE's input embedding); or explicit values."))
    embedding_shuffle: bool = option(False, "--embedding-shuffle", help=(
        "Shuffle the embedding (paper 002 Pre-trained_Shuffled, sec. 3.4; the patch-checkpoint function, seeded "
        "by --seed)."))
    shuffle_mode: Literal["rows", "rows-columns", "elements"] = option("rows", "--shuffle-mode", help=(
        "rows: permute token rows (vectors kept, assigned to other tokens); rows-columns: also permute dimensions "
        "(the paper's wording, 'the rows and columns of X_p are randomly shuffled'); elements: permute all "
        "entries."))
    warmup: Optional[int] = option(None, "--warmup", metavar="N", min=0, max=MAX_STEPS, help=(
        "Linear warm-up over N updates (default: the preset's; fine-tuning: --warmup-ratio 0.06). Give N or "
        "--warmup-ratio, not both."))
    warmup_ratio: Optional[float] = option(None, "--warmup-ratio", metavar="R", help=(
        "Linear warm-up over ceil(R x updates) (transformers' warmup_ratio), in [0, 1): the same share of any "
        "run length."))
    eval_every: Optional[int] = option(None, "--eval-every", metavar="K", min=1, max=MAX_STEPS, help=(
        "Evaluate every K steps, at step 0 and at the end (default 50)."))
    save_every: int = option(0, "--save-every", min=0, max=MAX_STEPS, help=(
        "Checkpoint and save a resumable state every N steps (0 = only at the end; step 0, the initial model, is "
        "always saved)."))
    stop_at: Optional[int] = option(None, "--stop-at", min=1, max=MAX_STEPS, help=(
        "Stop (checkpoint and state saved) after this many steps while the LR/AG schedules still follow --steps; "
        "continue later with --resume."))
    device: Literal["auto", "cpu", "cuda"] = option("auto", "--device", help=(
        "auto: CUDA when present (bf16 autocast), else CPU (float32)."))
    dtype: Literal["auto", "float32", "bfloat16"] = option("auto", "--dtype", help=(
        "Autocast precision (auto: bfloat16 on CUDA, float32 on CPU)."))
    seed: int = option(0, "--seed", min=0, max=MAX_SEED, help=(
        "Seed for init, data order, masks and dropout (0 to 2^63-1: the range torch's and numpy's generators both "
        "take)."))
    resume: bool = option(False, "--resume", help=(
        "Continue the run in DIR from its last saved state (same options required)."))


@dataclass
class ArchitectureOptions:
    """The choices paper 002 shows a Transformer's input depends on (app. A.1-A.2, sec. 6): layer-norm
    placement, positions, the sqrt(D) embedding scale and the initialisation, for nb's LM, its encoder
    from scratch and the encoder-decoder alike (`nbcli.models.lm`, `nbcli.models.seq2seq`)."""

    norm: Optional[Literal["post", "pre"]] = option(None, "--norm", help=(
        "post-LN, x <- LN(x + F(x)) (Vaswani, fairseq, BERT, PyTorch's nn.Transformer: the papers' models), or "
        "pre-LN, x <- x + F(LN(x)) (GPT-2). Default: translation post; nb's LM and encoder pre. nb's LM and encoder "
        "keep their final LayerNorm either way; translation has one per stack when pre-LN (not exportable to "
        "Marian)."))
    positions: Optional[Literal["sinusoidal", "learned", "none"]] = option(None, "--positions", help=(
        "sinusoidal (Vaswani sec. 3.5, fixed), learned, or none (paper 002 table 3's 'Pos.: no'). Default: "
        "translation sinusoidal; nb's LM and encoder learned."))
    scale_embedding: Optional[bool] = option(None, "--scale-embedding/--no-scale-embedding", help=(
        "Multiply token embeddings by sqrt(d) before adding positions (Vaswani sec. 3.4, paper 002 app. A.1 eq. 2; "
        "sec. 6's finding depends on it). Default: on for translation, off for nb's LM and encoder."))
    init_scheme: Optional[Literal["gpt2", "xavier", "fairseq"]] = option(None, "--init-scheme", help=(
        "The non-embedding weights' initialisation (biases 0, LayerNorm gains 1): gpt2 = N(0, 0.02), the projections "
        "into the residual stream N(0, 0.02/sqrt(2L)) (nb's LM and encoder default); xavier = Xavier uniform on "
        "every weight matrix, the output W included (paper 002 secs. 5-6); fairseq = embeddings and a separate W "
        "N(0, d^-1/2), q/k/v Xavier with gain 1/sqrt(2), the rest Xavier (translation's default; where it differs "
        "from fairseq: docs/training.md). The input embedding is --embedding-init's."))


@dataclass
class SelectionOptions:
    """Which evaluation is the run's best (translation: best.safetensors; classification and tagging:
    summary.json's best_step), by a metric the task logs (`nbcli.train.best`)."""

    select_by: Optional[str] = option(None, "--select-by", metavar="METRIC", help=(
        "The validation metric the best checkpoint is chosen by, recorded in summary.json's select_by (a loss is "
        "minimised, any other metric maximised; the earliest step wins a tie). Translation: val_bleu (default; paper "
        "000 app. A), val_chrf or val_loss (paper 002 secs. 5-6: 'the model with the lowest validation loss'); nb "
        "translate, eval and export use best.safetensors. Classification and tagging: val_accuracy (default), val_f1 "
        "or val_loss of the first --valid set, or val_NAME_accuracy|f1|loss of the set NAME; every set's best of the "
        "same metric is reported too (summary.json best_by_set; paper 002 sec. 4: MNLI's best matched and best "
        "mismatched accuracy)."))


@dataclass
class OptimizerOptions:
    """AdamW's settings and gradient clipping, which every paper states (paper 000 app. A, paper 001's
    RoBERTa (Liu et al. 2019), paper 002 app. A.2)."""

    adam_beta1: Optional[float] = option(None, "--adam-beta1", metavar="B1", help=(
        "Adam's beta1 (default 0.9, as in every paper)."))
    adam_beta2: Optional[float] = option(None, "--adam-beta2", metavar="B2", help=(
        "Adam's beta2 (default: the preset's: 0.95 GPT-2/nanoGPT, 0.98 fairseq, Vaswani and paper 002 app. A.2; "
        "paper 000 app. A: 0.997; fine-tuning: 0.999, transformers' Trainer)."))
    adam_eps: Optional[float] = option(None, "--adam-eps", metavar="EPS", help=(
        "Adam's epsilon (default: the preset's, else 1e-8; Vaswani and paper 002 app. A.2: 1e-9)."))
    weight_decay: Optional[float] = option(None, "--weight-decay", metavar="WD", help=(
        "AdamW weight decay of the matrices (biases, norms and embeddings: none; default: the preset's; "
        "fine-tuning: 0.01; paper 002's Adam: 0)."))
    grad_clip: Optional[float] = option(None, "--grad-clip", metavar="NORM", help=(
        "Clip the gradient's global norm to NORM (0 = no clipping; default: the preset's, else 1)."))


@dataclass
class OutputLayerOptions:
    """Models with an output layer over the vocabulary (lm, translation): its bias (paper 000), the
    schedule and validation of a language model, compilation and the tokenizer check."""

    untie: bool = option(False, "--untie-embeddings", help=(
        "Give the output layer its own W (`head.weight`) instead of tying it to the input embedding."))
    bias_init: Literal["unigram", "zero", "none"] = option("zero", "--bias-init", help=(
        "Output bias b (paper 000): unigram = smoothed log-unigram of the training tokens (counted while "
        "tokenising), zero, or none (no bias parameter)."))
    smoothing: str = option("add-k:1", "--smoothing", metavar="add-k:K", help=(
        "Smoothing for log-probabilities: log((c+K)/(N+K*V)). Default add-k:1 (Laplace): no token gets -inf."))
    rescale_w: Optional[Literal["fro", "spectral", "none"]] = option(None, "--rescale-w", metavar="fro|spectral|none", help=(
        "Scale W so its norm equals ||b|| (paper 000 sec. 4.1, fn. 3; same function as patch-checkpoint); none: "
        "W as drawn (what turns off a preset's or recipe arm's rescaling, e.g. nb reproduce --set "
        "rescale_w=\"none\"). Needs "
        "--bias-init unigram. A tied W is the input embedding (translation: the target or shared embedding), which "
        "is then scaled with it: the model reads c E[x] beside unchanged positions, c = ||b|| / ||W||; the paper's "
        "models have their own W: add --untie-embeddings (docs/training.md)."))
    embedding_whiten: bool = option(False, "--embedding-whiten", help=(
        "Zipfian-whiten the initial embedding (Yokoi et al. 2024): v' = Sigma^(-1/2)(v - mu) under the add-k "
        "unigram (--smoothing) of the training counts, after --embedding-init and before --embedding-standardise "
        "(whitened coordinates have unit weighted variance: add --embedding-standardise xavier for Xavier's "
        "scale)."))
    lr_schedule: Optional[Literal["cosine", "linear", "inverse-sqrt", "constant"]] = option(
        None, "--lr-schedule", help=(
            "After warm-up: cosine decay to 10% (GPT-2 presets), linear decay to 0 (roberta-8, as RoBERTa and paper "
            "001's release), inverse-sqrt: lr sqrt(warmup / step) (fairseq; the iwslt and base presets), or "
            "constant (kim-3). Default: the preset's."))
    label_smoothing: Optional[float] = option(None, "--label-smoothing", metavar="A", help=(
        "Label smoothing of the cross-entropy. Default: the preset's (0 for the LM presets; 0.1 for translation, "
        "paper 000 sec. 4.1)."))
    eval_batches: int = option(8, "--eval-batches", min=1, max=MAX_SEQUENCES, help=(
        "Validation batches per evaluation."))
    val_fraction: float = option(0.05, "--val-fraction", help=(
        "Every round(1/F)-th document is held out for validation."))
    compile: bool = option(False, "--compile", help="torch.compile the model.")
    allow_vocab_mismatch: bool = option(False, "--allow-vocab-mismatch", help=(
        "Accept a tokenizer whose fingerprint (pieces, ids, specials, normaliser) differs from the model's: a "
        "warning instead of an error. Relaxes only this identity check: counts or a vocabulary longer than the "
        "model's rows, or shorter by more than padding, are refused all the same."))


@dataclass
class GuidanceOptions:
    """Attention guidance (paper 001 sec. 3.2, eq. 4) and the unigram regulariser (paper 000 app. B.3):
    loss terms a task with attention over tokens adds."""

    ag_patterns: Optional[str] = option(None, "--ag-patterns", metavar="LIST", help=(
        "Attention-guidance patterns (paper 001 app. A.2) given to guided heads 0, 1, ... in order, the last one "
        "filling the rest: next,prev,first,delim,period. Default (sec. 4.5): next, prev, then first (causal: prev, "
        "then first; [Next] is refused in a causal model)."))
    ag_fraction: Optional[float] = option(None, "--ag-fraction", metavar="LAMBDA", help=(
        "Fraction of heads per layer guided (0 = no guidance; the paper uses 0.5). Default: the preset's (the "
        "paper001-*-ag presets guide), else 0."))
    ag_alpha: Optional[str] = option(None, "--ag-alpha", metavar="A0|auto", help=(
        "Initial AG weight alpha_0 in --ag-reduction's units (paper 001: 100 for small models, 10 for 12-16 "
        "layers), or auto: alpha_0 = L_LM / L_AG at step 0 (sec. 4.5's rule, 'comparable at the beginning of "
        "training'). Loss = L_LM + alpha_t L_AG (eq. 4). Default: the preset's, else 100."))
    ag_reduction: Literal["mse", "frobenius"] = option("mse", "--ag-reduction", help=(
        "Units of L_AG. mse (the paper's released code): sum over layers and pattern groups of nn.MSELoss, i.e. "
        "||H - P||_F^2 summed over the group's maps / (B k T^2), a group of k heads averaged. frobenius: eq. 2-3 "
        "as printed, ||H - P||_F^2 summed over guided heads, batch mean (k T^2 times larger per group)."))
    ag_hold_steps: int = option(0, "--ag-hold-steps", metavar="S", min=0, help=(
        "Hold alpha at alpha_0 for S steps, then decay linearly to 0 (the released code: 20000). 0 = decay from "
        "step 0, as the paper's text says."))
    ag_decay_steps: int = option(0, "--ag-decay-steps", metavar="S", min=0, max=MAX_STEPS, help=(
        "Step at which alpha reaches 0 (0 = --steps)."))
    unigram_reg_lambda: float = option(0.0, "--unigram-reg-lambda", metavar="L", help=(
        "Regularise away from the unigram distribution (paper 000 app. B.3, fig. 9): minimise KL(p || p_theta) - "
        "L KL(omega(p) || p_theta) for the first --unigram-reg-steps updates, then the standard objective. p: the "
        "one-hot next token (the first term is the cross-entropy); omega(p): the unigram of the training tokens, "
        "add-k smoothed by --smoothing (the --bias-init unigram distribution); both terms per predicted token, in "
        "nats. The logged loss stays the cross-entropy; log.jsonl adds unigram_reg_on, unigram_kl (the mean "
        "KL(omega || p_theta)) and unigram_reg_weighted (-L times it). 0 = off."))
    unigram_reg_steps: int = option(0, "--unigram-reg-steps", metavar="S", min=0, max=MAX_STEPS, help=(
        "Updates 0 .. S-1 use --unigram-reg-lambda's objective; from update S on, the standard one (fig. 9's "
        "'regularisation steps'; needs --unigram-reg-lambda, at most --steps)."))


@dataclass
class TrackingOptions:
    """Every task (the seam adds them, `Task.options`): experiment trackers through their own clients
    (`nbcli.trackers`, docs/tracking.md), rank 0 only under torchrun."""

    track: list[str] = option([], "--track", "--report-to", metavar="tensorboard|wandb|mlflow", help=(
        "Also log the run to an experiment tracker (repeatable, or a comma list; none: no tracker): its config "
        "(every option), each log.jsonl record's numbers at their step, the summary, and where the run directory "
        "is. Each needs its client: pip install 'nbcli[tensorboard]' (or [wandb], [mlflow]). A tracker that fails "
        "mid-run is warned about once and training goes on; one that cannot start stops the run before it trains. "
        "--report-to is the same option (transformers' TrainingArguments name)."))
    track_project: Optional[str] = option(None, "--track-project", metavar="NAME", help=(
        "W&B project and MLflow experiment. Default: WANDB_PROJECT / MLFLOW_EXPERIMENT_NAME, else the tool's "
        "default."))
    track_run_name: Optional[str] = option(None, "--track-run-name", metavar="NAME", help=(
        "The run's name in W&B and MLflow. Default: the run directory's name (W&B: WANDB_NAME when set)."))
    track_uri: Optional[str] = option(None, "--track-uri", metavar="URI", help=(
        "MLflow tracking URI (http://host:5000, sqlite:///mlflow.db, file:DIR). Default: MLFLOW_TRACKING_URI, "
        "else MLflow's default."))
    tensorboard_dir: Optional[Path] = option(None, "--tensorboard-dir", metavar="DIR", help=(
        "Where TensorBoard's event files go. Default: DIR/tensorboard in the run directory (tensorboard --logdir "
        "runs/ then shows each run by its directory's name)."))


@dataclass
class ThreadOptions:
    """Every task (the seam adds it, `Task.options`, and runs the task on it): its CPU threads."""

    threads: Optional[int] = option(None, "--threads", metavar="N", min=1, max=MAX_THREADS, help=(
        THREADS_HELP + " Recorded in summary.json (`threads`); not part of the run's config (--resume may change it)."))


def common_config(values: dict[str, object]) -> dict[str, object]:
    """The keyword arguments of `build_config` / `build_translation_config` that the shared groups
    give (parsed: smoothing K, AG patterns and alpha), from a task's option values."""
    from nbcli.counts import parse_smoothing
    from nbcli.ops import rescale_norm
    from nbcli.analysis.patterns import parse_patterns
    from nbcli.train.guidance import parse_alpha

    v = values
    given = v["ag_alpha"]   # None: the preset's alpha_0
    alpha = None if given is None else "auto" if parse_alpha(str(given)) is None else parse_alpha(str(given))
    return dict(
        steps=v["steps"], batch_size=v["batch_size"], grad_accum=v["grad_accum"], seq_len=v["seq_len"], lr=v["lr"],
        warmup=v["warmup"], warmup_ratio=v["warmup_ratio"], label_smoothing=v["label_smoothing"], dropout=v["dropout"], bias_init=v["bias_init"],
        smoothing_k=parse_smoothing(str(v["smoothing"])), rescale_w=rescale_norm(v["rescale_w"]),
        ag_patterns=parse_patterns(v["ag_patterns"]), ag_fraction=v["ag_fraction"],  # type: ignore[arg-type]
        ag_alpha=alpha, ag_reduction=v["ag_reduction"], ag_hold_steps=v["ag_hold_steps"],
        ag_decay_steps=v["ag_decay_steps"], lr_schedule=v["lr_schedule"], unigram_reg_lambda=v["unigram_reg_lambda"],
        unigram_reg_steps=v["unigram_reg_steps"], embedding_init=v["embedding_init"], embedding_missing=v["missing"],
        embedding_unicode_errors=v["unicode_errors"], d_model=v["d_model"], n_head=v["n_head"], embedding_standardise=v["embedding_standardise"],
        embedding_whiten=v["embedding_whiten"], embedding_shuffle=v["embedding_shuffle"],
        embedding_shuffle_mode=v["shuffle_mode"], eval_every=v["eval_every"], eval_batches=v["eval_batches"],
        val_fraction=v["val_fraction"], save_every=v["save_every"], device=v["device"], dtype=v["dtype"],
        compile=v["compile"], seed=v["seed"], n_layer=v["n_layer"], adam_beta1=v["adam_beta1"],
        adam_beta2=v["adam_beta2"], adam_eps=v["adam_eps"], weight_decay=v["weight_decay"], grad_clip=v["grad_clip"])
