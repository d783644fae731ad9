"""Rich renderings of core results (stdout). No computation happens here."""

from __future__ import annotations

from typing import Any

from nbcli.cli.console import esc, stdout_console


def _marker_text(added: bool, token: dict[str, Any] | None) -> str:
    """`yes ([SEP], id 102)` / `no (</s>, id 2)` / `no (none in the vocabulary)`."""
    where = esc(f"({token['piece']}, id {token['id']})") if token else "(none in the vocabulary)"
    return f"{'yes' if added else 'no'} {where}"


def render_count_summary(report: dict[str, Any]) -> None:
    from rich.table import Table

    console = stdout_console()
    table = Table(title=f"unigram counts -> {esc(report['output'])}", show_header=False, title_justify="left")
    table.add_column("", style="bold")
    table.add_column("")
    rows = [
        ("tokens", f"{report['tokens']:,}"),
        ("documents", f"{report['documents']:,}"),
        ("bytes read", f"{report['bytes_read']:,}"),
        ("distinct types", f"{report['distinct_types']:,} of {report['vocab_size']:,} "
                           f"({100 * report['vocab_coverage']:.1f}% vocabulary coverage)"),
        ("unigram entropy", f"{report['entropy_nats']:.4f} nats = {report['entropy_bits']:.4f} bits"),
        ("EOS per document", _marker_text(report["eos"], report.get("eos_token"))
         + (f"\n[dim]{esc(report['eos_reason'])}[/dim]" if report.get("eos_reason") else "")),
        ("BOS per document", _marker_text(report["bos"], report.get("bos_token"))),
        ("method", f"{report['method']}, {report['workers']} worker(s)\n[dim]{esc(report['method_reason'])}[/dim]"),
        ("throughput", f"{report['mb_per_s']:.1f} MB/s, {report['tokens_per_s']:,.0f} tokens/s "
                       f"({report['seconds']:.2f} s)"),
    ]
    if report.get("tsv"):
        rows.append(("tsv", esc(report["tsv"])))
    if report.get("tokenizer_adjustments"):
        rows.append(("tokenizer", "[yellow]" + esc("; ".join(report["tokenizer_adjustments"]))
                     + "[/yellow] (counting needs every token, nothing added)"))
    for key, value in rows:
        table.add_row(key, value)
    console.print(table)
    top = Table(title="top 10 pieces", title_justify="left")
    for name, justify in (("rank", "right"), ("id", "right"), ("piece", "left"), ("count", "right"), ("share", "right")):
        top.add_column(name, justify=justify)  # type: ignore[arg-type]
    for rank, item in enumerate(report["top"], 1):
        top.add_row(str(rank), str(item["id"]), esc(repr(item["piece"])), f"{item['count']:,}", f"{100 * item['share']:.2f}%")
    console.print(top)
