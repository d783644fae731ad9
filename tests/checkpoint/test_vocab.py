"""Counts against a checkpoint's tokenizer and vocabulary (nbcli.checkpoint.vocab)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbcli.checkpoint.vocab import check_counts
from nbcli.errors import CountsError
from nbcli.provenance import sha256_file


def fake(metadata: dict[str, str] | None = None, model_dir: Path | None = None, config: dict | None = None):  # noqa: ANN201
    return SimpleNamespace(metadata=metadata or {}, model_dir=model_dir, model_config=config)


@given(size=st.integers(1, 5000), extra=st.integers(1, 300))
def test_shorter_counts_are_padding_only_when_rounded_up(size: int, extra: int) -> None:
    rows = size + extra
    padding = any(-(-size // m) * m == rows for m in (64, 128))
    if padding:
        check = check_counts(Path("c"), None, size, rows, fake())
        assert any("vocabulary padding" in w for w in check.warnings)
    else:
        with pytest.raises(CountsError, match="not vocabulary padding"):
            check_counts(Path("c"), None, size, rows, fake())
        check = check_counts(Path("c"), None, size, rows, fake(), allow_mismatch=True)
        assert any("--allow-vocab-mismatch" in w for w in check.warnings)


def test_issue_examples_are_refused() -> None:
    with pytest.raises(CountsError):  # GPT-2's 50,257 rows with a 32,000-entry counts file
        check_counts(Path("c"), None, 32000, 50257, fake())
    with pytest.raises(CountsError):  # Llama's 32,000 rows with BERT's 30,522 counts
        check_counts(Path("c"), None, 30522, 32000, fake())
    check = check_counts(Path("c"), None, 50257, 50304, fake())  # GPT-2 counts, a padded 50304 model
    assert "multiple of 64" in check.warnings[-1]
    assert check_counts(Path("c"), None, 1001, 1010, fake(config={"pad_vocab_size_multiple": 10}))


def test_tokenizer_hash_from_model_folder_or_option(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "tokenizer.json").write_text('{"model": "a"}')
    (folder / "tokenizer.model").write_bytes(b"sp")
    other = tmp_path / "other.json"
    other.write_text('{"model": "b"}')
    ckpt = fake(model_dir=folder)
    for name in ("tokenizer.json", "tokenizer.model"):  # either file of the folder matches
        assert check_counts(Path("c"), sha256_file(folder / name), 10, 10, ckpt).tokenizer_checked
    with pytest.raises(CountsError, match="another tokenizer"):
        check_counts(Path("c"), sha256_file(other), 10, 10, ckpt)
    assert check_counts(Path("c"), sha256_file(other), 10, 10, ckpt, tokenizer=other).tokenizer_checked
    # a matching hash makes any shortfall padding
    assert check_counts(Path("c"), sha256_file(folder / "tokenizer.json"), 7, 10, ckpt).tokenizer_checked
    with pytest.raises(CountsError, match="no tokenizer file"):
        check_counts(Path("c"), "x", 10, 10, ckpt, tokenizer=tmp_path / "missing.json")
    assert "cannot check" in check_counts(Path("c"), None, 10, 10, ckpt).warnings[0]
    assert "names no tokenizer" in check_counts(Path("c"), "x", 10, 10, fake()).warnings[0]
