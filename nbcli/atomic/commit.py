"""The commit: OutputSet (temporaries, fsync, journal, renames) and the atomic_write /
write_*_atomic helpers built on it (see nbcli.atomic for the protocol).

`NB_FAULT_INJECT=POINT[:N[:SIGNAL]]` (tests only) makes the process send itself SIGNAL (default
KILL; e.g. INT for Ctrl-C, STOP to pause it there) the N-th time (default 1st) it reaches POINT:
`temp-created` (the temporary exists on disk, not yet recorded for removal), `before-commit`, `journal-written`, `mid-commit` (after the first rename),
`renamed` (after each rename, N counts them), `index-renamed` (the commit point), `retired` (after
each removal of a replaced file), `after-commit` (all renamed, journal not yet removed),
`folder-renamed` (a new folder's staged copy renamed into place: `staged_folder`'s commit point),
`swap-staged` (a folder's staged copy complete, not yet swapped in: `swapped_folder`), `folder-swapped`
(swapped in, the old folder not yet removed).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import signal
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import BinaryIO

from nbcli.atomic.checks import check_output_dir, name_max
from nbcli.atomic.recovery import (index_sha256, recover_directory, recover_journal_now, remove_staged_folder,
                                   removable_shard, shards_named_by)
from nbcli.atomic.temporaries import JOURNAL_PREFIX, fsync_dir, libc_function, pid_tag, temp_name
from nbcli.errors import OutputError

_prepared: set[str] = set()
_fault_hits: dict[str, int] = {}


_committed: list[Path] = []


def take_committed() -> list[Path]:
    """The outputs committed (renamed into place) since the last call (then cleared): what an
    interrupted command kept, where they still exist (`nb: interrupted; kept ...`)."""
    done = list(_committed)
    _committed.clear()
    return done


def fault(point: str) -> None:
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


@contextlib.contextmanager
def sigint_held(*, deliver: bool) -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) over the block, so that what the block does is never half done.

    With `deliver`, a Ctrl-C pressed meanwhile is raised (KeyboardInterrupt, through the handler in
    place before) as soon as the block ends: used where a file or folder is made and recorded for
    removal, so that the clean-up Ctrl-C triggers knows of it. Without, it is dropped (the commit's
    renames: once decided, the commit completes and the command succeeds). Only the main thread
    receives KeyboardInterrupt, so elsewhere the block runs as it is."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is None):  # a handler not set from Python: leave it
        yield
        return
    pressed: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: pressed.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if pressed and deliver:
            signal.raise_signal(signal.SIGINT)


def _prepare(directory: Path) -> None:
    key = str(directory)
    if key not in _prepared:
        _prepared.add(key)
        recover_directory(directory)


_SYNC_FILE_RANGE_WRITE = 2  # <fcntl.h>: start writeback of the dirty pages in the range, do not wait


def start_writeback(fd: int, offset: int, nbytes: int) -> None:
    """Ask the kernel to start writing bytes [offset, offset + nbytes) of `fd` to disk, without
    waiting (Linux sync_file_range(SYNC_FILE_RANGE_WRITE)), so that the fsync before the rename
    has little left to do. Durability still comes from that fsync, which reports any I/O error;
    this only starts the work earlier. A no-op where sync_file_range does not exist."""
    function = libc_function("sync_file_range", (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint))
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
        with sigint_held(deliver=True):  # a Ctrl-C lands once the temporary is recorded for removal
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
            fault("temp-created")
            handle = os.fdopen(fd, "w+b")
            if commit_point:
                self._point = len(self._files)
            self._files.append((path, tmp, handle))
            self._targets.add(str(directory / path.name))
        return handle

    def retire(self, path: Path | str) -> None:
        """Remove `path` once the commit point is passed (a shard the new index no longer names)."""
        self._retire.append(Path(path))

    def discard(self) -> None:
        """Close and remove every temporary; the targets stay as they were. A Ctrl-C meanwhile
        (a second one, while the first is being handled) lands once all are removed."""
        with sigint_held(deliver=True):
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
            fault("before-commit")
        except OSError as err:
            self.discard()
            raise OutputError(_os_error_message(path or Path("."), err)) from None
        except BaseException:
            self.discard()
            raise
        with sigint_held(deliver=False):  # from the journal on, the commit is decided: see it through
            if len(self._files) > 1 or self._retire:
                try:
                    journal = self._write_journal()
                except OSError as err:
                    self.discard()
                    raise OutputError(_os_error_message(self._files[0][0], err)) from None
            fault("journal-written")
            if self._point is not None:
                self._rename_around_point(journal)
            else:
                for i, (path, tmp, _handle) in enumerate(self._files):
                    self._rename(path, tmp, journal, decided=True)
                    if i == 0:
                        fault("mid-commit")
                    fault("renamed")
                for folder in {tmp.parent for _path, tmp, _handle in self._files}:
                    fsync_dir(folder)
            fault("after-commit")
            if journal is not None:
                journal.unlink(missing_ok=True)
                fsync_dir(journal.parent)
            _committed.extend(path for path, _tmp, _handle in self._files)
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
                fault("mid-commit")
            fault("renamed")
        for folder in {tmp.parent for _path, tmp, _handle in before}:
            fsync_dir(folder)  # the shards are durable under their names before the index names them
        index, tmp, _handle = point
        self._rename(index, tmp, journal, decided=False)
        fsync_dir(tmp.parent)
        if not before:
            fault("mid-commit")
        fault("renamed")
        fault("index-renamed")
        for path, tmp, _handle in after:
            self._rename(path, tmp, journal, decided=True)
            fault("renamed")
        live = shards_named_by(index)
        for old in self._retire:
            if removable_shard(old, live):
                old.unlink(missing_ok=True)
            fault("retired")
        for folder in {tmp.parent for _path, tmp, _handle in self._files} | {p.parent for p in self._retire}:
            fsync_dir(folder)

    def _write_journal(self) -> Path:
        directory = self._files[0][1].parent
        journal = directory / f"{JOURNAL_PREFIX}{pid_tag()}.json"

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
                   "point": pair(point), "sha256": index_sha256(point[1]),
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
        fsync_dir(directory)
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


def _folder_error(folder: Path) -> OutputError:
    return OutputError(f"{folder}: exists and is not an empty directory; choose a new output folder")


@contextlib.contextmanager
def staged_folder(folder: Path | str) -> Iterator[Path]:
    """A new folder that every reader sees absent (or empty) or complete, never in between.

    Yields a staging folder `.NAME.PID-TAG.nbtmp` beside `folder` (made here; write the files into
    it, with OutputSet); leaving the block without an exception renames it to `folder` (which must
    not exist or be an empty directory; a symbolic link to one stands for the folder it names): that
    one rename is the commit point, for nb and for any other reader (transformers loads a model and
    its tokenizer from several files, which a per-file commit cannot make appear together).
    With an exception, or a Ctrl-C before the rename, the staging folder is removed. A crash leaves
    the target as it was and the staging folder of a process that no longer runs, which the next nb
    run in the parent folder removes (`recover_directory`): the commit is rolled back, so that a
    plain rerun writes the folder. Leftovers of a per-file commit into `folder` itself (nb before
    the staged folder) are recovered too before `folder` is checked."""
    folder = Path(folder)
    check_output_dir(folder)
    target = folder.resolve()
    parent = target.parent
    recover_directory(parent)  # the staged folders of killed exports, the temporaries of dead processes
    if target.is_dir():
        recover_directory(target)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise _folder_error(folder)
    with sigint_held(deliver=True):  # a Ctrl-C lands once the staging folder is ours to remove
        for _attempt in range(100):
            staging = parent / temp_name(target.name, name_max(parent))
            try:
                staging.mkdir()
                break
            except FileExistsError:
                continue
            except OSError as err:
                raise OutputError(f"{folder}: cannot create output directory: {err.strerror}") from None
        else:  # pragma: no cover - 100 collisions of a random tag
            raise OutputError(f"{folder}: cannot create a temporary folder beside it")
    try:
        yield staging
        fsync_dir(staging)
        with sigint_held(deliver=False):  # the rename is the commit: once decided, see it through
            try:
                os.rename(staging, target)  # atomic; replaces an empty directory, refuses any other
            except OSError as err:
                if err.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                    raise _folder_error(folder) from None  # filled (or made a file) meanwhile
                raise OutputError(f"{folder}: cannot rename the new folder into place: {err.strerror}") from None
            fault("folder-renamed")
            fsync_dir(parent)
            _committed.append(folder)
    except BaseException:
        with sigint_held(deliver=True):
            remove_staged_folder(staging)
        raise


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
