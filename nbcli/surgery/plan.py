"""The surgery plan: which tensors change and how, computed in memory.

`SurgeryOptions` (`nbcli.surgery.options`) says what to do; `run_surgery` applies each requested
operation (`nbcli.surgery.operations`: one function per operation, the papers' formulas) in the
documented order (OPERATION_ORDER) to a `Workspace` (`nbcli.surgery.workspace`: each touched tensor
read once, float32, float64 stays float64) and returns the new tensors in their stored dtypes;
`surgery_result` is the report of that run, `held_tensors` says beforehand which existing tensors
it will rewrite, and `provenance_entry` the `nb.provenance` record. Writing them is
`nbcli.surgery.write`.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nbcli.jsonsafe import JsonProblem
from nbcli.jsonsafe import parse as parse_json
from nbcli.surgery.operations import OPERATIONS, SurgeryRun, write_aliases
from nbcli.surgery.options import OPERATION_ORDER, SurgeryOptions, require_operation
from nbcli.surgery.workspace import TouchedTensor, Workspace

if TYPE_CHECKING:
    import torch

    from nbcli.checkpoint.reader import Checkpoint
    from nbcli.checkpoint.roles import Roles


@dataclass
class SurgeryResult:
    architecture: str
    roles: dict[str, Any]
    operations: list[dict[str, Any]]
    tensors: list[TouchedTensor]
    warnings: list[str]
    outputs: list[str] = field(default_factory=list)
    dry_run: bool = False
    config_updates: dict[str, Any] = field(default_factory=dict)
    """config.json changes the surgery needs (written into a model-folder output)."""
    model_folder: bool = False
    """OUT is a model folder: tensors plus the input folder's other files (config.json updated)."""

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def resolve_options(checkpoint: Checkpoint, roles: Roles, options: SurgeryOptions) -> SurgeryOptions:
    """`options` with a standardise target made concrete for the input embedding's shape, so that
    the report and the provenance record the target used (xavier's std depends on the shape)."""
    emb = roles.get("input_embedding")
    if options.standardise is None or emb is None:
        return options
    return dataclasses.replace(options, standardise=options.standardise.resolved(checkpoint.shape(emb)))


def surgery_result(roles: Roles, options: SurgeryOptions, workspace: Workspace, warnings: list[str],
                   **fields: Any) -> SurgeryResult:
    """The SurgeryResult (what `nb patch-checkpoint --json` prints) of a `run_surgery` run: its
    workspace's touched tensors and config.json changes, and its warnings; `fields` are the
    SurgeryResult fields a write adds (outputs, dry_run, model_folder)."""
    return SurgeryResult(architecture=roles.architecture, roles=roles.as_dict(), operations=options.operations(),
                         tensors=list(workspace.touched.values()), warnings=warnings,
                         config_updates=dict(workspace.config_updates), **fields)


def run_surgery(checkpoint: Checkpoint, roles: Roles, options: SurgeryOptions,
                ) -> tuple[dict[str, torch.Tensor], Workspace, list[str]]:
    """Apply the requested operations in OPERATION_ORDER (each one's function in OPERATIONS); return
    the new tensors (stored dtypes), the workspace and the warnings. ConfigError when none is asked for."""
    requested = {operation["op"] for operation in require_operation(options).operations()}
    run = SurgeryRun(checkpoint, roles, options, Workspace(checkpoint, options.allow_nonfinite),
                     output_name=roles.get("output_weight"), tied=roles.tied)
    for name in OPERATION_ORDER:
        if name in requested:
            OPERATIONS[name](run)
    write_aliases(run)
    return run.ws.finish(), run.ws, list(dict.fromkeys(run.warnings))


def provenance_entry(options: SurgeryOptions, input_hashes: dict[str, str], previous: str | None,
                     unhashed: dict[str, Any] | None = None, from_cache: list[str] | None = None) -> str:
    """The `nb.provenance` metadata value: tool, time, operations in order, input sha256s (those
    taken from the hash cache listed), and size/mtime of inputs not hashed on request."""
    from nbcli.provenance import tool_version, utc_now

    doc: dict[str, Any] = {"tool": tool_version(), "command": "patch-checkpoint", "time": utc_now(),
                           "operations": options.operations(), "inputs_sha256": input_hashes}
    if from_cache:
        doc["inputs_sha256_from_cache"] = from_cache
    if unhashed:
        doc["inputs_not_hashed"] = unhashed
    if previous:
        try:
            doc["previous"] = parse_json(previous)
        except JsonProblem:
            doc["previous"] = previous
    return json.dumps(doc, sort_keys=False, separators=(",", ":"))


#: The role each operation rewrites (run_surgery is the authority; this only says which tensors to
#: hold back from the bulk copy, and a wrong guess costs time, never correctness: see apply_surgery).
_OPERATION_ROLES = {"set-output-bias": "output_bias", "rescale-w": "output_weight",
                    "standardise-embeddings": "input_embedding", "shuffle-embeddings": "input_embedding",
                    "zipfian-whiten-embeddings": "input_embedding",
                    "scale-ln-bias": "final_ln_bias", "remove-frequency-direction": "output_weight"}


def held_tensors(checkpoint: Checkpoint, roles: Roles, options: SurgeryOptions) -> frozenset[str] | None:
    """The existing tensors the requested operations rewrite, or None when they may create one
    (--untie, or an output bias named with --bias-name that is not in the checkpoint): the output
    layout is then known only after the surgery."""
    names: set[str] = set()
    for operation in options.operations():
        role = _OPERATION_ROLES.get(operation["op"])
        if role is None:  # untie: creates the output weight
            return None
        name = options.bias_name if role == "output_bias" and options.bias_name else roles.get(role)
        if name is None:
            continue  # run_surgery reports the missing role
        if name not in checkpoint:
            return None
        names.add(name)
        names.update(alias for alias in roles.aliases.get(role, ()) if alias in checkpoint)
    return frozenset(names)
