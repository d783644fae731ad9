"""One orchestration for every task's run, top to bottom: the runtime (device, bf16, DDP, compile),
the run directory's check, the task's set-up (tokenizer, data, model with the papers'
initialisations: `prepare`), the run directory, the optimizer, the position (step 0, or the saved
state with --resume), the run's files, the updates (`nbcli.train.updates`) with their callbacks (the
log, the face's progress, the best checkpoint, trackers), and the summary. Under DDP, rank 0 alone
checks and writes the run directory and every rank shares the outcome (`runtime.on_main_rank`): a
refusal there stops every rank at once.

A task brings a `prepare(rt, warn) -> TaskRun`: what the update loop needs (`Updates`), the files
of its run directory and its summary; the LM's is `nbcli.tasks.language_model`, translation's
`nbcli.tasks.translation`, classification's and tagging's `nbcli.tasks.finetune`.

A new run that fails or is interrupted before its first saved state (train-state.json) removes what
it created in `out` (and `out` itself if it made it), so the same command can simply be run again;
once a state is saved, the run directory stays and `--resume` continues.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from nbcli.checkpoint.runs import BEST, read_log_records
from nbcli.train.best import BestCheckpoint
from nbcli.train.callbacks import Callback, KeepBest, LogFile, StepHook
from nbcli.train.rundir import create_run_directory, removed_on_failure, write_summary
from nbcli.train.runtime import Runtime, on_main_rank, process_group_closed, setup_runtime
from nbcli.train.state import save_model
from nbcli.train.step import make_optimizer
from nbcli.train.updates import Position, Updates, run_updates, start_position


@dataclass
class TrainResult:
    """The summary fields every task's run reports (summary.json); a task's result adds its own."""

    out: Path
    steps: int
    final_val_loss: float | None
    alc: float | None
    checkpoint: Path
    tokens: int
    seconds: float
    tokens_per_s: float
    parameters: int
    device: str
    unigram_entropy: float
    log_v: float
    resumed_from: int | None
    ag_alpha0: float | None = None
    warnings: list[str] = field(default_factory=list)
    # --embedding-init pretrained:VECTORS: per embedding (input; translation: source/target/shared) the
    # vectors' coverage of its vocabulary (nbcli.vectors.vocabulary.vector_embedding)
    embedding_coverage: dict[str, Any] | None = None
    # the preset's values the run's options replaced ({name: {preset, run}}; TrainConfig.preset_overridden)
    preset_overridden: dict[str, Any] = field(default_factory=dict)
    # the Hub datasets among the inputs: repo, commit, config, split, files (run_training sets it)
    datasets: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["out"] = str(self.out)
        d["checkpoint"] = str(self.checkpoint)
        return d


class RuntimeSettings(Protocol):
    """What the runtime is set up from (a task's options: TrainConfig, FinetuneConfig)."""

    device: str
    dtype: str
    batch_size: int
    grad_accum: int


class Summarised(Protocol):
    datasets: list[dict[str, Any]]

    def as_dict(self) -> dict[str, Any]: ...


Result = TypeVar("Result", bound=Summarised)


@dataclass
class Finished:
    """How the updates ended: where (`position`, `last_step`), the last checkpoint, the wall-clock
    seconds of the updates (evaluation and saving included; `position.seconds` excludes them) and
    the run's warnings."""

    position: Position
    last_step: int
    checkpoint: Path
    seconds: float
    warnings: list[str]


@dataclass
class TaskRun:
    """What a task's set-up hands the orchestration: the update loop's record (its optimizer is made
    here), the run directory's files (`write_files(resumed_step or None)`, rank 0), the result
    (`finish`, summary.json = its as_dict()) and, for a task with a best checkpoint, which metric
    chooses it (`best`) and whether the model is kept as DIR/best.safetensors."""

    updates: Updates
    write_files: Callable[[int | None], None]
    finish: Callable[[Finished], Any]
    best: BestCheckpoint | None = None
    keep_best_model: bool = False


Warn = Callable[[str], None]


def run_training(settings: RuntimeSettings, out: Path, *, resume: bool, stop_at: int | None,
                 check_directory: Callable[[], None], prepare: Callable[[Runtime, Warn], TaskRun],
                 on_step: Callable[[int, dict[str, Any]], None] | None = None,
                 on_warning: Callable[[str], None] | None = None, callbacks: Sequence[Callback] = (),
                 inputs: Sequence[str] = ()) -> Any:
    """Run one task (module doc): `check_directory` on rank 0 before any work, `prepare` once the
    runtime is up, the run directory created only once `prepare` accepted every input. `stop_at`
    stops after that many updates (state saved) while the schedule follows the whole run. Warnings go
    to `on_warning` as they arise and to the summary; the Hub datasets among the data `inputs` (as
    given: --corpus, --valid) to its `datasets` (`nbcli.resolve_datasets.dataset_inputs`). Returns the
    task's result."""
    from nbcli.resolve_datasets import dataset_inputs

    with process_group_closed(), removed_on_failure(out, resume):
        rt = setup_runtime(settings)  # type: ignore[arg-type]
        warnings, warn = warning_sink(rt, on_warning)
        on_main_rank(rt, check_directory)
        run = prepare(rt, warn)
        datasets = dataset_inputs(inputs)   # the snapshots the inputs were read from
        u = run.updates
        on_main_rank(rt, lambda: create_run_directory(out))   # only once the inputs and options are accepted
        u.optimizer = make_optimizer(u.model, u.cfg, rt.device)
        position = start_position(u, resume)
        on_main_rank(rt, lambda: run.write_files(position.step if resume else None))
        last_step = min(u.cfg.steps, stop_at) if stop_at is not None else u.cfg.steps
        t_start = time.perf_counter()
        checkpoint = run_updates(u, position, last_step, [*_built_in(run, position, resume, on_step), *callbacks])
        seconds = time.perf_counter() - t_start
        result = run.finish(Finished(position, last_step, checkpoint, seconds, warnings))
        result.datasets = datasets
        on_main_rank(rt, lambda: write_summary(out, result.as_dict()))
        return result


def _built_in(run: TaskRun, position: Position, resume: bool,
              on_step: Callable[[int, dict[str, Any]], None] | None) -> list[Callback]:
    """The run's own callbacks: the best checkpoint (its logged evaluations before a resumed step
    taken up again), DIR/log.jsonl and the face's progress (rank 0)."""
    u = run.updates
    callbacks: list[Callback] = []
    if run.best is not None:
        if resume:
            run.best.take_up([r for r in read_log_records(u.out / "log.jsonl") if r["step"] < position.step])

        def save_best(step: int) -> None:
            on_main_rank(u.rt, lambda: save_model(u.out / BEST, u.model, u.metadata(step)))  # type: ignore[arg-type]

        callbacks.append(KeepBest(run.best, save_best if run.keep_best_model else None))
    if u.rt.is_main:
        callbacks.append(LogFile(u.out / "log.jsonl"))
        if on_step is not None:
            callbacks.append(StepHook(on_step))
    return callbacks


def warning_sink(rt: Runtime, on_warning: Callable[[str], None] | None) -> tuple[list[str], Warn]:
    """A run's warnings: the list they collect in (the summary's `warnings`) and the function that
    adds one, passing it to `on_warning` as it arises (rank 0 only)."""
    warnings: list[str] = []

    def warn(message: str) -> None:
        warnings.append(message)
        if on_warning is not None and rt.is_main:
            on_warning(message)

    return warnings, warn
