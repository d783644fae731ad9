"""Atomic outputs: write temporaries beside the targets, rename them into place only on success.

This is the only place nb creates output files. One command's outputs form one `OutputSet`:

1. every output is written to a temporary `.NAME.PID-TAG.nbtmp` in its target's directory (PID:
   the writing process; TAG: 4 hex digits of the host name and 4 random characters; NAME is
   shortened so that the temporary's name fits NAME_MAX);
2. all temporaries are flushed and fsynced; a failure (exception, Ctrl-C, full disk) up to here
   removes every temporary and leaves every target as it was;
3. with two or more outputs a journal `.nb-commit.PID-TAG.json` listing the renames is written and
   fsynced in the first output's directory: from then on the new set is decided;
4. the temporaries are renamed over their targets, in the order they were opened (the shards of a
   checkpoint before its index), the directories fsynced, and the journal removed.

A crash (SIGKILL, power loss) before step 3 leaves the old targets and some temporaries; after it,
a mix of renamed and not yet renamed outputs, every new file complete beside its temporary, and the
journal. The next nb run that writes into that directory, or opens a checkpoint in it, first
completes any journal whose process no longer runs (renames the temporaries it lists that still
exist) and then removes temporaries whose owner process (by PID, on this host) no longer runs; it
reports both as notes (`take_notes`; the CLI prints them as `nb: note: ...` after a successful run).

**A commit point** (a sharded checkpoint: `open(index, commit_point=True)`). Readers that are not nb
(transformers) see a set of files only through one of them, the index, so the index's rename is made
the one moment the new set appears for everyone: the outputs opened before it (the shards, written
under names the live index does not use: `layout.fresh_shard_name`) are renamed first, then the
index, then the outputs opened after it (config.json); last, the files `retire`d (the shards the old
index named and the new one does not) are removed. The journal (`"nb_commit": 2`) records the new
index's sha256: recovery finds the commit made when the index on disk has those bytes, and then
finishes it (renames what is left, removes the retired files); otherwise it rolls it back (removes
the new shards and temporaries), so the old index and its shards, never touched, stay the model.

Before anything is renamed, every target is checked again (its directory exists and is writable,
it is not a directory): a target that cannot take its file fails the command with nothing renamed.

`NB_FAULT_INJECT=POINT[:N[:SIGNAL]]` (tests only) makes the process send itself SIGNAL (default
KILL; e.g. INT for Ctrl-C, STOP to pause it there) the N-th time (default 1st) it reaches POINT:
`temp-created`, `before-commit`, `journal-written`, `mid-commit` (after the first rename),
`renamed` (after each rename, N counts them), `index-renamed` (the commit point), `retired` (after
each removal of a replaced file), `after-commit` (all renamed, journal not yet removed).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import hashlib
import json
import os
import re
import secrets
import signal
import socket
import threading
import zlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import BinaryIO

from nbcli.errors import OutputError

TEMP_SUFFIX = ".nbtmp"
JOURNAL_PREFIX = ".nb-commit."
_TEMP_RE = re.compile(r"^\.(?P<stem>.*)\.(?P<pid>[0-9]+)-(?P<host>[0-9a-f]{4})[0-9a-z]{4}\.nbtmp$", re.DOTALL)
_JOURNAL_RE = re.compile(r"^\.nb-commit\.(?P<pid>[0-9]+)-(?P<host>[0-9a-f]{4})[0-9a-z]{4}\.json$")
_PID_MAX = 1 << 22  # Linux's PID_MAX_LIMIT
_notes: list[str] = []
_prepared: set[str] = set()
_fault_hits: dict[str, int] = {}


def take_notes() -> list[str]:
    """Notes about recovered commits and removed stale temporaries since the last call (then cleared)."""
    notes = list(_notes)
    _notes.clear()
    return notes


def _fault(point: str) -> None:
    """Test hook: signal this process at `point` when NB_FAULT_INJECT asks for it (see module doc)."""
    spec = os.environ.get("NB_FAULT_INJECT")
    if not spec:
        return
    name, nth, sig = (spec.split(":") + ["", ""])[:3]
    if name != point:
        return
    _fault_hits[point] = _fault_hits.get(point, 0) + 1
    if _fault_hits[point] == int(nth or 1):
        os.kill(os.getpid(), getattr(signal, f"SIG{sig or 'KILL'}"))


@functools.cache
def _host_tag() -> str:
    return f"{zlib.crc32(socket.gethostname().encode()) & 0xFFFF:04x}"


def _tag() -> str:
    return f"{os.getpid()}-{_host_tag()}{secrets.token_hex(2)}"


def name_max(directory: Path) -> int:
    """The longest file name (bytes) the file system of `directory` allows (255 if unknown)."""
    try:
        return int(os.pathconf(directory, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return 255


def check_name_length(path: Path) -> None:
    """OutputError if a component of `path` is longer than its file system allows (before anything
    asks the system about `path`: that would be an OSError, ENAMETOOLONG)."""
    absolute = Path(os.path.abspath(path))
    for part in (absolute, *absolute.parents):
        size = len(os.fsencode(part.name))
        if size > 255:
            parent = part.parent
            while not parent.is_dir() and parent != parent.parent:
                parent = parent.parent
            limit = name_max(parent)
            if size > limit:
                what = "file name" if part == absolute else f"directory name {part.name[:40]!r}..."
                raise OutputError(f"{path}: {what} is {size} bytes, longer than the file system allows ({limit})")


def check_output_dir(path: Path, *, file: bool = False) -> None:
    """Raise OutputError unless `path`'s directory exists and is writable and its name fits (and lies
    outside the Hugging Face cache: nbcli.outputs.refuse_hub_cache); with `file`, also unless `path`
    can become a file (it is not an existing directory)."""
    from nbcli.outputs import refuse_hub_cache

    check_name_length(path)
    refuse_hub_cache(path)
    try:
        parent = path.resolve().parent
        is_dir = path.is_dir()
    except OSError as err:  # a symbolic link loop, a path too long for the system
        raise OutputError(f"{path}: cannot use this output path ({err.strerror or err})") from None
    if not parent.is_dir():
        raise OutputError(f"{path}: output directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{path}: output directory {parent} is not writable")
    size, limit = len(os.fsencode(path.name)), name_max(parent)
    if size > limit:  # a file system whose names are shorter than 255 bytes
        raise OutputError(f"{path}: file name is {size} bytes, longer than the file system allows ({limit})")
    if file and is_dir:
        raise OutputError(f"{path}: is a directory; give a file name for this output")


def temp_name(name: str, limit: int = 255) -> str:
    """The temporary's name for output NAME: `.NAME.PID-TAG.nbtmp`, NAME's bytes cut so that the
    whole stays within `limit` bytes (file names are bytes: a character cut in two is harmless)."""
    tail = f".{_tag()}{TEMP_SUFFIX}"
    return "." + os.fsdecode(os.fsencode(name)[:limit - 1 - len(tail)]) + tail


def _pid_alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie does not); a number no PID can have counts as running."""
    if not 0 < pid <= _PID_MAX:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def _owned_by_dead_process(match: re.Match[str]) -> bool:
    pid = int(match["pid"])
    return match["host"] == _host_tag() and pid != os.getpid() and not _pid_alive(pid)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


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
        if not _TEMP_RE.match(tmp.name) or tmp.parent != target.parent:
            raise OutputError(f"{journal}: not a valid nb commit journal ({tmp.name!r} -> {target.name!r}); remove it")
    return parsed


def _sha256_of(path: Path) -> str | None:
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read(256 << 20)).hexdigest()
    except OSError:
        return None


def _named_by(index: Path) -> set[str]:
    """The file names the index at `index` names in its weight_map (empty if unreadable)."""
    try:
        weight_map = json.loads(index.read_bytes()[:256 << 20]).get("weight_map", {})
        return {Path(v).name for v in weight_map.values() if isinstance(v, str)}
    except (OSError, ValueError, AttributeError, RecursionError):
        return set()


def _removable(path: Path, live: set[str]) -> bool:
    """A file recovery may remove: a shard (.safetensors) the index on disk does not name."""
    return path.name.endswith(".safetensors") and path.name not in live


def _finish_commit_point(journal: Path, doc: dict[str, object]) -> tuple[str, int]:
    """Recover a commit-point journal: finish it if the new index is in place, else roll it back.
    Returns ("completed" | "rolled back", files renamed or removed now). Only shards the index on
    disk does not name are ever removed, whatever the journal says."""
    point_tmp, point = doc["point"]  # type: ignore[misc]
    live = _named_by(point)
    done = 0
    if _sha256_of(point) == doc["sha256"]:  # the index rename happened: the new set is the model
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
            if _removable(old, live):
                with contextlib.suppress(FileNotFoundError):
                    old.unlink()
                    done += 1
        return "completed", done
    # not committed: the old index and its shards are the model; remove what the commit added
    added = [tmp for tmp, _target in [*doc["before"], *doc["after"]]] + [point_tmp]  # type: ignore[misc]
    added += [target for _tmp, target in doc["before"] if _removable(target, live)]  # type: ignore[attr-defined]
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
        match = _JOURNAL_RE.match(name)
        if not match:
            continue
        journal = directory / name
        if not _owned_by_dead_process(match):
            if strict and match["host"] == _host_tag() and int(match["pid"]) != os.getpid():
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
            _fsync_dir(folder)
        journal.unlink(missing_ok=True)
        _fsync_dir(directory)
        if outcome == "completed":
            notes.append(f"{directory}: completed an interrupted commit of {len(pairs)} file(s) "
                         f"({done} renamed now) left by nb process {match['pid']}: "
                         + ", ".join(target.name for _tmp, target in pairs))
        else:
            notes.append(f"{directory}: rolled back an interrupted commit left by nb process {match['pid']} "
                         f"before its index was renamed ({done} new file(s) removed); the previous files stay: "
                         + ", ".join(target.name for _tmp, target in pairs))
    stale = []
    for name in names:
        match = _TEMP_RE.match(name)
        if match and _owned_by_dead_process(match):
            with contextlib.suppress(OSError):  # gone meanwhile, or a folder nb may only read
                (directory / name).unlink()
                stale.append(name)
    if stale:
        notes.append(f"{directory}: removed {len(stale)} stale temporary file(s) of interrupted nb runs: "
                     + ", ".join(stale))
    _notes.extend(notes)
    return notes


@contextlib.contextmanager
def _sigint_held() -> Iterator[None]:
    """Defer Ctrl-C (SIGINT) over the block; a Ctrl-C pressed meanwhile is dropped once the
    block is done (the block is the commit's renames: what it does must not be half done)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, lambda _signum, _frame: None)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _prepare(directory: Path) -> None:
    key = str(directory)
    if key not in _prepared:
        _prepared.add(key)
        recover_directory(directory)


_SYNC_FILE_RANGE_WRITE = 2  # <fcntl.h>: start writeback of the dirty pages in the range, do not wait


@functools.cache
def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """libc's sync_file_range (Linux), or None where the C library has none."""
    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (AttributeError, OSError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def start_writeback(fd: int, offset: int, nbytes: int) -> None:
    """Ask the kernel to start writing bytes [offset, offset + nbytes) of `fd` to disk, without
    waiting (Linux sync_file_range(SYNC_FILE_RANGE_WRITE)), so that the fsync before the rename
    has little left to do. Durability still comes from that fsync, which reports any I/O error;
    this only starts the work earlier. A no-op where sync_file_range does not exist."""
    function = _sync_file_range()
    if function is not None:
        function(fd, offset, nbytes, _SYNC_FILE_RANGE_WRITE)


def _os_error_message(path: Path, err: OSError) -> str:
    if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return f"{path}: no space left to write the output ({err.strerror}); nothing was written"
    return f"{path}: cannot write output: {err.strerror or err}"


class OutputSet:
    """The outputs of one command, committed together or not at all (see the module doc).

    Use as a context manager: `open(path)` gives a binary handle on a new temporary; leaving the
    block without an exception commits every output, with one removes every temporary.
    `open(path, commit_point=True)` makes that output's rename the commit point, and `retire(path)`
    names a file to remove once it has happened (see the module doc)."""

    def __init__(self) -> None:
        self._files: list[tuple[Path, Path, BinaryIO]] = []
        self._targets: set[str] = set()
        self._point: int | None = None
        self._retire: list[Path] = []

    def open(self, path: Path | str, *, commit_point: bool = False) -> BinaryIO:
        """Create the temporary for output `path` and return its handle (binary, write + read)."""
        path = Path(path)
        check_output_dir(path, file=True)
        directory = path.resolve().parent
        if str(directory / path.name) in self._targets:
            raise OutputError(f"{path}: written twice by one command")
        if commit_point and self._point is not None:
            raise OutputError(f"{path}: one commit has one commit point")
        _prepare(directory)
        limit = name_max(directory)
        for _attempt in range(100):
            tmp = directory / temp_name(path.name, limit)
            try:
                fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
                break
            except FileExistsError:
                continue
            except OSError as err:
                raise OutputError(_os_error_message(path, err)) from None
        else:  # pragma: no cover - 100 collisions of a random tag
            raise OutputError(f"{path}: cannot create a temporary file beside it")
        handle = os.fdopen(fd, "w+b")
        if commit_point:
            self._point = len(self._files)
        self._files.append((path, tmp, handle))
        self._targets.add(str(directory / path.name))
        _fault("temp-created")
        return handle

    def retire(self, path: Path | str) -> None:
        """Remove `path` once the commit point is passed (a shard the new index no longer names)."""
        self._retire.append(Path(path))

    def discard(self) -> None:
        """Close and remove every temporary; the targets stay as they were."""
        for _path, tmp, handle in self._files:
            with contextlib.suppress(OSError):
                handle.close()
            tmp.unlink(missing_ok=True)
        self._files.clear()
        self._retire.clear()
        self._point = None

    def _check_targets(self) -> None:
        """Every target can take its file (checked again before the first rename)."""
        for path, _tmp, _handle in self._files:
            check_output_dir(path, file=True)

    def commit(self) -> None:
        """fsync every temporary, then (with a journal if there are several) rename all into place.

        Ctrl-C while renaming (milliseconds) is held until the renames are done: the commit completes."""
        path: Path | None = None
        journal: Path | None = None
        try:
            for path, tmp, handle in self._files:
                handle.flush()
                os.fsync(handle.fileno())
                handle.close()
                os.chmod(tmp, 0o644)
            self._check_targets()
            _fault("before-commit")
        except OSError as err:
            self.discard()
            raise OutputError(_os_error_message(path or Path("."), err)) from None
        except BaseException:
            self.discard()
            raise
        with _sigint_held():  # from the journal on, the commit is decided: see it through
            if len(self._files) > 1 or self._retire:
                try:
                    journal = self._write_journal()
                except OSError as err:
                    self.discard()
                    raise OutputError(_os_error_message(self._files[0][0], err)) from None
            _fault("journal-written")
            if self._point is not None:
                self._rename_around_point(journal)
            else:
                for i, (path, tmp, _handle) in enumerate(self._files):
                    self._rename(path, tmp, journal, decided=True)
                    if i == 0:
                        _fault("mid-commit")
                    _fault("renamed")
                for folder in {tmp.parent for _path, tmp, _handle in self._files}:
                    _fsync_dir(folder)
            _fault("after-commit")
            if journal is not None:
                journal.unlink(missing_ok=True)
                _fsync_dir(journal.parent)
            self._files.clear()
            self._retire.clear()
            self._point = None

    def _rename(self, path: Path, tmp: Path, journal: Path | None, *, decided: bool) -> None:
        try:
            os.replace(tmp, path)
        except OSError as err:
            if journal is None or not decided:
                self.discard()
                if journal is not None:
                    recover_journal_now(journal)
                raise OutputError(_os_error_message(path, err)) from None
            raise OutputError(f"{path}: cannot rename the new file into place ({err.strerror}); "
                              f"the next nb run in {journal.parent} completes the commit") from None

    def _rename_around_point(self, journal: Path | None) -> None:
        """Shards (under names no reader uses yet), then the index: the commit point, then the rest
        and the removal of the replaced shards."""
        assert self._point is not None
        before = self._files[:self._point]
        point = self._files[self._point]
        after = self._files[self._point + 1:]
        for i, (path, tmp, _handle) in enumerate(before):
            self._rename(path, tmp, journal, decided=False)
            if i == 0:
                _fault("mid-commit")
            _fault("renamed")
        for folder in {tmp.parent for _path, tmp, _handle in before}:
            _fsync_dir(folder)  # the shards are durable under their names before the index names them
        index, tmp, _handle = point
        self._rename(index, tmp, journal, decided=False)
        _fsync_dir(tmp.parent)
        if not before:
            _fault("mid-commit")
        _fault("renamed")
        _fault("index-renamed")
        for path, tmp, _handle in after:
            self._rename(path, tmp, journal, decided=True)
            _fault("renamed")
        live = _named_by(index)
        for old in self._retire:
            if _removable(old, live):
                old.unlink(missing_ok=True)
            _fault("retired")
        for folder in {tmp.parent for _path, tmp, _handle in self._files} | {p.parent for p in self._retire}:
            _fsync_dir(folder)

    def _write_journal(self) -> Path:
        directory = self._files[0][1].parent
        journal = directory / f"{JOURNAL_PREFIX}{_tag()}.json"

        def pair(item: tuple[Path, Path, BinaryIO]) -> list[str]:
            path, tmp, _handle = item
            return [os.path.relpath(tmp, directory), os.path.relpath(tmp.parent / path.name, directory)]

        if self._point is None:
            doc: dict[str, object] = {"nb_commit": 1, "pid": os.getpid(), "renames": [pair(f) for f in self._files]}
        else:
            point = self._files[self._point]
            if any(tmp.parent != directory for _path, tmp, _handle in self._files):
                raise OutputError(f"{point[0]}: a commit point needs every output in its directory")
            doc = {"nb_commit": 2, "pid": os.getpid(), "before": [pair(f) for f in self._files[:self._point]],
                   "point": pair(point), "sha256": _sha256_of(point[1]),
                   "after": [pair(f) for f in self._files[self._point + 1:]],
                   "retire": [p.name for p in self._retire]}
        data = json.dumps(doc, indent=1).encode()
        tmp = directory / temp_name(journal.name, name_max(directory))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, journal)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(directory)
        return journal

    def __enter__(self) -> OutputSet:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            self.commit()
            return
        last = self._files[-1][0] if self._files else Path(".")
        self.discard()
        if isinstance(exc, OSError):  # a write failed: full disk, file-size limit, I/O error
            raise OutputError(_os_error_message(last, exc)) from None


def recover_journal_now(journal: Path) -> None:
    """Undo this process's own commit-point journal after a rename before the point failed."""
    with contextlib.suppress(OutputError, OSError):
        doc = _read_journal(journal)
        if "point" in doc:
            _finish_commit_point(journal, doc)
        journal.unlink(missing_ok=True)
        _fsync_dir(journal.parent)


@contextlib.contextmanager
def atomic_write(path: Path | str) -> Iterator[BinaryIO]:
    """Yield a binary file handle whose content replaces `path` only if the block succeeds."""
    with OutputSet() as outputs:
        yield outputs.open(path)


def write_all_atomic(outputs: Mapping[Path, bytes]) -> None:
    """Write several files as one commit: all of them or none (see OutputSet)."""
    with OutputSet() as out:
        for path, data in outputs.items():
            out.open(path).write(data)


def write_bytes_atomic(path: Path | str, data: bytes) -> None:
    """Write `data` to `path` atomically."""
    with atomic_write(path) as handle:
        handle.write(data)


def write_text_atomic(path: Path | str, text: str) -> None:
    """Write UTF-8 `text` to `path` atomically."""
    write_bytes_atomic(path, text.encode("utf-8"))
