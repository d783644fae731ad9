"""Every command takes a Hub repo id as it takes the snapshot folder (issue 20), with no network.

A hub cache is built on disk in huggingface_hub's layout (tests/hub_cache.py) from transformers'
tiny random models saved with `save_pretrained` (GPT-2, Llama sharded, BERT) and their tokenizers;
each command run by `org/name[@rev]` with HF_HUB_OFFLINE=1 and HF_HOME pointing at it must give
what the same snapshot folder given as a path gives. Any socket opened fails the test.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.cli.helpers import run_cli
from tests.cli.helpers import run_nb
from tests.hub_cache import add_snapshot, commit_hash, repo_folder

GPT2, LLAMA, BERT = "org/gpt2-tiny", "meta/llama-tiny", "google/bert-tiny"


@dataclass
class Hub:
    home: Path  # HF_HOME
    main: dict[str, Path]  # repo id -> snapshot folder of refs/main
    dev: Path  # GPT2's second commit (branch dev, tag v1.0)
    dev_commit: str


def _quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def _gpt2(directory: Path, tokenizer: Path, seed: int) -> Path:
    from transformers import GPT2Config, GPT2LMHeadModel

    from nbcli.tokenizers import load_tokenizer

    tok = load_tokenizer(tokenizer)
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=tok.vocab_size, n_positions=64, n_embd=32, n_layer=2, n_head=2,
                                       bos_token_id=tok.eos_id, eos_token_id=tok.eos_id))
    with torch.no_grad():
        model.transformer.ln_f.bias.normal_(0, 0.5)
    model.save_pretrained(str(directory))
    shutil.copy(tokenizer, directory / "tokenizer.json")
    return directory


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory, hf_bytelevel_json: Path, sp_llama2_model: Path,
        hf_bert_json: Path) -> Hub:
    from transformers import BertConfig, BertForMaskedLM, LlamaConfig, LlamaForCausalLM

    _quiet_transformers()
    work = tmp_path_factory.mktemp("hub-src")
    home = tmp_path_factory.mktemp("hf-home")
    cache = home / "hub"
    main = {GPT2: add_snapshot(cache, GPT2, _gpt2(work / "gpt2-a", hf_bytelevel_json, 0), commit_hash("gpt2-a"))}
    dev_commit = commit_hash("gpt2-b")
    dev = add_snapshot(cache, GPT2, _gpt2(work / "gpt2-b", hf_bytelevel_json, 1), dev_commit, refs=("dev", "v1.0"))
    torch.manual_seed(2)
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=700, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                                         tie_word_embeddings=False))
    llama.save_pretrained(str(work / "llama"), max_shard_size="20KB")  # sharded: an index and several files
    shutil.copy(sp_llama2_model, work / "llama" / "tokenizer.model")
    main[LLAMA] = add_snapshot(cache, LLAMA, work / "llama", commit_hash("llama"))
    torch.manual_seed(3)
    BertForMaskedLM(BertConfig(vocab_size=300, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                               num_attention_heads=2, max_position_embeddings=64)).save_pretrained(str(work / "bert"))
    shutil.copy(hf_bert_json, work / "bert" / "tokenizer.json")
    main[BERT] = add_snapshot(cache, BERT, work / "bert", commit_hash("bert"))
    assert len(list(main[LLAMA].glob("*.safetensors"))) > 1, "the Llama model must be sharded"
    return Hub(home, main, dev, dev_commit)


class SocketOpened(AssertionError):
    pass


@pytest.fixture(autouse=True)
def offline_hub(hub: Hub, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """HF_HOME at the built cache, HF_HUB_OFFLINE=1, and no socket may connect or look a name up (a Unix
    socket is no network: the fork server of `nb` processes, tests/forked_nb.py, is one)."""
    attempts: list[str] = []
    connect = socket.socket.connect

    def refuse(*args: Any, **kwargs: Any) -> Any:
        if isinstance(args[0], socket.socket) and args[0].family == socket.AF_UNIX:
            return connect(*args, **kwargs)
        attempts.append(repr(args[:2]))
        raise SocketOpened(f"a test opened a network connection: {args[:2]!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("HF_HOME", str(hub.home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    yield attempts
    assert not attempts, attempts


def nb(*args: str, ok: bool = True) -> Any:
    result = run_cli([str(a) for a in args])
    if ok:
        assert result.exit_code == 0, (args, result.stdout, result.stderr, result.exception)
    return result


def nb_json(*args: str) -> dict[str, Any]:
    return json.loads(nb(*args, "--json").stdout)


def same_report(by_id: dict[str, Any], by_path: dict[str, Any], spec: str, path: Path) -> None:
    """Equal, but for the fields that echo the argument as given (the id in one, the path in the other)."""
    echo = {k for k in by_id if by_id[k] == spec and by_path.get(k) == str(path)}
    assert {k: v for k, v in by_id.items() if k not in echo} == {k: v for k, v in by_path.items() if k not in echo}


def test_the_socket_guard_is_live(offline_hub: list[str]) -> None:
    with pytest.raises(SocketOpened):
        socket.create_connection(("huggingface.co", 443))
    with pytest.raises(SocketOpened):
        socket.socket().connect(("127.0.0.1", 9))
    assert len(offline_hub) == 2  # the fixture's teardown fails any test that tried: empty the record here
    offline_hub.clear()


@pytest.mark.parametrize("repo", [GPT2, LLAMA, BERT])
def test_inspect_by_repo_id_equals_the_snapshot_folder(hub: Hub, repo: str) -> None:
    by_id, by_path = nb_json("inspect", repo), nb_json("inspect", hub.main[repo])
    same_report(by_id, by_path, repo, hub.main[repo])
    assert by_id["hub"] == {"repo_id": repo, "commit": hub.main[repo].name}
    assert by_id["sharded"] == (repo == LLAMA)


@pytest.mark.parametrize("repo", [GPT2, LLAMA, BERT])
def test_probe_bias_by_repo_id_equals_the_snapshot_folder(hub: Hub, repo: str) -> None:
    same_report(nb_json("probe-bias", repo), nb_json("probe-bias", hub.main[repo]), repo, hub.main[repo])


@pytest.mark.parametrize("rev", ["dev", "v1.0", "COMMIT"])
def test_revision_by_branch_tag_and_commit(hub: Hub, rev: str) -> None:
    rev = hub.dev_commit if rev == "COMMIT" else rev
    by_rev = nb_json("probe-bias", f"{GPT2}@{rev}")
    same_report(by_rev, nb_json("probe-bias", hub.dev), f"{GPT2}@{rev}", hub.dev)
    assert by_rev != nb_json("probe-bias", GPT2)  # another commit, other weights
    assert nb_json("inspect", f"{GPT2}@{rev}")["hub"]["commit"] == hub.dev_commit


def _tensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for file in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(file)))
    return out


def _metadata(folder: Path) -> dict[str, str]:
    from nbcli.checkpoint.format import read_header

    merged: dict[str, str] = {}
    for file in sorted(folder.glob("*.safetensors")):
        merged.update(read_header(file).metadata)
    merged.pop("nb.provenance", None)  # holds the time of the run
    return merged


@pytest.mark.parametrize(("repo", "operation"), [(GPT2, ["--scale-ln-bias", "0.5"]),
                                                 (LLAMA, ["--standardise-embeddings", "xavier"])])
def test_patch_checkpoint_by_repo_id_equals_the_snapshot_folder(hub: Hub, tmp_path: Path, repo: str,
                                                                operation: list[str]) -> None:
    nb("patch-checkpoint", repo, "-o", tmp_path / "by-id", *operation)
    nb("patch-checkpoint", hub.main[repo], "-o", tmp_path / "by-path", *operation)
    a, b = _tensors(tmp_path / "by-id"), _tensors(tmp_path / "by-path")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert _metadata(tmp_path / "by-id") == _metadata(tmp_path / "by-path")
    names = sorted(p.name for p in (tmp_path / "by-id").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "by-path").iterdir())
    for name in names:
        if name.endswith(".index.json"):  # its metadata holds nb.provenance, with the time of the run
            a_index, b_index = (json.loads((tmp_path / d / name).read_text()) for d in ("by-id", "by-path"))
            for index in (a_index, b_index):
                index["metadata"].pop("nb.provenance")
            assert a_index == b_index
        elif not name.endswith(".safetensors"):
            assert (tmp_path / "by-id" / name).read_bytes() == (tmp_path / "by-path" / name).read_bytes(), name
    hub_inputs = json.loads(_metadata(tmp_path / "by-id")["nb.hub_inputs"])
    assert {v["repo_id"] for v in hub_inputs.values()} == {repo}
    assert {v["commit"] for v in hub_inputs.values()} == {hub.main[repo].name}
    assert not any(p.is_symlink() for p in (tmp_path / "by-id").iterdir())  # real files, not links into the cache


def test_match_source_by_repo_id(hub: Hub, tmp_path: Path) -> None:
    tensor = "bert.embeddings.word_embeddings.weight"
    nb("patch-checkpoint", GPT2, "-o", tmp_path / "a", "--standardise-embeddings", f"match:{BERT}:{tensor}")
    file = next(hub.main[BERT].glob("*.safetensors"))
    nb("patch-checkpoint", GPT2, "-o", tmp_path / "b", "--standardise-embeddings", f"match:{file}:{tensor}")
    a, b = _tensors(tmp_path / "a"), _tensors(tmp_path / "b")
    assert all(torch.equal(a[k], b[k]) for k in a)
    hub_inputs = json.loads(_metadata(tmp_path / "a")["nb.hub_inputs"])
    assert {v["repo_id"] for v in hub_inputs.values()} == {GPT2, BERT}


@pytest.mark.parametrize("repo", [GPT2, LLAMA, BERT])
def test_count_unigrams_with_a_repo_tokenizer(hub: Hub, tmp_path: Path, repo: str) -> None:
    from nbcli.counts import read_counts

    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat\nthe end of the story\n" * 5)
    nb("count-unigrams", corpus, "-t", repo, "-o", tmp_path / "a.safetensors")
    nb("count-unigrams", corpus, "-t", hub.main[repo], "-o", tmp_path / "b.safetensors")
    a, b = read_counts(tmp_path / "a.safetensors"), read_counts(tmp_path / "b.safetensors")
    assert (a.counts == b.counts).all() and a.tokenizer_sha256 == b.tokenizer_sha256
    assert json.loads(a.metadata["nb.tokenizer_hub"]) == {"repo_id": repo, "commit": hub.main[repo].name}


def test_eval_by_repo_id_uses_the_models_tokenizer(hub: Hub, tmp_path: Path) -> None:
    corpus = tmp_path / "held.txt"
    corpus.write_text("the cat sat on the mat\nthe end of the story\n")
    by_id = nb("eval", GPT2, "--corpus", corpus, "--device", "cpu", "--json")
    assert f"tokenizer: {hub.main[GPT2] / 'tokenizer.json'}" in by_id.stderr
    by_path = nb("eval", hub.main[GPT2], "--corpus", corpus, "-t", hub.main[GPT2] / "tokenizer.json",
                 "--device", "cpu", "--json")
    a, b = json.loads(by_id.stdout), json.loads(by_path.stdout)
    for report in (a, b):
        report.pop("created")
    same_report(a, b, GPT2, hub.main[GPT2])
    assert {r["repo_id"] for r in a["hub"].values()} == {GPT2}


def test_eval_without_a_tokenizer_anywhere_says_so(hub: Hub, tmp_path: Path) -> None:
    folder = tmp_path / "bare"
    shutil.copytree(hub.main[GPT2], folder, ignore=shutil.ignore_patterns("tokenizer.json"))
    corpus = tmp_path / "held.txt"
    corpus.write_text("the cat\n")
    result = nb("eval", folder, "--corpus", corpus, "--device", "cpu", ok=False)
    assert result.exit_code == 1 and "pass -t" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_transplant_sources_by_repo_id(hub: Hub, tmp_path: Path) -> None:
    args = ("--target-tokenizer", BERT, "--missing", "mean")
    nb("transplant-embeddings", GPT2, "--source-tokenizer", GPT2, *args, "-o", tmp_path / "a.safetensors")
    nb("transplant-embeddings", hub.main[GPT2], "--source-tokenizer", hub.main[GPT2] / "tokenizer.json",
       "--target-tokenizer", hub.main[BERT] / "tokenizer.json", "--missing", "mean", "-o", tmp_path / "b.safetensors")
    a, b = _tensors_file(tmp_path / "a.safetensors"), _tensors_file(tmp_path / "b.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    from nbcli.checkpoint.format import read_header

    hub_inputs = json.loads(read_header(tmp_path / "a.safetensors").metadata["nb.provenance"])["hub"]
    assert {v["repo_id"] for v in hub_inputs.values()} == {GPT2, BERT}


def _tensors_file(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path))


def test_online_mode_reads_the_cache_first(hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without HF_HUB_OFFLINE a cached repo opens with no network at all (unlike a hub-first listing)."""
    monkeypatch.delenv("HF_HUB_OFFLINE")
    assert nb_json("inspect", GPT2)["hub"]["commit"] == hub.main[GPT2].name


def test_a_local_folder_wins_and_the_output_says_so(hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(hub.main[LLAMA], tmp_path / GPT2)  # ./org/gpt2-tiny holds the Llama model
    monkeypatch.chdir(tmp_path)
    result = nb("inspect", GPT2, "--json")
    assert json.loads(result.stdout)["architecture"] == "llama"
    assert result.stderr.count(f"using the local folder ./{GPT2}, not the Hub repo") == 1
    for explicit in (f"./{GPT2}", f"{GPT2}/"):  # docs/hub.md: `./name` (or a folder's slash) is a path, no note
        result = nb("inspect", explicit, "--json")
        assert json.loads(result.stdout)["architecture"] == "llama"
        assert "using the local folder" not in result.stderr, explicit
    real = run_nb("inspect", f"./{GPT2}", "--json", cwd=tmp_path)  # a real process, as a shell passes it
    assert real.returncode == 0 and b"using the local folder" not in real.stderr, real.stderr
    shutil.copy(hub.main[GPT2] / "tokenizer.json", tmp_path / GPT2 / "tokenizer.json")
    (tmp_path / "corpus.txt").write_text("the cat sat on the mat\n")
    for tokenizer, notes in ((GPT2, 1), (f"./{GPT2}", 0)):  # an option's value is kept as typed too
        result = nb("count-unigrams", "corpus.txt", "-t", tokenizer, "-o", f"counts{notes}.safetensors")
        assert result.stderr.count("using the local folder") == notes, (tokenizer, result.stderr)


def test_in_place_on_a_cached_snapshot_is_refused(hub: Hub) -> None:
    from tests.fuzz.harness import snapshot

    before = snapshot([hub.home])
    result = nb("patch-checkpoint", GPT2, "--in-place", "--scale-ln-bias", "0.5", ok=False)
    assert result.exit_code == 1 and "Hugging Face cache" in result.stderr
    assert snapshot([hub.home]) == before


def test_a_real_nb_process_by_repo_id(hub: Hub) -> None:
    env = {**os.environ, "HF_HOME": str(hub.home), "HF_HUB_OFFLINE": "1"}
    by_id = subprocess.run(["nb", "inspect", BERT, "--json"], capture_output=True, text=True, env=env, check=True)
    by_path = subprocess.run(["nb", "inspect", str(hub.main[BERT]), "--json"], capture_output=True, text=True, env=env,
                             check=True)
    same_report(json.loads(by_id.stdout), json.loads(by_path.stdout), BERT, hub.main[BERT])
    assert repo_folder(hub.home / "hub", BERT).is_dir()


def test_train_with_a_repo_tokenizer_records_it(hub: Hub, tmp_path: Path) -> None:
    from nbcli.checkpoint.format import read_header

    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat and the dog sat on the log\n" * 40)
    nb("train", "--corpus", corpus, "-t", GPT2, "--out", tmp_path / "run", "--steps", "1", "--seq-len", "16",
       "--batch-size", "2", "--eval-every", "1", "--eval-batches", "1", "--device", "cpu")
    step = next((tmp_path / "run").glob("step-*.safetensors"))
    meta = read_header(step).metadata
    assert meta["nb.tokenizer_sha256"] == __import__("hashlib").sha256(
        (hub.main[GPT2] / "tokenizer.json").read_bytes()).hexdigest()
    assert {v["repo_id"] for v in json.loads(meta["nb.hub_inputs"]).values()} == {GPT2}
