"""nbcli.resolve: repo-id syntax, the cache layout read back, the output guard's view of the cache, and
one line per Hub failure. No network: the cache is built on disk (tests/hub_cache.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbcli.errors import OutputError
from nbcli.outputs import check_outputs
from nbcli.resolve import (
    HubError,
    TypedPath,
    hub_blob,
    hub_cache_dir,
    hub_origin,
    inside_hub_cache,
    looks_like_repo_id,
    resolve,
)
from nbcli.tokenizers import model_tokenizer
from tests.hub_cache import add_snapshot, commit_hash, repo_folder

NAME = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_]{0,20}", fullmatch=True)


@pytest.mark.parametrize("spec", ["gpt2", "openai-community/gpt2", "meta-llama/Llama-3.2-1B", "org/m@main",
                                  "org/m@refs/pr/3", "EleutherAI/pythia-70m@step1000"])
def test_repo_ids(spec: str) -> None:
    assert looks_like_repo_id(spec)


@pytest.mark.parametrize("spec", ["./gpt2", "/abs/gpt2", "~/m", "a/b/c", "model.safetensors", "tok.model",
                                  "org/tokenizer.json", "org/m@", "org--x/m", "a..b", "-x", "", "c:\\m",
                                  "glove.6B.300d.vec", "wiki.en.vec", "train.conll", "data.arrow"])
def test_paths_are_not_repo_ids(spec: str) -> None:
    assert not looks_like_repo_id(spec)


@given(NAME, NAME, st.one_of(st.none(), NAME))
def test_org_name_rev_parses_as_a_repo_id(org: str, name: str, rev: str | None) -> None:
    spec = f"{org}/{name}" + (f"@{rev}" if rev else "")
    assert looks_like_repo_id(spec)
    assert not looks_like_repo_id("./" + spec) and not looks_like_repo_id(f"{org}/{name}/x")


def test_hub_origin_reads_the_layout(tmp_path: Path) -> None:
    c = commit_hash("x")
    snap = tmp_path / "models--org--name" / "snapshots" / c
    assert hub_origin(snap) == ("org/name", c)
    assert hub_origin(snap / "model.safetensors") == ("org/name", c)
    assert hub_origin(tmp_path / "models--gpt2" / "snapshots" / c / "config.json") == ("gpt2", c)
    assert hub_origin(tmp_path / "models--org--name" / "snapshots" / "main") is None  # not a commit
    assert hub_origin(tmp_path / "models--org--name" / "blobs" / "abc") is None
    assert hub_origin(tmp_path / "model.safetensors") is None


def _cache(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    src = home.parent / "src"
    src.mkdir(exist_ok=True)
    (src / "model.safetensors").write_bytes(b"weights")
    (src / "tokenizer.json").write_text("{}")
    add_snapshot(home / "hub", "org/m", src, commit_hash("m"), refs=("main", "v1"))
    return home / "hub"


def test_cache_dir_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    assert hub_cache_dir() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    assert hub_cache_dir() == tmp_path / "elsewhere"


def test_resolve_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = _cache(tmp_path / "hf", monkeypatch)
    for spec, revision in (("org/m", None), ("org/m@v1", "v1"), (f"org/m@{commit_hash('m')}", commit_hash("m"))):
        got = resolve(spec)
        assert got.from_hub and got.repo_id == "org/m" and got.revision == revision
        assert got.commit == commit_hash("m")
        assert got.path == repo_folder(cache, "org/m") / "snapshots" / commit_hash("m")
    assert resolve(got.path / "model.safetensors").repo_id == "org/m"  # a snapshot path is known as one
    assert not resolve(got.path).from_hub


def test_a_missing_path_that_is_no_repo_id_is_left_to_the_caller(tmp_path: Path) -> None:
    assert resolve(tmp_path / "absent.safetensors").path == tmp_path / "absent.safetensors"
    assert resolve("missing.safetensors").path == Path("missing.safetensors")


def test_a_path_typed_as_one_is_never_a_repo_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`./gpt2` is Path `gpt2`; typed so (TypedPath, what the CLI and the API pass) it is a local path:
    no note that a folder shadows the repo, and no Hub look-up when it is missing (docs/hub.md)."""
    _cache(tmp_path / "hf", monkeypatch)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org" / "m").mkdir(parents=True)
    assert "using the local folder ./org/m" in resolve("org/m").note
    for typed in ("./org/m", "org/m/"):
        got = resolve(TypedPath(typed))
        assert got.note == "" and not got.from_hub and got.path == Path("org/m")
        assert isinstance(got.path, TypedPath) and resolve(got.path).note == ""  # openers resolve again
    (tmp_path / "org" / "m").rmdir()
    assert resolve("org/m").from_hub  # the cached snapshot
    missing = resolve(TypedPath("./org/m"))
    assert not missing.from_hub and missing.path == Path("org/m") and not missing.path.exists()


def test_offline_errors_name_the_repo_and_the_ways_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _cache(tmp_path / "hf", monkeypatch)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubError, match=r"^org/absent: .*HF_HUB_OFFLINE.*local copy"):
        resolve("org/absent")
    with pytest.raises(HubError, match=r"^org/m@v9: revision not in .*cached: main, v1"):
        resolve("org/m@v9")


def test_model_tokenizer_prefers_tokenizer_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nbcli.resolve import set_reporter

    _cache(tmp_path / "hf", monkeypatch)
    notes: list[str] = []
    set_reporter(notes.append)
    try:
        found = model_tokenizer("org/m")
    finally:
        set_reporter(None)
    assert found.name == "tokenizer.json" and hub_origin(found) == ("org/m", commit_hash("m"))
    assert notes and str(found) in notes[0]


def test_output_guard_on_the_cache_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = _cache(tmp_path / "hf", monkeypatch)
    snap = repo_folder(cache, "org/m") / "snapshots" / commit_hash("m")
    blob = (snap / "model.safetensors").resolve()
    assert inside_hub_cache(snap / "new.safetensors") and inside_hub_cache(blob)
    link = tmp_path / "link.safetensors"
    os.symlink(blob, link)
    hard = tmp_path / "hard.safetensors"
    os.link(blob, hard)
    assert inside_hub_cache(link) and not inside_hub_cache(hard) and hub_blob(hard) == blob
    assert not inside_hub_cache(tmp_path / "out.safetensors") and hub_blob(tmp_path / "src" / "tokenizer.json") is None
    for out in (snap / "model.safetensors", snap / "x.safetensors", link, hard, blob):
        with pytest.raises(OutputError, match="Hugging Face cache"):
            check_outputs([out], [])
    check_outputs([tmp_path / "out.safetensors"], [])  # elsewhere: allowed


def test_a_cache_layout_anywhere_is_refused(tmp_path: Path) -> None:
    """A cache given with cache_dir= or copied elsewhere is recognised by its layout alone."""
    other = tmp_path / "models--a--b" / "snapshots" / commit_hash("a")
    with pytest.raises(OutputError, match="Hugging Face cache"):
        check_outputs([other / "out.safetensors"], [])


@pytest.mark.parametrize(("kind", "expected"), [
    ("gated", "gated repo; accept its terms"), ("private", "no such repo on the Hub, or a private one"),
    ("revision", "unknown revision 'r1'"), ("server", "Hub error: 500"), ("forbidden", "access denied (403)"),
])
def test_each_hub_failure_is_one_line(kind: str, expected: str, tmp_path: Path) -> None:
    from nbcli.resolve import _explain
    from tests.fuzz.test_hub import _hub_error

    err = _explain(_hub_error(kind), "org/x", "r1", tmp_path)
    assert str(err).startswith("org/x@r1: ") and expected in str(err) and "\n" not in str(err)
