"""Rich renderings of core results (stdout). No computation happens here."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from nbcli.cli.console import stdout_console


def render_count_summary(report: dict[str, Any]) -> None:
    console = stdout_console()
    table = Table(title=f"unigram counts -> {report['output']}", show_header=False, title_justify="left")
    table.add_column("", style="bold")
    table.add_column("")
    rows = [
        ("tokens", f"{report['tokens']:,}"),
        ("documents", f"{report['documents']:,}"),
        ("bytes read", f"{report['bytes_read']:,}"),
        ("distinct types", f"{report['distinct_types']:,} of {report['vocab_size']:,} "
                           f"({100 * report['vocab_coverage']:.1f}% vocabulary coverage)"),
        ("unigram entropy", f"{report['entropy_nats']:.4f} nats = {report['entropy_bits']:.4f} bits"),
        ("EOS / BOS per document", f"{'yes' if report['eos'] else 'no'} / {'yes' if report['bos'] else 'no'}"),
        ("method", f"{report['method']}, {report['workers']} worker(s)\n[dim]{escape(report['method_reason'])}[/dim]"),
        ("throughput", f"{report['mb_per_s']:.1f} MB/s, {report['tokens_per_s']:,.0f} tokens/s "
                       f"({report['seconds']:.2f} s)"),
    ]
    if report.get("tsv"):
        rows.append(("tsv", report["tsv"]))
    for key, value in rows:
        table.add_row(key, value)
    console.print(table)
    top = Table(title="top 10 pieces", title_justify="left")
    for name, justify in (("rank", "right"), ("id", "right"), ("piece", "left"), ("count", "right"), ("share", "right")):
        top.add_column(name, justify=justify)  # type: ignore[arg-type]
    for rank, item in enumerate(report["top"], 1):
        top.add_row(str(rank), str(item["id"]), repr(item["piece"]), f"{item['count']:,}", f"{100 * item['share']:.2f}%")
    console.print(top)
