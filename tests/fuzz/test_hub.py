"""Hub repo ids that cannot be used, and outputs aimed at the hub cache (issue 20): each must fail as
every hostile case does (tests/fuzz/harness.py: one `nb: error:` line naming the repo, non-zero exit,
nothing written, the cache byte-identical, its links unchanged). No case touches the network: sockets
refuse to connect (a machine with no network), and the Hub's answers (gated, private, unknown
revision, server error) come from huggingface_hub's own exception types raised in its place.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fuzz import inputs
from tests.fuzz.harness import Case, check_case
from tests.hub_cache import add_snapshot, blob_name, commit_hash, repo_folder

COMMIT = commit_hash("tiny")
SNAPSHOT = f"{{DIR}}/hf/hub/models--org--tiny/snapshots/{COMMIT}"


def _response(status: int) -> Any:
    import httpx2  # huggingface_hub's HTTP client: its errors carry a response

    return httpx2.Response(status, request=httpx2.Request("GET", "https://huggingface.co/api/models/org/x"))


def _hub_error(kind: str) -> BaseException:
    from huggingface_hub import errors

    return {
        "gated": lambda: errors.GatedRepoError("Access to model org/gated is restricted", response=_response(401)),
        "private": lambda: errors.RepositoryNotFoundError("Repository Not Found for url", response=_response(404)),
        "revision": lambda: errors.RevisionNotFoundError("Revision Not Found for url", response=_response(404)),
        "server": lambda: errors.HfHubHTTPError("500 Server Error: Internal Server Error", response=_response(500)),
        "forbidden": lambda: errors.HfHubHTTPError("403 Forbidden", response=_response(403)),
    }[kind]()


# (case, online?, the Hub's answer when asked: None = no network at all)
CASES: list[tuple[Case, bool, str | None]] = [
    (Case("offline-not-cached", ("inspect", "org/absent"), names=("org/absent", "HF_HUB_OFFLINE", "local copy"),
          family="hub"), False, None),
    (Case("offline-unknown-revision", ("inspect", "org/tiny@nope"), names=("org/tiny@nope", "cached: main"),
          family="hub"), False, None),
    (Case("offline-tokenizer-not-cached", ("count-unigrams", "{CORPUS}", "-t", "org/absent", "-o", "{DIR}/c.safetensors"),
          names=("org/absent", "HF_HUB_OFFLINE"), family="hub"), False, None),
    (Case("online-unknown-revision", ("inspect", "org/tiny@nope"), names=("org/tiny@nope", "unknown revision"),
          family="hub"), True, "revision"),
    (Case("gated-no-token", ("inspect", "org/gated"), names=("org/gated", "gated", "HF_TOKEN"), family="hub"),
     True, "gated"),
    (Case("private-no-token", ("probe-bias", "org/private"), names=("org/private", "HF_TOKEN"), family="hub"),
     True, "private"),
    (Case("forbidden", ("inspect", "org/x"), names=("org/x", "HF_TOKEN"), family="hub"), True, "forbidden"),
    (Case("hub-server-error", ("inspect", "org/x"), names=("org/x", "Hub error"), family="hub"), True, "server"),
    (Case("no-network", ("inspect", "org/absent"), names=("org/absent", "cannot reach the Hub"), family="hub"),
     True, None),
    (Case("no-network-eval", ("eval", "org/absent", "--corpus", "{CORPUS}"), names=("org/absent", "cannot reach"),
          family="hub"), True, None),
    (Case("pickles-only", ("inspect", "org/pickled"), names=("org/pickled", "pytorch_model.bin", "safetensors"),
          family="hub"), False, None),
    (Case("in-place-on-snapshot", ("patch-checkpoint", "org/tiny", "--in-place", "--scale-ln-bias", "0.5"),
          names=("Hugging Face cache",), family="hub"), False, None),
    (Case("in-place-on-snapshot-path", ("patch-checkpoint", SNAPSHOT, "--in-place", "--scale-ln-bias", "0.5"),
          names=("Hugging Face cache",), family="hub"), False, None),
    (Case("output-in-snapshot", ("patch-checkpoint", "{CKPT}", "-o", f"{SNAPSHOT}/new.safetensors", "--scale-ln-bias",
                                 "0.5"), names=("new.safetensors", "Hugging Face cache"), family="hub"), False, None),
    (Case("output-in-blobs", ("count-unigrams", "{CORPUS}", "-t", "{SP}", "-o", "{DIR}/hf/hub/models--org--tiny/blobs/c"),
          names=("blobs/c", "Hugging Face cache"), family="hub"), False, None),
    (Case("output-symlink-to-blob", ("patch-checkpoint", "{CKPT}", "-o", "{DIR}/link.safetensors", "--scale-ln-bias",
                                     "0.5"), names=("link.safetensors", "Hugging Face cache"), family="hub"), False, None),
    (Case("output-hardlink-to-blob", ("patch-checkpoint", "{CKPT}", "-o", "{DIR}/hard.safetensors", "--scale-ln-bias",
                                      "0.5"), names=("hard.safetensors", "hard link"), family="hub"), False, None),
    (Case("counts-to-hardlinked-blob", ("count-unigrams", "{CORPUS}", "-t", "{SP}", "-o", "{DIR}/hard.safetensors"),
          names=("hard.safetensors", "hard link"), family="hub"), False, None),
    (Case("train-out-in-cache", ("train", "--corpus", "{CORPUS}", "-t", "{SP}", "--out", "{DIR}/hf/hub/run",
                                 "--steps", "1", "--device", "cpu"), names=("Hugging Face cache",), family="hub"),
     False, None),
]


def build_cache(directory: Path) -> None:
    """{DIR}/hf/hub: org/tiny (an nb checkpoint and a tokenizer), org/pickled (pytorch_model.bin only);
    {DIR}/link.safetensors: a symbolic link to org/tiny's weights blob; {DIR}/hard.safetensors a hard link."""
    cache = directory / "hf" / "hub"
    tiny = directory / "src-tiny"
    tiny.mkdir()
    weights = inputs.valid_checkpoint()
    (tiny / "model.safetensors").write_bytes(weights)
    add_snapshot(cache, "org/tiny", tiny, COMMIT)
    pickled = directory / "src-pickled"
    pickled.mkdir()
    (pickled / "pytorch_model.bin").write_bytes(b"PK\x03\x04 not unpickled")
    (pickled / "config.json").write_text('{"model_type": "gpt2"}')
    add_snapshot(cache, "org/pickled", pickled, commit_hash("pickled"))
    blob = repo_folder(cache, "org/tiny") / "blobs" / blob_name("model.safetensors", weights)
    os.symlink(blob, directory / "link.safetensors")
    os.link(blob, directory / "hard.safetensors")
    for src in (tiny, pickled):
        for file in src.iterdir():
            file.unlink()
        src.rmdir()


@pytest.mark.parametrize(("case", "online", "answer"), [pytest.param(*c, id=f"hub/{c[0].id}") for c in CASES])
def test_hub_refusal_fails_cleanly(case: Case, online: bool, answer: str | None, tmp_path: Path,
                                   fuzz_shared: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    build_cache(tmp_path)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    if online:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    else:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def no_network(*args: Any, **kwargs: Any) -> Any:
        raise OSError(101, "Network is unreachable (no network in tests)")

    for name in ("getaddrinfo", "create_connection"):
        monkeypatch.setattr(socket, name, no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    if answer is not None:
        real: Callable[..., str] = huggingface_hub.snapshot_download

        def hub_answers(*args: Any, **kwargs: Any) -> str:
            if kwargs.get("local_files_only"):
                return real(*args, **kwargs)  # the cache is read for real
            raise _hub_error(answer)

        monkeypatch.setattr(huggingface_hub, "snapshot_download", hub_answers)
    check_case(case, tmp_path, fuzz_shared)
