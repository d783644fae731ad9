"""Checkpoint surgery: the papers' operations (`nbcli.ops`) applied to a checkpoint's tensors.

    options.py     SurgeryOptions (what to do) and surgery_options (the one builder of it from a
                   user's values, refusing no operation), StandardiseSpec / parse_standardise,
                   check_lambda, OPERATION_ORDER
    plan.py        run_surgery (which tensors change, in OPERATION_ORDER), resolve_options,
                   surgery_result (run_surgery's output as the report), held_tensors, provenance_entry
    operations.py  one function per operation (OPERATIONS: the papers' formulas on the tensors their
                   roles name, through a SurgeryRun), standardise_to
    workspace.py   the Workspace: each touched tensor read once as a working copy, cast back to its
                   stored dtype and checked finite (TouchedTensor: its before/after summaries)
    write.py       apply_surgery: the streamed write of OUT, overlapped with hashing the inputs, and
                   a model folder's other files (config.json rewritten); patch_file: the same from a path

`nb patch-checkpoint` and `nbcli.patch` on a path call `patch_file`; `nbcli.patch` on a model in
memory runs `run_surgery` and `surgery_result`; `nb eval` and `nb generate` run `run_surgery` on a
model in memory; `nb train` and `nb transplant-embeddings` use `standardise_to`.
"""

from nbcli.surgery.options import (
    CREATED_BIAS_NOTE, OPERATION_ORDER, StandardiseSpec, SurgeryOptions, check_lambda, parse_standardise,
    surgery_options,
)
from nbcli.surgery.operations import standardise_to
from nbcli.surgery.plan import (
    SurgeryResult, held_tensors, provenance_entry, resolve_options, run_surgery, surgery_result,
)
from nbcli.surgery.workspace import TouchedTensor, Workspace
from nbcli.surgery.write import apply_surgery, patch_file

__all__ = [
    "CREATED_BIAS_NOTE", "OPERATION_ORDER", "StandardiseSpec", "SurgeryOptions", "SurgeryResult", "TouchedTensor",
    "Workspace", "apply_surgery", "check_lambda", "held_tensors", "parse_standardise", "patch_file",
    "provenance_entry", "resolve_options", "run_surgery", "standardise_to", "surgery_options", "surgery_result",
]
