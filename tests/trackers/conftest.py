"""The installed example task of docs/tasks.md (`site`, a folder on PYTHONPATH), shared with
tests/tasks/test_external_task.py: a task from another package, with a loop of its own, is tracked too."""

from tests.tasks.test_external_task import site

__all__ = ["site"]
