"""tests/forked_nb.py: a forked `nb` is the process an exec'd one is (the tests that start hundreds of
`nb` processes rely on it): the same outputs, exit statuses, signals, sessions and limits; and a
request it cannot serve faithfully (another import-time environment) is exec'd."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from safetensors.numpy import load_file

from conftest import english_like_lines
from tests import forked_nb
from tests.fork_server import added_python_path

needs_server = pytest.mark.skipif(not os.environ.get("PYTEST_XDIST_WORKER") or os.environ.get("NB_TEST_EXEC") == "1",
                                  reason="no fork server: NB_TEST_EXEC=1, or not under xdist (whose one-thread "
                                         "environment it needs, tests/conftest.py)")


def _both(args: list[str], **options: object) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    forked = forked_nb.run(["nb", *args], capture_output=True, **options)
    plain = subprocess.run(["nb", *args], capture_output=True, **options)  # type: ignore[call-overload]
    return forked, plain


@pytest.mark.slow
@needs_server
def test_a_forked_train_run_equals_an_exec_d_one(tmp_path: Path) -> None:
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(english_like_lines(200)) + "\n")
    common = ["train", "--corpus", str(corpus), "-t", "words:min-freq=1", "--steps", "4", "--eval-every", "2",
              "--batch-size", "4", "--seq-len", "16", "--d-model", "16", "--n-head", "2", "--log-every", "2"]
    forked = forked_nb.Popen(["nb", *common, "--out", str(tmp_path / "a")], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    assert isinstance(forked, forked_nb.Popen)  # served by the fork server, not exec'd
    out, err = forked.communicate(timeout=300)
    plain = subprocess.run(["nb", *common, "--out", str(tmp_path / "b")], capture_output=True, text=True, timeout=300)
    assert (forked.returncode, plain.returncode) == (0, 0), (err, plain.stderr)
    assert [line.split()[:3] for line in err.splitlines()] == [line.split()[:3] for line in plain.stderr.splitlines()]
    a, b = load_file(str(tmp_path / "a" / "step-4.safetensors")), load_file(str(tmp_path / "b" / "step-4.safetensors"))
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)


@needs_server
def test_errors_stdin_and_exit_statuses_are_an_exec_d_process_s(tmp_path: Path, sp_model: Path) -> None:
    forked, plain = _both(["inspect", str(tmp_path / "absent.safetensors")])
    assert (forked.returncode, forked.stdout, forked.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    assert forked.returncode == 1 and forked.stderr.startswith(b"nb: error: ")
    text = ("\n".join(english_like_lines(50)) + "\n").encode()
    count = ["nb", "count-unigrams", "-", "-t", str(sp_model), "-o", "c.safetensors", "--json", "-j", "1"]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    forked = forked_nb.run(count, input=text, capture_output=True, cwd=tmp_path / "a")
    plain = subprocess.run(count, input=text, capture_output=True, cwd=tmp_path / "b")
    assert forked.returncode == plain.returncode == 0, forked.stderr
    assert forked.stderr == plain.stderr
    timing = ("seconds", "mb_per_s", "tokens_per_s")
    reports = [{k: v for k, v in json.loads(done.stdout.replace(b"/a/", b"/b/")).items() if k not in timing}
               for done in (forked, plain)]
    assert reports[0] == reports[1]
    assert load_file(str(tmp_path / "a" / "c.safetensors")).keys() == load_file(str(tmp_path / "b" / "c.safetensors")).keys()


@needs_server
def test_signals_sessions_and_limits_reach_the_forked_process(tmp_path: Path, sp_model: Path) -> None:
    proc = forked_nb.Popen(["nb", "count-unigrams", "-", "-t", str(sp_model), "-o", str(tmp_path / "c.safetensors")],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           start_new_session=True)
    assert isinstance(proc, forked_nb.Popen)
    assert os.getsid(proc.pid) == proc.pid  # its own session, as start_new_session gives
    assert proc.poll() is None
    proc.kill()
    assert proc.wait(timeout=60) == -signal.SIGKILL
    assert not (tmp_path / "c.safetensors").exists()
    limited = forked_nb.run(["nb", "count-unigrams", "-", "-t", str(sp_model), "-o", str(tmp_path / "d.safetensors")],
                            input=("\n".join(english_like_lines(400)) + "\n").encode(), capture_output=True,
                            rlimits={"RLIMIT_FSIZE": (1024, 1024)})
    assert limited.returncode == 1 and b"Traceback" not in limited.stderr, limited.stderr
    assert not (tmp_path / "d.safetensors").exists()


@needs_server
def test_a_timeout_raises_and_the_process_is_killed(tmp_path: Path, sp_model: Path) -> None:
    read, write = os.pipe()  # stdin never closes: the count waits for it
    try:
        start = time.monotonic()
        with pytest.raises(subprocess.TimeoutExpired):
            forked_nb.run(["nb", "count-unigrams", "-", "-t", str(sp_model), "-o", str(tmp_path / "c.safetensors"),
                           "-j", "1"], stdin=read, capture_output=True, timeout=2)  # no workers to outlive it
        assert time.monotonic() - start < 60
    finally:
        os.close(read)
        os.close(write)


def test_another_import_time_environment_is_exec_d(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "3"}  # torch reads it on import
    proc = forked_nb.Popen(["nb", "--version"], stdout=subprocess.PIPE, env=env)
    assert isinstance(proc, subprocess.Popen)
    assert proc.communicate(timeout=120)[0].startswith(b"nb ")
    run_time = {**os.environ, "NB_FAULT_INJECT": "nowhere", "COLUMNS": "77", "HF_HOME": str(tmp_path / "hf")}
    assert forked_nb.import_key(run_time) == forked_nb.import_key(dict(os.environ))


@pytest.mark.slow
@needs_server
def test_a_lasting_change_of_this_process_s_environment_gets_a_server_of_its_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONHASHSEED", "0")  # as Dask's LocalCluster leaves it in the test process
    proc = forked_nb.Popen(["nb", "--version"], stdout=subprocess.PIPE)
    assert isinstance(proc, forked_nb.Popen)
    assert proc.communicate(timeout=120)[0].startswith(b"nb ")


def _cmdline_while_running(tmp_path: Path, sp_model: Path, env: dict[str, str]) -> tuple[bytes, int]:
    """The command line of a forked `nb count-unigrams -` while it waits for stdin, and its exit status."""
    proc = forked_nb.Popen(["nb", "count-unigrams", "-", "-t", str(sp_model), "-o", str(tmp_path / "c.safetensors"),
                            "-j", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert isinstance(proc, forked_nb.Popen)
    with open(f"/proc/{proc.pid}/cmdline", "rb") as handle:
        cmdline = handle.read()
    proc.communicate(b"the of and\n", timeout=120)
    return cmdline, proc.returncode


@needs_server
def test_folders_put_in_front_of_python_path_are_searched_first(tmp_path: Path, sp_model: Path) -> None:
    """A PYTHONPATH with a folder in front of the server's: the fork puts it on sys.path where the
    interpreter would (a module only it holds is found), or execs the interpreter when the folder
    holds a module the server has already imported (Python would import that one instead)."""
    def with_front(folder: Path) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), *filter(None, [os.environ.get("PYTHONPATH")])])}

    assert added_python_path("a:b", "c:a:b") == ["c"] and added_python_path("", "c") == ["c"]
    assert added_python_path("a:b", "b") is None and added_python_path("a", "a:c") is None
    fresh, marker = tmp_path / "fresh", tmp_path / "imported"
    fresh.mkdir()
    (fresh / "nb_front_probe.py").write_text("")  # a name nothing has imported: the folder shadows nothing
    cmdline, code = _cmdline_while_running(tmp_path, sp_model, with_front(fresh))
    assert code == 0 and b"fork_server.py" in cmdline  # forked, not exec'd (an installed plugin's task:
    # tests/tasks/test_external_task.py finds its entry point and module through such a folder)
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "rich.py").write_text(f"open({str(marker)!r}, 'w').write('rich')\nraise SystemExit(7)\n")
    cmdline, code = _cmdline_while_running(tmp_path, sp_model, with_front(shadow))
    assert b"fork_server.py" not in cmdline and code == 7 and marker.read_text() == "rich"  # the folder's rich


def _gone(write_end: int, seconds: float = 60) -> bool:
    """True once no process reads the pipe whose write end this is (the fork holding it has died)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.write(write_end, b"the of and\n")
        except BrokenPipeError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.slow
@needs_server
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_launcher_s_proxy_passes_signals_on_and_takes_its_fork_along(tmp_path: Path, sp_model: Path,
                                                                       sig: int) -> None:
    """tests/fork_proxy.py (torchrun's ranks): SIGTERM reaches the fork, which ends; if the proxy is
    killed, the server kills the fork."""
    import sys

    env = {**os.environ, **forked_nb.launcher_env()}
    assert env.get("NB_FORK_SOCKET")
    version = subprocess.run([sys.executable, str(forked_nb.PROXY), "--version"], capture_output=True, env=env,
                             timeout=120)
    assert version.returncode == 0 and version.stdout.startswith(b"nb "), version.stderr
    read, write = os.pipe()
    proxy = subprocess.Popen([sys.executable, str(forked_nb.PROXY), "count-unigrams", "-", "-t", str(sp_model), "-o",
                              str(tmp_path / "c.safetensors"), "-j", "1"], stdin=read, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, env=env)
    os.close(read)
    try:
        os.write(write, b"the of and\n")
        time.sleep(1)  # the fork reads its stdin by now
        assert proxy.poll() is None
        with open(f"/proc/{proxy.pid}/cmdline", "rb") as cmdline:
            assert b"fork_proxy.py" in cmdline.read()  # still the proxy: nb runs in the fork, not exec'd here
        proxy.send_signal(sig)
        assert proxy.wait(timeout=120) != 0
        assert _gone(write)
        assert not (tmp_path / "c.safetensors").exists()
    finally:
        os.close(write)
        if proxy.poll() is None:
            proxy.kill()
