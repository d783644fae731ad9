"""The run directory of `nb train`: what is checked before a run starts or resumes, the files written
there besides the saved state (state.py), and the clean-up of a new run that failed.

DIR layout: config.json (TrainConfig), log.jsonl (one object per step; eval fields on eval steps),
counts.safetensors (training-token unigram counts), tokenizer.json or tokenizer.model (the LM's tokenizer, so
eval/generate on the run's checkpoints need no -t; --task translation keeps source-/target-tokenizer.*),
step-N.safetensors + train-state.safetensors +
train-state.json (state.py), summary.json.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nbcli.atomic import write_text_atomic
from nbcli.checkpoint.runs import read_log_records
from nbcli.errors import CheckpointError, ConfigError, OutputError
from nbcli.jsonsafe import load_file
from nbcli.provenance import tool_version, utc_now
from nbcli.tokenizers import Tokenizer
from nbcli.train import init
from nbcli.train.config import TrainConfig
from nbcli.train.data import TokenData
from nbcli.train.runtime import main_process
from nbcli.train.state import read_state

# Settings that may change between a run and its --resume (they do not change the trajectory).
RESUMABLE_CHANGES = {"device", "compile", "eval_every", "eval_batches", "save_every", "extra"}


def check_run_directory(out: Path, cfg: TrainConfig, corpus: list[str], tokenizer_path: Path | str,
                        resume: bool) -> None:
    """Everything about `out` that can refuse the run, checked before anything is read or written:
    not a file, no input inside it, no earlier run unless --resume, and for --resume a config with
    the same options, a valid training state and a readable log."""
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out}: exists and is not a directory")
    check_inputs_outside(out, cfg, corpus, tokenizer_path)
    if not resume and (out / "log.jsonl").exists():
        raise OutputError(f"--out {out}: already holds a run (log.jsonl); use --resume or another directory")
    if resume:
        if not (out / "config.json").exists():
            raise ConfigError(f"--resume: {out / 'config.json'} not found (no run to resume)")
        check_resume_config(out, cfg)
        read_state(out)
        read_log_records(out / "log.jsonl")


def check_inputs_outside(out: Path, cfg: TrainConfig, corpus: list[str], tokenizer_path: Path | str) -> None:
    """OutputError if an input (corpus file, tokenizer, pretrained embedding) lies in the run
    directory, whose files nb train writes and replaces."""
    from nbcli.corpus import corpus_files
    from nbcli.outputs import inputs_inside
    from nbcli.tokenizers import tokenizer_files

    inputs: list[Path | str] = [*corpus_files(corpus), *tokenizer_files(tokenizer_path)]
    if cfg.embedding_init.startswith("pretrained:"):
        inputs.append(init.parse_pretrained(cfg.embedding_init)[0])
    inside = inputs_inside(out, inputs)
    if inside is not None:
        raise OutputError(f"--out {out}: the input {inside} lies in this run directory, whose files nb train "
                          "writes; choose another --out")


def check_resume_config(out: Path, cfg: TrainConfig) -> None:
    path = out / "config.json"
    data = load_file(path, error=CheckpointError, what="run config", max_bytes=1 << 20)
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: run config is a JSON {type(data).__name__}, expected an object")
    try:
        saved = TrainConfig.from_dict(data).to_dict()
    except ConfigError as err:
        raise CheckpointError(f"{path}: not a valid run config ({err})") from None
    except (TypeError, ValueError, AttributeError):  # a value of the wrong type reached a check
        raise CheckpointError(f"{path}: not a valid run config (a value has the wrong type)") from None
    now = cfg.to_dict()
    saved_task, now_task = saved.get("task_options"), now.get("task_options")
    if isinstance(saved_task, dict) and isinstance(now_task, dict):  # a task option added since the run began:
        saved["task_options"] = {**{k: None for k, v in now_task.items() if v is None}, **saved_task}  # None = unset
    diff = sorted(k for k in now if k not in RESUMABLE_CHANGES and now[k] != saved.get(k))
    if diff:
        details = ", ".join(f"{k}: {saved.get(k)!r} -> {now[k]!r}" for k in diff[:4])
        raise ConfigError(f"--resume: options differ from {out / 'config.json'} ({details}); "
                          "resume with the run's own options")


def create_run_directory(out: Path) -> None:
    """mkdir -p `out` (once the corpus and options have been accepted); OutputError when it cannot."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(f"--out {out}: cannot create directory ({err.strerror})") from None


def write_run_files(out: Path, cfg: TrainConfig, data: TokenData, tokenizer: Tokenizer, resume_step: int | None,
                    ) -> None:
    """DIR/config.json and DIR/counts.safetensors; on --resume the log loses the records from
    `resume_step` on (they are written again)."""
    write_text_atomic(out / "config.json", cfg.to_json() + "\n")
    write_training_counts(out / "counts.safetensors", data, tokenizer, cfg)
    if resume_step is not None:
        truncate_log(out / "log.jsonl", resume_step)


def write_run_tokenizer(out: Path, tokenizer: Tokenizer) -> None:
    """DIR/tokenizer.json (or tokenizer.model for SentencePiece): the tokenizer's bytes, the file a model
    folder's loader looks for (`nbcli.tokenizers.model_tokenizer`); the checkpoints record its
    fingerprint (`nbcli.tokenizers.identity`). A `-t words:...` vocabulary lives only here."""
    from nbcli.atomic import write_bytes_atomic
    from nbcli.tokenizers import DIRECTORY_CANDIDATES

    name = DIRECTORY_CANDIDATES[0] if tokenizer.kind == "tokenizer.json" else DIRECTORY_CANDIDATES[1]
    write_bytes_atomic(out / name, tokenizer.serialized())


def write_training_counts(path: Path, data: TokenData, tokenizer: Tokenizer, cfg: TrainConfig) -> None:
    """DIR/counts.safetensors: the training-token unigram counts (nb counts format), for
    `nb probe-bias -c` and `nb patch-checkpoint --counts`."""
    from nbcli.counts import UnigramCounts, write_counts
    from nbcli.tokenizers.identity import identity_metadata

    write_counts(path, UnigramCounts(counts=data.counts, metadata={
        "nb.version": tool_version(), "nb.created": utc_now(), **identity_metadata(tokenizer),
        "nb.vocab_size": str(tokenizer.vocab_size),
        "nb.total_tokens": str(int(data.counts.sum())), "nb.documents": str(data.documents),
        "nb.inputs": json.dumps(data.inputs), "nb.method": "nb train (training split only)",
        "nb.options": json.dumps({"eos": tokenizer.eos_id is not None, "bos": False,
                                  "smoothing": f"add-k:{cfg.smoothing_k:g}", "val_fraction": cfg.val_fraction}),
    }))


def truncate_log(path: Path, before_step: int) -> None:
    if not path.exists():
        return
    kept = [json.dumps(record) for record in read_log_records(path) if record["step"] < before_step]
    write_text_atomic(path, "".join(line + "\n" for line in kept))


def read_log(out: Path | str) -> list[dict[str, Any]]:
    """The records of DIR/log.jsonl."""
    return read_log_records(Path(out) / "log.jsonl")


def write_summary(out: Path, summary: dict[str, Any]) -> None:
    """DIR/summary.json: the run's TrainResult, and `threads`, the CPU threads torch computed on
    (`nb train --threads`; every core by default)."""
    import torch

    write_text_atomic(out / "summary.json", json.dumps({**summary, "threads": torch.get_num_threads()}, indent=2) + "\n")


@contextlib.contextmanager
def removed_on_failure(out: Path, resume: bool) -> Iterator[None]:
    """A new run that fails or is interrupted before its first saved state (train-state.json)
    removes what it created in `out` (and `out` itself if it made it), so the same command can
    simply be run again; once a state is saved, the run directory stays and `--resume` continues."""
    from nbcli.atomic import check_name_length

    check_name_length(out)  # before asking the system about a name it cannot hold
    before = set(os.listdir(out)) if out.is_dir() else None
    try:
        yield
    except BaseException:
        if not resume and main_process() and not (out / "train-state.json").exists():
            remove_new_entries(out, before)
        raise


def remove_new_entries(out: Path, before: set[str] | None) -> None:
    """Remove the files a failed new run created in `out` (not those that were there before), and
    `out` itself if the run created it and it is now empty."""
    import shutil

    if not out.is_dir():
        return
    for name in set(os.listdir(out)) - (before or set()):
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    if before is None:
        with contextlib.suppress(OSError):
            out.rmdir()
