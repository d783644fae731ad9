"""nb train classification and nb train tagging: an encoder (a transformers checkpoint, an nb MLM
run, or nb's encoder from scratch, paper 002) with a head on sentences (pairs) or on every word
(papers 001 tables 1, 2, 4 and 002 table 1; docs/classification.md), their options declared once.
The run itself is `nbcli.tasks.finetune.finetune` (imported when training: this module stays free
of torch, so `nb train --help` is fast)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Optional

from nbcli.resolve_datasets import DATASET_ID_HELP
from nbcli.tasks.base import Formatter, SummaryView, Task, TrainHooks
from nbcli.tasks.options import MAX_STEPS, REQUIRED, option
from nbcli.tasks.common_options import ArchitectureOptions, OptimizerOptions, RunOptions, SelectionOptions
from nbcli.tasks.presets import CLASSIFICATION_PRESETS

if TYPE_CHECKING:
    from nbcli.tasks.finetune import FinetuneConfig

EncoderPreset = Literal[(*("tiny", "small", "gpt2-124m", "roberta-8"), *CLASSIFICATION_PRESETS)]  # type: ignore[valid-type]


@dataclass
class FinetuneRunOptions(RunOptions):
    """RunOptions as fine-tuning words them (epochs decide the updates, one evaluation per epoch)."""

    corpus: list[str] = option(REQUIRED, "--corpus", metavar="FILE", help=(
        "Training data (repeatable): TSV with a header (GLUE), CSV, JSONL, parquet/Arrow or a `datasets` folder; "
        "tagging also CoNLL text (one token a line). Classification also reads a folder with one sub-folder per "
        "label, a file per document, as scikit-learn's load_files (BBC News, aclImdb/train/{neg,pos}): its "
        "sub-folders' names are the labels (docs/classification.md). " + DATASET_ID_HELP))
    steps: Optional[int] = option(None, "--steps", min=1, max=MAX_STEPS, help=(
        "Optimizer updates (default: --epochs decides)."))
    eval_every: Optional[int] = option(None, "--eval-every", metavar="K", min=1, max=MAX_STEPS, help=(
        "Evaluate every K steps and at the end (default: once per epoch)."))
    dropout: Optional[float] = option(None, "--dropout", metavar="P", help="Dropout probability (default 0.1).")


@dataclass
class EncoderOptions:
    """The encoder and head: fine-tuned (--init) or from scratch, and the schedule of fine-tuning."""

    preset: EncoderPreset = option("tiny", "--preset", metavar="NAME", help=(
        "nb's encoder from scratch (no --init): tiny (2x4x128), small (4x8x256), gpt2-124m (12x12x768), roberta-8 "
        "(8x12x768), or paper 002's encoder and training exactly as app. A.2 and Table 5 state them, "
        "paper002-{sst2,mnli}-{glove,bert,t5}: 3 layers, D 300/768/512, 8 heads (10 for GloVe), FFN 512, "
        "sinusoidal positions, lr 1e-4, Adam (0.9, 0.98, 1e-9), dropout 0.1, batch 128, Table 5's epochs; a "
        "constant rate without clipping, nb's choice where it states none (docs/classification.md 'Paper 002's "
        "presets'). An option given with a preset wins; summary.json's preset_overridden names the values it "
        "replaced."))
    init: Optional[str] = option(None, "--init", metavar="BASE", help=(
        "The encoder to fine-tune: an nb MLM run or step-N.safetensors (give -t), a transformers encoder folder "
        "(BERT, RoBERTa, DistilBERT, MiniLM, ...; its tokenizer) or a cached Hub repo id. Without it nb's encoder "
        "is trained from scratch (--preset, --embedding-init, --positions; paper 002)."))
    valid: Optional[list[str]] = option(None, "--valid", metavar="[NAME=]FILE", help=(
        "Validation data (repeatable): NAME=FILE, each set evaluated on every record (log.jsonl "
        "val_NAME_accuracy, val_NAME_f1, val_NAME_loss; the first set also as val_accuracy ...), e.g. --valid "
        "matched=dev_m.tsv --valid mismatched=dev_mm.tsv; a bare FILE is named valid; FILE may be a Hub dataset id (as --corpus). The best step is chosen by "
        "--select-by (default: the first set's highest accuracy); each set's own best is reported too."))
    freeze_embeddings: bool = option(False, "--freeze-embeddings", help=(
        "Keep the token embeddings at their initial values (paper 002 table 3's 'Train: no')."))
    text_field: Optional[str] = option(None, "--text-field", metavar="NAME", help=(
        "The text column/field (default: text, else sentence); tagging: the token list of JSONL/parquet/Arrow "
        "records (default: tokens) or CoNLL's 0-based token column (default 0; 1 for CoNLL-U and GermEval, whose "
        "column 0 numbers the tokens)."))
    label_field: Optional[str] = option(None, "--label-field", metavar="NAME", help=(
        "The label column/field (default: label); tagging: the tag list of JSONL/parquet/Arrow records (default: "
        "ner_tags; integer tags are named by the data's ClassLabel feature) or CoNLL's 0-based tag column "
        "(default: the last; CoNLL-U's UPOS: 3)."))
    label_names: Optional[str] = option(None, "--label-names", metavar="A,B,...|FILE", help=(
        "The labels in id order (integer labels name themselves by it; a datasets features file names them too). "
        "Default: the ClassLabel names of a datasets parquet/Arrow file or folder (or a dataset_info.json beside "
        "the data), else the names in the training data, sorted (integer labels in numeric order; tagging: "
        "integer tags are named 0..the largest)."))
    lr_schedule: Optional[Literal["cosine", "linear", "inverse-sqrt", "constant"]] = option(
        None, "--lr-schedule", help=(
            "After the warm-up: linear decay to 0 at the last update (default; transformers' "
            "get_linear_schedule_with_warmup), cosine decay to 0, inverse-sqrt (fairseq), or constant (paper 002 names "
            "no schedule: its presets)."))
    epochs: Optional[float] = option(None, "--epochs", metavar="E", help=(
        "Passes over the training data (default 3; --steps overrides)."))


@dataclass
class SentenceOptions:
    """Classification only: the second sentence of a pair and the sentence vector."""

    text_pair_field: Optional[str] = option(None, "--text-pair-field", metavar="NAME", help=(
        "The second sentence of a pair (MNLI sentence2, QNLI sentence); encoded as the encoder's pair ([CLS] a "
        "[SEP] b [SEP])."))
    pooling: Optional[Literal["first", "mean"]] = option(None, "--pooling", help=(
        "The sentence vector the head reads: first (the first token, <s> / [CLS]; default, and the only one for a "
        "transformers encoder's own head) or mean (the mean over real tokens; nb's encoder)."))


class ClassificationTask(Task):
    name = "classification"
    help = "an encoder with a head on sentences or sentence pairs, validated by accuracy and F1."
    description = (
        "Fine-tune an encoder with a head (docs/classification.md): log.jsonl adds val_accuracy, val_f1, val_loss "
        "(and per --valid set) at evaluations, summary.json best_step and best_epoch (by --select-by: default the first "
        "set's highest accuracy, the earliest on a tie), best_val_accuracy (the first set's accuracy there), "
        "best_by_set (each set's own best) and the final metrics; DIR/best.safetensors is the model at best_step, which "
        "nb predict, eval and export read from the run directory. Under torchrun it trains with DDP.")
    examples = """\
  nb train classification --init bert-base-uncased --corpus MNLI/train.tsv --text-field sentence1 \\
      --text-pair-field sentence2 --valid matched=MNLI/dev_matched.tsv --valid mismatched=MNLI/dev_mismatched.tsv \\
      --epochs 3 --lr 2e-5 --out runs/mnli
  nb train --task classification --init runs/roberta8-ag --tokenizer spm.model --corpus SST-2/train.tsv \\
      --valid SST-2/dev.tsv --out runs/sst2-ag
  nb train classification -t spm.model --preset small --embedding-init xavier --positions sinusoidal \\
      --corpus SST-2/train.tsv --valid dev=SST-2/dev.tsv --lr 1e-4 --epochs 10 --seed 1 --out runs/sst2-xavier-s1
  nb train classification -t words:min-freq=2,lower --embedding-init pretrained:glove.6B.300d.txt \\
      --d-model 300 --n-head 10 --corpus SST-2/train.tsv --valid dev=SST-2/dev.tsv --out runs/sst2-glove
"""
    option_groups: tuple[type, ...] = (FinetuneRunOptions, EncoderOptions, ArchitectureOptions, SelectionOptions,
                                      OptimizerOptions, SentenceOptions)

    def config(self, values: dict[str, Any]) -> FinetuneConfig:
        """The FinetuneConfig a run of `values` (every option's value) is made with: a paper preset's
        values, then the options given over them (`preset_overridden` names what they replaced); nothing read."""
        from nbcli.tasks.data import DataSpec
        from nbcli.tasks.presets import with_classification_preset
        from nbcli.tasks.finetune import FinetuneConfig
        from nbcli.train.config import check_warmup

        v = values
        scratch = dict(n_layer=v["n_layer"], d_ff=v["d_ff"], norm=v["norm"], scale_embedding=v["scale_embedding"],
                       init_scheme=v["init_scheme"], embedding_standardise=v["embedding_standardise"],
                       embedding_shuffle=v["embedding_shuffle"] or None,
                       embedding_shuffle_mode=v["shuffle_mode"] if v["embedding_shuffle"] else None,
                       embedding_unicode_errors=v["unicode_errors"])
        options = dict(
            init=v["init"], tokenizer=None if v["tokenizer"] is None else str(v["tokenizer"]),
            label_names=v["label_names"], pooling=v.get("pooling"), warmup_ratio=v["warmup_ratio"], warmup=v["warmup"],
            epochs=v["epochs"], steps=v["steps"], batch_size=v["batch_size"], grad_accum=v["grad_accum"], lr=v["lr"],
            dropout=v["dropout"], eval_every=v["eval_every"], save_every=v["save_every"], seed=v["seed"],
            preset=v["preset"], embedding_init=v["embedding_init"], embedding_missing=v["missing"],
            d_model=v["d_model"], n_head=v["n_head"], positions=v["positions"],
            freeze_embeddings=v["freeze_embeddings"], device=v["device"], dtype=v["dtype"],
            adam_beta1=v["adam_beta1"], adam_beta2=v["adam_beta2"], adam_eps=v["adam_eps"],
            weight_decay=v["weight_decay"], grad_clip=v["grad_clip"], lr_schedule=v["lr_schedule"],
            select_by=v["select_by"],
            encoder_options={k: x for k, x in scratch.items() if x is not None})
        check_warmup(v["warmup"], v["warmup_ratio"])
        o = with_classification_preset({k: x for k, x in options.items() if x is not None})
        data = DataSpec(task=self.name, text_field=v["text_field"], pair_field=v.get("text_pair_field"),  # type: ignore[arg-type]
                        label_field=v["label_field"] or "label", max_len=v["seq_len"] or 128)
        return FinetuneConfig(data=data, **o)  # type: ignore[arg-type]

    def train(self, values: dict[str, Any], hooks: TrainHooks) -> dict[str, Any]:
        from nbcli.tasks.data import parse_valid
        from nbcli.tasks.finetune import finetune

        v = values
        cfg = self.config(v)
        steps, stop_at = v["steps"], v["stop_at"]
        hooks.on_start(min(steps, stop_at or steps) if steps else stop_at)
        return finetune(cfg, v["corpus"], parse_valid(v["valid"] or []), v["out"], resume=v["resume"],
                        stop_at=stop_at, on_step=hooks.on_step, on_warning=hooks.on_warning,
                        callbacks=hooks.callbacks).as_dict()

    eval_options = frozenset({"batch_size", "device"})
    eval_view = "labelled"

    def evaluate(self, run: Path | None, corpus: list[str], **o: Any) -> dict[str, Any]:
        """Every record of `corpus` through the run's classifier: loss, accuracy, F1, Matthews
        (classification) or entity P/R/F1 (tagging) (`nbcli.tasks.inference.evaluate_classifier`)."""
        from nbcli.errors import ConfigError
        from nbcli.tasks.inference import evaluate_classifier, load_classifier

        if run is None:
            raise ConfigError(f"CHECKPOINT is required: a run of nb train {self.name}")
        loaded = load_classifier(run, o["device"])
        if loaded.spec.task != self.name:
            raise ConfigError(f"{run}: a {loaded.spec.task} run; give --task {loaded.spec.task}")
        return evaluate_classifier(loaded, corpus, o["batch_size"])

    predict_options = frozenset({"batch_size", "device"})

    def predict_report(self, run: Path, corpus: list[str], output: Path | None, **o: Any) -> dict[str, Any]:
        """Every record of `corpus` labelled by the run's classifier, labels by name with probabilities
        (`nbcli.tasks.inference.predict_report`; `output` "-": standard output)."""
        from nbcli.tasks.inference import predict_report

        return predict_report(run, corpus, output, batch_size=o["batch_size"], device=o["device"])

    def export(self, run: Path, out: Path, **o: Any) -> dict[str, Any]:
        """A run fine-tuned from a transformers encoder as that family's For{Sequence,Token}Classification
        folder (`nbcli.tasks.classifier_export`; a run directory: its last checkpoint)."""
        from nbcli.tasks.classifier_export import export_classifier

        return export_classifier(run, out).as_dict()

    def summary_view(self, summary: dict[str, Any], num: Formatter = str) -> SummaryView:
        from nbcli.tasks.lm import closing_rows

        s = summary
        best = s.get("best_val_accuracy")
        rows = [("steps (per epoch)", f"{num(s['steps'])} ({num(s['steps_per_epoch'])})"), ("device", s["device"]),
                ("best val accuracy (step, epoch)", f"{num(best)} ({num(s['best_step'])}, {num(s['best_epoch'])})"
                 if best is not None else "- (no --valid)"),
                ("best step chosen by", s.get("select_by", "val_accuracy"))]
        for name, b in s.get("best_by_set", {}).items():
            rows.append((f"best {b['metric']} (step, epoch)", f"{num(b['value'])} ({num(b['step'])}, {num(b['epoch'])})"))
        for name, metrics in s["final"].items():
            rows.append((f"final {name}: accuracy / F1 / loss",
                         f"{num(metrics['accuracy'])} / {num(metrics['f1'])} / {num(metrics['loss'])}"))
        rows += [("tokens/s", num(s["tokens_per_s"])), ("checkpoint", s["checkpoint"]),
                 ("best checkpoint", s.get("best_checkpoint") or "-")]
        return SummaryView(f"nb train --task {s['task']}: {s['out']}", rows + closing_rows(s, num))


class TaggingTask(ClassificationTask):
    name = "tagging"
    help = "an encoder with a head on every word (CoNLL, NER), validated by accuracy and entity F1."
    description = ClassificationTask.description.replace("Fine-tune an encoder with a head",
                                                         "Fine-tune an encoder with a head on every word")
    examples = """\
  nb train tagging --init xlm-roberta-base --corpus om/train.conll --valid dev=om/dev.conll --out runs/ner
  nb train --task tagging --init bert-base-cased --corpus conll2003/train.parquet \\
      --valid conll2003/validation.parquet --out runs/conll03   # the Hub's parquet: tokens, ner_tags, ClassLabel names
"""
    option_groups = (FinetuneRunOptions, EncoderOptions, ArchitectureOptions, SelectionOptions, OptimizerOptions)
