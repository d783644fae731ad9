"""The table of which `nb train` options apply to which task (nbcli.train.task_options)."""

from __future__ import annotations

import pytest

from nbcli.errors import ConfigError
from nbcli.train.task_options import OPTION_TASKS, TASKS, check_task_options


def _train_options() -> set[str]:
    import typer.main

    from nbcli.cli import build_app

    command = typer.main.get_command(build_app(["train"])).commands["train"]  # type: ignore[attr-defined]
    return {opt for param in command.params for opt in [*param.opts, *param.secondary_opts]}


def test_every_option_in_the_table_is_an_option_of_nb_train() -> None:
    options = _train_options()
    assert "--beam" in options and "--pooling" in options   # the walk found them
    assert set(OPTION_TASKS) <= options, sorted(set(OPTION_TASKS) - options)
    assert all(tasks and set(tasks) <= set(TASKS) for tasks in OPTION_TASKS.values())


@pytest.mark.parametrize("option", sorted(OPTION_TASKS))
def test_an_option_is_refused_by_exactly_the_tasks_it_does_not_apply_to(option: str) -> None:
    for task in TASKS:
        if task in OPTION_TASKS[option]:
            check_task_options(task, [option])
        else:
            with pytest.raises(ConfigError, match=f"^{option} applies to --task {'|'.join(OPTION_TASKS[option])}$"):
                check_task_options(task, ["--seed", option])


def test_options_of_every_task_pass_and_an_unknown_task_is_refused() -> None:
    for task in TASKS:
        check_task_options(task, ["--seed", "--steps", "--lr", "--dropout", "--preset", "--embedding-init"])
    with pytest.raises(ConfigError, match="--task must be one of"):
        check_task_options("regression", [])
