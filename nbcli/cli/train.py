"""`nb train`: train nb's reference Transformer with the papers' initialisations and losses."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from nbcli.cli.base import NbCommand
from nbcli.cli.options import (
    DOCUMENTS_HELP, AllowVocabMismatchOption, DtypeOption, JsonOption, RescaleNorm, SmoothingOption, SrcLangOption, TgtLangOption,
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

[bold]Translation[/bold] (--task translation; paper 000's experiment)

  nb train --task translation --corpus data/train --valid data/valid --src-lang de --tgt-lang en \\
      -t joint.model --preset iwslt --bias-init unigram --out runs/iwslt-unigram-s0 --seed 0
  nb train --task translation --corpus train.jsonl --src-lang de --tgt-lang en --src-tokenizer de.model \\
      --tgt-tokenizer en.model --preset kim-3 --positions none --freeze-embeddings --out runs/t3
  nb train --task translation --corpus train.tsv --src-lang de --tgt-lang en -t joint.model --preset base \\
      --ag-fraction 0.25 --ag-patterns next,prev --out runs/ag     # paper 001 table 7: encoder heads only

[bold]Classification and tagging[/bold] (--task classification | tagging; papers 001 tables 1, 2, 4 and 002 table 1;
docs/classification.md)

  nb train --task classification --init bert-base-uncased --corpus MNLI/train.tsv --text-field sentence1 \\
      --text-pair-field sentence2 --valid matched=MNLI/dev_matched.tsv --valid mismatched=MNLI/dev_mismatched.tsv \\
      --epochs 3 --lr 2e-5 --out runs/mnli
  nb train --task classification --init runs/roberta8-ag --tokenizer spm.model --corpus SST-2/train.tsv \\
      --valid SST-2/dev.tsv --out runs/sst2-ag
  nb train --task classification -t spm.model --preset small --embedding-init xavier --positions sinusoidal \\
      --corpus SST-2/train.tsv --valid dev=SST-2/dev.tsv --lr 1e-4 --epochs 10 --seed 1 --out runs/sst2-xavier-s1
  nb train --task classification -t words:min-freq=2,lower --embedding-init pretrained:glove.6B.300d.txt \\
      --d-model 300 --n-head 10 --corpus SST-2/train.tsv --valid dev=SST-2/dev.tsv --out runs/sst2-glove
  nb train --task tagging --init xlm-roberta-base --corpus om/train.conll --valid dev=om/dev.conll --out runs/ner
  nb train --task tagging --init bert-base-cased --corpus conll2003/train.parquet --valid conll2003/validation.parquet \
      --out runs/conll03     # the Hub's parquet: tokens and ner_tags, tag names from its ClassLabel feature
"""

# Bounds that keep every derived count (tokens seen, positions, step numbers) inside int64 and every
# allocation representable; values beyond them are usage errors rather than overflows or hangs.
MAX_STEPS = 10**12
MAX_SEQUENCES = 2**24
MAX_SEQ_LEN = 2**20

PresetName = Literal["tiny", "small", "gpt2-124m", "roberta-8", "iwslt", "base", "kim-3"]


def train(
    ctx: typer.Context,
    corpus: Annotated[list[str], corpus_option(
        "Training text: files, directories, globs (repeatable). " + DOCUMENTS_HELP + " --task translation: "
        "sentence pairs, the PREFIX of aligned PREFIX.SRC + PREFIX.TGT files, a .tsv (source TAB target), a "
        ".jsonl with {\"translation\": {SRC: ..., TGT: ...}}, or parquet/Arrow.")],
    out: Annotated[Path, out_dir_option(
        "Run directory (config, log.jsonl, step-N.safetensors, training state, summary.json).", short=False)],
    tokenizer: Annotated[Optional[Path], typer.Option(
        "--tokenizer", "-t", metavar="TOK", show_default=False,
        help="SentencePiece .model file, Hugging Face tokenizer.json, a model folder (its tokenizer.json, else "
        "its tokenizer.model), a Hub repo id org/name[@rev], or words:min-freq=K[,lower]: a word vocabulary of "
        "the training data's words seen at least K times, saved in the run (docs/vectors.md). --task "
        "translation: the joint tokenizer of both sides (or give --src-tokenizer and --tgt-tokenizer).")] = None,
    task: Annotated[Literal["lm", "translation", "classification", "tagging"], typer.Option(
        "--task", help="lm: nb's decoder-only / MLM Transformer (--objective). translation: the Vaswani "
        "encoder-decoder on sentence pairs, validated by BLEU (docs/training.md 'Translation'). classification: "
        "an encoder (--init, or nb's from scratch) with a head on sentences or sentence pairs; tagging: a head "
        "on every word (CoNLL, NER); both validated by accuracy and F1 on whole files (docs/classification.md)."
        )] = "lm",
    objective: Annotated[Optional[Literal["clm", "mlm"]], typer.Option(
        "--objective", help="clm: causal LM (decoder-only). mlm: RoBERTa-style masked LM, 15% of tokens "
        "selected, 80% <mask> / 10% random / 10% kept. Default: the preset's (clm except roberta-8).",
        show_default=False)] = None,
    preset: Annotated[PresetName, typer.Option(
        "--preset", help="tiny (2x4x128, T=128; seconds on CPU), small (4x8x256), gpt2-124m (12x12x768, T=1024), "
        "roberta-8 (paper 001 table 10: 8x12x768, T=512, mlm, batch 120, lr 1e-4, linear decay). --task "
        "translation: tiny (2+2 layers, d 64; seconds on CPU), iwslt (fairseq transformer_iwslt_de_en: 6+6, d 512, "
        "FFN 1024, 4 heads), base (Vaswani base: 6+6, d 512, FFN 2048, 8 heads), kim-3 (paper 002: 3+3, 8 heads). "
        "Vocabulary size always comes from the tokenizer.")] = "tiny",
    steps: Annotated[Optional[int], typer.Option(
        "--steps", min=1, max=MAX_STEPS, show_default=False,
        help="Optimizer updates (default 200; --task classification|tagging: --epochs decides).")] = None,
    batch_size: Annotated[Optional[int], typer.Option(
        "--batch-size", min=1, max=MAX_SEQUENCES, show_default=False,
        help="Sequences per update over all GPUs and micro-steps (default: preset's).")] = None,
    grad_accum: Annotated[int, typer.Option("--grad-accum", min=1, max=MAX_SEQUENCES,
                                            help="Micro-steps per update.")] = 1,
    seq_len: Annotated[Optional[int], typer.Option(
        "--seq-len", "--max-len", min=2, max=MAX_SEQ_LEN, show_default=False,
        help="Tokens per sequence T (default: preset's). --task translation: the most tokens a side may have, "
        "EOS included; longer pairs are skipped and counted (summary.json skipped_long_pairs).")] = None,
    lr: Annotated[Optional[float], typer.Option("--lr", show_default=False,
                                                help="Peak learning rate (AdamW; default: preset's).")] = None,
    lr_schedule: Annotated[Optional[Literal["cosine", "linear", "inverse-sqrt", "constant"]], typer.Option(
        "--lr-schedule", show_default=False, help="After warm-up: cosine decay to 10% (GPT-2 presets), linear "
        "decay to 0 (roberta-8, as RoBERTa and paper 001's release), inverse-sqrt: lr sqrt(warmup / step) "
        "(fairseq; the iwslt and base presets), or constant (kim-3). Default: the preset's.")] = None,
    warmup: Annotated[Optional[int], typer.Option("--warmup", min=0, max=MAX_STEPS, show_default=False,
                                                  help="Linear warm-up steps (default: preset's).")] = None,
    label_smoothing: Annotated[Optional[float], typer.Option(
        "--label-smoothing", metavar="A", show_default=False,
        help="Label smoothing of the cross-entropy. Default: the preset's (0 for the LM presets; 0.1 for "
        "translation, paper 000 sec. 4.1).")] = None,
    dropout: Annotated[Optional[float], typer.Option(
        "--dropout", metavar="P", show_default=False,
        help="Dropout probability. Default: the preset's (0 for the LM presets, the papers' small runs use none; "
        "translation: 0.1, iwslt 0.3).")] = None,
    untie: Annotated[bool, typer.Option(
        "--untie-embeddings", help="Give the output layer its own W (`head.weight`) instead of tying it to "
        "the input embedding. (--task translation: --share-embeddings none.)")] = False,
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
        "--embedding-init", metavar="normal|xavier|pretrained:FILE[:TENSOR]|pretrained:VECTORS",
        help="Input embedding init (paper 002): N(0, 0.02), Xavier uniform, a [V, d] tensor of a "
        "safetensors checkpoint (default tensor: the file's input-embedding role), or word vectors (GloVe, "
        "word2vec text/binary, fastText .vec, maybe compressed; told from a checkpoint by content): each "
        "whole-word piece takes the vector of its word, else of its lower-cased word; the other rows as "
        "--missing says; the coverage is reported (docs/vectors.md).")] = "normal",
    missing: Annotated[Literal["xavier", "mean", "neighbours"], typer.Option(
        "--missing", help="--embedding-init pretrained:VECTORS: rows whose word has no vector (special tokens "
        "too): xavier U(+-sqrt(6/(V+d))) seeded by --seed, or the mean of the vectors read (transplant-"
        "embeddings' --missing; its neighbours needs a source tokenizer, so word vectors refuse it).")] = "xavier",
    d_model: Annotated[Optional[int], typer.Option(
        "--d-model", metavar="D", min=1, max=1 << 16, show_default=False,
        help="Model width (default: the preset's); word vectors need their dimension (GloVe: 300).")] = None,
    n_head: Annotated[Optional[int], typer.Option(
        "--n-head", metavar="H", min=1, max=1024, show_default=False,
        help="Attention heads per layer, dividing --d-model (default: the preset's; paper 002: 10 for GloVe).")] = None,
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
    eval_every: Annotated[Optional[int], typer.Option(
        "--eval-every", metavar="K", min=1, max=MAX_STEPS, show_default=False,
        help="Evaluate every K steps, at step 0 and at the end (default 50; --task classification|tagging: "
        "once per epoch).")] = None,
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
    dtype: DtypeOption = "auto",
    compile_model: Annotated[bool, typer.Option("--compile", help="torch.compile the model.")] = False,
    seed: Annotated[int, seed_option("Seed for init, data order, masks and dropout")] = 0,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue the run in DIR from its last saved state (same options required).")] = False,
    allow_vocab_mismatch: AllowVocabMismatchOption = False,
    src_lang: SrcLangOption = None,
    tgt_lang: TgtLangOption = None,
    src_tokenizer: Annotated[Optional[Path], typer.Option(
        "--src-tokenizer", metavar="TOK", show_default=False,
        help="--task translation: the source side's tokenizer (with --tgt-tokenizer, instead of -t).")] = None,
    tgt_tokenizer: Annotated[Optional[Path], typer.Option(
        "--tgt-tokenizer", metavar="TOK", show_default=False,
        help="--task translation: the target side's tokenizer (its EOS ends sentences; its BOS, else EOS, "
        "starts the decoder).")] = None,
    valid: Annotated[Optional[list[str]], typer.Option(
        "--valid", metavar="[NAME=]FILE", show_default=False,
        help="Validation data (repeatable). --task translation: FILE, validation pairs in --corpus's forms "
        "(default: every round(1/--val-fraction)-th pair of --corpus is held out). --task classification|tagging: "
        "NAME=FILE, each set evaluated on every record (log.jsonl val_NAME_accuracy, val_NAME_f1, val_NAME_loss; "
        "the first set also as val_accuracy ...), e.g. --valid matched=dev_m.tsv --valid mismatched=dev_mm.tsv; "
        "a bare FILE is named valid. The best step is the first set's highest accuracy.")] = None,
    norm: Annotated[Optional[Literal["post", "pre"]], typer.Option(
        "--norm", show_default=False, help="--task translation: post-LN (the papers' fairseq models, Vaswani; "
        "default) or pre-LN (+ a final LayerNorm per stack; not exportable to Marian).")] = None,
    positions: Annotated[Optional[Literal["sinusoidal", "learned", "none"]], typer.Option(
        "--positions", show_default=False, help="--task translation: sinusoidal (Vaswani; default), learned, or "
        "none (paper 002 table 3's 'Pos.: no'). --task classification|tagging from scratch (no --init): learned "
        "(default), sinusoidal (fixed) or none.")] = None,
    scale_embedding: Annotated[Optional[bool], typer.Option(
        "--scale-embedding/--no-scale-embedding", show_default=False,
        help="--task translation: multiply token embeddings by sqrt(d) before adding positions (Vaswani sec. "
        "3.4, paper 002 app. A.1; default on).")] = None,
    share_embeddings: Annotated[Optional[Literal["auto", "all", "decoder", "none"]], typer.Option(
        "--share-embeddings", show_default=False,
        help="--task translation: all = one matrix for source, target and output (fairseq --share-all-embeddings; "
        "needs -t), decoder = target embedding is the output W (--share-decoder-input-output-embed), none = three "
        "matrices. auto (default): all with a joint tokenizer, else decoder.")] = None,
    freeze_embeddings: Annotated[bool, typer.Option(
        "--freeze-embeddings", help="--task translation|classification|tagging: keep the token embeddings (and a W "
        "tied to them) at their initial values (paper 002 table 3's 'Train: no').")] = False,
    beam: Annotated[Optional[int], typer.Option(
        "--beam", min=1, max=1024, show_default=False,
        help="--task translation: beam size of validation BLEU (and of nb translate for this run). Default 5 "
        "(paper 000 sec. 4.1).")] = None,
    lenpen: Annotated[Optional[float], typer.Option(
        "--lenpen", show_default=False, help="--task translation: length penalty: hypotheses are scored "
        "logprob / length^lenpen (fairseq --lenpen, transformers length_penalty). Default 1.")] = None,
    eval_sentences: Annotated[Optional[int], typer.Option(
        "--eval-sentences", min=0, max=MAX_SEQUENCES, show_default=False,
        help="--task translation: validation pairs decoded for BLEU/chrF at each evaluation (0 = all; tiny: 64).")] = None,
    ag_decoder_fraction: Annotated[Optional[float], typer.Option(
        "--ag-decoder-fraction", metavar="LAMBDA", show_default=False,
        help="--task translation: fraction of decoder self-attention heads guided (default 0, as paper 001 "
        "table 7's best model); --ag-fraction/--ag-patterns guide the encoder.")] = None,
    ag_decoder_patterns: Annotated[Optional[str], typer.Option(
        "--ag-decoder-patterns", metavar="LIST", show_default=False,
        help="--task translation: patterns of the guided decoder heads (prev,first,delim,period; default prev, "
        "then first).")] = None,
    init: Annotated[Optional[str], typer.Option(
        "--init", metavar="BASE", show_default=False,
        help="--task classification|tagging: the encoder to fine-tune: an nb MLM run or step-N.safetensors (give -t), "
        "a transformers encoder folder (BERT, RoBERTa, DistilBERT, MiniLM, ...; its tokenizer) or a cached Hub repo "
        "id. Without it nb's encoder is trained from scratch (--preset, --embedding-init, --positions; paper 002).")
    ] = None,
    text_field: Annotated[Optional[str], typer.Option(
        "--text-field", metavar="NAME", show_default=False,
        help="--task classification|tagging: the text column/field (default: text, else sentence); tagging: the token "
        "list of JSONL/parquet/Arrow records (default: tokens) or CoNLL's 0-based token column (default 0; 1 for "
        "CoNLL-U and GermEval, whose column 0 numbers the tokens).")] = None,
    text_pair_field: Annotated[Optional[str], typer.Option(
        "--text-pair-field", metavar="NAME", show_default=False,
        help="--task classification: the second sentence of a pair (MNLI sentence2, QNLI sentence); encoded as "
        "the encoder's pair ([CLS] a [SEP] b [SEP]).")] = None,
    label_field: Annotated[Optional[str], typer.Option(
        "--label-field", metavar="NAME", show_default=False,
        help="--task classification|tagging: the label column/field (default: label); tagging: the tag list of "
        "JSONL/parquet/Arrow records (default: ner_tags; integer tags are named by the data's ClassLabel "
        "feature) or CoNLL's 0-based tag column (default: the last; CoNLL-U's UPOS: 3).")] = None,
    label_names: Annotated[Optional[str], typer.Option(
        "--label-names", metavar="A,B,...|FILE", show_default=False,
        help="--task classification|tagging: the labels in id order (integer labels name themselves by it; a "
        "datasets features file names them too). Default: the ClassLabel names of a datasets parquet/Arrow file "
        "or folder (or a dataset_info.json beside the data), else the names in the training data, sorted (integer "
        "labels in numeric order; tagging: integer tags are named 0..the largest).")] = None,
    pooling: Annotated[Optional[Literal["first", "mean"]], typer.Option(
        "--pooling", show_default=False,
        help="--task classification: the sentence vector the head reads: first (the first token, <s> / [CLS]; "
        "default, and the only one for a transformers encoder's own head) or mean (the mean over real tokens; "
        "nb's encoder).")] = None,
    warmup_ratio: Annotated[Optional[float], typer.Option(
        "--warmup-ratio", metavar="R", show_default=False,
        help="--task classification|tagging: linear warm-up over ceil(R x updates), then linear decay to 0 "
        "(default 0.06).")] = None,
    epochs: Annotated[Optional[float], typer.Option(
        "--epochs", metavar="E", show_default=False,
        help="--task classification|tagging: passes over the training data (default 3; --steps overrides).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Train nb's reference Transformer (pre-LN, learned positions) and record what the papers measure.

    Writes DIR/log.jsonl (per step: loss before the update, lr, tokens_per_s, mfu on CUDA, ag_loss/ag_alpha;
    unigram_reg_on/unigram_kl with --unigram-reg-lambda; eval steps add val_loss, kl_unigram, kl_uniform,
    bias_kl_unigram, bias_norm), step-N.safetensors checkpoints in nb's layout (step 0: the initial model;
    readable by probe-bias and patch-checkpoint) and summary.json with the final validation loss and the area under the validation-loss curve (ALC, paper 000 sec. 4.2).
    --task translation trains the Vaswani encoder-decoder (post-LN, sinusoidal positions) on sentence pairs: eval
    steps add val_bleu and val_chrf (sacreBLEU) to the log, DIR/best.safetensors is the best checkpoint by
    validation BLEU, and summary.json adds best_val_bleu, best_step and alc_val_bleu.
    Under torchrun it trains with DDP. A new run that fails or is interrupted before its first saved
    state (train-state.json: at --save-every or the end) removes what it wrote, so the same command can
    simply run again; once a state is saved, DIR stays and --resume continues from it.
    --task classification|tagging fine-tunes an encoder with a head (docs/classification.md): log.jsonl adds
    val_accuracy, val_f1, val_loss (and per --valid set) at evaluations, summary.json best_val_accuracy,
    best_step and best_epoch (the first set's highest accuracy, the earliest on a tie) and the final metrics.
    """
    from nbcli.cli.console import print_report
    from nbcli.train.runtime import main_process
    from nbcli.counts import parse_smoothing
    from nbcli.errors import ConfigError
    from nbcli.train.guidance import parse_alpha, parse_patterns
    from nbcli.train.task_options import check_task_options

    common = dict(
        steps=steps, batch_size=batch_size, grad_accum=grad_accum, seq_len=seq_len, lr=lr, warmup=warmup,
        label_smoothing=label_smoothing, dropout=dropout, bias_init=bias_init, smoothing_k=parse_smoothing(smoothing),
        rescale_w=rescale_w, ag_patterns=parse_patterns(ag_patterns), ag_fraction=ag_fraction,
        ag_alpha=_alpha_or_auto(parse_alpha(ag_alpha)), ag_reduction=ag_reduction, ag_hold_steps=ag_hold_steps,
        ag_decay_steps=ag_decay_steps, lr_schedule=lr_schedule, unigram_reg_lambda=unigram_reg_lambda,
        unigram_reg_steps=unigram_reg_steps, embedding_init=embedding_init, embedding_missing=missing,
        d_model=d_model, n_head=n_head,
        embedding_standardise=embedding_standardise, embedding_whiten=embedding_whiten,
        embedding_shuffle=embedding_shuffle, embedding_shuffle_mode=shuffle_mode,
        eval_every=eval_every, eval_batches=eval_batches, val_fraction=val_fraction, save_every=save_every,
        device=device, dtype=dtype, compile=compile_model, seed=seed)
    check_task_options(task, _given_options(ctx))
    if task in ("classification", "tagging"):
        run, render = _finetune_run(task, dict(
            init=init, tokenizer=tokenizer, text_field=text_field, pair_field=text_pair_field,
            label_field=label_field, label_names=label_names, pooling=pooling, warmup_ratio=warmup_ratio, epochs=epochs,
            steps=steps, batch_size=batch_size, grad_accum=grad_accum, max_len=seq_len, lr=lr, dropout=dropout,
            eval_every=eval_every, save_every=save_every, seed=seed, preset=preset, embedding_init=embedding_init,
            embedding_missing=missing, d_model=d_model, n_head=n_head, positions=positions,
            freeze_embeddings=freeze_embeddings, device=device, dtype=dtype,
            encoder_options={k: v for k, v in dict(  # from scratch (paper 002 sec. 3.4); --init refuses them
                embedding_standardise=embedding_standardise, embedding_shuffle=embedding_shuffle or None,
                embedding_shuffle_mode=shuffle_mode if embedding_shuffle else None).items() if v is not None}),
            corpus, valid, out, resume, stop_at)
        with _progress(min(steps, stop_at or steps) if steps else stop_at) as progress:
            def on_update(step: int, record: dict[str, object]) -> None:
                if "loss" in record:
                    progress(1, status=f"loss {record['loss']:.3f}  {record['tokens_per_s']:,.0f} tok/s")

            summary = run(on_update)
        if main_process():   # under torchrun every rank returns the summary: one report, rank 0's
            print_report(summary, as_json, render)
        return
    if task == "translation":
        from nbcli.tasks.translation import build_translation_config, train_translation

        if src_lang is None or tgt_lang is None:
            raise ConfigError("--task translation needs --src-lang and --tgt-lang (e.g. --src-lang de --tgt-lang en)")
        source_tok, target_tok = _translation_tokenizers(tokenizer, src_tokenizer, tgt_tokenizer)
        if untie and share_embeddings not in (None, "none"):
            raise ConfigError(f"--untie-embeddings contradicts --share-embeddings {share_embeddings}")
        cfg = build_translation_config(preset, dict(
            src_lang=src_lang, tgt_lang=tgt_lang, norm=norm, positions=positions, scale_embedding=scale_embedding,
            share_embeddings="none" if untie else share_embeddings, freeze_embeddings=freeze_embeddings or None,
            beam=beam, lenpen=lenpen, eval_sentences=eval_sentences, ag_decoder_fraction=ag_decoder_fraction,
            ag_decoder_patterns=parse_patterns(ag_decoder_patterns)), **common)

        def run(on_step: Callable[[int, dict[str, object]], None]) -> dict[str, object]:
            return train_translation(cfg, corpus, source_tok, target_tok, out, valid=valid, resume=resume,
                                     stop_at=stop_at, on_step=on_step, on_warning=_print_warning,
                                     allow_vocab_mismatch=allow_vocab_mismatch).as_dict()
        render = _render_translation
    else:
        from nbcli.train.config import build_config
        from nbcli.train.loop import train as run_training

        if tokenizer is None:
            raise ConfigError("Missing option '--tokenizer' / '-t'")
        cfg = build_config(preset, objective=objective, tie_embeddings=not untie, **common)

        def run(on_step: Callable[[int, dict[str, object]], None]) -> dict[str, object]:
            return run_training(cfg, corpus, tokenizer, out, resume=resume, stop_at=stop_at, on_step=on_step,
                                on_warning=_print_warning, allow_vocab_mismatch=allow_vocab_mismatch).as_dict()
        render = _render
    total = min(cfg.steps, stop_at) if stop_at else cfg.steps
    with _progress(total) as progress:
        def on_step(step: int, record: dict[str, object]) -> None:
            if "loss" in record:
                progress(1, status=f"loss {record['loss']:.3f}  {record['tokens_per_s']:,.0f} tok/s")

        summary = run(on_step)
    if main_process():
        print_report(summary, as_json, render)


def _progress(total: int | None) -> contextlib.AbstractContextManager[Callable[..., None]]:
    """The training progress bar (stderr, a terminal): rank 0's alone under torchrun, the rank that
    sees the log records."""
    from nbcli.cli.console import step_progress
    from nbcli.train.runtime import main_process

    if not main_process():
        return contextlib.nullcontext(lambda advance=1, **fields: None)
    return step_progress("training", total)


def _finetune_run(task: str, options: dict[str, object], corpus: list[str], valid: list[str] | None, out: Path,
                  resume: bool, stop_at: int | None,
                  ) -> tuple[Callable[[Callable[[int, dict[str, object]], None]], dict[str, object]],
                             Callable[[dict[str, object]], None]]:
    """--task classification|tagging: the run (`tasks.finetune.train_report`) and its renderer."""
    from nbcli.tasks.data import DataSpec, parse_valid
    from nbcli.tasks.finetune import FinetuneConfig, train_report

    o = {k: v for k, v in options.items() if v is not None}
    data = DataSpec(task=task, text_field=o.pop("text_field", None), pair_field=o.pop("pair_field", None),  # type: ignore[arg-type]
                    label_field=o.pop("label_field", "label"), max_len=o.pop("max_len", 128))  # type: ignore[arg-type]
    if "tokenizer" in o:
        o["tokenizer"] = str(o["tokenizer"])
    cfg = FinetuneConfig(data=data, **o)  # type: ignore[arg-type]
    sets = parse_valid(valid or [])

    def run(on_step: Callable[[int, dict[str, object]], None]) -> dict[str, object]:
        return train_report(cfg, corpus, sets, out, resume=resume, stop_at=stop_at, on_step=on_step,
                            on_warning=_print_warning)
    return run, _render_finetune


def _render_finetune(summary: dict[str, object]) -> None:
    from nbcli.cli.console import esc
    from nbcli.cli.render import TEXT, num, print_pairs

    best = summary.get("best_val_accuracy")
    rows = [("steps (per epoch)", f"{num(summary['steps'])} ({num(summary['steps_per_epoch'])})"),
            ("device", esc(summary["device"])),
            ("best val accuracy (step, epoch)", f"{num(best)} ({num(summary['best_step'])}, "
             f"{num(summary['best_epoch'])})" if best is not None else "- (no --valid)")]
    for name, metrics in summary["final"].items():  # type: ignore[attr-defined]
        rows.append((f"final {esc(name)}: accuracy / F1 / loss",
                     f"{num(metrics['accuracy'])} / {num(metrics['f1'])} / {num(metrics['loss'])}"))
    rows += [("tokens/s", num(summary["tokens_per_s"])), ("checkpoint", esc(summary["checkpoint"]))]
    print_pairs(f"nb train --task {summary['task']}: {summary['out']}", rows + _coverage_rows(summary),
                "nothing to report", kind=TEXT)


def _given_options(ctx: typer.Context) -> list[str]:
    """The options typed on the command line (or set in the environment), by their long names."""
    typed = ("COMMANDLINE", "ENVIRONMENT")
    return [max(param.opts, key=len) for param in ctx.command.params if param.name is not None and param.opts
            and getattr(ctx.get_parameter_source(param.name), "name", None) in typed]


def _translation_tokenizers(joint: Path | None, source: Path | None, target: Path | None) -> tuple[Path, Path]:
    """(source, target) tokenizer of --task translation: -t for both, or --src-tokenizer and --tgt-tokenizer."""
    from nbcli.errors import ConfigError

    if joint is not None and (source is not None or target is not None):
        raise ConfigError("give either -t (one joint tokenizer) or --src-tokenizer and --tgt-tokenizer, not both")
    if joint is not None:
        return joint, joint
    if source is None or target is None:
        raise ConfigError("--task translation needs -t (a joint tokenizer) or both --src-tokenizer and --tgt-tokenizer")
    return source, target


def _print_warning(message: str) -> None:
    from nbcli.cli.console import stderr_console

    stderr_console().print(f"[yellow]warning:[/] {message}", markup=True, highlight=False)


def _alpha_or_auto(value: float | None) -> float | str:
    return "auto" if value is None else value


def _render(summary: dict[str, object]) -> None:
    from nbcli.cli.console import esc
    from nbcli.cli.render import TEXT, num, print_pairs

    rows = [("steps", num(summary["steps"])), ("device", esc(summary["device"])), ("parameters", num(summary["parameters"])),
            ("final val loss", num(summary["final_val_loss"])), ("ALC (val loss)", num(summary["alc"])),
            ("unigram entropy / log V", f"{num(summary['unigram_entropy'])} / {num(summary['log_v'])} nats"),
            ("tokens/s", num(summary["tokens_per_s"])), ("checkpoint", esc(summary["checkpoint"]))]
    if summary.get("ag_alpha0") is not None:
        rows.insert(5, ("AG alpha_0", num(summary["ag_alpha0"])))
    print_pairs(f"nb train: {summary['out']}", rows + _coverage_rows(summary), "nothing to report", kind=TEXT)


def _coverage_rows(summary: dict[str, object]) -> list[tuple[str, str]]:
    """--embedding-init pretrained:VECTORS: words with a vector, per embedding."""
    from nbcli.cli.render import num, percent

    rows = []
    for side, c in (summary.get("embedding_coverage") or {}).items():  # type: ignore[attr-defined]
        rows.append((f"{side} embedding: words with a vector",
                     f"{num(c['matched'])} of {num(c['words'])} ({percent(c['matched_fraction'])}; "
                     f"{num(c['matched_lowercased'])} lower-cased); {num(c['initialised'])} rows {c['missing']}"))
    return rows


def register(app: typer.Typer) -> None:
    app.command("train", epilog=EPILOG, cls=NbCommand)(train)


def _render_translation(summary: dict[str, object]) -> None:
    from nbcli.cli.console import esc
    from nbcli.cli.render import TEXT, num, print_pairs

    bleu = summary.get("final_val_bleu")
    best = summary.get("best_val_bleu")
    rows = [("steps", num(summary["steps"])), ("device", esc(summary["device"])),
            ("parameters", num(summary["parameters"])),
            ("pairs (skipped: too long)", f"{num(summary['pairs'])} ({num(summary['skipped_long_pairs'])})"),
            ("final val loss", num(summary["final_val_loss"])), ("ALC (val loss)", num(summary["alc"])),
            ("final val BLEU / chrF", f"{num(bleu)} / {num(summary['final_val_chrf'])}" if bleu is not None else "-"),
            ("best val BLEU (step)", f"{num(best)} ({num(summary['best_step'])})" if best is not None else "-"),
            ("ALC (val BLEU)", num(summary["alc_val_bleu"])),
            ("target unigram entropy / log V", f"{num(summary['unigram_entropy'])} / {num(summary['log_v'])} nats"),
            ("target tokens/s", num(summary["tokens_per_s"])), ("checkpoint", esc(summary["checkpoint"])),
            ("best checkpoint", esc(summary["best_checkpoint"])), ("BLEU signature", esc(summary["bleu_signature"]))]
    if summary.get("ag_alpha0") is not None:
        rows.insert(6, ("AG alpha_0", num(summary["ag_alpha0"])))
    print_pairs(f"nb train --task translation: {summary['out']}", rows + _coverage_rows(summary), "nothing to report",
                kind=TEXT)
