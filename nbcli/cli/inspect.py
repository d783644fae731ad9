"""`nb inspect`: tensors, dtypes, shapes, detected architecture, roles and metadata of a checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from nbcli.cli.base import NbCommand
from nbcli.cli.options import ArchOption, JsonOption, RoleMapOption

EPILOG = """\
Reads only the headers (no tensor data, no torch import): instant on any size.

[bold]Examples[/bold]

  nb inspect openai-community/gpt2              # a Hub repo id: cache first, then the Hub
  nb inspect model.safetensors
  nb inspect llama-dir/                      # sharded: directory or its index.json
  nb inspect model.safetensors --json | jq '.roles'
  nb inspect odd.safetensors --arch gpt2 --map final_ln_bias=decoder.norm.bias
"""


def inspect_checkpoint(
    checkpoint: Annotated[Path, typer.Argument(
        metavar="IN", show_default=False,
        help="A .safetensors file, a sharded checkpoint directory, or its *.safetensors.index.json, or a Hub "
        "repo id org/name[@rev] (cache first; see docs/hub.md).")],
    arch: ArchOption = "auto",
    mapping: RoleMapOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show a checkpoint's tensors (name, dtype, shape, bytes, shard), its architecture and roles, and
    its metadata. An unrecognised architecture is reported, not an error."""
    from nbcli.checkpoint import parse_role_map
    from nbcli.checkpoint.report import inspect_checkpoint as inspect_report
    from nbcli.cli.console import print_report

    report = inspect_report(checkpoint, arch, parse_role_map(mapping or []))
    print_report(report, as_json, _render)


def _render(report: dict[str, Any]) -> None:
    from rich.table import Table

    from nbcli.cli.console import esc, stdout_console

    console = stdout_console()
    for note in report["recovered"]:
        console.print(f"[yellow]recovered:[/] {esc(note)}")
    files = len(report["files"])
    console.print(f"[bold]{esc(report['checkpoint'])}[/]: {report['tensor_count']} tensors, "
                  f"{report['total_bytes']:,} bytes" + (f" in {files} shards" if report["sharded"] else ""))
    if report["architecture"]:
        console.print(f"architecture: [bold]{esc(report['architecture'])}[/]"
                      + (" (output weight tied to the input embedding)" if report["tied"] else ""))
        roles = Table(title="roles", title_justify="left")
        roles.add_column("role", overflow="fold")
        roles.add_column("tensor", overflow="fold")
        for role, name in report["roles"].items():
            why = (report["absent"] or {}).get(role)
            roles.add_row(esc(role), esc(name) if name else f"[dim]absent{': ' + esc(why) if why else ''}[/]")
        console.print(roles)
    else:
        console.print(f"architecture: [yellow]not recognised[/] ({esc(report['architecture_error'])})")
    tensors = Table(title="tensors", title_justify="left")
    for column in ("name", "dtype", "shape", "bytes") + (("shard",) if report["sharded"] else ()):
        tensors.add_column(column, justify="right" if column == "bytes" else "left", overflow="fold")
    for t in report["tensors"]:
        row = [esc(t["name"]), esc(t["dtype"]), "x".join(map(str, t["shape"])) or "scalar", f"{t['bytes']:,}"]
        tensors.add_row(*row, *([esc(t["file"])] if report["sharded"] else []))
    console.print(tensors)
    if report["metadata"]:
        meta = Table(title="metadata", title_justify="left")
        meta.add_column("key")
        meta.add_column("value", overflow="fold")
        for key, value in report["metadata"].items():
            meta.add_row(esc(key), esc(value if len(value) <= 400 else value[:400] + " ..."))
        console.print(meta)


def register(app: typer.Typer) -> None:
    app.command("inspect", epilog=EPILOG, cls=NbCommand)(inspect_checkpoint)
