"""Checkpoint I/O (`io`: the one safetensors reader/writer) and the architecture table (`roles`).

    from nbcli.checkpoint import open_checkpoint, resolve_roles, save_tensors, write_like
"""

from nbcli.checkpoint.format import TensorInfo, dtype_code, read_header, torch_dtype
from nbcli.checkpoint.io import save_tensors, write_like, write_safetensors
from nbcli.checkpoint.layout import resolve_output
from nbcli.checkpoint.reader import Checkpoint, open_checkpoint
from nbcli.checkpoint.roles import ARCHITECTURES, ROLES, Roles, detect_architecture, parse_role_map, resolve_roles

__all__ = [
    "ARCHITECTURES", "ROLES", "Checkpoint", "Roles", "TensorInfo", "detect_architecture", "dtype_code",
    "open_checkpoint", "parse_role_map", "read_header", "resolve_output", "resolve_roles", "save_tensors",
    "torch_dtype", "write_like", "write_safetensors",
]
