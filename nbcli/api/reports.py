"""The results the Python API returns (`Report` and one subclass per command family) and the
argument types its functions take."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    import numpy as np
    import torch

PathLike = Union[str, os.PathLike[str]]
"""A local path; for a model or a tokenizer also a Hub repo id (nbcli.resolve)."""
RoleMap = Union[Mapping[str, str], Sequence[str], None]
"""Role -> tensor name overrides: {"output_bias": "lm_head.bias"} or ["output_bias=lm_head.bias"]."""


@dataclass(frozen=True)
class Report:
    """A command's result. `to_dict()`: plain JSON data, what `nb COMMAND --json` prints; its
    top-level keys also read as attributes and items, with the same value (`report.warnings`,
    `report["warnings"]`, `report.to_dict()["warnings"]`). The tables in it (`tables()`: `rows`,
    `bias_effect.bins`, `samples`, ...) come as flat records (`to_records`) or a pandas DataFrame
    (`to_pandas`), the rows `nb COMMAND --csv` writes."""

    data: dict[str, Any] = field(repr=False)

    def __post_init__(self) -> None:
        extra = {f.name for f in fields(self)} - {"data"}
        clash = sorted(extra & set(self.data))
        if clash:  # an attribute would hide the key of the same name: one name, two meanings
            raise TypeError(f"{type(self).__name__}: field(s) {', '.join(clash)} are also keys of its data")

    def to_dict(self) -> dict[str, Any]:
        from nbcli.jsonsafe import json_ready

        return json_ready(self.data)

    def tables(self) -> list[str]:
        """The names of the tables in this result (`nbcli.tables.find_tables`), the first the default."""
        from nbcli.tables import find_tables

        return find_tables(self.data)

    def to_records(self, table: str | None = None) -> list[dict[str, Any]]:
        """The rows of `table` (default: the first of `tables()`) as flat dicts: nested objects as
        dotted keys (`before.norm`), full precision, as `nb COMMAND --csv --table TABLE` writes them."""
        from nbcli.tables import table_records

        return table_records(self.to_dict(), table)

    def to_pandas(self, table: str | None = None) -> Any:
        """`to_records(table)` as a pandas DataFrame (pandas is optional: NbError when missing)."""
        from nbcli.tables import to_pandas

        return to_pandas(self.to_records(table))

    def __getattr__(self, name: str) -> Any:
        data = self.__dict__.get("data")
        if data is not None and name in data:
            return data[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def keys(self) -> list[str]:
        return list(self.data)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | {k for k in self.data if k.isidentifier()})

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(self.data)})"


@dataclass(frozen=True, repr=False)
class CountReport(Report):
    """`count_unigrams`: the summary (tokens, entropy, coverage, top pieces, `warnings`: lines
    replaced or skipped and options that did not apply, one line each, as the command prints them)
    and the counts vector."""

    counts: np.ndarray | None = None
    """int64 [V]: the count of each token id, as written to the counts file"""


@dataclass(frozen=True, repr=False)
class CheckpointReport(Report):
    """`inspect`: tensors, architecture, roles and metadata of a checkpoint."""


@dataclass(frozen=True, repr=False)
class PatchReport(Report):
    """`patch`: the operations and each touched tensor's statistics before and after."""

    state_dict: dict[str, torch.Tensor] | None = None
    """In-memory surgery: the patched state dict (the caller's tensors, the touched ones replaced;
    tied names share the new tensor). None when a file was patched."""


@dataclass(frozen=True, repr=False)
class ProbeReport(Report):
    """`probe`: frequency direction, isotropy, output bias vs unigram, log-frequency bins."""

    scores: np.ndarray | None = None
    """float32 [V]: <b_LN, w_i> per token (None without a usable b_LN and counts)"""


@dataclass(frozen=True, repr=False)
class EvalReport(Report):
    """`evaluate`: one row per arm (lambda): loss, perplexity, word perplexity, KL to the unigram."""


@dataclass(frozen=True, repr=False)
class GenerateReport(Report):
    """`generate`: one row per arm (`rows`: Distinct-n, length, EOS rate, perplexity) and every
    sample (`samples`: each continuation with its arm, lambda, prompt and seed, as `nb generate
    --json` prints them and `--out`'s samples.jsonl holds them); `samples_per_prompt` is --samples."""


@dataclass(frozen=True, repr=False)
class TrainReport(Report):
    """`train`: the run's summary (final validation loss, ALC, throughput, checkpoint path)."""


@dataclass(frozen=True, repr=False)
class TransplantReport(Report):
    """`transplant_embeddings`: the output, its source tensor and the vocabulary coverage."""

