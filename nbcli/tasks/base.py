"""The Task seam (fairseq's `FairseqTask`): a task declares its options (dataclass groups,
`nbcli.tasks.options`), trains from their values through the shared update loop, and says how its
summary reads. `nb train TASK`, its `--help` and the Python API (`nbcli.api.train_task`) are faces of
this declaration; `nbcli.tasks.registry` finds the built-in tasks and those of other packages
(entry-point group `nbcli.tasks`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from nbcli.errors import ConfigError
from nbcli.tasks.common_options import ThreadOptions, TrackingOptions
from nbcli.tasks.options import Declared, declared
from nbcli.train.callbacks import Callback

StepHook = Callable[[int, dict[str, Any]], None]
#: Option groups every task takes without listing them; the seam (`train_task`) acts on their values
#: and gives the task the rest.
SEAM_GROUPS: tuple[type, ...] = (TrackingOptions, ThreadOptions)


def _ignore(*_: Any) -> None:
    return None


@dataclass
class TrainHooks:
    """What the face hears during a run: the number of updates once known (`on_start`; None:
    unknown), each logged record (`on_step`), each warning (`on_warning`); `callbacks` go into the
    update loop itself (`nbcli.train.callbacks.Callback`: every evaluation and log record, the end)."""

    on_start: Callable[[int | None], None] = _ignore
    on_step: StepHook = _ignore
    on_warning: Callable[[str], None] = _ignore
    callbacks: list[Callback] = field(default_factory=list)


Formatter = Callable[..., str]  # a number as the face prints it (the CLI's `num(value, sig=...)`)


@dataclass
class SummaryView:
    """How a run's summary reads: a title and (label, text) rows, numbers written by the face's
    formatter (`Task.summary_view(summary, num)`)."""

    title: str
    rows: list[tuple[str, str]] = field(default_factory=list)


class Task:
    """One task: subclass, set `name`, `help`, `option_groups`, and implement `train`."""

    name: ClassVar[str]
    help: ClassVar[str]                          # one line for `nb train --help`'s list of tasks
    description: ClassVar[str] = ""              # paragraphs for `nb train NAME --help`
    examples: ClassVar[str] = ""                 # command lines for the help's epilog
    option_groups: ClassVar[tuple[type, ...]] = ()

    @classmethod
    def options(cls) -> list[Declared]:
        """Every option the task takes, in --help order: its groups', then the seam's own
        (`SEAM_GROUPS`: experiment trackers, CPU threads), which `nbcli.tasks.runs.train_task` handles."""
        return declared(cls.option_groups + tuple(g for g in SEAM_GROUPS if g not in cls.option_groups))

    def train(self, values: dict[str, Any], hooks: TrainHooks) -> dict[str, Any]:
        """Train from `values` (every option's value, `options()`'s names) and return the summary
        (summary.json's content)."""
        raise NotImplementedError

    # nb eval: the options (keyword names of `nb eval`'s, e.g. "beam", "tokenizer") this task's
    # `evaluate` reads, each passed to it by name; any other option given is refused naming the task.
    # `eval_view`: how a face shows the report ("scalars": every scalar; nb's own: "lm", "translation",
    # "labelled").
    eval_options: ClassVar[frozenset[str]] = frozenset()
    eval_view: ClassVar[str] = "scalars"

    def evaluate(self, run: Path, corpus: list[str], **options: Any) -> dict[str, Any]:
        """`nb eval RUN --corpus FILE...`: the run's metrics on `corpus` (a report: plain data);
        `options`: the values of the `eval_options` it declares. The seam adds `datasets` (the Hub
        datasets among `corpus`, `nbcli.tasks.runs.eval_run`)."""
        raise ConfigError(self.lacks("eval"))

    def predict(self, run: Path, corpus: list[str]) -> list[dict[str, Any]]:
        """`nb predict RUN --corpus FILE...`: one prediction (a JSON object) per record of `corpus`."""
        raise ConfigError(self.lacks("predict"))

    # nb predict and nb export, as nb eval: the options (keyword names of the command's: "batch_size",
    # "device"; "source_tokenizer", "beam", ...) this task's `predict_report` / `export` reads, each passed
    # by name; any other option given is refused naming the task (`nbcli.tasks.runs.command_options`).
    predict_options: ClassVar[frozenset[str]] = frozenset()
    export_options: ClassVar[frozenset[str]] = frozenset()

    def predict_report(self, run: Path, corpus: list[str], output: Path | None, **options: Any) -> dict[str, Any]:
        """`nb predict RUN --corpus FILE... [-o FILE]`: the report; by default `predict`'s records as JSON
        lines in `output` (checked before any work: no input overwritten; written whole or not at all) or,
        without `output`, in the report's `predictions`. The seam adds `datasets` (the Hub datasets
        among `corpus`, `nbcli.tasks.runs.predict_run`)."""
        import json

        from nbcli.atomic import write_text_atomic
        from nbcli.outputs import guard_outputs, model_inputs

        guard_outputs([output], [*model_inputs(run), *corpus])
        predictions = self.predict(run, corpus)
        if output is not None:
            write_text_atomic(output, "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in predictions))
        return {"task": self.name, "checkpoint": str(run), "corpus": list(corpus),
                "output": None if output is None else str(output), "records": len(predictions), "labels": [],
                "predictions": predictions if output is None else None, "warnings": []}

    def export(self, run: Path, out: Path, **options: Any) -> dict[str, Any]:
        """`nb export RUN -o DIR`: the run as a model folder another library loads; the report (plain
        data); `options`: the values of the `export_options` it declares."""
        raise ConfigError(self.lacks("export"))

    # nb translate: the options (keyword names of the command's: "beam", "src_lang", "progress", ...)
    # this task's `translate` reads.
    translate_options: ClassVar[frozenset[str]] = frozenset()

    def translate(self, run: Path, input_path: Path, output: Path, **options: Any) -> dict[str, Any]:
        """`nb translate RUN -i FILE -o FILE`: every line of `input_path` decoded into `output`; the
        report (plain data); `options`: the values of the `translate_options` it declares."""
        raise ConfigError(self.lacks("translate"))

    # nb generate: the options (keyword names of the command's: "tokenizer", "scale_ln_bias", "decoding",
    # "progress_bar", ...) this task's `generate` reads; `generate_view`: how a face shows the report
    # ("scalars": every scalar; nb's own: "lm").
    generate_options: ClassVar[frozenset[str]] = frozenset()
    generate_view: ClassVar[str] = "scalars"

    def generate(self, run: Any, prompts: list[str], **options: Any) -> dict[str, Any]:
        """`nb generate RUN --prompts FILE...`: continuations of prompts drawn from `prompts`; the report
        (plain data); `options`: the values of the `generate_options` it declares. `run` is what
        `nbcli.tasks.runs.generating_task` read its task from (the LM's: also a model folder, a Hub id or
        a model in memory)."""
        raise ConfigError(self.not_generating(run))

    def not_generating(self, run: Any) -> str:
        """The one-line refusal of `nb generate` for a run of a task without `generate`: the command that
        is the task's inference, where it has one."""
        inference = next((c for c in ("translate", "predict") if c in self.commands()), None)
        if inference is None:
            return f"{run}: {self.lacks('generate')}"
        return (f"{run} is a run of nb train {self.name}: use nb {inference} (nb train {self.name} runs have no "
                "nb generate)")

    def commands(self) -> list[str]:
        """The `nb` commands that read this task's runs: those whose method the task implements."""
        own = type(self)
        methods = {"eval": ("evaluate",), "predict": ("predict", "predict_report"), "export": ("export",),
                   "translate": ("translate",), "generate": ("generate",)}
        return [command for command, names in methods.items()
                if any(getattr(own, name) is not getattr(Task, name) for name in names)]

    def lacks(self, command: str) -> str:
        """The one-line refusal of `nb COMMAND` for a run of this task, naming the commands that read it."""
        has = [f"nb {c}" for c in self.commands()]
        return f"nb train {self.name} runs have no nb {command}" + (
            f" ({', '.join(has)} read{'s' if len(has) == 1 else ''} them)" if has else "")

    def summary_view(self, summary: dict[str, Any], num: Formatter = str) -> SummaryView:
        """The summary as a person reads it (default: every scalar of it), numbers written by `num`."""
        rows = [(key, value if isinstance(value, str) else num(value)) for key, value in summary.items()
                if isinstance(value, (int, float, str)) or value is None]
        return SummaryView(f"nb train {self.name}: {summary.get('out', '')}", rows)
