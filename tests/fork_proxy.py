"""One `nb` process forked by the test worker's fork server (tests/fork_server.py), standing where a
launcher execs `python -m nbcli`: torchrun runs `python -u tests/fork_proxy.py ARGS` as each rank
(tests/train/ddp_helpers.py). Standard library only, so it starts in milliseconds; the rank itself is
the fork, with this process's stdio, cwd and environment (torchrun's RANK, MASTER_PORT, ...). Signals
this process gets (torchrun's agent stops its workers with SIGTERM) are passed on to the fork, whose exit
status or signal becomes this process's; if this process dies first, the server kills the fork. Where
the server cannot serve its environment (NB_FORK_KEY differs, or there is no server), it execs
`python -m nbcli ARGS` instead."""

from __future__ import annotations

import os
import signal
import socket
import sys

from fork_server import key_digest, send_request  # sys.path[0] is tests/

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def main(argv: list[str]) -> None:
    path, key = os.environ.get("NB_FORK_SOCKET"), os.environ.get("NB_FORK_KEY")
    if not path or key != key_digest(os.environ):
        os.execv(sys.executable, [sys.executable, "-m", "nbcli", *argv])
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    send_request(conn, argv, os.environ, os.getcwd(), [0, 1, 2], die_with_client=True)
    reply = conn.makefile("rb")
    first = reply.readline().decode().strip()
    if not first.isdigit():
        print(f"tests/fork_proxy.py: {first}", file=sys.stderr)
        sys.exit(127)
    pid = int(first)
    for sig in FORWARDED:
        signal.signal(sig, lambda number, _frame: os.kill(pid, number))
    status = reply.readline().decode().strip()
    code = int(status) if status else -signal.SIGKILL
    conn.close()
    if code >= 0:
        sys.exit(code)
    signal.signal(-code, signal.SIG_DFL)  # die of the fork's signal, as the rank would have
    os.kill(os.getpid(), -code)


if __name__ == "__main__":
    main(sys.argv[1:])
