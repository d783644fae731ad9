"""Initialisations from the papers, built on the shared pure functions of `nbcli.ops`.

* Output bias (paper 000 sec. 3): `ops.unigram_log_prior` (the one smoothing formula,
  `nbcli.counts.log_unigram`) of the training-token counts.
* W rescaling (paper 000 sec. 4.1, fn. 3): `ops.rescale_w`, as `nb patch-checkpoint --rescale-w`. A tied W
  is the input embedding itself, so rescaling it rescales the embedding: the model then reads
  c E[x] (times sqrt(d) where it scales embeddings) beside unchanged positions, c = ||b|| / ||W||
  (docs/training.md '--rescale-w'); the paper's models have their own W (`--untie-embeddings`).
* Input embedding (paper 002): N(0, init_std) (GPT-2), Xavier uniform U(+-sqrt(6/(V+d))) (sec. 3.1),
  rows of a pretrained safetensors tensor (same vocabulary size required; `nb transplant-embeddings`
  makes one for another tokenizer's vocabulary, sec. 3.3), or a word-vector file (GloVe/word2vec/
  fastText, sec. 3.2: rows matched by word, the rest as --missing says; `nbcli.vectors.vocabulary`;
  told apart from a checkpoint by content, `nbcli.vectors.reader.is_vector_file`), optionally standardised (eq. 1 Xavier's
  statistics, eq. 4 another tensor's, or explicit: `surgery.standardise_to`, the patch-checkpoint
  function), Zipfian-whitened first if asked (Yokoi et al. 2024, `ops.zipfian_whiten` under the add-k
  unigram of the training counts), and/or shuffled (sec. 3.4, rows / rows-columns / elements: `ops.shuffle_embeddings`).
  The draws are seeded by --seed itself for the one embedding of an LM or encoder; a model with several embeddings names each one's role ("source_embedding",
  "target_embedding", "shared_embedding" in a translation model) and each draw (the Xavier matrix, the
  --missing xavier rows, the permutation) then has its own stream, `nbcli.seeds.stream_seed(--seed, ROLE,
  "xavier"|"missing"|"shuffle")`, so distinct tensors never get the same draw.

`build_model` applies them to a fresh `nbcli.models.lm.Transformer` (GPT-2 init) for `nb train`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nbcli import ops, surgery
from nbcli.array_ops import unigram_weights
from nbcli.errors import CheckpointError, ConfigError, naming
from nbcli.models.lm import ModelConfig, Transformer
from nbcli.seeds import stream_seed
from nbcli.tokenizers import Tokenizer
from nbcli.train.config import TrainConfig
from nbcli.train.data import never_predicted


def output_bias(counts: np.ndarray, vocab_size: int, k: float) -> torch.Tensor:
    """b = log p_unigram (float32 [V]), counts zero-padded to the model's vocabulary."""
    return ops.unigram_log_prior(counts, vocab_size, k)


def rescale_output_weight(weight: torch.Tensor, bias: torch.Tensor, norm: str) -> torch.Tensor:
    """W scaled so its (fro|spectral) norm equals ||b||_2 (paper 000 sec. 4.1)."""
    return ops.rescale_w(weight, bias, norm)  # type: ignore[arg-type]


def parse_pretrained(spec: str) -> tuple[Path, str | None]:
    """`pretrained:FILE[:TENSOR]` -> (FILE, TENSOR or None)."""
    from nbcli.resolve import looks_like_repo_id

    body = spec[len("pretrained:"):]
    if not body:
        raise ConfigError("--embedding-init pretrained:FILE[:TENSOR]: FILE is missing")
    path, _, tensor = body.partition(":") if not Path(body).exists() else (body, "", "")
    if not Path(path).exists() and not looks_like_repo_id(path):
        raise ConfigError(f"--embedding-init pretrained:{path}: no such file (a word-vector file, a safetensors "
                          "checkpoint, a model folder or a Hub repo id)")
    return Path(path), (tensor or None)


def pretrained_tensor(ckpt: Any, path: Path, name: str | None) -> str:
    """The tensor `pretrained:FILE[:TENSOR]` names: TENSOR, else the file's only matrix, else the
    `input_embedding` role of the detected architecture."""
    from nbcli.checkpoint.roles import resolve_roles

    if name is None:
        matrices = [n for n in ckpt.names() if len(ckpt.shape(n)) == 2]
        name = matrices[0] if len(matrices) == 1 else resolve_roles(ckpt).require(
            "input_embedding", "--embedding-init pretrained")
    if name not in ckpt:
        raise CheckpointError(f"{path}: no tensor {name!r}")
    return name


def pretrained_vectors(cfg: TrainConfig) -> Path | None:
    """The word-vector file of `--embedding-init pretrained:VECTORS`, None for normal, xavier or a checkpoint."""
    from nbcli.vectors.reader import is_vector_file

    if not cfg.embedding_init.startswith("pretrained:"):
        return None
    path, name = parse_pretrained(cfg.embedding_init)
    return path if name is None and is_vector_file(path) else None


def check_pretrained_vocab(cfg: TrainConfig, tokenizer: Tokenizer, *, allow_mismatch: bool = False) -> list[str]:
    """--embedding-init pretrained:FILE against the training tokenizer, before any work, by nb's one
    policy (nbcli.checkpoint.vocab): FILE's rows are indexed by the tokenizer it records (a transplant
    output's target tokenizer, an nb checkpoint's own) or its model folder holds; the training
    tokenizer must be that one (`allow_mismatch`: a warning) and fit its rows. The warnings."""
    from nbcli.checkpoint.reader import open_checkpoint
    from nbcli.checkpoint.vocab import check_vocab, model_vocab, tokenizer_vocabulary

    if not cfg.embedding_init.startswith("pretrained:"):
        return []
    path, name = parse_pretrained(cfg.embedding_init)
    if pretrained_vectors(cfg) is not None:
        return []  # word vectors are matched by word, whatever the tokenizer (nbcli.vectors.vocabulary)
    with open_checkpoint(path) as ckpt:
        pretrained = model_vocab(ckpt, ckpt.shape(pretrained_tensor(ckpt, path, name))[0])
    return check_vocab(tokenizer_vocabulary(tokenizer, f"--tokenizer {tokenizer.path}"), pretrained,
                       allow_mismatch=allow_mismatch, error=ConfigError).warnings


def pretrained_rows(spec: str, vocab_size: int, d_model: int, tokenizer_rows: int | None = None) -> torch.Tensor:
    """The [V, d] input-embedding tensor of a safetensors file: TENSOR, else the file's only matrix,
    else the `input_embedding` role of the detected architecture. Its shape must equal the model's,
    or have `tokenizer_rows` rows when the model appends rows after the tokenizer's (MLM `<mask>`)."""
    from nbcli.checkpoint.reader import open_checkpoint

    path, name = parse_pretrained(spec)
    with open_checkpoint(path) as ckpt:
        name = pretrained_tensor(ckpt, path, name)
        rows = ckpt.get_float(name)
    if rows.ndim != 2:
        raise CheckpointError(f"{path}: tensor {name!r} has shape {list(rows.shape)}, expected [V, d]")
    if rows.shape[0] != vocab_size and rows.shape[0] != tokenizer_rows:
        raise ConfigError(f"--embedding-init: {path} tensor {name!r} has {rows.shape[0]} rows but the "
                          f"vocabulary has {vocab_size} (vocabulary sizes must match)")
    if rows.shape[1] != d_model:
        raise ConfigError(f"--embedding-init: {path} tensor {name!r} has width {rows.shape[1]} but the model's "
                          f"d_model is {d_model}")
    if not bool(torch.isfinite(rows).all()):
        raise CheckpointError(f"{path}: tensor {name!r} holds NaN or infinite values; it cannot initialise "
                              "the embedding")
    return rows


def draw_seed(seed: int, role: str | None, draw: str) -> int:
    """The seed of one random draw of an embedding's init: `seed` itself for a model's only embedding
    (role None: an LM's or encoder's), else the stream of (seed, role, draw) (`nbcli.seeds`)."""
    return seed if role is None else stream_seed(seed, role, draw)


def input_embedding(cfg: TrainConfig, current: torch.Tensor, tokenizer_rows: int | None = None,
                    counts: np.ndarray | None = None, tokenizer: Tokenizer | None = None,
                    coverage: dict[str, Any] | None = None, role: str | None = None) -> torch.Tensor:
    """The initial tok_emb.weight [V, d] for cfg (current holds the default N(0, 0.02) draw). A
    pretrained file with only the tokenizer's rows leaves the appended rows (MLM `<mask>`) at their
    current init. Word vectors are matched to `tokenizer`'s words (their coverage report goes into
    `coverage`). Order: init, Zipfian whitening (cfg.embedding_whiten, weights from `counts`, the
    training counts), standardisation, shuffling (the order of nb patch-checkpoint). `role` names one
    of several embeddings of a model (None: the only one): its random draws then come from streams of
    (cfg.seed, role) (`draw_seed`, module docstring)."""
    V, d = current.shape
    vectors = pretrained_vectors(cfg)
    if vectors is None and cfg.embedding_unicode_errors is not None:
        raise ConfigError(f"--unicode-errors applies to word vectors; --embedding-init {cfg.embedding_init} is a "
                          "checkpoint's tensor")
    if vectors is not None:
        from nbcli.vectors.vocabulary import vector_embedding

        if tokenizer is None:
            raise ConfigError("--embedding-init pretrained:VECTORS needs the tokenizer whose words it matches")
        seed = draw_seed(cfg.seed, role, "missing")
        rows, report = vector_embedding(vectors, tokenizer, d, cfg.embedding_missing, seed,  # type: ignore[arg-type]
                                        unicode_errors=cfg.embedding_unicode_errors)
        emb = current.detach().clone().to(rows.dtype)
        emb[:rows.shape[0]] = rows
        if coverage is not None:
            coverage.update(report)
    elif cfg.embedding_init == "normal":
        emb = current.detach().clone()
    elif cfg.embedding_init == "xavier":
        emb = ops.xavier_uniform(V, d, draw_seed(cfg.seed, role, "xavier"))
    else:
        rows = pretrained_rows(cfg.embedding_init, V, d, tokenizer_rows)
        emb = current.detach().clone().to(rows.dtype)
        emb[:rows.shape[0]] = rows
    with naming(f"--embedding-init {cfg.embedding_init}"):
        if cfg.embedding_whiten:
            if counts is None:
                raise ConfigError("--embedding-whiten needs the training counts")
            with naming("--embedding-whiten"):
                emb = ops.zipfian_whiten(emb, unigram_weights(counts, V, cfg.smoothing_k))
        if cfg.embedding_standardise is not None:
            emb = surgery.standardise_to(emb, surgery.parse_standardise(cfg.embedding_standardise))
        if cfg.embedding_shuffle:
            emb = ops.shuffle_embeddings(emb, draw_seed(cfg.seed, role, "shuffle"), cfg.embedding_shuffle_mode)
    return emb.to(current.dtype)


def mask_token_id(tokenizer: Tokenizer) -> tuple[int, int]:
    """(mask id, model vocabulary size) for MLM: the tokenizer's <mask>/[MASK] piece if it has one,
    otherwise one extra row appended after the tokenizer's vocabulary."""
    for i in sorted(tokenizer.special_ids) + list(range(min(tokenizer.vocab_size, 1000))):
        if tokenizer.piece(i) in ("<mask>", "[MASK]"):
            return i, tokenizer.vocab_size
    return tokenizer.vocab_size, tokenizer.vocab_size + 1


def model_config(cfg: TrainConfig, tokenizer: Tokenizer) -> ModelConfig:
    mask_id, vocab = (None, tokenizer.vocab_size)
    specials: tuple[int, ...] = ()
    if cfg.objective == "mlm":
        mask_id, vocab = mask_token_id(tokenizer)
        specials = tuple(sorted(never_predicted(tokenizer) | {mask_id}))
    return ModelConfig(vocab_size=vocab, seq_len=cfg.seq_len, n_layer=cfg.n_layer, n_head=cfg.n_head,
                       d_model=cfg.d_model, d_ff=cfg.d_ff, dropout=cfg.dropout, objective=cfg.objective,
                       norm=cfg.norm, positions=cfg.positions, scale_embedding=cfg.scale_embedding,  # type: ignore[arg-type]
                       init=cfg.init_scheme,  # type: ignore[arg-type]
                       tie_embeddings=cfg.tie_embeddings, output_bias=cfg.bias_init != "none",
                       mask_id=mask_id, special_ids=specials)


def build_model(cfg: TrainConfig, mcfg: ModelConfig, counts: np.ndarray, tokenizer_rows: int | None = None,
                tokenizer: Tokenizer | None = None, coverage: dict[str, Any] | None = None) -> Transformer:
    """The model with paper 000's bias init (+ W rescale) and paper 002's embedding init applied
    (`tokenizer`, `coverage`: word vectors' matching, see input_embedding)."""
    torch.manual_seed(cfg.seed)
    model = Transformer(mcfg)
    with torch.no_grad():
        emb = input_embedding(cfg, model.tok_emb.weight, tokenizer_rows, counts, tokenizer, coverage)
        model.tok_emb.weight.copy_(emb)
        if model.head_bias is not None and cfg.bias_init == "unigram":
            model.head_bias.copy_(output_bias(counts, mcfg.vocab_size, cfg.smoothing_k))
            if cfg.rescale_w is not None:   # tied: W is tok_emb.weight, rescaled with it (module doc)
                model.output_weight.copy_(rescale_output_weight(model.output_weight, model.head_bias, cfg.rescale_w))
    return model


START_MARGIN = 0.5   # nats above log V before check_start warns


def check_start(loss: float, vocab_size: int, cfg: TrainConfig, warn: Callable[[str], None]) -> None:
    """Warn when the step-0 loss exceeds log V, the loss of a uniform guess, by more than START_MARGIN
    (an initialisation clearly worse than chance; paper 000's --rescale-w in nb's model is the known
    case, see the README). The margin: small random logits (std s) already cost about s^2 / 2 nats
    over log V, so an ordinary zero-bias start sits a few hundredths above log V (0.03 for the tiny
    preset, 0.19 for roberta-8 in BENCHMARKS.md) and should not warn."""
    log_v = math.log(vocab_size)
    if not loss > log_v + START_MARGIN:
        return
    cause = (f" --rescale-w {cfg.rescale_w} scaled W to ||b||_2: the logits' noise then has about the rms of b "
             "(several nats) because the final hidden state has unit-variance coordinates; see README "
             "'--rescale-w'" if cfg.rescale_w else "")
    if cfg.rescale_w and cfg.tie_embeddings:
        cause += " (W is tied: the input embedding was scaled with it; --untie-embeddings gives W its own matrix)"
    if not cfg.rescale_w and cfg.tie_embeddings and cfg.embedding_init.startswith("pretrained:") \
            and not cfg.embedding_standardise:
        cause = (" The output layer is tied to the pretrained embedding, whose rows (norms of several units, against "
                 "N(0, 0.02)'s 0.02 sqrt(d)) make the first logits large: add --untie-embeddings (the output layer "
                 "its own W) or --embedding-standardise xavier (the vectors at Xavier's scale; paper 002 eq. 1).")
    warn(f"step-0 loss {loss:.2f} nats exceeds log V = {log_v:.2f} (a uniform guess) by more than {START_MARGIN} "
         f"nats: the initialisation starts worse than chance.{cause}")


# ---------------------------------------------------------------------------------------------
# Metrics
