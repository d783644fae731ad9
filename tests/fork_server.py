"""The fork server of `nb` processes for tests (tests/forked_nb.py is its client and says why).

Run as `python tests/fork_server.py SOCKET` by the client, with sys.path[0] the console script's folder
(as a real `nb` has it). It imports every nbcli module and `PRELOAD` once, never `NOT_PRELOADED`,
and serves only while no other thread runs (a fork copies one thread and every lock).

Protocol (a Unix socket, one connection per process): the client sends its request as one JSON line
with the child's stdin, stdout and stderr descriptors attached (SCM_RIGHTS). The server forks a
supervisor, which forks the `nb` child, sends back its pid once the child is set up (its own session,
limits, cwd, environment, stdio: the point where exec would have succeeded), waits for it to exit
without reaping it (`waitid(WNOWAIT)`), sends the exit status and reaps it only when the client closes
the connection: as with `subprocess.Popen`, the pid stays the test's to signal until the test has seen
it exit.
"""

from __future__ import annotations

import atexit
import io
import json
import os
import select
import signal
import socket
import sys
import threading
from collections.abc import Mapping
from typing import Any

# Libraries that read the environment when imported, which the server therefore never imports: the
# Hugging Face libraries read their cache and offline variables (HF_HOME, HF_HUB_OFFLINE, ...) on
# import, and tests/conftest.py gives each test its own HF_HOME; the trackers' clients (mlflow, wandb)
# read theirs. Left to each child, these variables are read when it imports them, like every variable
# nb reads while it runs.
NOT_PRELOADED = ("huggingface_hub", "transformers", "datasets", "mlflow", "wandb")
NOT_PRELOADED_MODULES = ("nbcli.__main__", "nbcli.hf.trainer")  # runs nb / imports transformers
# Environment variables a forked child may have different from the server's: those nb reads while it
# runs (its own; COLUMNS, read by rich when a console is made, which nb does per command; a rank's,
# read by nb and by torch.distributed when the process group starts), those of the libraries above,
# and pytest's name of the current test.
RUN_TIME_VARIABLES = ("NB_", "COLUMNS", "LINES", "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                      "LOCAL_WORLD_SIZE", "GROUP_", "ROLE_", "TORCHELASTIC_", "TORCH_NCCL_",  # torchrun's, per rank
                      "PYTEST_CURRENT_TEST", "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "MLFLOW_", "WANDB_",
                      # set in the test process by what its tests import or run, as in any nb process that
                      # does the same: scikit-learn's import (setdefault), torch.compile's first use, nb's
                      # counting (`nbcli.counting.run`)
                      "KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK", "TORCHINDUCTOR_CACHE_DIR", "TOKENIZERS_PARALLELISM")
# Heavy libraries nb's modules import only inside functions.
PRELOAD = ("torch", "torch._dynamo", "sklearn.metrics", "sentencepiece", "tokenizers", "safetensors.torch",
           "rich.console", "rich.progress")


def import_key(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The part of an environment a forked child shares with the server (it must be the server's).
    PYTHONPATH is the child's own business (`_python_path`)."""
    return tuple(sorted((k, v) for k, v in env.items() if not k.startswith(RUN_TIME_VARIABLES) and k != "PYTHONPATH"))


def added_python_path(server: str, wanted: str) -> list[str] | None:
    """The folders a child's PYTHONPATH `wanted` puts before the server's `server` (what an installed
    plugin's test does), or None when it is not the server's with folders in front."""
    have = server.split(os.pathsep) if server else []
    want = wanted.split(os.pathsep) if wanted else []
    if len(want) < len(have) or want[len(want) - len(have):] != have:
        return None
    return want[:len(want) - len(have)]


def _shadows_an_import(folder: str) -> bool:
    """Whether a PYTHONPATH entry could hold a module the server already imported (or is not a plain
    folder: a zip, the current directory)."""
    if not folder or os.path.isfile(folder):
        return True
    if not os.path.isdir(folder):
        return False  # a missing folder holds nothing
    imported = {name.partition(".")[0] for name in sys.modules}
    return any(entry.partition(".")[0] in imported for entry in os.listdir(folder))


def nb_script() -> str:
    """The `nb` console script of this interpreter: a forked nb's argv[0], sys.path[0] and __main__."""
    return os.path.join(os.path.dirname(sys.executable), "nb")


def send_request(conn: socket.socket, argv: list[str], env: Mapping[str, str], cwd: str, stdio: list[int], *,
                 new_session: bool = False, rlimits: Mapping[str, tuple[int, int]] | None = None,
                 die_with_client: bool = False) -> None:
    """Ask the server on `conn` for `nb ARGV` with these descriptors as its stdin, stdout and stderr."""
    request = {"argv": argv, "env": dict(env), "cwd": cwd, "new_session": new_session,
               "rlimits": {k: list(v) for k, v in (rlimits or {}).items()}, "script": nb_script(),
               "die_with_client": die_with_client}
    socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], stdio)


def key_digest(env: Mapping[str, str]) -> str:
    """`import_key` as a short string (tests/fork_proxy.py compares it with the server's)."""
    import hashlib

    return hashlib.sha256(json.dumps(import_key(env)).encode()).hexdigest()[:32]


def _preload() -> None:
    """Every nbcli module and the libraries in PRELOAD; never those in NOT_PRELOADED."""
    import importlib
    import pkgutil

    import nbcli

    names = [m.name for m in pkgutil.walk_packages(nbcli.__path__, "nbcli.") if m.name not in NOT_PRELOADED_MODULES]
    for name in (*names, *PRELOAD):
        try:
            importlib.import_module(name)
        except ImportError:  # an optional library not installed: its users import it themselves
            pass


def _unwanted_imports() -> list[str]:
    return [name for name in NOT_PRELOADED if name in sys.modules]


# Threads a library may start on import whose locks are safe across fork (jemalloc, which pyarrow
# links, takes its locks in a pthread_atfork handler)
FORK_SAFE_THREADS = ("jemalloc_bg_thd",)


def _other_threads() -> list[str]:
    names = []
    for task in os.listdir("/proc/self/task"):
        if int(task) != os.getpid():
            with open(f"/proc/self/task/{task}/comm") as handle:
                names.append(handle.read().strip())
    return [name for name in names if name not in FORK_SAFE_THREADS]


def serve(path: str) -> None:
    _preload()
    import gc

    gc.freeze()  # the children's collections leave the imported objects alone: their pages stay shared
    unwanted = _unwanted_imports()
    if unwanted:  # their import-time settings would be the server's, not the child's
        print(f"not forking: the imports loaded {unwanted}", flush=True)
        return
    others = _other_threads()
    if others:  # a fork would copy a process whose other threads may hold locks
        print(f"not forking: threads {others} after the imports (set OMP_NUM_THREADS, OPENBLAS_NUM_THREADS "
              "and MKL_NUM_THREADS to 1, as tests/conftest.py does under xdist)", flush=True)
        return
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped by the kernel
    print("ready", flush=True)
    while True:
        ready, _, _ = select.select([listener, sys.stdin], [], [])
        if sys.stdin in ready:  # the test process closed our stdin: it has gone
            return
        conn, _ = listener.accept()
        request, fds = _receive(conn)
        if os.fork() == 0:
            listener.close()
            _supervise(conn, request, fds)  # never returns
        conn.close()
        for fd in fds:
            os.close(fd)


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data, fds, _flags, _address = socket.recv_fds(conn, 1 << 16, 3)
    while not data.endswith(b"\n"):
        more = conn.recv(1 << 16)
        if not more:
            break
        data += more
    return json.loads(data), list(fds)


def _supervise(conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        ready, set_up = os.pipe()  # the child says when its set-up is done, as exec does for Popen
        pid = os.fork()
        if pid == 0:
            conn.close()
            os.close(ready)
            _become_nb(request, fds, set_up)  # never returns
        os.close(set_up)
        for fd in fds:
            os.close(fd)
        with open(ready, "rb") as report:
            problem = report.read()
        if problem:  # the set-up failed (a missing cwd, a limit refused): the child has exited
            os.waitpid(pid, 0)
            conn.sendall(b"error " + problem.replace(b"\n", b" ") + b"\n")
            return
        conn.sendall(f"{pid}\n".encode())
        if request.get("die_with_client"):  # tests/fork_proxy.py: a proxy that dies takes its fork along
            with open(os.pidfd_open(pid), "rb", buffering=0) as exited:
                ready, _, _ = select.select([exited, conn], [], [])
                if exited not in ready:
                    os.kill(pid, signal.SIGKILL)
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        code = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
        conn.sendall(f"{code}\n".encode())
        try:
            conn.recv(1)  # the client closes the connection once it has read the status
        finally:
            os.waitpid(pid, 0)
    finally:
        os._exit(0)


_SERVER_STDIO: list[Any] = []


def _become_nb(request: dict[str, Any], fds: list[int], set_up: int) -> None:
    """The child: its set-up (a failure is written to `set_up`, as exec's failure reaches Popen), then
    `nb ARGV` as the console script runs it; exits as the interpreter would."""
    try:
        _set_up(request, fds)
    except Exception as err:  # noqa: BLE001 - reported to the client, which raises it
        os.write(set_up, f"{type(err).__name__}: {err}".encode())
        os._exit(127)
    os.close(set_up)
    code = 1
    try:
        from nbcli.cli import main as nb_main

        nb_main()
        code = 0
    except SystemExit as stop:
        code = _exit_code(stop.code)
    except KeyboardInterrupt:  # as Python does: the traceback, then death by SIGINT
        import traceback

        traceback.print_exc()
        _flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:  # noqa: BLE001 - printed as the interpreter prints it
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            threading._shutdown()  # type: ignore[attr-defined]  # join non-daemon threads, as at exit
            atexit._run_exitfuncs()
        finally:
            _flush()
            os._exit(code)


def _set_up(request: dict[str, Any], fds: list[int]) -> None:
    """The test's stdio, session, limits, cwd, environment and argv; signals as Python sets them."""
    import resource

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds):
        os.close(fd)
    if request["new_session"]:
        os.setsid()
    for name, limits in request["rlimits"].items():
        resource.setrlimit(getattr(resource, name), tuple(limits))
    os.chdir(request["cwd"])
    added = added_python_path(os.environ.get("PYTHONPATH", ""), request["env"].get("PYTHONPATH", ""))
    os.environ.clear()
    os.environ.update(request["env"])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _SERVER_STDIO.extend((sys.stdin, sys.stdout, sys.stderr))  # never freed: they would close 0-2
    sys.stdin, sys.stdout, sys.stderr = (_stream(0, "r", sys.stdin), _stream(1, "w", sys.stdout),
                                         _stream(2, "w", sys.stderr))
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    script = request["script"]
    if added is None or any(_shadows_an_import(folder) for folder in added):
        # Python would have imported from these first: run the real interpreter here (the pid, session,
        # limits and stdio are already the child's; the set-up pipe closes on exec, as Popen's does)
        os.execve(sys.executable, [sys.executable, script, *request["argv"]], request["env"])
    sys.argv = [script, *request["argv"]]
    sys.path[0] = os.path.dirname(script)
    sys.path[1:1] = added  # where the interpreter puts PYTHONPATH: after the script's folder
    main = type(sys)("__main__")
    main.__file__ = script
    sys.modules["__main__"] = main


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _stream(fd: int, mode: str, template: Any) -> io.TextIOWrapper:
    buffered = open(fd, mode + "b", closefd=False)  # noqa: SIM115 - the process's own stdio
    tty = os.isatty(fd)
    return io.TextIOWrapper(buffered, encoding=template.encoding, errors=template.errors,
                            line_buffering=tty or fd == 2, write_through=fd == 2)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


if __name__ == "__main__":
    serve(sys.argv[1])
