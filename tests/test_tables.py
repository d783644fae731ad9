"""nbcli.tables: which table of a report --csv / --tsv write by default."""

from __future__ import annotations

import pytest

from nbcli.errors import ConfigError
from nbcli.tables import table_records


DATASETS = [{"input": "org/x:default:test", "repo_id": "org/x", "commit": "a" * 40}]


def test_the_default_table_is_a_result_not_the_datasets_a_report_read() -> None:
    """A report's `datasets` (its provenance) comes before or after its rows: the default table is the
    rows either way; `--table datasets` still names it."""
    rows = [{"label": "pos", "accuracy": 0.5}]
    for report in ({"datasets": DATASETS, "rows": rows}, {"rows": rows, "datasets": DATASETS}):
        assert table_records(report) == rows
        assert table_records(report, "datasets") == DATASETS


def test_a_report_with_only_its_provenance_has_no_default_table() -> None:
    with pytest.raises(ConfigError, match="no table of rows.*--table datasets"):
        table_records({"accuracy": 0.5, "datasets": DATASETS})
    with pytest.raises(ConfigError, match="no table of rows$"):
        table_records({"accuracy": 0.5, "datasets": []})
