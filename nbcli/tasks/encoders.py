"""The encoder a classifier or tagger starts from (`--init BASE`), with its head and tokenizer.

    a transformers encoder folder or Hub repo id   AutoModel (safetensors only), its family read from
                                                   config.json's model_type through the one architecture
                                                   table (bert, roberta, distilbert; MiniLM is bert);
                                                   the head of that family (`nbcli.models.heads`)
    an nb MLM checkpoint (step-N.safetensors)      nbcli.models.lm's Transformer, its MLM output head unused (frozen);
    or run directory (best, else last step-N)      a plain head (first-token or mean pooling)
    nothing (from scratch)                         nbcli.models.lm's Transformer built as `nb train --objective
                                                   mlm` builds it (preset, --embedding-init: paper 002),
                                                   positions learned | sinusoidal | none

`--freeze-embeddings` stops the gradient of the input embedding (paper 002's frozen arm).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from nbcli.checkpoint.runs import run_checkpoint
from nbcli.errors import CheckpointError, ConfigError
from nbcli.models.heads import (FAMILIES, Classifier, EncoderFamily, EncoderSpec, Head, Pooling, family, head_dropout,
                                init_head)
from nbcli.tasks import classification, tagging

__all__ = ["encoder_from_scratch", "freeze_embeddings", "input_embedding_of", "is_transformers_folder", "open_encoder",
           "task_head"]

# Each task module chooses the head it puts on an encoder family (`head_class`).
TASK_HEADS = {"classification": classification.head_class, "tagging": tagging.head_class}


def task_head(task: str, row: EncoderFamily) -> type[Head]:
    """The head class `task` puts on an encoder of the family `row` (its module's `head_class`)."""
    if task not in TASK_HEADS:
        raise ConfigError(f"no head for task {task!r} ({' or '.join(TASK_HEADS)})")
    return TASK_HEADS[task](row)


def is_transformers_folder(path: Path) -> bool:
    """A transformers model folder: a config.json naming a model_type (an nb run directory's config.json
    is nb train's options, without one)."""
    if not (path.is_dir() and (path / "config.json").is_file()):
        return False
    from nbcli.errors import NbError
    from nbcli.jsonsafe import load_file

    try:
        config = load_file(path / "config.json", what="config.json")
    except (OSError, NbError):
        return True   # not nb's: reading it as a transformers folder says what is wrong with it
    return not isinstance(config, dict) or "model_type" in config


def _hf_encoder(path: Path, task: str, num_labels: int, pooling: Pooling) -> Classifier:
    from nbcli.checkpoint.architectures import by_model_type

    from nbcli.jsonsafe import load_file

    try:
        config = load_file(path / "config.json", error=CheckpointError, what="config.json")
    except OSError as err:
        raise CheckpointError(f"{path / 'config.json'}: not readable ({err.strerror or err})") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{path / 'config.json'}: a JSON {type(config).__name__}, not an object")
    style = by_model_type(config.get("model_type"))
    exportable = [name for name, f in FAMILIES.items() if f.export_class is not None]
    if style not in exportable:
        raise ConfigError(f"{path}: model_type {config.get('model_type')!r} is not an encoder nb can put a head on "
                          f"({', '.join(exportable)} families)")
    row = family(style)
    head_cls = task_head(task, row)
    try:
        from transformers import AutoModel
        from transformers.utils import logging as hf_logging
    except ImportError:
        raise ConfigError(f"{path}: fine-tuning a transformers encoder needs transformers: "
                          "pip install 'nbcli[hf]'") from None
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()   # stderr is nb's: one line on failure, a progress bar of its own
    kwargs: dict[str, Any] = {"add_pooling_layer": head_cls.reads_pooler} if row.pooling_flag else {}
    from nbcli.checkpoint.reader import open_checkpoint

    with open_checkpoint(path):   # nb's own reader first: a broken file is one line naming it, not a library's traceback
        pass
    try:
        encoder = AutoModel.from_pretrained(path, use_safetensors=True, **kwargs)
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path}: cannot load the encoder ({str(err).splitlines()[0]})") from None
    encoder.train()
    d = int(config.get("hidden_size") or config.get("dim"))
    head = head_cls(d, num_labels, head_dropout(config, row, head_cls), pooling)
    init_head(head, float(config.get("initializer_range", 0.02)))
    return Classifier(encoder, head, EncoderSpec("hf", row.name, config, path))


def _nb_encoder(path: Path, task: str, num_labels: int, pooling: Pooling, dropout: float) -> Classifier:
    from nbcli.models.lm import ModelConfig, Transformer
    from nbcli.train.state import load_model_tensors

    file = run_checkpoint(path)
    tensors, metadata = load_model_tensors(file)
    if "nb.config" not in metadata:
        raise CheckpointError(f"{file}: not an nb checkpoint (no nb.config) and not a transformers folder")
    cfg = ModelConfig.from_json(metadata["nb.config"])
    if cfg.objective != "mlm":
        raise CheckpointError(f"{file}: a {cfg.objective} run is causal; --init needs an mlm run (a bidirectional "
                              "encoder)")
    model = Transformer(cfg)
    model.load_nb_state_dict(tensors)
    return _nb_classifier(model, task, num_labels, pooling, dropout)


def _nb_classifier(model: Any, task: str, num_labels: int, pooling: Pooling, dropout: float) -> Classifier:
    # The MLM output layer (dense + LayerNorm, untied W, b) stays in the checkpoint but the head never
    # reads it: frozen, so AdamW leaves it out and DDP does not wait for its gradients (a trainable
    # parameter without one stops a multi-rank run at its second update).
    for unused in (model.mlm, model.head_weight, model.head_bias):
        if unused is not None:
            unused.requires_grad_(False)
    head = task_head(task, FAMILIES["nb"])(model.cfg.d_model, num_labels, dropout, pooling)
    init_head(head, model.cfg.init_std)
    from dataclasses import asdict

    return Classifier(model, head, EncoderSpec("nb", "nb", asdict(model.cfg)))


def encoder_from_scratch(tokenizer: Any, task: str, num_labels: int, *, preset: str, seq_len: int, dropout: float,
                         embedding_init: str, positions: str, pooling: Pooling, seed: int, d_model: int | None = None,
                         n_head: int | None = None, missing: str = "xavier",
                         coverage: dict[str, Any] | None = None,
                         options: Mapping[str, Any] | None = None) -> Classifier:
    """nb's encoder as `nb train --objective mlm --preset PRESET --embedding-init ... [--d-model D --n-head H
    --missing M]` builds it at step 0 (`nbcli.train.init`), with `positions` and a fresh head. Word
    vectors (pretrained:VECTORS) are matched to `tokenizer`'s words; their coverage report goes into
    `coverage`. `options`: TrainConfig fields over the preset's (n_layer, d_ff; norm, scale_embedding,
    init_scheme: paper 002 app. A.1-A.2's post-LN, x sqrt(D) and Xavier; embedding_standardise and
    embedding_shuffle: paper 002 sec. 3.4's Pre-trained_Xavier and Pre-trained_Shuffled, app. A.3's
    Xavier_Pre-trained)."""
    from nbcli.models.lm import Transformer
    from nbcli.train.config import build_config
    from nbcli.train.init import input_embedding, model_config

    cfg = build_config(preset, **(options or {}), objective="mlm", seq_len=seq_len, dropout=dropout, embedding_init=embedding_init,
                       embedding_missing=missing, d_model=d_model, n_head=n_head, seed=seed, positions=positions)
    mcfg = model_config(cfg, tokenizer)
    torch.manual_seed(seed)
    model = Transformer(mcfg)
    with torch.no_grad():
        model.tok_emb.weight.copy_(input_embedding(cfg, model.tok_emb.weight, tokenizer.vocab_size, None, tokenizer,
                                                   coverage))
    return _nb_classifier(model, task, num_labels, pooling, dropout)


def init_path(base: str) -> Path:
    """The local file or folder `--init BASE` names (a Hub repo id: its cached snapshot);
    CheckpointError when there is none (before anything else asks about it)."""
    from nbcli.resolve import local_path

    path = local_path(base, "model")
    if not path.exists():
        raise CheckpointError(f"--init {base}: no such file, folder or cached Hub repo")
    return path


def open_encoder(base: str, task: str, num_labels: int, *, pooling: Pooling = "first", dropout: float = 0.1,
                 ) -> Classifier:
    """The classifier of `--init BASE` (module doc) with a fresh head of `num_labels`."""
    path = init_path(base)
    if is_transformers_folder(path):
        return _hf_encoder(path, task, num_labels, pooling)
    return _nb_encoder(path, task, num_labels, pooling, dropout)


def input_embedding_of(model: Classifier) -> torch.nn.Parameter:
    """The encoder's input embedding matrix [V, d]."""
    if model.spec.kind == "nb":
        return model.encoder.tok_emb.weight
    return model.encoder.get_input_embeddings().weight


def freeze_embeddings(model: Classifier) -> None:
    """`--freeze-embeddings`: the input embedding keeps its initial values (paper 002)."""
    input_embedding_of(model).requires_grad_(False)
