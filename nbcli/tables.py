"""The row and bin tables inside nb's reports, as flat records: for `--csv FILE|-` / `--tsv FILE|-`
and for `Report.to_records()` / `to_pandas()`.

A table is a list of objects in a report, named by its path: `rows`, `bias_effect.bins`, `samples`,
and through a list, `series.bins` (each bin with its series' fields as `series.label`, ...).
A record is one row flattened: nested objects become dotted columns (`before.norm`), lists of
numbers or strings stay lists in records and are JSON text in CSV, and nested lists of lists (an
attention map's matrix) are left out (they are in --json). Values are the report's own, full
precision (no rounding: the text tables round, CSV does not).
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nbcli.errors import ConfigError


def _is_rows(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, Mapping) for v in value)


def find_tables(data: Mapping[str, Any]) -> list[str]:
    """The paths of the tables in a report, in the report's order: lists of objects at its top level
    or one object deep, and lists of objects inside those rows (`series.bins`)."""
    found: list[str] = []
    for k, v in data.items():
        if _is_rows(v):
            found.append(k)
            inner = {ik for row in v for ik, iv in row.items() if _is_rows(iv)}
            found.extend(f"{k}.{ik}" for ik in sorted(inner))
        elif isinstance(v, Mapping):
            found.extend(f"{k}.{ik}" for ik, iv in v.items() if _is_rows(iv))
    return found


def flatten(row: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """One row as flat columns: nested objects dotted, lists of lists (and of objects) left out."""
    out: dict[str, Any] = {}
    for k, v in row.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, f"{name}."))
        elif isinstance(v, list) and any(isinstance(x, (list, Mapping)) for x in v):
            continue
        else:
            out[name] = v
    return out


#: Tables that record where a result came from, not the result: named with --table, never the default.
PROVENANCE_TABLES = ("datasets",)


def table_records(data: Mapping[str, Any], name: str | None = None) -> list[dict[str, Any]]:
    """The table `name` (default: the report's first that is not provenance, `PROVENANCE_TABLES`) as
    flat records; an unknown name is a one-line error listing the tables there are."""
    tables = find_tables(data)
    results = [t for t in tables if t.split(".")[0] not in PROVENANCE_TABLES]
    if name is None and not results:
        raise ConfigError("this result has no table of rows" + (
            f" (only where it came from: --table {', '.join(tables)})" if tables else ""))
    name = results[0] if name is None else name
    if name not in tables:
        raise ConfigError(f"no table {name!r} in this result; its tables: {', '.join(tables)}")
    first, _, rest = name.partition(".")
    value = data[first]
    if isinstance(value, Mapping):
        return [flatten(row) for row in value[rest]]
    if not rest:
        return [flatten(row) for row in value]
    records = []
    for parent in value:
        carried = {f"{first}.{k}": v for k, v in flatten(parent).items()}
        records.extend({**carried, **flatten(row)} for row in parent.get(rest) or [])
    return records


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, float):
        return repr(value)
    return value


def delimited(records: Sequence[Mapping[str, Any]], sep: str) -> str:
    """CSV (`sep` ",") or TSV ("\\t") text of `records`: a header of every column in first-seen
    order, then one line per record (missing values and None empty; floats at full precision)."""
    columns = list(dict.fromkeys(k for r in records for k in r))
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter=sep, lineterminator="\n",
                        quoting=csv.QUOTE_MINIMAL)
    writer.writerow(columns)
    for record in records:
        writer.writerow([_cell(record.get(c)) for c in columns])
    return buffer.getvalue()


def write_table(records: Sequence[Mapping[str, Any]], target: str | Path, sep: str) -> str | None:
    """`--csv FILE|-` / `--tsv FILE|-`: the records to stdout for `-` (never a file named `-`), else
    to FILE, atomically. Returns the path written (None for stdout)."""
    from nbcli.atomic import write_text_atomic

    text = delimited(records, sep)
    if str(target) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return None
    write_text_atomic(Path(target), text)
    return str(target)


def to_pandas(records: list[dict[str, Any]]) -> Any:
    """A pandas DataFrame of `records` (pandas is optional: a one-line error when it is missing)."""
    try:
        import pandas
    except ImportError:
        raise ConfigError("to_pandas() needs pandas: pip install 'nbcli[pandas]' (to_records() gives the same rows "
                          "as a list of dicts)") from None
    return pandas.DataFrame.from_records(records)
