"""What transformers sees of `nb export`'s output folder at every step of its commit, and what a plain
rerun does after a kill there (issue 42).

A real `nb export RUN -o hf` (a translation run: Marian folder, 8 files; a classifier run: BERT
sequence classification, 5 files; the model card README.md among them) is paused with NB_FAULT_INJECT=POINT:N:STOP at each step of the
commit: each temporary created, before the journal, after it, after each rename, after the last one,
and after the folder is in place. While it is stopped, and again after it is killed there, `hf` is
loaded with transformers' Auto classes, the model AND the tokenizer: both must fail (no folder,
nothing to load) before the commit point and both load, byte for byte the uninterrupted export,
after it; never the model without its tokenizer. Then the same `nb export` runs again, plainly:
before the commit point it recovers (the killed process's temporaries go, with a note) and writes
the folder; after it, the folder is complete and the rerun refuses it in one line, untouched. No
file of nb's (temporary, journal, staged folder) is left anywhere.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from tests import forked_nb
from tests.cli.helpers import assert_one_line_error
from tests.fuzz.reruns import rerun
from tests.fuzz.test_shard_commit import pause_then_kill

pytestmark = pytest.mark.faults

transformers = pytest.importorskip("transformers")

# the points before the folder is in place: the staged files' temporaries, the journal, the renames
TRANSLATION_BEFORE = ["temp-created:1", "temp-created:7", "before-commit", "journal-written", "renamed:1",
                      "renamed:3", "renamed:7", "after-commit"]
CLASSIFIER_BEFORE = ["temp-created:1", "journal-written", "renamed:2"]  # the same commit: a sample of its points
AFTER = ["folder-renamed"]


def _env(fault: str | None) -> dict[str, str]:
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("NB_FAULT_INJECT", None)
    if fault:
        env["NB_FAULT_INJECT"] = fault if fault.count(":") >= 2 else f"{fault if ':' in fault else fault + ':1'}:STOP"
    return env


def _export(run: Path, out: Path) -> subprocess.CompletedProcess[str]:
    done = forked_nb.run(["nb", "export", str(run), "-o", str(out)], capture_output=True, text=True, timeout=300,
                          env=_env(None))
    assert "Traceback" not in done.stderr, done.stderr
    return done


def digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def reader_view(folder: Path, auto: str) -> str:
    """"absent" (neither the model nor the tokenizer loads), "complete" (both do), or what is loadable."""
    from transformers.utils import logging

    logging.set_verbosity_error()
    loaded = []
    for cls in (getattr(transformers, auto), transformers.AutoTokenizer):
        try:
            cls.from_pretrained(folder)
            loaded.append(cls.__name__)
        except Exception:  # noqa: BLE001 - whatever transformers raises for a folder it cannot load
            pass
    if len(loaded) == 1:
        return f"only {loaded[0]} loads"
    return "complete" if loaded else "absent"


def nb_leftovers(*folders: Path) -> list[str]:
    return sorted(str(p) for folder in folders if folder.is_dir() for p in folder.iterdir()
                  if p.name.endswith(".nbtmp") or p.name.startswith(".nb-commit."))


@pytest.fixture(scope="module")
def classifier_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERT sequence classifier run (3 steps), as tests/tasks/test_classifier_export.py makes one."""
    from nbcli.tasks.data import DataSpec
    from nbcli.tasks.finetune import FinetuneConfig, finetune
    from tests.tasks.builders import encoder_folder, write_corpus
    from tests.tasks.test_finetune import pairs

    root = tmp_path_factory.mktemp("clf")
    folder = encoder_folder(root / "bert", "bert")
    train = write_corpus(root / "train.jsonl", pairs(16), "jsonl")
    cfg = FinetuneConfig(data=DataSpec(text_field="sentence1", pair_field="sentence2"), init=str(folder), steps=3,
                         batch_size=8, lr=5e-3)
    finetune(cfg, [str(train)], {}, root / "run")
    return root / "run"


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory, translation_run: Path,
               classifier_run: Path) -> dict[str, tuple[Path, str, dict[str, str]]]:
    """kind -> (run, the Auto model class, the digests of its uninterrupted export)."""
    out = {}
    for kind, run, auto in (("translation", translation_run, "AutoModelForSeq2SeqLM"),
                            ("classifier", classifier_run, "AutoModelForSequenceClassification")):
        folder = tmp_path_factory.mktemp(f"ref-{kind}") / "hf"
        done = _export(run, folder)
        assert done.returncode == 0, done.stderr
        assert reader_view(folder, auto) == "complete"
        out[kind] = (run, auto, digests(folder))
    return out


# every point into a new folder; one point before the commit and the one after into an existing empty one
CASES = ([("translation", p, False) for p in TRANSLATION_BEFORE + AFTER]
         + [("classifier", p, False) for p in CLASSIFIER_BEFORE + AFTER]
         + [("translation", "renamed:3", True),
            ("classifier", "folder-renamed", True)])


@pytest.mark.parametrize(("kind", "point", "empty"), CASES)
def test_export_killed_at_every_step_is_absent_or_complete_and_a_rerun_recovers(
        tmp_path: Path, references, kind: str, point: str, empty: bool) -> None:  # noqa: ANN001
    run, auto, expected_files = references[kind]
    hf = tmp_path / "hf"
    if empty:
        hf.mkdir()
    committed = point in AFTER
    want = "complete" if committed else "absent"
    pause_then_kill(["nb", "export", str(run), "-o", str(hf)], _env(point), point,
                    lambda: reader_view(hf, auto) == want, f"a reader should see the folder {want}")
    assert reader_view(hf, auto) == want, f"killed at {point}, before any nb run"
    if committed:
        assert digests(hf) == expected_files
    again = rerun(["export", run, "-o", hf], as_process=(kind, point, empty) == CASES[0])
    if committed:  # the export was done: the folder stays as it is, the rerun says so
        assert again.returncode == 1
        assert_one_line_error(again.stderr, "not an empty directory")
    else:
        assert again.returncode == 0, f"killed at {point}, the rerun: {again.stderr}"
        assert "nb: note: " in again.stderr and "stale" in again.stderr, again.stderr  # it says what it removed
    assert digests(hf) == expected_files
    assert reader_view(hf, auto) == "complete"
    assert nb_leftovers(tmp_path, hf) == []
