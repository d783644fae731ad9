"""Option declarations shared by several commands: one definition and one validation per option.

An option whose meaning is the same everywhere is an `Annotated` alias (`JsonOption`); one whose
help says what it is for in each command comes from a small factory (`output_option(help)`), so the
names, metavar and bounds stay in one place and only the sentence differs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, TypeVar

import typer

from nbcli.checkpoint.architectures import ARCHITECTURES, ROLES  # the one architecture table (no torch import)
from nbcli.tasks.common_options import UNICODE_ERRORS_HELP  # nb train's --unicode-errors says the same
from nbcli.threads import MAX_THREADS, THREADS_HELP  # nb train's --threads says the same

JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as one JSON object on stdout.")]
TokenizerOption = Annotated[
    Path,
    typer.Option(
        "--tokenizer", "-t", metavar="TOK",
        help="SentencePiece .model file, Hugging Face tokenizer.json, a model folder "
        "(its tokenizer.json, else its tokenizer.model), or a Hub repo id org/name[@rev].",
    ),
]
# A translation run's tokenizers (nb translate, nb export): found in the run directory unless given.
JointTokenizerOption = Annotated[Optional[Path], typer.Option(
    "--tokenizer", "-t", metavar="TOK", show_default=False,
    help="The joint tokenizer, when the checkpoint is not in its run directory.")]
SrcTokenizerOption = Annotated[Optional[Path], typer.Option(
    "--src-tokenizer", metavar="TOK", show_default=False, help="The source tokenizer (default: the run's).")]
TgtTokenizerOption = Annotated[Optional[Path], typer.Option(
    "--tgt-tokenizer", metavar="TOK", show_default=False, help="The target tokenizer (default: the run's).")]
MAX_WORKERS = 1024
WorkersOption = Annotated[
    int,
    typer.Option("--workers", "-j", min=0, max=MAX_WORKERS,
                 help="Worker processes (0 = all cores available to nb)."),
]
MAX_SEED = 2**63 - 1  # torch generators take 64-bit seeds, numpy's non-negative ones


def seed_option(purpose: str) -> typer.models.OptionInfo:
    """--seed: one bound for every command, the widest range every generator nb seeds accepts."""
    return typer.Option("--seed", min=0, max=MAX_SEED,
                        help=f"{purpose} (0 to 2^63-1: the range torch's and numpy's generators both take).")


def output_option(help: str, metavar: str = "OUT") -> typer.models.OptionInfo:
    """-o/--output: the file (or folder) a command writes; `help` says what it holds."""
    return typer.Option("--output", "-o", metavar=metavar, show_default=False, help=help)


def out_dir_option(help: str, short: bool = True) -> typer.models.OptionInfo:
    """--out DIR: the folder a command writes several files into (a run, a study)."""
    return typer.Option("--out", *(["-o"] if short else []), metavar="DIR", show_default=False, help=help)


def counts_option(help: str) -> typer.models.OptionInfo:
    """-c/--counts: a unigram-counts file; `help` says what the command uses it for."""
    return typer.Option("--counts", "-c", metavar="COUNTS.safetensors", show_default=False, help=help)


DOCUMENTS_HELP = (
    "Each file is read in the format its name says, as count-unigrams reads it: text, one document per "
    "non-empty line (a line ends at LF or CRLF only); .jsonl .ndjson .json: the `text` field; .tsv .csv: "
    "the `text` column named by the header; parquet, Arrow and `datasets` folders: the `text` column; "
    "also compressed (.gz .bz2 .xz .zst).")
"""How every command that reads documents reads them (`nbcli.corpus.records.iter_documents`)."""


def corpus_option(help: str) -> typer.models.OptionInfo:
    """--corpus FILE (repeatable): documents (DOCUMENTS_HELP)."""
    return typer.Option("--corpus", metavar="FILE", show_default=False, help=help)


RescaleNorm = Literal["fro", "spectral", "none"]


def rescale_w_option(help: str) -> typer.models.OptionInfo:
    """--rescale-w fro|spectral|none: ||W|| = ||b|| (paper 000 sec. 4.1); none: W as it is."""
    return typer.Option("--rescale-w", metavar="fro|spectral|none", show_default=False, help=help)

SmoothingOption = Annotated[
    str,
    typer.Option(
        "--smoothing", metavar="add-k:K",
        help="Smoothing for log-probabilities: log((c+K)/(N+K*V)). Default add-k:1 (Laplace): "
        "no token gets -inf.",
    ),
]
ArchOption = Annotated[
    str,
    typer.Option(
        "--arch", metavar="ARCH",
        help="Architecture whose tensor names give the roles: auto (detect from names, nb metadata and a "
        f"model folder's config.json), {', '.join(ARCHITECTURES)} (custom: every role from --map).",
    ),
]
RoleMapOption = Annotated[
    Optional[list[str]],
    typer.Option(
        "--map", metavar="ROLE=TENSOR",
        help=f"Use TENSOR for ROLE ({', '.join(ROLES)}); repeatable.",
    ),
]
LmCheckpointArgument = Annotated[
    Path,
    typer.Argument(
        metavar="CHECKPOINT", show_default=False,
        help="An nb train checkpoint (.safetensors), a Hugging Face causal-LM directory (config.json + "
        "safetensors; needs pip install 'nbcli\\[hf]'), or a Hub repo id org/name[@rev] (cache first).",
    ),
]
SrcLangOption = Annotated[Optional[str], typer.Option(
    "--src-lang", metavar="LANG", show_default=False,
    help="Source language of a parallel corpus: PREFIX.LANG of aligned files, the JSONL/parquet key or column.")]
TgtLangOption = Annotated[Optional[str], typer.Option(
    "--tgt-lang", metavar="LANG", show_default=False,
    help="Target language of a parallel corpus (its side holds the references).")]
LambdasOption = Annotated[
    Optional[str],
    typer.Option(
        "--scale-ln-bias", metavar="L1,L2,...",
        help="Scale the final LayerNorm bias b_LN by each LAMBDA in memory, one row each (paper 003 sec. 3.3): "
        "e.g. 1,0.5,0 or 0,0.1,...,1. Default: the model as saved.",
    ),
]
RemoveDirectionOption = Annotated[
    bool,
    typer.Option(
        "--remove-frequency-direction",
        help="Also project the b_LN direction out of every output-embedding row, in memory (paper 003 sec. 3.2).",
    ),
]
BatchSizeOption = Annotated[int, typer.Option("--batch-size", min=1, help="Sequences per forward pass.")]
DeviceOption = Annotated[
    str,
    typer.Option("--device", metavar="auto|cpu|cuda", help="auto: CUDA when present, else CPU. Weights keep their saved dtype."),
]
DtypeOption = Annotated[Literal["auto", "float32", "bfloat16"], typer.Option(
    "--dtype", help="Autocast precision (auto: bfloat16 on CUDA, float32 on CPU).")]
Tf32Option = Annotated[bool, typer.Option(
    "--tf32/--no-tf32", help="On CUDA, run float32 matmuls on TF32 tensor cores (no effect on CPU).")]


def standardise_option(name: str) -> typer.models.OptionInfo:
    """The embedding-standardisation option (paper 002 eq. 1 / eq. 4), one help text for
    patch-checkpoint, train and transplant-embeddings; parsed by `nbcli.surgery.parse_standardise`."""
    return typer.Option(
        name, metavar="xavier|match:FILE[:TENSOR]|mean=M,std=S", show_default=False,
        help="Standardise the input embedding, x* = (x - mean X) s / std X + m: xavier = m 0, s sqrt(2/(N+D)) "
        "(uniform Xavier's std for N x D; paper 002 eq. 1, Pre-trained_Xavier); match = another tensor's mean "
        "and sample std (eq. 4, Xavier_Pre-trained; without TENSOR: FILE's input embedding); or explicit values.")


def shuffle_mode_option(name: str = "--shuffle-mode") -> typer.models.OptionInfo:
    """How Pre-trained_Shuffled shuffles (paper 002 sec. 3.4); `nbcli.surgery.shuffle_embeddings`."""
    return typer.Option(
        name, help="rows: permute token rows (vectors kept, assigned to other tokens); rows-columns: also "
        "permute dimensions (the paper's wording, 'the rows and columns of X_p are randomly shuffled'); "
        "elements: permute all entries.")


ModelTokenizerOption = Annotated[
    Optional[Path],
    typer.Option(
        "--tokenizer", metavar="TOK",
        help="The model's tokenizer file (or a folder holding one), to check the counts' tokenizer "
        "against (by fingerprint: pieces, ids, specials, normaliser; a re-saved copy matches). Default: the "
        "checkpoint's nb metadata, else the tokenizer files of its model folder.",
    ),
]
AllowVocabMismatchOption = Annotated[
    bool,
    typer.Option(
        "--allow-vocab-mismatch",
        help="Accept a tokenizer whose fingerprint (pieces, ids, specials, normaliser) differs from the "
        "model's: a warning instead of an error. Relaxes only this identity check: counts or a vocabulary "
        "longer than the model's rows, or shorter by more than padding, are refused all the same.",
    ),
]
LmTokenizerOption = Annotated[
    Optional[Path],
    typer.Option(
        "--tokenizer", "-t", metavar="TOK",
        help="SentencePiece .model, tokenizer.json, a model folder or a Hub repo id org/name[@rev]. "
        "Default: the model's own tokenizer (its tokenizer.json, else tokenizer.model; nb says which). "
        "It must be the model's: compared by fingerprint (a re-saved copy matches) with what an nb "
        "checkpoint records or a model folder's own tokenizer files, and it must fit the output rows.",
    ),
]
DpiOption = Annotated[
    int,
    typer.Option("--dpi", min=10, max=2400,
                 help="Dots per inch of PNG figures (and of the rasterised token points inside PDF and SVG)."),
]
FigsizeOption = Annotated[
    Optional[str],
    typer.Option("--figsize", metavar="W,H", show_default=False,
                 help="Figure size in inches, e.g. 6.5,4 [default: each figure's own]."),
]
TitleOption = Annotated[
    Optional[str],
    typer.Option("--title", metavar="TEXT", show_default=False,
                 help="Figure title [default: what is plotted: the model or runs and the data]; --title '' draws "
                 "none. Provenance (versions, paths, hashes, Hub commits) is in the file's metadata, not the title."),
]
FigureFormatOption = Annotated[
    Literal["png", "pdf", "svg"],
    typer.Option("--figure-format", help="Format of the figures written into the folder (vector: pdf, svg)."),
]
# Word vectors (nb analogy, nb embedding-stats --vectors): words that are not UTF-8, as gensim's unicode_errors.
UnicodeErrorsOption = Annotated[
    Optional[Literal["strict", "replace", "ignore", "backslashreplace"]],
    typer.Option("--unicode-errors", show_default=False, help=UNICODE_ERRORS_HELP),
]
# Every command that computes (nbcli.threads): the option, and the decorator that runs the command on it.
ThreadsOption = Annotated[
    Optional[int],
    typer.Option("--threads", metavar="N", min=1, max=MAX_THREADS, show_default=False, help=THREADS_HELP),
]
Command = TypeVar("Command", bound=Callable[..., Any])


def on_threads(command: Command) -> Command:
    """Run `command` (which declares `threads: ThreadsOption`) on its --threads CPU threads
    (`nbcli.threads.cpu_threads`; typer reads the wrapped signature)."""
    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        from nbcli.threads import cpu_threads

        with cpu_threads(kwargs.get("threads")):
            return command(*args, **kwargs)

    return run  # type: ignore[return-value]


CsvOption = Annotated[
    Optional[str],
    typer.Option("--csv", metavar="FILE|-", show_default=False,
                 help="Also write the result's table of rows (the one --table names, where a command has "
                 "several) as CSV to FILE, or to stdout for - (then nothing else is printed there); every "
                 "column of its rows, full precision."),
]
TsvOption = Annotated[
    Optional[str],
    typer.Option("--tsv", metavar="FILE|-", show_default=False,
                 help="As --csv, tab-separated (- is stdout, never a file named -)."),
]


def table_option(names: str) -> typer.models.OptionInfo:
    """--table NAME: which of a command's tables --csv / --tsv write; `names` lists them, first the default."""
    return typer.Option("--table", metavar="NAME", show_default=False,
                        help=f"The table --csv/--tsv write: {names} [default: the first present].")


# nb reproduce and nb sweep: one sweep of a recipe's runs (nbcli.sweeps)
def _sweep_option(flag: str, metavar: str, help: str) -> typer.models.OptionInfo:
    return typer.Option(flag, metavar=metavar, show_default=False, help=help)


SweepDataOption = Annotated[Optional[list[str]], _sweep_option(
    "--data", "ROLE=PATH", "The data a recipe needs, by role (repeatable): a file, a folder, the PREFIX of "
    "PREFIX.LANG files, a Hub dataset id ID[:CONFIG[:SPLIT]] (read offline from the local cache, checked before any "
    "run starts), or a cached Hub repo id for a model role. A missing role is an error listing them.")]
SweepOutOption = Annotated[Optional[Path], out_dir_option(
    "The sweep's folder: runs/ID (each an nb run directory) and runs/ID.json (its settings and results), "
    "ITEM/results.json, results.csv, results.md, ITEM/figures/, sweep.json. Finished runs there are reused, stopped "
    "ones resumed; runs made with other settings are refused.", short=False)]
SweepScaleOption = Annotated[Optional[str], _sweep_option(
    "--scale", "smoke|cpu|paper", "The recipe's scale: smoke (seconds: checks the pipeline), cpu (a 2-core "
    "machine, under an hour), paper (the paper's settings; the default).")]
SweepArmsOption = Annotated[Optional[list[str]], _sweep_option(
    "--arms", "PATTERN", "Only the arms whose name matches (fnmatch, repeatable), e.g. 'SST2/BERT/*' (default: all).")]
SweepSetOption = Annotated[Optional[list[str]], _sweep_option(
    "--set", "OPTION=VALUE", "Set a task option of every run over the recipe's (repeatable; VALUE as TOML reads it: "
    "400, 0.5, true, \"de\"); one an axis varies is refused. Changes the runs' settings (new runs in another --out).")]
SweepDaskOption = Annotated[Optional[str], _sweep_option(
    "--dask", "ADDRESS", "Send each run to this Dask distributed scheduler (tcp://host:8786) instead of local "
    "processes. Workers need nb installed and --out on a filesystem they share with this machine.")]
SweepResourcesOption = Annotated[Optional[list[str]], _sweep_option(
    "--resources", "NAME=N", "With --dask: what each run asks of a worker (repeatable), e.g. GPU=1 for workers "
    "started with --resources GPU=1: one GPU run at a time each.")]


def _sweep_options(
    data: SweepDataOption = None,
    out: SweepOutOption = None,
    scale: SweepScaleOption = None,
    arms: SweepArmsOption = None,
    sets: SweepSetOption = None,
    seeds: Annotated[Optional[str], _sweep_option(
        "--seeds", "S,S,...", "Run these seeds instead of the scale's (e.g. 0,1 for a first look; a new seed is a new "
        "run, the others are reused).")] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, max=1024, help=(
        "Runs at a time on this machine (each a process; 1: in this process)."))] = 1,
    threads: Annotated[int, typer.Option("--threads", min=1, max=MAX_THREADS, help=(
        "torch and BLAS threads of each run (the same wherever a run goes, so local and Dask runs compute "
        "alike)."))] = 1,
    dask: SweepDaskOption = None,
    resources: SweepResourcesOption = None,
    figures: Annotated[bool, typer.Option("--figures/--no-figures", help=(
        "Draw figures/ (the runs' curves and results.png; needs matplotlib)."))] = True,
    download: Annotated[bool, typer.Option("--download", help=(
        "A data role not given by --data takes the recipe's Hub source (nb reproduce --list names each, with its "
        "licence): the dataset card and that split's files are fetched into the local Hugging Face cache before "
        "any run (never a loading script), as is a dataset id given by --data that the cache lacks; a model repo is "
        "fetched when first read. Off: nb reads only what is "
        "cached or given."))] = False,
    as_json: JsonOption = False,
) -> None:
    """The options nb reproduce and nb sweep share (`sweep_command`)."""


def sweep_command(arguments: Callable[..., None], run: Callable[..., None]) -> Callable[..., None]:
    """A command whose parameters are `arguments`' (its own: ITEM, RECIPE) then the sweep options,
    with `arguments`' name and help; it calls `run` with all of them as keywords."""
    import inspect
    import typing

    params = [p.replace(kind=p.KEYWORD_ONLY) for f in (arguments, _sweep_options)
              for p in inspect.signature(f, eval_str=True).parameters.values()]

    def command(**values: object) -> None:
        run(**values)

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {**typing.get_type_hints(arguments, include_extras=True),
                               **typing.get_type_hints(_sweep_options, include_extras=True)}
    command.__name__, command.__doc__ = arguments.__name__, arguments.__doc__
    return command
