"""Recovery of interrupted commits: read a journal, finish or roll back a commit point, complete
the renames of a plain commit, remove stale temporaries (see nbcli.atomic)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path

from nbcli.atomic.temporaries import JOURNAL_RE, TEMP_RE, fsync_dir, host_tag, owned_by_dead_process
from nbcli.errors import OutputError

_notes: list[str] = []


def take_notes() -> list[str]:
    """Notes about recovered commits and removed stale temporaries since the last call (then cleared)."""
    notes = list(_notes)
    _notes.clear()
    return notes


def _read_journal(journal: Path) -> dict[str, object]:
    """A commit journal: {"renames": [(temporary, target)], and for a commit point (version 2)
    "before", "point", "sha256", "after", "retire"}; OutputError if it is not one of nb's."""
    def pairs_of(items: object) -> list[tuple[Path, Path]]:
        return [(journal.parent / tmp, journal.parent / target) for tmp, target in items]  # type: ignore[union-attr]

    try:
        doc = json.loads(journal.read_bytes()[:1 << 20])
        if doc.get("nb_commit") == 2:
            point = pairs_of([doc["point"]])[0]
            parsed: dict[str, object] = {
                "before": pairs_of(doc["before"]), "point": point, "sha256": str(doc["sha256"]),
                "after": pairs_of(doc["after"]), "retire": [journal.parent / Path(name).name for name in doc["retire"]]}
            pairs = [*parsed["before"], point, *parsed["after"]]  # type: ignore[misc]
            parsed["renames"] = pairs
        else:
            pairs = pairs_of(doc["renames"])
            parsed = {"renames": pairs}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError):
        raise OutputError(f"{journal}: not a readable nb commit journal; remove it") from None
    for tmp, target in pairs:
        if not TEMP_RE.match(tmp.name) or tmp.parent != target.parent:
            raise OutputError(f"{journal}: not a valid nb commit journal ({tmp.name!r} -> {target.name!r}); remove it")
    return parsed


def index_sha256(path: Path) -> str | None:
    """The sha256 of an index file's first 256 MiB (None if unreadable): how a journal knows
    whether the index rename happened."""
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read(256 << 20)).hexdigest()
    except OSError:
        return None


def shards_named_by(index: Path) -> set[str]:
    """The file names the index at `index` names in its weight_map (empty if unreadable)."""
    try:
        weight_map = json.loads(index.read_bytes()[:256 << 20]).get("weight_map", {})
        return {Path(v).name for v in weight_map.values() if isinstance(v, str)}
    except (OSError, ValueError, AttributeError, RecursionError):
        return set()


def removable_shard(path: Path, live: set[str]) -> bool:
    """A file recovery may remove: a shard (.safetensors) the index on disk does not name."""
    return path.name.endswith(".safetensors") and path.name not in live


def _finish_commit_point(journal: Path, doc: dict[str, object]) -> tuple[str, int]:
    """Recover a commit-point journal: finish it if the new index is in place, else roll it back.
    Returns ("completed" | "rolled back", files renamed or removed now). Only shards the index on
    disk does not name are ever removed, whatever the journal says."""
    point_tmp, point = doc["point"]  # type: ignore[misc]
    live = shards_named_by(point)
    done = 0
    if index_sha256(point) == doc["sha256"]:  # the index rename happened: the new set is the model
        for tmp, target in doc["after"]:  # type: ignore[attr-defined]
            try:
                os.replace(tmp, target)
                done += 1
            except FileNotFoundError:
                pass
            except OSError as err:
                raise OutputError(f"{target}: cannot complete the interrupted commit of {journal}: "
                                  f"{err.strerror}") from None
        for old in doc["retire"]:  # type: ignore[attr-defined]
            if removable_shard(old, live):
                with contextlib.suppress(FileNotFoundError):
                    old.unlink()
                    done += 1
        return "completed", done
    # not committed: the old index and its shards are the model; remove what the commit added
    added = [tmp for tmp, _target in [*doc["before"], *doc["after"]]] + [point_tmp]  # type: ignore[misc]
    added += [target for _tmp, target in doc["before"] if removable_shard(target, live)]  # type: ignore[attr-defined]
    for path in added:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            done += 1
    return "rolled back", done


def recover_directory(directory: Path | str, *, strict: bool = False) -> list[str]:
    """Complete the interrupted commits (journals of processes that no longer run) in `directory`,
    then remove nb's temporaries whose owner no longer runs. Returns (and records) notes. With
    `strict`, a commit still in progress (its process runs) is an OutputError."""
    directory = Path(directory)
    notes: list[str] = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return notes
    for name in names:
        match = JOURNAL_RE.match(name)
        if not match:
            continue
        journal = directory / name
        if not owned_by_dead_process(match):
            if strict and match["host"] == host_tag() and int(match["pid"]) != os.getpid():
                raise OutputError(f"{directory}: nb process {match['pid']} is committing new files here "
                                  f"({name}); wait for it to finish")
            continue
        doc = _read_journal(journal)
        pairs: list[tuple[Path, Path]] = doc["renames"]  # type: ignore[assignment]
        if "point" in doc:
            outcome, done = _finish_commit_point(journal, doc)
        else:
            outcome, done = "completed", 0
            for tmp, target in pairs:
                try:
                    os.replace(tmp, target)
                    done += 1
                except FileNotFoundError:
                    pass  # renamed before the crash
                except OSError as err:
                    raise OutputError(f"{target}: cannot complete the interrupted commit of {journal}: "
                                      f"{err.strerror}") from None
        for folder in {target.parent for _tmp, target in pairs}:
            fsync_dir(folder)
        journal.unlink(missing_ok=True)
        fsync_dir(directory)
        if outcome == "completed":
            notes.append(f"{directory}: completed an interrupted commit of {len(pairs)} file(s) "
                         f"({done} renamed now) left by nb process {match['pid']}: "
                         + ", ".join(target.name for _tmp, target in pairs))
        else:
            notes.append(f"{directory}: rolled back an interrupted commit left by nb process {match['pid']} "
                         f"before its index was renamed ({done} new file(s) removed); the previous files stay: "
                         + ", ".join(target.name for _tmp, target in pairs))
    stale, staged = [], []
    for name in names:
        match = TEMP_RE.match(name)
        if match and owned_by_dead_process(match):
            path = directory / name
            if path.is_dir() and not path.is_symlink():  # a new folder, staged (never renamed into place)
                if remove_staged_folder(path):
                    staged.append(name)
                continue
            with contextlib.suppress(OSError):  # gone meanwhile, or a folder nb may only read
                path.unlink()
                stale.append(name)
    if stale:
        notes.append(f"{directory}: removed {len(stale)} stale temporary file(s) of interrupted nb runs: "
                     + ", ".join(stale))
    if staged:
        notes.append(f"{directory}: removed {len(staged)} stale temporary folder(s) of interrupted nb runs "
                     "(a new folder or a copy never renamed into place, or the old folder a swap replaced): " + ", ".join(staged))
    _notes.extend(notes)
    return notes


def remove_staged_folder(folder: Path) -> bool:
    """Remove a staged folder (`staged_folder`'s new folder, or `swapped_folder`'s copy, or the old
    folder a swap replaced) with everything in it: links are removed, never followed. Whether it is
    gone."""
    try:
        shutil.rmtree(folder)
    except FileNotFoundError:
        return True
    except OSError:
        return not os.path.lexists(folder)
    fsync_dir(folder.parent)
    return True


def recover_journal_now(journal: Path) -> None:
    """Undo this process's own commit-point journal after a rename before the point failed."""
    with contextlib.suppress(OutputError, OSError):
        doc = _read_journal(journal)
        if "point" in doc:
            _finish_commit_point(journal, doc)
        journal.unlink(missing_ok=True)
        fsync_dir(journal.parent)

