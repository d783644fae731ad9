"""THE resolver: what nb opens as a model or a tokenizer, from a local path or a Hugging Face repo id.

A local path wins. Otherwise `name` or `org/name`, with an optional `@revision` (branch, tag or
commit), resolves through `huggingface_hub` and its cache (HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE and
HF_TOKEN are honoured; nb never re-implements the cache). The cache is asked first (no network when
the snapshot is there, like transformers' `from_pretrained`); only when it lacks the files is the Hub
asked, and then only for what the command reads: `*.json`, `tokenizer.model`, `*.safetensors` (never
`*.bin`, `*.pt` or other pickles). See docs/hub.md.

The cache is an input, never an output: `inside_hub_cache` and `hub_blob` let the output guard
(nbcli.outputs) refuse any output that lies in it or is a link to one of its blobs. Datasets by id
(`ID[:CONFIG[:SPLIT]]`, the corpus inputs) resolve beside this, in nbcli.resolve_datasets.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nbcli.errors import InputError

__all__ = ["HubError", "Resolved", "TypedPath", "hub_blob", "hub_cache_dir", "hub_origin", "hub_record", "inside_hub_cache",
           "local_path", "looks_like_repo_id", "resolve", "set_reporter"]

Kind = Literal["model", "tokenizer"]

#: What each kind of input downloads (fnmatch patterns, as huggingface_hub's allow_patterns).
ALLOW_PATTERNS: dict[str, list[str]] = {
    "model": ["*.json", "tokenizer.model", "*.safetensors"],
    "tokenizer": ["*.json", "tokenizer.model"],
}
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
# Names that are files nb reads, never repo ids (a missing `model.safetensors` is a missing file).
_FILE_SUFFIXES = (".safetensors", ".json", ".jsonl", ".model", ".txt", ".gz", ".bz2", ".xz", ".zst",
                  ".parquet", ".arrow", ".tsv", ".csv", ".vec", ".conll", ".conllu", *PICKLE_SUFFIXES)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


class TypedPath(type(Path())):  # type: ignore[misc]  # the concrete PosixPath / WindowsPath
    """A path that keeps the text the user typed (`typed`): Path("./gpt2") is `gpt2`, and only the
    typed `./gpt2` says "a local path, not the repo id gpt2" (docs/hub.md). The CLI's option parsing
    and the Python API hand inputs to the resolver as these; everything else reads them as the Path
    they are. Paths derived from one (parent, joins) are plain Paths."""

    typed = ""

    def __new__(cls, *args: str) -> TypedPath:
        self = super().__new__(cls, *args)
        self.typed = args[0] if len(args) == 1 and isinstance(args[0], str) else ""
        return self

    def with_segments(self, *segments: str | os.PathLike[str]) -> Path:  # Python 3.12+: derived paths
        return Path(*segments)


class HubError(InputError):
    """A repo id that could not be resolved (not cached while offline, unknown revision, no access, ...)."""


@dataclass(frozen=True)
class Resolved:
    """Where an input is on disk and where it came from."""

    path: Path  # the local file or folder nb reads (a snapshot folder for a repo id)
    repo_id: str | None = None  # `org/name` when the input is (a file of) a Hub snapshot
    revision: str | None = None  # the revision asked (`@rev`), None for the default branch
    commit: str | None = None  # the resolved commit hash of the snapshot
    from_hub: bool = False  # True when the input was given as a repo id
    note: str = ""  # what the user should know (a local folder that shadows a repo id)

    def to_dict(self) -> dict[str, object]:
        return {"path": str(self.path), "repo_id": self.repo_id, "revision": self.revision,
                "commit": self.commit, "from_hub": self.from_hub}


_reporter: Callable[[str], None] | None = None


def set_reporter(report: Callable[[str], None] | None) -> None:
    """Where resolution notes go (the CLI prints them on stderr); None: nowhere."""
    global _reporter
    _reporter = report


def report(message: str) -> None:
    """Pass a note to the reporter (e.g. which tokenizer file a command took from the model)."""
    if _reporter is not None:
        _reporter(message)


# ---------------------------------------------------------------------------------------------
# The cache layout (read only: huggingface_hub writes it)

def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "on", "yes", "true")


def hub_offline() -> bool:
    """Whether HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set: the cache alone is read."""
    return _truthy(os.environ.get("HF_HUB_OFFLINE")) or _truthy(os.environ.get("TRANSFORMERS_OFFLINE"))


def hub_cache_dir() -> Path:
    """The hub cache huggingface_hub uses, read from the environment now (HF_HUB_CACHE, else
    HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.path.expanduser(os.environ["HF_HUB_CACHE"]))
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    return Path(os.path.expanduser(home)) / "hub"


def _repo_folder_parts(path: Path | str, prefixes: tuple[str, ...] = ("models--",)) -> tuple[tuple[str, ...], int] | None:
    """The absolute path's parts and the index of its `models--org--name` part (or another of
    `prefixes`), if any is followed by snapshots/, blobs/ or refs/ (a hub cache's layout, wherever it lies)."""
    parts = Path(os.path.abspath(path)).parts
    for i in range(len(parts) - 1):
        if parts[i].startswith(prefixes) and parts[i + 1] in ("snapshots", "blobs", "refs"):
            return parts, i
    return None


def hub_origin(path: Path | str) -> tuple[str, str] | None:
    """(repo_id, commit) when `path` is a Hub snapshot folder or a file in one, else None."""
    found = _repo_folder_parts(path)
    if found is None:
        return None
    parts, i = found
    if parts[i + 1] != "snapshots" or len(parts) < i + 3 or not _COMMIT.match(parts[i + 2]):
        return None
    return parts[i][len("models--"):].replace("--", "/"), parts[i + 2]


def hub_record(path: Path | str | None) -> dict[str, str]:
    """{'repo_id', 'commit'} of an input that came from the Hub (for provenance), else {}."""
    origin = hub_origin(path) if path is not None else None
    return {} if origin is None else {"repo_id": origin[0], "commit": origin[1]}


def hub_records(paths: Iterable[Path | str | None]) -> dict[str, dict[str, str]]:
    """path -> hub_record for each of `paths` that came from the Hub."""
    return {str(p): rec for p in paths if p is not None and (rec := hub_record(p))}


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def inside_hub_cache(path: Path | str) -> bool:
    """Whether `path` (as given, or where its links lead) lies in the hub cache or in any folder laid
    out as one (models--org--name/{snapshots,blobs,refs}, datasets--org--name/... likewise)."""
    repos = ("models--", "datasets--", "spaces--")
    if _repo_folder_parts(path, repos) is not None or _repo_folder_parts(os.path.realpath(path), repos) is not None:
        return True
    cache = hub_cache_dir()
    if not cache.is_dir():
        return False
    roots = {os.path.abspath(cache), os.path.realpath(cache)}
    candidates = {os.path.abspath(path), os.path.realpath(path)}
    return any(_within(c, r) for c in candidates for r in roots)


def hub_blob(path: Path | str) -> Path | None:
    """The cache blob that the existing file `path` is a hard link to (same inode), else None.
    Only files with several links are looked up, and only in the hub cache's blobs/ folders."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if st.st_nlink < 2:
        return None
    cache = hub_cache_dir()
    try:
        repos = list(cache.iterdir()) if cache.is_dir() else []
    except OSError:
        return None
    for repo in repos:
        blobs = repo / "blobs"
        try:
            for blob in blobs.iterdir() if blobs.is_dir() else ():
                other = os.stat(blob)
                if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
                    return blob
        except OSError:
            continue
    return None


# ---------------------------------------------------------------------------------------------
# Resolution

def looks_like_repo_id(spec: str) -> bool:
    """Whether `spec` reads as `name` or `org/name`, with an optional `@revision`, rather than a path."""
    if not spec or spec[0] in "./~" or "\\" in spec:
        return False
    repo = spec.split("@", 1)[0]
    parts = repo.split("/")
    if len(parts) > 2 or not all(_NAME.match(p) and "--" not in p and ".." not in p and not p.endswith((".", "-"))
                                 for p in parts):
        return False
    if "@" in spec and not spec.split("@", 1)[1]:
        return False
    return not parts[-1].lower().endswith(_FILE_SUFFIXES)


def _split(spec: str) -> tuple[str, str | None]:
    repo, _, revision = spec.partition("@")
    return repo, revision or None


def resolve(spec: Path | str, kind: Kind = "model") -> Resolved:
    """Resolve a user's input to a local path. A path that exists is used as is (a Hub snapshot
    path is still recognised as one); a repo id goes through the hub cache, then the Hub; anything
    else is returned unchanged, for the caller's own 'not found' error."""
    text = spec.typed or str(spec) if isinstance(spec, TypedPath) else str(spec)
    local = spec if isinstance(spec, TypedPath) else Path(spec)  # resolved again by openers: keep as typed
    if local.exists() or not looks_like_repo_id(text):
        origin = hub_origin(local) if local.exists() else None
        note = ""
        if local.exists() and looks_like_repo_id(text) and local.is_dir():
            note = (f"{text}: using the local folder ./{text}, not the Hub repo {text} "
                    f"(give a path like ./{text}, or move out of this directory, to be explicit)")
            report(note)
        if local.exists():   # resolved as a local path: resolving it again (a folder's files) says so again
            local = TypedPath(str(local))
            local.typed = f"./{text}" if looks_like_repo_id(text) else text
        return Resolved(local, origin[0] if origin else None, None, origin[1] if origin else None, False, note)
    repo_id, revision = _split(text)
    folder = _snapshot(repo_id, revision, kind)
    origin = hub_origin(folder)
    return Resolved(folder, repo_id, revision, origin[1] if origin else revision, True)


def local_path(spec: Path | str, kind: Kind = "model") -> Path:
    """resolve(spec, kind).path: the seam every opener calls."""
    return resolve(spec, kind).path


def _has_weights(folder: Path) -> bool:
    return any(folder.glob("*.safetensors"))


def _snapshot(repo_id: str, revision: str | None, kind: Kind) -> Path:
    """The snapshot folder of `repo_id@revision` holding what `kind` needs: cached, else downloaded."""
    from huggingface_hub import errors, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    IncompleteSnapshotError = getattr(errors, "IncompleteSnapshotError", LocalEntryNotFoundError)  # 2.x

    cache = hub_cache_dir()
    patterns = ALLOW_PATTERNS[kind]
    label = repo_id + (f"@{revision}" if revision else "")
    try:
        folder = Path(snapshot_download(repo_id, revision=revision, cache_dir=cache, local_files_only=True,
                                        allow_patterns=patterns))
        if kind == "tokenizer" or _has_weights(folder) or hub_offline():
            return _checked(folder, label, kind, online=False)
    except (LocalEntryNotFoundError, IncompleteSnapshotError, FileNotFoundError):
        if hub_offline():
            raise _not_cached(repo_id, revision, cache) from None
    except Exception as err:  # noqa: BLE001 - any library error becomes one line
        raise HubError(f"{label}: {_first_line(err)}") from None
    try:
        folder = Path(download_snapshot(repo_id, revision=revision, patterns=patterns))
    except Exception as err:  # noqa: BLE001 - mapped to one line each
        raise _explain(err, repo_id, revision, cache) from None
    return _checked(folder, label, kind, online=True, repo_id=repo_id)


def download_snapshot(repo_id: str, *, revision: str | None, patterns: list[str], repo_type: str = "model") -> str:
    """huggingface_hub's snapshot_download of the files matching `patterns` into nb's hub cache (never
    local-only), progress on stderr only when it is a terminal; the snapshot folder. The library's
    errors pass through (each caller words them)."""
    import sys

    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    quiet = not sys.stderr.isatty()
    was_disabled = are_progress_bars_disabled()
    if quiet:
        disable_progress_bars()
    try:
        return snapshot_download(repo_id, repo_type=repo_type, revision=revision, cache_dir=hub_cache_dir(),
                                 allow_patterns=patterns, local_files_only=False)
    finally:
        if quiet and not was_disabled:
            enable_progress_bars()


def _checked(folder: Path, label: str, kind: Kind, *, online: bool, repo_id: str | None = None) -> Path:
    """`folder` if it holds what `kind` needs; a one-line refusal for a repo of pickles only."""
    if kind == "tokenizer" or _has_weights(folder):
        return folder
    pickles = [p.name for p in folder.iterdir() if p.name.lower().endswith(PICKLE_SUFFIXES)]
    if not pickles and online and repo_id is not None:
        pickles = _remote_pickles(repo_id, folder.name)
    if pickles:
        raise HubError(
            f"{label}: holds only pickled weights ({pickles[0]}), which nb never loads (unpickling can run "
            f"code); use a revision with safetensors (the Hub's 'Convert to safetensors' pull request, "
            f"e.g. {label.split('@')[0]}@refs/pr/N) or convert it locally and give the folder")
    raise HubError(f"{label}: the snapshot {folder} holds no .safetensors weights")


def _remote_pickles(repo_id: str, commit: str) -> list[str]:
    try:
        from huggingface_hub import HfApi

        files = HfApi().list_repo_files(repo_id, revision=commit)
    except Exception:  # noqa: BLE001 - only used to word the refusal
        return []
    return [f for f in files if f.lower().endswith(PICKLE_SUFFIXES)]


def _cached_revisions(repo_id: str, cache: Path) -> list[str]:
    refs = cache / f"models--{repo_id.replace('/', '--')}" / "refs"
    try:
        return sorted(str(p.relative_to(refs)) for p in refs.rglob("*") if p.is_file())
    except OSError:
        return []


def _not_cached(repo_id: str, revision: str | None, cache: Path) -> HubError:
    known = _cached_revisions(repo_id, cache)
    if revision and known:
        return HubError(f"{repo_id}@{revision}: revision not in the Hugging Face cache {cache} (cached: "
                        f"{', '.join(known)}) and HF_HUB_OFFLINE is set; unset HF_HUB_OFFLINE to fetch it, "
                        "or give a cached revision or a local folder")
    return HubError(f"{repo_id}: no such local path, and not in the Hugging Face cache {cache} while HF_HUB_OFFLINE "
                    f"is set; unset HF_HUB_OFFLINE to download it, or give the path of a local copy")


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return (text[0] if text else type(err).__name__)[:300]


def _explain(err: BaseException, repo_id: str, revision: str | None, cache: Path) -> HubError:
    """One line for a failed Hub look-up: which repo, what went wrong, what to do."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    label = repo_id + (f"@{revision}" if revision else "")
    if isinstance(err, OfflineModeIsEnabled):
        return _not_cached(repo_id, revision, cache)
    if isinstance(err, RevisionNotFoundError):
        return HubError(f"{label}: unknown revision {revision!r} (give a branch, tag or commit of {repo_id})")
    if isinstance(err, GatedRepoError):
        return HubError(f"{label}: gated repo; accept its terms on https://huggingface.co/{repo_id} and set "
                        "HF_TOKEN (or run `hf auth login`)")
    if isinstance(err, RepositoryNotFoundError):
        return HubError(f"{label}: no such repo on the Hub, or a private one and no valid token (set HF_TOKEN "
                        "or run `hf auth login`)")
    if isinstance(err, HfHubHTTPError):
        status = getattr(getattr(err, "response", None), "status_code", None)
        if status in (401, 403):
            return HubError(f"{label}: access denied ({status}); a private or gated repo needs HF_TOKEN "
                            "(or `hf auth login`)")
        return HubError(f"{label}: Hub error: {_first_line(err)}")
    if isinstance(err, LocalEntryNotFoundError):
        return HubError(f"{label}: cannot reach the Hub and not in the Hugging Face cache {cache}; check the "
                        "network (or HF_ENDPOINT), or give the path of a local copy")
    if isinstance(err, OSError):
        return HubError(f"{label}: {_first_line(err)}")
    return HubError(f"{label}: {type(err).__name__}: {_first_line(err)}")


def hub_inputs_metadata(paths: Iterable[Path | str | None]) -> dict[str, str]:
    """{'nb.hub_inputs': JSON path -> {repo_id, commit}} for the inputs that came from the Hub, else {}:
    the provenance entry of safetensors outputs (patched checkpoints, training checkpoints)."""
    import json

    records = hub_records(paths)
    return {"nb.hub_inputs": json.dumps(records, sort_keys=True)} if records else {}
