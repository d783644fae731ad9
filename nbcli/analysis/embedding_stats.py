"""Embedding statistics as paper 002 tabulates them (Kim et al., tables 2, 6 and 8): the range
(min, max), mean and sample standard deviation of all entries of an embedding matrix, and the same
scaled by sqrt(D) as table 6 scales them (the embedding a Transformer adds to its positional
encoding is x * sqrt(D)), for a checkpoint's input and output embeddings, for word vectors (GloVe, word2vec: table 6) and
their table 4 transforms, and for a pretrained embedding before and after each of nb's initialisations.

Initialisations (`INITIALISATIONS`, the functions of `nbcli.ops`, as nb patch-checkpoint and nb
train apply them):
    xavier               U(+-sqrt(6/(N+D))) of the source's shape, seeded (sec. 3.1)
    pretrained           the source as it is
    pretrained-xavier    eq. 1: (x - mean) * sigma_xavier / sigma + 0 (table 2's "BERT_Xavier")
    xavier-pretrained    eq. 4: the Xavier draw standardised to the source's mean and sigma (table 8)
    pretrained-shuffled  sec. 3.4: the source shuffled (--shuffle-mode; the statistics are the
                         source's, as table 2's note says)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from nbcli import ops
from nbcli.errors import ConfigError, naming

INITIALISATIONS = ("xavier", "pretrained", "pretrained-xavier", "xavier-pretrained", "pretrained-shuffled")


def embedding_row(label: str, x: torch.Tensor) -> dict[str, Any]:
    """One table row: shape, min, max, mean, sample std (ddof 1) of all entries, float64 in row
    blocks (`ops.tensor_summary`), and the same times sqrt(D) (table 6's "(Scaled)")."""
    if x.ndim != 2 or 0 in x.shape:
        raise ConfigError(f"{label}: expected a non-empty [V, D] matrix, got shape {list(x.shape)}")
    summary = ops.tensor_summary(x)
    if not all(math.isfinite(summary[k]) for k in ("min", "max", "mean", "std")):
        raise ConfigError(f"{label}: the matrix holds NaN or infinite values")
    scale = math.sqrt(x.shape[1])
    stats = {k: summary[k] for k in ("min", "max", "mean", "std")}
    return {"label": label, "shape": list(x.shape), **stats, "scale": scale,
            "scaled": {k: v * scale for k, v in stats.items()}}


def initialisations(source: torch.Tensor, seed: int = 0, shuffle_mode: ops.ShuffleMode = "rows",
                    which: tuple[str, ...] = INITIALISATIONS) -> list[tuple[str, torch.Tensor]]:
    """(name, matrix) for each initialisation in `which`, from the [N, D] `source` (see the module
    docstring); the Xavier draw and the shuffle use `seed`."""
    unknown = [name for name in which if name not in INITIALISATIONS]
    if unknown:
        raise ConfigError(f"unknown initialisation {unknown[0]!r}: expected {', '.join(INITIALISATIONS)}")
    n, d = source.shape
    xavier = ops.xavier_uniform(n, d, seed)
    mean, std = ops.embedding_stats(source)
    make: dict[str, Callable[[], torch.Tensor]] = {
        "xavier": lambda: xavier,
        "pretrained": lambda: source,
        "pretrained-xavier": lambda: ops.standardise_embeddings(source),
        "xavier-pretrained": lambda: ops.standardise_embeddings(xavier, mean, std),
        "pretrained-shuffled": lambda: ops.shuffle_embeddings(source, seed, shuffle_mode),
    }
    return [(name, make[name]()) for name in which]


def embedding_table(matrices: list[tuple[str, torch.Tensor]]) -> list[dict[str, Any]]:
    """`embedding_row` for each (label, matrix)."""
    return [embedding_row(label, x) for label, x in matrices]


# ---------------------------------------------------------------------------------------------
# Reading a checkpoint (the one reader and architecture table)


def embedding_stats_report(checkpoint_path: Any, *, arch: str = "auto", mapping: list[str] | tuple[str, ...] = (),
                           tensor: str | None = None, inits: tuple[str, ...] = (), seed: int = 0,
                           shuffle_mode: ops.ShuffleMode = "rows") -> dict[str, Any]:
    """The `nb embedding-stats` report: rows for the checkpoint's input embedding and (untied) output
    weight, or for `tensor` alone; then, with `inits`, one row per initialisation of that source
    (the input embedding, or `tensor`)."""
    from nbcli.checkpoint import open_checkpoint, parse_role_map, resolve_roles
    from nbcli.errors import CheckpointError

    with open_checkpoint(checkpoint_path) as ckpt:
        if tensor is not None:
            if tensor not in ckpt:
                raise CheckpointError(f"{checkpoint_path}: no tensor named {tensor!r}")
            named = [(tensor, "tensor", tensor)]
            architecture, tied = None, None
        else:
            roles = resolve_roles(ckpt, arch, parse_role_map(list(mapping)))
            architecture, tied = roles.architecture, roles.tied
            emb = roles.require("input_embedding", "embedding statistics")
            named = [(emb, "input_embedding", emb)]
            out = roles.get("output_weight")
            if out is not None and out != emb:
                named.append((out, "output_weight", out))
        matrices, sources = [], {}
        for name, role, label in named:
            if len(ckpt.shape(name)) != 2:
                raise CheckpointError(f"{ckpt.shard_of(name)}: tensor {name!r} has shape {list(ckpt.shape(name))}, "
                                      "expected [V, D]")
            x = ckpt.get_float(name)
            sources[role] = x
            matrices.append((role if role != "tensor" else label, x))
        rows = []
        for (label, x), (name, role, _) in zip(matrices, named):
            with _naming_tensor(ckpt, name):
                rows.append({**embedding_row(label, x), "tensor": name, "role": role, "initialisation": None})
        source_name, source_role = named[0][0], named[0][1]
        source = sources[source_role]
        with _naming_tensor(ckpt, source_name):
            for init, matrix in initialisations(source, seed, shuffle_mode, inits):
                row = embedding_row(init, matrix)
                rows.append({**row, "tensor": source_name, "role": source_role, "initialisation": init})
    return {"checkpoint": str(checkpoint_path), "architecture": architecture, "tied": tied, "source": source_name,
            "initialisations": list(inits), "seed": seed, "shuffle_mode": shuffle_mode, "rows": rows}


def _naming_tensor(ckpt: Any, name: str) -> Any:
    return naming(f"{ckpt.shard_of(name)}: tensor {name!r}")


# ---------------------------------------------------------------------------------------------
# Reading word vectors (the one word-vector reader, table 4's transforms)


def vectors_stats_report(vectors_path: Any, *, transforms: tuple[str, ...] = (), positions: Any = None,
                         inits: tuple[str, ...] = (), seed: int = 0, shuffle_mode: ops.ShuffleMode = "rows",
                         limit: int | None = None, duplicates: Any = "error",
                         vocabulary: Any = None, unicode_errors: Any = None) -> dict[str, Any]:
    """`nb embedding-stats --vectors`: table 6 for a word-vector file. Rows: the vectors as read; the
    matrix after each prefix of `transforms` (nbcli.vectors.transforms, in order); the positional
    encodings added (table 6's "Pos. Encoding"), when a pos-enc transform is in the chain; then one
    row per initialisation in `inits` of the vectors as read (xavier: table 6's "Xavier" of the same
    N x D; pretrained-xavier: its "Pretrained_Xavier"). `vocabulary`: a word-list file, the only
    words kept (table 6's 5893 x 300 Multi30k rows)."""
    from nbcli.vectors.reader import read_vectors, read_word_list
    from nbcli.vectors.transforms import Positions, positional_table, transform_chain

    positions = positions or Positions()
    keep = None if vocabulary is None else read_word_list(vocabulary)
    wv = read_vectors(vectors_path, limit=limit, duplicates=duplicates, vocabulary=keep, unicode_errors=unicode_errors)
    source = torch.from_numpy(wv.vectors)
    path = str(vectors_path)
    base = {"tensor": path, "role": "vectors"}
    with naming(path):
        rows = [{**embedding_row("vectors", source), **base, "initialisation": None, "transform": None}]
        for label, matrix in transform_chain(source, transforms, positions):
            rows.append({**embedding_row(label, matrix), **base, "initialisation": None, "transform": label})
        if any(name.startswith("pos-enc") for name in transforms):
            table = positional_table(source.shape[0], source.shape[1], positions)
            rows.append({**embedding_row("positional-encoding", table), **base, "initialisation": None,
                         "transform": "positional-encoding"})
        for init, matrix in initialisations(source, seed, shuffle_mode, inits):
            rows.append({**embedding_row(init, matrix), **base, "initialisation": init, "transform": None})
    return {"checkpoint": path, "architecture": f"{wv.format} word vectors", "tied": None, "source": path,
            "vectors": wv.summary(), "transforms": list(transforms),
            "positions": positions.as_dict() if any(t.startswith("pos-enc") for t in transforms) else None,
            "initialisations": list(inits), "seed": seed, "shuffle_mode": shuffle_mode, "rows": rows}
