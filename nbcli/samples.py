"""The small sample corpus and tokenizer bundled with nb (see nbcli/data/README.md)."""

from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).parent / "data"
SAMPLE_CORPUS = DATA_DIR / "botchan.txt.gz"
SAMPLE_TOKENIZER = DATA_DIR / "botchan-bpe2k.model"
