"""`nb inspect`: tensors, dtypes, shapes, detected architecture, roles and metadata of a checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from nbcli.cli.base import NbCommand
from nbcli.cli.options import ArchOption, CsvOption, JsonOption, RoleMapOption, TsvOption
from nbcli.cli.render import KEY, NUM, TEXT, Col, key, num, print_rows

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
    csv: CsvOption = None,
    tsv: TsvOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show a checkpoint's tensors (name, dtype, shape, bytes, shard), its architecture and roles, and
    its metadata. An unrecognised architecture is reported, not an error."""
    from nbcli.checkpoint import parse_role_map
    from nbcli.checkpoint.report import inspect_checkpoint as inspect_report
    from nbcli.cli.console import check_table_targets, print_report
    from nbcli.outputs import model_inputs

    check_table_targets(as_json, csv, tsv, [*model_inputs(checkpoint)])
    report = inspect_report(checkpoint, arch, parse_role_map(mapping or []))
    print_report(report, as_json, _render, csv=csv, tsv=tsv, table="tensors")


TENSOR_COLUMNS = (Col("name", TEXT, key("name")), Col("dtype", KEY, key("dtype")),
                  Col("shape", KEY, lambda t: "x".join(map(str, t["shape"])) or "scalar"),
                  Col("bytes", NUM, key("bytes")))


def _render(report: dict[str, Any]) -> None:
    from nbcli.cli.console import esc, stdout_console

    console = stdout_console()
    for note in report["recovered"]:
        console.print(f"[yellow]recovered:[/] {esc(note)}")
    files = len(report["files"])
    console.print(f"[bold]{esc(report['checkpoint'])}[/]: {num(report['tensor_count'])} tensors, "
                  f"{num(report['total_bytes'])} bytes" + (f" in {num(files)} shards" if report["sharded"] else ""))
    if report["architecture"]:
        console.print(f"architecture: [bold]{esc(report['architecture'])}[/]"
                      + (" (output weight tied to the input embedding)" if report["tied"] else ""))
        absent = report["absent"] or {}
        print_rows("roles", (Col("role", KEY, lambda r: r[0]),
                             Col("tensor", TEXT, lambda r: r[1] or f"absent{': ' + absent[r[0]] if absent.get(r[0]) else ''}")),
                   list(report["roles"].items()), "no roles")
    else:
        console.print(f"architecture: [yellow]not recognised[/] ({esc(report['architecture_error'])})")
    columns = TENSOR_COLUMNS + ((Col("shard", TEXT, key("file")),) if report["sharded"] else ())
    print_rows("tensors", columns, report["tensors"], "the checkpoint holds no tensor")
    if report["metadata"]:
        print_rows("metadata", (Col("key", TEXT, lambda kv: kv[0]),
                                Col("value", TEXT, lambda kv: kv[1] if len(kv[1]) <= 400 else kv[1][:400] + " ...")),
                   list(report["metadata"].items()), "none")


def register(app: typer.Typer) -> None:
    app.command("inspect", epilog=EPILOG, cls=NbCommand)(inspect_checkpoint)
