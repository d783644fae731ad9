"""Which `nb train` options apply to which task (`--task lm|translation|classification|tagging`): one
table, checked before anything is read, so that an option of another task is refused in one line
instead of being silently ignored. Options not in the table apply to every task."""

from __future__ import annotations

from collections.abc import Iterable

from nbcli.errors import ConfigError

LM, TRANSLATION, CLASSIFIERS = ("lm",), ("translation",), ("classification", "tagging")
TASKS = LM + TRANSLATION + CLASSIFIERS

#: option -> the tasks it applies to. The output bias, attention guidance, the unigram regulariser and
#: the LM's schedule and validation sampling belong to the models with an output layer over the
#: vocabulary (lm, translation); a classifier's head and its linear warm-up ratio do not have them.
OPTION_TASKS: dict[str, tuple[str, ...]] = {
    "--objective": LM,
    **dict.fromkeys(("--src-lang", "--tgt-lang", "--src-tokenizer", "--tgt-tokenizer", "--norm", "--scale-embedding",
                     "--share-embeddings", "--beam", "--lenpen", "--eval-sentences", "--ag-decoder-fraction",
                     "--ag-decoder-patterns"), TRANSLATION),
    **dict.fromkeys(("--valid", "--positions", "--freeze-embeddings"), TRANSLATION + CLASSIFIERS),
    **dict.fromkeys(("--init", "--text-field", "--text-pair-field", "--label-field", "--label-names", "--pooling",
                     "--warmup-ratio", "--epochs"), CLASSIFIERS),
    **dict.fromkeys(("--untie-embeddings", "--rescale-w", "--bias-init", "--smoothing", "--ag-patterns",
                     "--ag-fraction", "--ag-alpha", "--ag-reduction", "--ag-hold-steps", "--ag-decay-steps",
                     "--unigram-reg-lambda", "--unigram-reg-steps", "--embedding-whiten", "--warmup",
                     "--lr-schedule", "--label-smoothing", "--eval-batches", "--val-fraction", "--compile",
                     "--allow-vocab-mismatch"), LM + TRANSLATION),
}


def check_task_options(task: str, given: Iterable[str]) -> None:
    """ConfigError naming the first of the options `given` (as typed: "--beam") that `task` does not take."""
    if task not in TASKS:
        raise ConfigError(f"--task must be one of {', '.join(TASKS)}, got {task!r}")
    for option in given:
        tasks = OPTION_TASKS.get(option)
        if tasks is not None and task not in tasks:
            raise ConfigError(f"{option} applies to --task {'|'.join(tasks)}")
