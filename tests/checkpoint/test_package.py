"""The checkpoint package's public names load on first use: every one resolves, and reaching the
architecture table (as `nb --help` does) does not import the reader, writer or torch."""

from __future__ import annotations

import subprocess
import sys

import nbcli.checkpoint as checkpoint


def test_every_public_name_resolves_to_its_module() -> None:
    assert sorted(checkpoint.__all__) == sorted(checkpoint._MODULE_OF)
    for name in checkpoint.__all__:
        value = getattr(checkpoint, name)
        module = checkpoint._MODULE_OF[name]
        assert value is getattr(__import__(f"nbcli.checkpoint.{module}", fromlist=[name]), name)


def test_the_architecture_table_alone_loads_no_reader_writer_or_torch() -> None:
    code = ("import sys, nbcli.checkpoint.architectures; "
            "print(sorted(m for m in ('nbcli.checkpoint.reader', 'nbcli.checkpoint.writer', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
