"""nb's public Python API: what each `nb` command does, as a function for notebooks.

    import nbcli
    counts = nbcli.count_unigrams("corpus.txt", tokenizer="spm.model", output="counts.safetensors")
    report = nbcli.probe(model, counts="counts.safetensors")      # a path, a transformers model or a state dict
    patched = nbcli.patch(state_dict, scale_ln_bias=0.5)          # in memory: patched.state_dict
    report.to_dict() == json.loads(`nb probe-bias ... --json`)    # the same content

Every function calls the same core functions as its command (docs/python.md), and returns a
`Report` dataclass: `to_dict()` is the command's `--json` object; its keys also read as attributes
(`report.isotropy["mean_cosine"]`). Arguments that name files take a `str` or `os.PathLike`; a
model or tokenizer string may also be a Hugging Face repo id `org/name[@rev]` (`./name` is always a
local path: `nbcli.api.inputs.local_path`). Errors are `nbcli.errors.NbError` subclasses with a one-line message, as on
the command line, in this API's words: each function is `@public` (nbcli.arguments), so a wrong
type, choice or bound is refused before anything runs, and options are named as its parameters
(`scale_ln_bias=`, `mapping=`), not as the command's flags.

One module per command family (counting, checkpoints, language_models, translation,
classification, vectors, runs, reproduce), the report classes in `reports` and the argument conversions in
`inputs`; `models` is the API on transformers models in memory and in training
(`nbcli.api.models`). Internal modules are imported inside the functions, so `import nbcli` stays fast and torch is
loaded only by the functions that need it.
"""

from __future__ import annotations

from nbcli.api.checkpoints import inspect, open_checkpoint, patch, probe, transplant_embeddings
from nbcli.api.classification import evaluate_classifier, finetune_classifier, predict_labels
from nbcli.api.counting import count_unigrams
from nbcli.api.language_models import attention_maps, evaluate, generate, plot_by_frequency, train_model
from nbcli.api.reproduce import reproduce, reproduce_items, sweep
from nbcli.api.runs import export_checkpoint, plot_runs
from nbcli.api.translation import evaluate_translation, train_translation, translate_file
from nbcli.api.vectors import analogy, read_vectors
from nbcli.api.reports import (
    CheckpointReport, CountReport, EvalReport, GenerateReport, PatchReport, ProbeReport, Report, TrainReport,
    TransplantReport,
)

__all__ = [
    "CheckpointReport", "CountReport", "EvalReport", "GenerateReport", "PatchReport", "ProbeReport", "Report",
    "TrainReport", "TransplantReport", "analogy", "attention_maps", "count_unigrams", "evaluate",
    "evaluate_classifier", "evaluate_translation", "export_checkpoint", "finetune_classifier", "generate", "inspect",
    "open_checkpoint", "patch", "plot_by_frequency", "plot_runs", "predict_labels", "probe", "read_vectors",
    "reproduce", "reproduce_items", "sweep", "train_model", "train_translation", "translate_file",
    "transplant_embeddings",
]
