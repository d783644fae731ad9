"""The checkpoint room: the one safetensors reader/writer and the one architecture table.

    format.py   dtypes, TensorInfo, header read/build: bytes <-> structs, nothing else
    reader.py   open_checkpoint -> Checkpoint (mmap), shards + index, config.json, model folders,
                row-block reads (Checkpoint.rows)
    writer.py   streamed writes, held (deferred) tensors, one commit for every output file
    edits.py    what write_like writes: the edits checked against the source, each file's entries
    layout.py   where outputs go (file, model folder, shard directory), checks before any rename
    architectures.py  THE architecture table: one entry per model family (the file to add a model)
    roles.py    resolving roles from tensor names / config.json, and the hints in error messages
    vocab.py    counts vs the checkpoint's tokenizer and vocabulary
    memory.py   a state dict or loaded transformers model read as a checkpoint (the Python API)
    report.py   inspect_checkpoint: `nb inspect`'s report (headers only)
    runs.py     an nb train run directory read back: its saved steps, THE checkpoint it stands for
                (best, else last step), its log records

    from nbcli.checkpoint import open_checkpoint, resolve_roles, save_tensors, write_like
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> the module that defines it. Imported on first use (PEP 562), so reaching one
#: module (e.g. the architecture table for help text) does not load the reader and writer too.
_EXPORTS = {
    "architectures": ("ARCHITECTURES", "ROLES", "candidate_names", "untie_rule"),
    "format": ("DTYPE_SIZES", "FLOAT_CODES", "TensorInfo", "build_header", "dtype_code", "read_header", "torch_dtype"),
    "layout": ("check_output_paths", "folder_output", "model_folder_files", "output_paths", "resolve_output"),
    "reader": ("Checkpoint", "RowBlocks", "find_checkpoint_files", "open_checkpoint", "read_model_config"),
    "roles": ("Roles", "detect_architecture", "look_alikes", "parse_role_map", "resolve_roles"),
    "writer": ("Deferred", "save_tensors", "write_like", "write_safetensors"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'nbcli.checkpoint' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"nbcli.checkpoint.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULE_OF))


__all__ = [
    "ARCHITECTURES", "DTYPE_SIZES", "FLOAT_CODES", "ROLES", "Checkpoint", "Deferred", "Roles", "RowBlocks",
    "TensorInfo", "build_header", "candidate_names", "check_output_paths", "detect_architecture",
    "dtype_code", "find_checkpoint_files", "folder_output", "look_alikes", "model_folder_files",
    "open_checkpoint", "output_paths", "parse_role_map", "read_header", "read_model_config", "resolve_output",
    "resolve_roles", "save_tensors", "torch_dtype", "untie_rule", "write_like", "write_safetensors",
]
