"""`nb train TASK`: one sub-command per task of the registry (`nbcli.tasks.registry`), its options
generated from the task's declaration (`Task.options()`); `nb train --task TASK ...` and `nb train
...` (the LM) still run. This module parses and renders; the task trains."""

from __future__ import annotations

import contextlib
import inspect
from typing import Annotated, Any, Optional

import typer

from nbcli.cli.base import NbCommand, NbGroup

GROUP_HELP = """Train a model of one task and record what the papers measure (docs/training.md).

Each task is a sub-command with its own options: nb train TASK --help lists them. `nb train --task TASK ...`
is the same as `nb train TASK ...`, and without a task nb train trains the language model (lm)."""

GROUP_EPILOG = """\
[bold]Examples[/bold]

  nb train --corpus corpus.txt -t spm.model --out runs/unigram --bias-init unigram
  nb train --corpus corpus.txt -t spm.model --out runs/u --bias-init unigram --stop-at 100
  nb train --corpus corpus.txt -t spm.model --out runs/u --bias-init unigram --resume
  nb train translation --corpus data/train --valid data/valid --src-lang de --tgt-lang en -t joint.model --out runs/mt
  nb train classification --init bert-base-uncased --corpus SST-2/train.tsv --valid SST-2/dev.tsv --out runs/sst2
  nb train tagging --init bert-base-cased --corpus conll2003/train.conll --valid conll2003/dev.conll --out runs/ner
  nb train lm --help
"""


class TrainGroup(NbGroup):
    """`nb train`: the task is the first word (`nb train translation ...`), or `--task TASK` anywhere,
    or lm. An option that another task takes is refused in one line naming that task."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        from nbcli.errors import ConfigError
        from nbcli.tasks.registry import task_names

        names = task_names()
        args = list(args)
        if args and not args[0].startswith("-") and args[0] not in names:
            raise ConfigError(f"no task {args[0]!r}; nb train knows {', '.join(names)}")
        if args and args[0] not in names and args[0] not in ("--help", "-h"):
            args = [*_task_from_option(args), *(a for i, a in enumerate(args) if not _is_task_option(args, i))]
        if args and args[0] in names:
            _refuse_other_tasks_options(args[0], args[1:])
        elif args and args[0] not in ("--help", "-h"):
            raise ConfigError(f"no task {args[0]!r}; nb train knows {', '.join(names)}")
        return super().parse_args(ctx, args)


def _is_task_option(args: list[str], i: int) -> bool:
    """Whether args[i] is `--task`, its value, or `--task=VALUE` (the first one only)."""
    first = next((j for j, a in enumerate(args) if a == "--task" or a.startswith("--task=")), None)
    if first is None:
        return False
    return i == first or (args[first] == "--task" and i == first + 1)


def _task_from_option(args: list[str]) -> list[str]:
    """[TASK] from `--task TASK` / `--task=TASK` (the first), else ["lm"]."""
    for i, arg in enumerate(args):
        if arg == "--task" and i + 1 < len(args):
            return [args[i + 1]]
        if arg.startswith("--task="):
            return [arg.split("=", 1)[1]]
    return ["lm"]


def _refuse_other_tasks_options(task: str, args: list[str]) -> None:
    """ConfigError for the first flag of `args` that `task` does not take but another task does."""
    from nbcli.errors import ConfigError
    from nbcli.tasks.registry import get_task, option_owners

    own = {flag for o in get_task(task).options() for flag in o.typed_flags}
    owners = option_owners()
    for arg in args:
        if arg == "--":
            return
        flag = arg.split("=", 1)[0]
        if flag.startswith("-") and flag not in own and flag in owners and flag not in ("--help", "--json"):
            raise ConfigError(f"{flag} applies to --task {'|'.join(owners[flag])}, not {task} "
                              f"(nb train {owners[flag][0]} --help)")


def _typer_option(declared: Any) -> Any:
    o = declared.opt
    flags = o.flags or (declared.flag,)
    return typer.Option(*flags, help=o.help, metavar=o.metavar, min=o.min, max=o.max,
                        show_default=not declared.required and declared.default not in (None, [], False))


def task_command(name: str) -> Any:
    """The typer command function of task `name`: its signature is the task's declared options."""
    from nbcli.tasks.registry import get_task

    task = get_task(name)
    params = [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)]
    for declared in task.options():
        default = inspect.Parameter.empty if declared.required else declared.default
        params.append(inspect.Parameter(declared.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                        annotation=Annotated[declared.type, _typer_option(declared)]))
    params += [
        inspect.Parameter("log_every", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
            Optional[int], typer.Option(
                "--log-every", metavar="N", min=1, max=10**12, show_default=False,
                help="Off a terminal (nohup, a batch job's log), a progress line on stderr every N updates (step, "
                "loss, tokens/s, elapsed, ETA). Default: every NB_LOG_SECONDS seconds (30; 0: none). On a "
                "terminal the progress bar shows instead.")]),
        inspect.Parameter("quiet", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=Annotated[
            bool, typer.Option("--quiet", "-q", help="No progress bar and no progress lines (warnings and "
                               "the result still print).")]),
        inspect.Parameter("as_json", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=Annotated[
            bool, typer.Option("--json", help="Print the result as one JSON object on stdout.")]),
    ]

    def command(ctx: typer.Context, **values: Any) -> None:
        as_json, log_every, quiet = values.pop("as_json"), values.pop("log_every"), values.pop("quiet")
        run_task(name, values, as_json, log_every=log_every, quiet=quiet)

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__doc__ = task.description or task.help
    return command


def run_task(name: str, values: dict[str, Any], as_json: bool, *, log_every: int | None = None,
             quiet: bool = False) -> None:
    """Train task `name` with the progress bar on a terminal, log lines off one (rank 0's under
    torchrun), and print its summary (one report, rank 0's)."""
    from nbcli.cli.console import print_report
    from nbcli.tasks.base import TrainHooks
    from nbcli.tasks.registry import get_task
    from nbcli.tasks.runs import train_task
    from nbcli.train.runtime import main_process

    task = get_task(name)
    with contextlib.ExitStack() as stack:
        bar: list[Any] = []

        def on_start(total: int | None) -> None:
            bar.append(stack.enter_context(_progress(total, log_every, quiet)))

        def on_step(step: int, record: dict[str, Any]) -> None:
            if "loss" in record and bar:
                bar[0](1, status=f"loss {record['loss']:.3f}  {record['tokens_per_s']:,.0f} tok/s"
                       + "".join(f"  {k} {v:.4g}" for k, v in record.items() if k.startswith("val_") and
                                 isinstance(v, (int, float)) and k.count("_") == 1))

        summary = train_task(name, values, TrainHooks(on_start=on_start, on_step=on_step, on_warning=_print_warning))
    if main_process():
        print_report(summary, as_json, lambda s: _render(task, s))


def _progress(total: int | None, every: int | None, quiet: bool) -> contextlib.AbstractContextManager[Any]:
    from nbcli.cli.console import step_progress
    from nbcli.train.runtime import main_process

    if not main_process():
        return contextlib.nullcontext(lambda advance=1, **fields: None)
    return step_progress("training", total, every=every, quiet=quiet)


def _print_warning(message: str) -> None:
    from nbcli.cli.console import stderr_console

    stderr_console().print(f"[yellow]warning:[/] {message}", markup=True, highlight=False)


def _render(task: Any, summary: dict[str, Any]) -> None:
    from nbcli.cli.console import esc
    from nbcli.cli.render import TEXT, num, print_pairs

    view = task.summary_view(summary, num)
    print_pairs(view.title, [(esc(label), esc(text)) for label, text in view.rows], "nothing to report", kind=TEXT)


def register(app: typer.Typer) -> None:
    from nbcli.tasks.registry import get_task, task_names

    train_app = typer.Typer(cls=TrainGroup, help=GROUP_HELP, epilog=GROUP_EPILOG, no_args_is_help=True,
                            add_completion=False)
    for name in task_names():
        task = get_task(name)
        epilog = f"[bold]Examples[/bold]\n\n{task.examples}" if task.examples else None
        train_app.command(name, cls=NbCommand, help=task.description or task.help, short_help=task.help,
                          epilog=epilog)(task_command(name))
    app.add_typer(train_app, name="train", help=GROUP_HELP, epilog=GROUP_EPILOG)
