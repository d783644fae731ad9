"""Options that several commands share are declared once: same names, type and bounds everywhere."""

from __future__ import annotations

import collections

import typer.main

from nbcli.cli import app
from tests.cli.helpers import run_cli
from nbcli.cli.options import MAX_SEED

def _leaves(commands: dict) -> dict:
    """name -> leaf command; a group's (nb train's tasks) as "train lm", "train translation", ..."""
    leaves = {}
    for name, command in commands.items():
        for sub, leaf in getattr(command, "commands", {}).items():
            leaves[f"{name} {sub}"] = leaf
        if not hasattr(command, "commands"):
            leaves[name] = command
    return leaves


COMMANDS = _leaves(typer.main.get_command(app).commands)
# Same name, different meaning (a list of LAMBDAs vs one LAMBDA; train's own device/batch semantics;
# --task: train trains lm|translation|classification|tagging, eval scores lm|translation|classification|tagging;
# --tsv: count-unigrams' per-token table is an output the core commits beside the counts file, a Path;
# --preset: each task of nb train has its own presets; --beam/--lenpen: nb train translation's are the old
# names of --valid-beam/--valid-lenpen, the validation search, not the decoding of translate/eval/export):
DIFFERENT_MEANING = {"--scale-ln-bias", "--device", "--batch-size", "--out", "--tokenizer", "--task", "--tsv",
                     "--preset", "--beam", "--lenpen"}


def _declarations() -> dict[str, list[tuple[str, object]]]:
    found = collections.defaultdict(list)
    for name, command in COMMANDS.items():
        for param in command.params:
            if getattr(param, "param_type_name", "") == "option":
                found[param.opts[-1] if param.opts[-1].startswith("--") else param.opts[0]].append((name, param))
    return found


def test_shared_options_have_one_declaration() -> None:
    shared = {opt: uses for opt, uses in _declarations().items() if len(uses) > 1 and opt not in DIFFERENT_MEANING}
    assert {"--output", "--counts", "--seed", "--rescale-w", "--corpus"} <= set(shared)
    for opt, uses in shared.items():
        shapes = {(tuple(sorted(p.opts)), getattr(p, "min", None), getattr(p, "max", None),
                   str(getattr(getattr(p, "type_descriptor", None), "annotation", None)).replace("typing.Optional[", "").rstrip("]"))
                  for _, p in uses}  # the metavar may say more (OUT.safetensors, OUTDIR)
        assert len(shapes) == 1, (opt, shapes)


def test_seed_has_one_bound_everywhere() -> None:
    seeds = _declarations()["--seed"]
    # patch-checkpoint, embedding-stats, analogy, train (each task), generate, transplant-embeddings
    assert len({name.split()[0] for name, _ in seeds}) == 6
    for name, _ in seeds:
        assert {(p.min, p.max) for n, p in seeds if n == name} == {(0, MAX_SEED)}
        result = run_cli([*name.split(), "--seed", str(MAX_SEED + 1)])
        assert result.exit_code == 2 and "--seed" in result.stderr, (name, result.output)
