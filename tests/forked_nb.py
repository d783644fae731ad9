"""`nb` processes for tests without paying the imports each time: a fork server.

A real `nb` process spends 2-8 CPU seconds importing torch and torch._dynamo (which torch.optim's
first step imports) before it does anything; the fault tests start hundreds of them. Here one server
process per test worker imports every nbcli module and those libraries once (`PRELOAD`; never the
Hugging Face libraries, which read the environment on import: `NOT_PRELOADED`), and every `nb`
process a test asks for is a fork of it: a real process (its own pid, signals, exit status, file
descriptors, session, limits), running `nb`'s console entry point (`nbcli.cli.main`) with the test's
argv, environment, cwd and stdio. Only the imports are shared, and only where they cannot differ:
a request whose environment differs from the server's in anything but the variables read while a
command runs (`RUN_TIME_VARIABLES`) is exec'd with `subprocess` instead (`NB_FORK_LOG=FILE` names
those variables per request), as is every request while `NB_TEST_EXEC=1` is set. PYTHONPATH may put
folders in front of the server's (an installed plugin's test): the child puts them on sys.path where
the interpreter would, or execs the interpreter itself when one could hold a module the server has
already imported. Tests of start-up itself (what a command imports, `--help`) keep calling
`subprocess` directly; torchrun is exec'd and its ranks are forks, through tests/fork_proxy.py
(`launcher_env`).

`Popen` and `run` take the subset of `subprocess.Popen`/`subprocess.run`'s arguments the tests use
(plus `rlimits`, which stands for a `preexec_fn` that sets resource limits) for an argv that starts
with `nb` or `[sys.executable, "-m", "nbcli"]`.

The server and its protocol: tests/fork_server.py.
"""

from __future__ import annotations

import atexit
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.fork_server import RUN_TIME_VARIABLES, import_key, key_digest, nb_script, send_request

SERVER = Path(__file__).with_name("fork_server.py")


class _Server:
    """This process's server, started on first use (None when forking is off or unavailable)."""

    lock = threading.Lock()
    instance: _Server | None = None
    failed = False

    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="nb-fork-")
        self.path = os.path.join(self.directory, "socket")
        self.env = dict(os.environ)
        self.key = import_key(self.env)
        # run as a real nb runs: sys.path[0] is the console script's folder (not tests/, whose packages
        # would shadow libraries of the same name)
        boot = (f"import sys; sys.path[0] = {os.path.dirname(nb_script())!r}; __file__ = {str(SERVER)!r}; "
                f"exec(compile(open(__file__).read(), __file__, 'exec'))")
        self.process = subprocess.Popen([sys.executable, "-c", boot, self.path], stdout=subprocess.PIPE,
                                        stdin=subprocess.PIPE, text=True, env=self.env,
                                        cwd=self.directory)
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        if line != "ready":
            self.process.kill()
            raise RuntimeError(f"nb fork server did not start: {line!r}")
        atexit.register(self.close)

    @classmethod
    def get(cls) -> _Server | None:
        if os.environ.get("NB_TEST_EXEC") == "1" or cls.failed:
            return None
        with cls.lock:
            if cls.instance is not None and import_key(os.environ) != cls.instance.key:
                # this process's own environment has changed for good (Dask's LocalCluster sets
                # PYTHONHASHSEED and MALLOC_TRIM_THRESHOLD_ in it): a server started in it serves it
                cls.instance.close()
                cls.instance = None
            if cls.instance is None or cls.instance.process.poll() is not None:
                try:
                    cls.instance = cls()
                except (OSError, RuntimeError) as err:  # said once; every nb then starts by exec
                    print(f"tests/forked_nb.py: {err}; nb processes start by exec", file=sys.stderr)
                    cls.failed = True
                    return None
            return cls.instance

    def close(self) -> None:
        """Stop the server (the `nb` processes it forked run on)."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.kill()
        self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)
        atexit.unregister(self.close)


def launcher_env() -> dict[str, str]:
    """For a launcher (torchrun) that runs tests/fork_proxy.py as each `nb` process: the server's socket
    and environment digest, or nothing when no server runs (the proxy then execs nb)."""
    server = _Server.get()
    return {} if server is None else {"NB_FORK_SOCKET": server.path, "NB_FORK_KEY": key_digest(server.env)}


PROXY = Path(__file__).with_name("fork_proxy.py")


def _log_refusal(server: Mapping[str, str], env: Mapping[str, str]) -> None:
    """With NB_FORK_LOG=FILE, a line there naming the variables that made a request exec'd."""
    path = os.environ.get("NB_FORK_LOG")
    if path:
        differ = sorted(k for k in set(server) | set(env) if server.get(k) != env.get(k)
                        and not k.startswith(RUN_TIME_VARIABLES))
        with open(path, "a") as log:
            log.write(f"{os.environ.get('PYTEST_CURRENT_TEST', '')}\t{' '.join(differ)}\n")


def nb_words(args: Sequence[object]) -> list[str] | None:
    """The words after `nb` of an argv running nb, else None."""
    words = [os.fspath(a) if isinstance(a, os.PathLike) else str(a) for a in args]
    if words[:1] == ["nb"]:
        return words[1:]
    if words[:3] == [sys.executable, "-m", "nbcli"]:
        return words[3:]
    return None


class Popen:
    """A forked `nb` process with `subprocess.Popen`'s interface (the part the tests use), or a real
    `subprocess.Popen` when it cannot be forked (see the module doc)."""

    def __new__(cls, args: Sequence[object], *, stdin: Any = None, stdout: Any = None, stderr: Any = None,
                text: bool = False, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
                start_new_session: bool = False, rlimits: Mapping[str, tuple[int, int]] | None = None
                ) -> Any:
        env = dict(os.environ if env is None else env)
        words = nb_words(args)
        server = _Server.get() if words is not None else None
        if server is not None and import_key(env) != server.key:
            _log_refusal(server.env, env)
            server = None
        if server is None:
            return _exec(args, stdin=stdin, stdout=stdout, stderr=stderr, text=text, env=env, cwd=cwd,
                         start_new_session=start_new_session, rlimits=rlimits)
        self = super().__new__(cls)
        self._start(server, list(args), words or [], stdin, stdout, stderr, text, env, cwd, start_new_session,
                    rlimits or {})
        return self

    def _start(self, server: _Server, args: list[object], words: list[str], stdin: Any, stdout: Any,
               stderr: Any, text: bool, env: dict[str, str], cwd: str | Path | None, new_session: bool,
               rlimits: Mapping[str, tuple[int, int]]) -> None:
        self.args, self.returncode, self.text = args, None, text
        self.stdin = self.stdout = self.stderr = None
        ends: list[int] = []  # descriptors opened for the child, closed here once sent
        child_fds: list[int] = []
        for number, spec in enumerate((stdin, stdout, stderr)):
            if spec == subprocess.PIPE:
                read, write = os.pipe()
                mine, theirs = (write, read) if number == 0 else (read, write)
                ends.append(theirs)
                child_fds.append(theirs)
                mode = ("w" if number == 0 else "r") + ("" if text else "b")  # text mode: str, as Popen's
                stream = open(mine, mode, encoding="utf-8" if text else None)  # noqa: SIM115 - closed by communicate
                setattr(self, ("stdin", "stdout", "stderr")[number], stream)
            elif spec == subprocess.DEVNULL:
                fd = os.open(os.devnull, os.O_RDWR)
                ends.append(fd)
                child_fds.append(fd)
            elif spec == subprocess.STDOUT and number == 2:
                child_fds.append(child_fds[1])
            elif spec is None:
                child_fds.append(number)
            else:
                child_fds.append(spec if isinstance(spec, int) else spec.fileno())
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._conn.connect(server.path)
            send_request(self._conn, words, env, os.fspath(cwd or os.getcwd()), child_fds, new_session=new_session,
                         rlimits=rlimits)
        finally:
            for fd in ends:
                os.close(fd)
        self._buffer = b""
        first = self._line(None)
        if first.startswith("error "):  # the child could not be set up: what exec would raise
            self._conn.close()
            raise OSError(f"nb fork server: {first[6:]}")
        self.pid = int(first)
        self._output: dict[str, bytes | str | ValueError] = {}
        self._readers: list[threading.Thread] = []

    def _line(self, timeout: float | None) -> str:
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([self._conn], [], [], timeout)
            if not ready:
                raise subprocess.TimeoutExpired(self.args, timeout)  # type: ignore[arg-type]
            more = self._conn.recv(64)
            if not more:
                raise RuntimeError("nb fork server: the supervisor went away")
            self._buffer += more
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                self.wait(0)
            except subprocess.TimeoutExpired:
                pass
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = int(self._line(timeout))
            self._conn.close()  # the supervisor reaps the child now
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, input: bytes | str | None = None, timeout: float | None = None) -> tuple[Any, Any]:
        if not self._readers:
            for name in ("stdout", "stderr"):
                stream = getattr(self, name)
                if stream is not None:
                    thread = threading.Thread(target=self._read, args=(name, stream), daemon=True)
                    thread.start()
                    self._readers.append(thread)
            if self.stdin is not None:
                data = input or ("" if self.text else b"")
                thread = threading.Thread(target=self._write, args=(self.stdin, data), daemon=True)
                thread.start()
                self._readers.append(thread)
        self.wait(timeout)
        for thread in self._readers:
            thread.join()
        return self._decoded("stdout"), self._decoded("stderr")

    def _read(self, name: str, stream: Any) -> None:
        with stream:
            try:
                self._output[name] = stream.read()
            except ValueError as err:  # text mode: bytes that are not UTF-8, which Popen's communicate raises
                self._output[name] = err

    @staticmethod
    def _write(stream: Any, data: bytes | str) -> None:
        try:
            with stream:
                stream.write(data)
        except BrokenPipeError:
            pass

    def _decoded(self, name: str) -> Any:
        if getattr(self, name) is None:
            return None
        data = self._output.get(name, "" if self.text else b"")
        if isinstance(data, ValueError):
            raise data
        return data


def _exec(args: Sequence[object], *, rlimits: Mapping[str, tuple[int, int]] | None, **options: Any
          ) -> subprocess.Popen[Any]:
    def limit() -> None:
        import resource

        for name, limits in (rlimits or {}).items():
            resource.setrlimit(getattr(resource, name), tuple(limits))

    return subprocess.Popen([os.fspath(a) if isinstance(a, os.PathLike) else str(a) for a in args],
                            preexec_fn=limit if rlimits else None, **options)


def run(args: Sequence[object], *, input: bytes | str | None = None, capture_output: bool = False,
        timeout: float | None = None, check: bool = False, stdin: Any = None, stdout: Any = None,
        stderr: Any = None, **options: Any) -> subprocess.CompletedProcess[Any]:
    """`subprocess.run` for an `nb` argv, forked when it can be (see the module doc)."""
    if capture_output:
        stdout = stderr = subprocess.PIPE
    if input is not None:
        stdin = subprocess.PIPE
    proc = Popen(args, stdin=stdin, stdout=stdout, stderr=stderr, **options)
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    if check and proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, proc.args, out, err)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
