"""`nb patch-checkpoint` and `nb inspect` end to end: CliRunner and a real `nb` subprocess."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from nbcli.checkpoint import open_checkpoint
from nbcli.counts import UnigramCounts, log_unigram, write_counts
from nbcli.provenance import sha256_file
from tests.checkpoint.builders import (
    bert_tensors, gpt2_tensors, llama_tensors, nb_tensors, raw_safetensors, save, save_sharded,
)
from tests.cli.helpers import PYTHON, assert_one_line_error, invoke, run_nb

V = 40


def tensor_digests(path: Path) -> dict[str, str]:
    ckpt = open_checkpoint(path)
    out = {}
    for name in ckpt.names():
        info = ckpt.info(name)
        with open(info.file, "rb") as handle:
            handle.seek(info.start)
            out[name] = hashlib.sha256(handle.read(info.nbytes)).hexdigest()
    return out


@pytest.fixture()
def counts_file(tmp_path: Path) -> tuple[Path, np.ndarray]:
    counts = np.random.default_rng(0).integers(0, 500, size=V).astype(np.int64)
    path = tmp_path / "counts.safetensors"
    write_counts(path, UnigramCounts(counts=counts, metadata={"nb.format": "unigram-counts/1"}))
    return path, counts


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_bert_bias_and_ln_scale_untouched_bytes_and_provenance(tmp_path: Path, counts_file) -> None:  # noqa: ANN001
    counts_path, counts = counts_file
    src = save(tmp_path / "bert.safetensors", bert_tensors(dtype=torch.bfloat16), {"format": "pt"})
    out = tmp_path / "out.safetensors"
    result = invoke("patch-checkpoint", src, "-o", out, "--set-output-bias", counts_path,
                    "--scale-ln-bias", "0.5", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["architecture"] == "bert" and report["outputs"] == [str(out)]
    touched = {t["name"]: t for t in report["tensors"]}
    assert set(touched) == {"cls.predictions.bias", "cls.predictions.transform.LayerNorm.bias"}
    assert touched["cls.predictions.bias"]["before"]["norm"] > 0
    loaded = load_file(str(out))
    expected = torch.from_numpy(log_unigram(counts, 1.0)).to(torch.bfloat16)
    assert torch.equal(loaded["cls.predictions.bias"], expected)
    original = load_file(str(src))
    assert torch.equal(loaded["cls.predictions.transform.LayerNorm.bias"],
                       (original["cls.predictions.transform.LayerNorm.bias"].float() * 0.5).bfloat16())
    before, after = tensor_digests(src), tensor_digests(out)
    for name in before:
        if name not in touched:
            assert before[name] == after[name], name
    meta = open_checkpoint(out).metadata
    assert meta["format"] == "pt"
    prov = json.loads(meta["nb.provenance"])
    assert [op["op"] for op in prov["operations"]] == ["set-output-bias", "scale-ln-bias"]
    assert prov["inputs_sha256"] == {"checkpoint:bert.safetensors": sha256_file(src), "counts": sha256_file(counts_path)}
    assert prov["tool"].startswith("nb ")


def test_dry_run_writes_nothing_and_prints_table(tmp_path: Path) -> None:
    src = save(tmp_path / "g.safetensors", gpt2_tensors())
    result = invoke("patch-checkpoint", src, "-o", tmp_path / "o.safetensors", "--scale-ln-bias", "0", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "dry run" in result.stdout and "ln_f.bias" in result.stdout and "norm" in result.stdout
    assert listing(tmp_path) == ["g.safetensors"]


def test_in_place_requires_flag_and_keeps_file_valid(tmp_path: Path) -> None:
    tensors, meta = nb_tensors()
    src = save(tmp_path / "m.safetensors", tensors, meta)
    before = src.read_bytes()
    result = invoke("patch-checkpoint", src, "-o", src, "--scale-ln-bias", "0.5")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "--in-place")
    assert src.read_bytes() == before
    result = invoke("patch-checkpoint", src, "--in-place", "--scale-ln-bias", "0.5")
    assert result.exit_code == 0, result.output
    assert torch.equal(load_file(str(src))["ln_f.bias"], tensors["ln_f.bias"] * 0.5)
    assert listing(tmp_path) == ["m.safetensors"]
    prov = json.loads(open_checkpoint(src).metadata["nb.provenance"])
    assert prov["inputs_sha256"]["checkpoint:m.safetensors"] == hashlib.sha256(before).hexdigest()


def test_patching_twice_chains_provenance(tmp_path: Path) -> None:
    src = save(tmp_path / "g.safetensors", gpt2_tensors())
    assert invoke("patch-checkpoint", src, "-o", tmp_path / "a.safetensors", "--scale-ln-bias", "0.5").exit_code == 0
    assert invoke("patch-checkpoint", tmp_path / "a.safetensors", "-o", tmp_path / "b.safetensors",
                  "--remove-frequency-direction").exit_code == 0
    prov = json.loads(open_checkpoint(tmp_path / "b.safetensors").metadata["nb.provenance"])
    assert prov["operations"][0]["op"] == "remove-frequency-direction"
    assert prov["previous"]["operations"][0]["op"] == "scale-ln-bias"


def test_repeated_patch_takes_input_hash_from_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep over LAMBDA hashes the checkpoint once; the provenance says which digests came from
    the cache, and they are the file's sha256; a changed input is hashed again."""
    monkeypatch.setenv("NB_HASH_CACHE", "1")
    src = save(tmp_path / "g.safetensors", gpt2_tensors())
    truth = sha256_file(src)
    provs = []
    for i, lam in enumerate(("0.5", "0.25")):
        assert run_nb("patch-checkpoint", src, "-o", tmp_path / f"o{i}.safetensors", "--scale-ln-bias", lam).returncode == 0
        provs.append(json.loads(open_checkpoint(tmp_path / f"o{i}.safetensors").metadata["nb.provenance"]))
    assert [p["inputs_sha256"]["checkpoint:g.safetensors"] for p in provs] == [truth, truth]
    assert "inputs_sha256_from_cache" not in provs[0]
    assert provs[1]["inputs_sha256_from_cache"] == ["checkpoint:g.safetensors"]
    save(src, {name: tensor + 1 for name, tensor in gpt2_tensors().items()})  # same size, other bytes
    assert invoke("patch-checkpoint", src, "-o", tmp_path / "o2.safetensors", "--scale-ln-bias", "2").exit_code == 0
    prov = json.loads(open_checkpoint(tmp_path / "o2.safetensors").metadata["nb.provenance"])
    assert prov["inputs_sha256"]["checkpoint:g.safetensors"] == sha256_file(src) != truth
    assert "inputs_sha256_from_cache" not in prov


def test_gpt2_created_bias_rescale_untie(tmp_path: Path, counts_file) -> None:  # noqa: ANN001
    counts_path, counts = counts_file
    src = save(tmp_path / "g.safetensors", gpt2_tensors("transformer."))
    out = tmp_path / "o.safetensors"
    result = invoke("patch-checkpoint", src, "-o", out, "--set-output-bias", counts_path,
                    "--bias-name", "lm_head.bias", "--rescale-w", "fro", "--untie")
    assert result.exit_code == 0, result.output
    assert "transformers" in result.stderr  # the loader note for a created bias
    loaded = load_file(str(out))
    bias = loaded["lm_head.bias"].double().numpy()
    assert np.allclose(bias, log_unigram(counts, 1.0), atol=1e-6)
    assert np.linalg.norm(loaded["lm_head.weight"].double().numpy()) == pytest.approx(np.linalg.norm(bias), rel=1e-5)
    assert torch.equal(loaded["transformer.wte.weight"], load_file(str(src))["transformer.wte.weight"])


def test_padded_vocabulary_counts(tmp_path: Path) -> None:
    write_counts(tmp_path / "c.safetensors", UnigramCounts(counts=np.full(30, 10, dtype=np.int64)))
    tensors, meta = nb_tensors()
    src = save(tmp_path / "m.safetensors", tensors, meta)
    out = tmp_path / "o.safetensors"
    refused = invoke("patch-checkpoint", src, "-o", out, "--set-output-bias", tmp_path / "c.safetensors")
    assert refused.exit_code == 1 and "not vocabulary padding" in refused.stderr  # 30 of 40 rows: not padding
    # --allow-vocab-mismatch relaxes the tokenizer identity only, not the rows
    relaxed = invoke("patch-checkpoint", src, "-o", out, "--set-output-bias", tmp_path / "c.safetensors",
                     "--allow-vocab-mismatch")
    assert relaxed.exit_code == 1 and "not vocabulary padding" in relaxed.stderr
    assert not out.exists()
    same = {"nb.tokenizer_sha256": "c" * 64, "nb.tokenizer_fingerprint": "nbtok1:" + "c" * 64}
    write_counts(tmp_path / "c.safetensors", UnigramCounts(counts=np.full(30, 10, dtype=np.int64), metadata=same))
    src = save(tmp_path / "m.safetensors", tensors, {**meta, **same})  # the same tokenizer: rows past it are padding
    assert invoke("patch-checkpoint", src, "-o", out, "--set-output-bias", tmp_path / "c.safetensors",
                  "--smoothing", "add-k:0.5").exit_code == 0
    bias = load_file(str(out))["head.bias"].double().numpy()
    assert np.allclose(bias[30:], math.log(0.5 / (300 + 0.5 * V)), atol=1e-6)
    assert np.exp(bias).sum() == pytest.approx(1.0, abs=1e-5)


def test_sharded_in_sharded_out(tmp_path: Path) -> None:
    tensors = bert_tensors(dtype=torch.float16)
    src = save_sharded(tmp_path / "in", tensors)
    result = invoke("patch-checkpoint", src / "model.safetensors.index.json", "-o", tmp_path / "out",
                    "--standardise-embeddings", "xavier", "--json")
    assert result.exit_code == 0, result.output
    assert listing(tmp_path / "out") == listing(src)
    out = open_checkpoint(tmp_path / "out")
    emb = out.get_float("bert.embeddings.word_embeddings.weight").double()
    assert float(emb.mean()) == pytest.approx(0, abs=2e-3)
    assert float(emb.std()) == pytest.approx(math.sqrt(2 / (V + 8)), rel=5e-3)
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    assert "nb.provenance" in index["metadata"] and index["metadata"]["total_size"] == out.total_bytes
    src_ckpt = open_checkpoint(src)
    for name in tensors:
        assert out.shard_of(name).name == src_ckpt.shard_of(name).name


def test_standardise_match_and_shuffle(tmp_path: Path) -> None:
    ref = save(tmp_path / "ref.safetensors", {"emb": torch.randn(100, 8) * 0.05 + 0.3})
    tensors, meta = nb_tensors(tied=False)
    src = save(tmp_path / "m.safetensors", tensors, meta)
    out = tmp_path / "o.safetensors"
    result = invoke("patch-checkpoint", src, "-o", out, "--standardise-embeddings", f"match:{ref}:emb",
                    "--shuffle-embeddings", "--seed", "4", "--json")
    assert result.exit_code == 0, result.output
    emb = load_file(str(out))["tok_emb.weight"].double()
    refx = load_file(str(ref))["emb"].double()
    assert float(emb.mean()) == pytest.approx(float(refx.mean()), abs=1e-5)
    assert float(emb.std()) == pytest.approx(float(refx.std()), rel=1e-4)
    assert "match" in json.loads(open_checkpoint(out).metadata["nb.provenance"])["inputs_sha256"]


def test_inspect_table_and_json(tmp_path: Path) -> None:
    src = save_sharded(tmp_path / "s", llama_tensors(), shards=2)
    result = invoke("inspect", src)
    assert result.exit_code == 0, result.output
    assert "llama" in result.stdout and "model.norm.weight" in result.stdout and "absent" in result.stdout
    report = json.loads(invoke("inspect", src, "--json").stdout)
    assert report["sharded"] and report["roles"]["output_weight"] == "lm_head.weight"
    assert {t["name"] for t in report["tensors"]} == set(llama_tensors())
    odd = save(tmp_path / "odd.safetensors", {"x": torch.zeros(2)})
    report = json.loads(invoke("inspect", odd, "--json").stdout)
    assert report["architecture"] is None and "cannot tell" in report["architecture_error"]


# --- bad input: one line, exit 1, no OUT --------------------------------------------------------

def broken_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    good = save(tmp_path / "good.safetensors", gpt2_tensors())
    raw = good.read_bytes()
    files = {}
    p = tmp_path / "text.safetensors"
    p.write_text("this is plain text, not a checkpoint\n")
    files["not safetensors"] = (p, "not a safetensors file")
    p = tmp_path / "trunc.safetensors"
    p.write_bytes(raw[:-100])
    files["truncated"] = (p, "truncated")
    p = tmp_path / "long.safetensors"
    p.write_bytes((10**9).to_bytes(8, "little") + raw[8:])
    files["header too long"] = (p, "larger than the file")
    files["not json"] = (raw_safetensors(tmp_path / "nj.safetensors", b"{oops" + b" " * 3, bytes(8)), "not JSON")
    files["not object"] = (raw_safetensors(tmp_path / "no.safetensors", [1], bytes(8)), "expected an object")
    files["overlap"] = (raw_safetensors(tmp_path / "ov.safetensors", {
        "ln_f.bias": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "wte.weight": {"dtype": "F32", "shape": [2, 1], "data_offsets": [4, 12]}}, bytes(12)), "overlapping")
    files["out of range"] = (raw_safetensors(tmp_path / "oor.safetensors", {
        "ln_f.bias": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, bytes(8)), "out of range")
    files["unknown dtype"] = (raw_safetensors(tmp_path / "dt.safetensors", {
        "ln_f.bias": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}}, bytes(8)), "unknown dtype 'Q4'")
    p = tmp_path / "pytorch_model.bin"
    p.write_bytes(b"\x80\x02pickle")
    files["pickle"] = (p, "convert it to safetensors")
    return files


@pytest.mark.parametrize("case", ["not safetensors", "truncated", "header too long", "not json", "not object",
                                  "overlap", "out of range", "unknown dtype", "pickle"])
def test_bad_checkpoints(tmp_path: Path, case: str) -> None:
    path, message = broken_files(tmp_path)[case]
    out = tmp_path / "out" / "o.safetensors"
    out.parent.mkdir()
    result = invoke("patch-checkpoint", path, "-o", out, "--scale-ln-bias", "0.5")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, str(path), message)
    assert listing(out.parent) == []
    result = invoke("inspect", path)
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, message)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "abc", "1e999"])
def test_lambda_must_be_finite(tmp_path: Path, value: str) -> None:
    src = save(tmp_path / "g.safetensors", gpt2_tensors())
    result = invoke("patch-checkpoint", src, "-o", tmp_path / "o.safetensors", f"--scale-ln-bias={value}")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "LAMBDA must be a finite number")
    assert listing(tmp_path) == ["g.safetensors"]


def test_nonfinite_tensor_error_or_allowed(tmp_path: Path) -> None:
    tensors = gpt2_tensors()
    tensors["ln_f.bias"][0] = math.inf
    src = save(tmp_path / "g.safetensors", tensors)
    out = tmp_path / "o.safetensors"
    result = invoke("patch-checkpoint", src, "-o", out, "--scale-ln-bias", "0.5")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "'ln_f.bias'", "NaN or Inf", "--allow-nonfinite")
    assert not out.exists()
    result = invoke("patch-checkpoint", src, "-o", out, "--scale-ln-bias", "0.5", "--allow-nonfinite")
    assert result.exit_code == 0 and out.exists()


def test_counts_of_another_format_and_vocab_mismatch(tmp_path: Path) -> None:
    tensors, meta = nb_tensors()
    src = save(tmp_path / "m.safetensors", tensors, meta)
    foreign = save(tmp_path / "foreign.safetensors", {"counts": torch.ones(V, dtype=torch.int64)})
    result = invoke("patch-checkpoint", src, "-o", tmp_path / "o.safetensors", "--set-output-bias", foreign)
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "foreign.safetensors", "nb.format")
    write_counts(tmp_path / "big.safetensors", UnigramCounts(counts=np.ones(V + 1, dtype=np.int64)))
    result = invoke("patch-checkpoint", src, "-o", tmp_path / "o.safetensors", "--set-output-bias",
                    tmp_path / "big.safetensors")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, f"{V + 1} counts", f"{V} vocabulary rows")
    assert not (tmp_path / "o.safetensors").exists()


def test_tokenizer_hash_mismatch(tmp_path: Path) -> None:
    tensors, meta = nb_tensors()
    src = save(tmp_path / "m.safetensors", tensors, {**meta, "nb.tokenizer_sha256": "a" * 64})
    write_counts(tmp_path / "c.safetensors", UnigramCounts(
        counts=np.ones(V, dtype=np.int64), metadata={"nb.tokenizer_sha256": "b" * 64}))
    result = invoke("patch-checkpoint", src, "-o", tmp_path / "o.safetensors", "--set-output-bias",
                    tmp_path / "c.safetensors")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "c.safetensors", "another tokenizer", "--allow-vocab-mismatch")
    result = invoke("patch-checkpoint", src, "-o", tmp_path / "o.safetensors", "--set-output-bias",
                    tmp_path / "c.safetensors", "--allow-vocab-mismatch")
    assert result.exit_code == 0 and "another tokenizer" in result.stderr


def test_missing_role_and_missing_bias_name(tmp_path: Path, counts_file) -> None:  # noqa: ANN001
    src = save(tmp_path / "l.safetensors", llama_tensors())
    result = invoke("patch-checkpoint", src, "-o", tmp_path / "o.safetensors", "--scale-ln-bias", "0.5")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "llama has no final_ln_bias", "RMSNorm", "no bias")
    assert "--map" not in result.stderr and "model.norm.weight" not in result.stderr  # no weight suggested
    result = invoke("patch-checkpoint", src, "-o", tmp_path / "o.safetensors", "--set-output-bias", counts_file[0])
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "--bias-name")


def test_unwritable_output_directory(tmp_path: Path) -> None:
    src = save(tmp_path / "g.safetensors", gpt2_tensors())
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as root, which permission bits do not stop; test_unwritable_output_directory_simulated covers it")
        result = invoke("patch-checkpoint", src, "-o", locked / "o.safetensors", "--scale-ln-bias", "0.5")
        assert result.exit_code == 1
        assert_one_line_error(result.stderr, "not writable")
    finally:
        locked.chmod(0o700)


def test_unwritable_output_directory_simulated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same refusal where the test runs as root (permission bits do not stop root): os.access says no."""
    src = save(tmp_path / "g.safetensors", gpt2_tensors())
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == locked else real_access(p, mode))
    result = invoke("patch-checkpoint", src, "-o", locked / "o.safetensors", "--scale-ln-bias", "0.5")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "not writable")
    assert listing(locked) == []


def test_sharded_in_place(tmp_path: Path) -> None:
    tensors = gpt2_tensors()
    src = save_sharded(tmp_path / "in", tensors)
    names_before = listing(src)
    result = invoke("patch-checkpoint", src, "-o", src, "--scale-ln-bias", "2")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "--in-place")
    stats_before = {name: (src / name).stat() for name in names_before}
    holder = open_checkpoint(src).shard_of("ln_f.bias").name
    assert invoke("patch-checkpoint", src, "--in-place", "--scale-ln-bias", "2").exit_code == 0
    with open_checkpoint(src) as patched:
        assert torch.equal(patched.get("ln_f.bias"), tensors["ln_f.bias"] * 2)
        renamed = patched.shard_of("ln_f.bias").name
        assert "nb.provenance" in patched.metadata  # from the index
    # only the shard holding the changed tensor is rewritten, under a fresh name the index names;
    # the replaced one is gone, every other shard is the same file (inode) with the same bytes
    assert re.fullmatch(re.escape(holder.removesuffix(".safetensors")) + r"\.nb-[0-9a-f]{8}\.safetensors", renamed)
    assert listing(src) == sorted([n for n in names_before if n != holder] + [renamed])
    for name in names_before:
        if name not in (holder, "model.safetensors.index.json"):
            after = (src / name).stat()
            assert (after.st_ino, after.st_mtime_ns, after.st_size) == (
                stats_before[name].st_ino, stats_before[name].st_mtime_ns, stats_before[name].st_size)
    # a second edit of the same shard replaces the fresh name by another one, not a longer one
    assert invoke("patch-checkpoint", src, "--in-place", "--scale-ln-bias", "0.5").exit_code == 0
    again = open_checkpoint(src).shard_of("ln_f.bias").name
    assert again != renamed and len(again) == len(renamed) and not (src / renamed).exists()
    assert torch.equal(open_checkpoint(src).get("ln_f.bias"), tensors["ln_f.bias"])


def test_missing_output_directory(tmp_path: Path) -> None:
    """The one output rule: a file output's missing folders are made; a file in the way is one line."""
    src = save(tmp_path / "g.safetensors", gpt2_tensors())
    result = invoke("patch-checkpoint", src, "-o", tmp_path / "nope" / "o.safetensors", "--scale-ln-bias", "0.5")
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "nope" / "o.safetensors").is_file()
    result = invoke("patch-checkpoint", src, "-o", src / "o.safetensors", "--scale-ln-bias", "0.5")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "is not a directory")


def test_no_operation_is_an_error(tmp_path: Path) -> None:
    src = save(tmp_path / "g.safetensors", gpt2_tensors())
    result = invoke("patch-checkpoint", src, "-o", tmp_path / "o.safetensors")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "no operation")


@pytest.mark.slow
def test_full_disk_leaves_input_untouched_subprocess(tmp_path: Path) -> None:
    """RLIMIT_FSIZE makes writes past 20 kB fail with EFBIG, as a full disk would (in place, too)."""
    tensors = {"tok_emb.weight": torch.randn(400, 16), "ln_f.bias": torch.randn(16)}
    src = save(tmp_path / "m.safetensors", tensors, nb_tensors()[1])
    before = src.read_bytes()
    script = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))\n"
        "from nbcli.cli import main\n"
        "sys.argv = ['nb'] + sys.argv[1:]\n"
        "main()\n")
    import subprocess
    for args in (["-o", str(tmp_path / "o.safetensors")], ["--in-place"]):
        proc = subprocess.run([PYTHON, "-c", script, "patch-checkpoint", str(src), "--scale-ln-bias", "0.5", *args],
                              capture_output=True, timeout=120)
        assert proc.returncode == 1, proc.stderr
        assert_one_line_error(proc.stderr.decode(), "no space left")
        assert listing(tmp_path) == ["m.safetensors"]
        assert src.read_bytes() == before


def test_subprocess_end_to_end_json(tmp_path: Path, counts_file) -> None:  # noqa: ANN001
    tensors, meta = nb_tensors(objective="mlm")
    src = save(tmp_path / "m.safetensors", tensors, meta)
    out = tmp_path / "o.safetensors"
    proc = run_nb("patch-checkpoint", src, "-o", out, "--set-output-bias", counts_file[0], "--rescale-w", "spectral",
                  "--scale-ln-bias", "0.3", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    names = {t["name"] for t in report["tensors"]}
    assert names == {"head.bias", "tok_emb.weight", "mlm.ln.bias"}  # MLM: final LN is mlm.ln
    assert proc.stderr.decode().count("tied") == 1
    proc = run_nb("inspect", out, "--json")
    assert json.loads(proc.stdout)["architecture"] == "nb"


# --- loading with transformers -------------------------------------------------------------------

def _transformers():  # noqa: ANN202
    return pytest.importorskip("transformers", reason="transformers is not installed (pip install nbcli[test])")


def test_patched_gpt2_loads_in_transformers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    transformers = _transformers()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = transformers.GPT2Config(vocab_size=V, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    model = transformers.GPT2LMHeadModel(config)
    model.save_pretrained(tmp_path / "gpt2", safe_serialization=True)
    src = tmp_path / "gpt2" / "model.safetensors"
    out_dir = tmp_path / "patched"
    out_dir.mkdir()
    shutil.copy(tmp_path / "gpt2" / "config.json", out_dir / "config.json")
    result = invoke("patch-checkpoint", src, "-o", out_dir / "model.safetensors", "--scale-ln-bias", "0.5")
    assert result.exit_code == 0, result.output
    patched = transformers.GPT2LMHeadModel.from_pretrained(out_dir)
    assert torch.allclose(patched.transformer.ln_f.bias, model.transformer.ln_f.bias * 0.5)
    assert torch.equal(patched.transformer.wte.weight, model.transformer.wte.weight)


def test_patched_bert_loads_in_transformers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counts_file) -> None:  # noqa: ANN001
    transformers = _transformers()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = transformers.BertConfig(vocab_size=V, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=16)
    model = transformers.BertForMaskedLM(config)
    model.save_pretrained(tmp_path / "bert", safe_serialization=True)
    out_dir = tmp_path / "patched"
    out_dir.mkdir()
    shutil.copy(tmp_path / "bert" / "config.json", out_dir / "config.json")
    result = invoke("patch-checkpoint", tmp_path / "bert" / "model.safetensors", "-o", out_dir / "model.safetensors",
                    "--set-output-bias", counts_file[0])
    assert result.exit_code == 0, result.output
    patched = transformers.BertForMaskedLM.from_pretrained(out_dir)
    expected = torch.from_numpy(log_unigram(counts_file[1], 1.0)).float()
    assert torch.allclose(patched.cls.predictions.decoder.bias, expected, atol=1e-6)


def test_no_hash_inputs_records_size_and_mtime(tmp_path: Path, counts_file) -> None:  # noqa: ANN001
    tensors, meta = nb_tensors()
    src = save(tmp_path / "m.safetensors", tensors, meta)
    out = tmp_path / "o.safetensors"
    result = invoke("patch-checkpoint", src, "-o", out, "--set-output-bias", counts_file[0], "--no-hash-inputs")
    assert result.exit_code == 0, result.output
    prov = json.loads(open_checkpoint(out).metadata["nb.provenance"])
    assert prov["inputs_sha256"] == {"counts": sha256_file(counts_file[0])}
    assert prov["inputs_not_hashed"]["checkpoint:m.safetensors"]["bytes"] == src.stat().st_size


def test_map_and_arch_for_unknown_names(tmp_path: Path) -> None:
    tensors = {"enc.emb": torch.randn(V, 8), "dec.final_norm.bias": torch.randn(8), "dec.final_norm.weight": torch.ones(8)}
    src = save(tmp_path / "x.safetensors", tensors)
    out = tmp_path / "o.safetensors"
    result = invoke("patch-checkpoint", src, "-o", out, "--scale-ln-bias", "0.5")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "cannot tell the architecture", "--arch")
    result = invoke("patch-checkpoint", src, "-o", out, "--arch", "gpt2", "--map", "final_ln_bias=dec.final_norm.bias",
                    "--scale-ln-bias", "0.5", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["tensors"][0]["name"] == "dec.final_norm.bias"
    assert torch.equal(load_file(str(out))["dec.final_norm.bias"], tensors["dec.final_norm.bias"] * 0.5)
    result = invoke("patch-checkpoint", src, "-o", out, "--arch", "gpt2", "--map", "final_ln_bias=nope",
                    "--scale-ln-bias", "0.5")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "no tensor named 'nope'")


def test_standardise_provenance_records_the_target_used(tmp_path: Path) -> None:
    other = save(tmp_path / "other.safetensors", {"emb": torch.randn(50, 8, generator=torch.Generator().manual_seed(4)) * 3 + 1})
    src = save(tmp_path / "g.safetensors", gpt2_tensors())
    for spec, out in ((f"match:{other}:emb", tmp_path / "m.safetensors"), ("xavier", tmp_path / "x.safetensors")):
        assert invoke("patch-checkpoint", src, "-o", out, "--standardise-embeddings", spec).exit_code == 0
        op = json.loads(open_checkpoint(out).metadata["nb.provenance"])["operations"][0]
        emb = open_checkpoint(out).get_float("wte.weight").double()
        assert op["mean"] == pytest.approx(float(emb.mean()), abs=1e-5)
        assert op["std"] == pytest.approx(float(emb.std()), rel=1e-5)
    source = load_file(str(other))["emb"].double()
    match = json.loads(open_checkpoint(tmp_path / "m.safetensors").metadata["nb.provenance"])["operations"][0]
    assert match["mean"] == pytest.approx(float(source.mean())) and match["mean"] != 0.0
    assert match["std"] == pytest.approx(float(source.std()))
    xavier = json.loads(open_checkpoint(tmp_path / "x.safetensors").metadata["nb.provenance"])["operations"][0]
    assert xavier["mean"] == 0.0 and xavier["std"] == pytest.approx(math.sqrt(2 / (V + 8)))


@pytest.mark.parametrize(("option", "stored"), [((), "F32"), (("--new-tensor-dtype", "bfloat16"), "BF16")])
def test_created_bias_dtype_in_a_bf16_checkpoint(tmp_path: Path, counts_file, option, stored) -> None:  # noqa: ANN001
    src = save(tmp_path / "l.safetensors", llama_tensors(dtype=torch.bfloat16))
    out = tmp_path / "o.safetensors"
    result = invoke("patch-checkpoint", src, "-o", out, "--set-output-bias", counts_file[0],
                    "--bias-name", "lm_head.bias", *option)
    assert result.exit_code == 0, result.output
    ckpt = open_checkpoint(out)
    assert ckpt.dtype("lm_head.bias") == stored and ckpt.dtype("lm_head.weight") == "BF16"
    expected = torch.from_numpy(log_unigram(counts_file[1], 1.0))
    got = ckpt.get_float("lm_head.bias")
    assert torch.equal(got, expected.float() if stored == "F32" else expected.bfloat16().float())


def test_model_folder_tokenizer_is_compared(tmp_path: Path, hf_bytelevel_json: Path, hf_bert_json: Path) -> None:
    from nbcli.tokenizers import load_tokenizer
    from nbcli.tokenizers.identity import identity_metadata

    folder = tmp_path / "gpt2"
    folder.mkdir()
    save(folder / "model.safetensors", gpt2_tensors())
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "vocab_size": V}))
    (folder / "tokenizer.json").write_bytes(hf_bytelevel_json.read_bytes())
    counts = np.arange(V, dtype=np.int64)
    for name, tok in (("ours", hf_bytelevel_json), ("theirs", hf_bert_json)):
        write_counts(tmp_path / f"{name}.safetensors", UnigramCounts(
            counts=counts, metadata={"nb.format": "unigram-counts/1", **identity_metadata(load_tokenizer(tok))}))
    ok = invoke("patch-checkpoint", folder, "-o", tmp_path / "a", "--set-output-bias", tmp_path / "ours.safetensors",
                "--bias-name", "lm_head.bias")
    assert ok.exit_code == 0, ok.output
    for command in (("patch-checkpoint", folder, "-o", tmp_path / "b", "--set-output-bias",
                     tmp_path / "theirs.safetensors", "--bias-name", "lm_head.bias"),
                    ("probe-bias", folder, "-c", tmp_path / "theirs.safetensors")):
        refused = invoke(*command)
        assert refused.exit_code == 1
        assert_one_line_error(refused.stderr, "theirs.safetensors", "another tokenizer", "tokenizer.json")
        checked = invoke(*command, "--tokenizer", hf_bert_json)  # the tokenizer named on the command line wins
        assert checked.exit_code == 0, checked.output
    assert not (tmp_path / "b").exists() or (tmp_path / "b" / "model.safetensors").exists()


def test_custom_architecture_from_map_in_every_command(tmp_path: Path, counts_file) -> None:  # noqa: ANN001
    """A layout no table row matches: refused with look-alikes per role; --map alone defines
    architecture `custom` in inspect, patch-checkpoint and probe-bias."""
    tensors = {"net.tok.weight": torch.randn(V, 8), "net.out.weight": torch.randn(V, 8),
               "net.final_norm.weight": torch.ones(8), "net.final_norm.bias": torch.randn(8),
               "net.blocks.0.norm.bias": torch.randn(8)}
    src = save(tmp_path / "odd.safetensors", tensors)
    refused = invoke("patch-checkpoint", src, "-o", tmp_path / "o.safetensors", "--scale-ln-bias", "0.5")
    assert refused.exit_code == 1
    assert_one_line_error(refused.stderr, "cannot tell the architecture", "final_ln_bias: net.final_norm.bias",
                          "output_weight: net.out.weight")
    maps = ["--map", "output_weight=net.out.weight", "--map", "final_ln_bias=net.final_norm.bias"]
    report = json.loads(invoke("inspect", src, *maps, "--json").stdout)
    assert report["architecture"] == "custom" and report["roles"]["output_weight"] == "net.out.weight"
    result = invoke("patch-checkpoint", src, "-o", tmp_path / "o.safetensors", *maps, "--scale-ln-bias", "0.5",
                    "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["architecture"] == "custom"
    assert torch.equal(load_file(str(tmp_path / "o.safetensors"))["net.final_norm.bias"], tensors["net.final_norm.bias"] * 0.5)
    probe = invoke("probe-bias", src, *maps, "--json")
    assert probe.exit_code == 0, probe.output
    assert json.loads(probe.stdout)["architecture"] == "custom"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_zipfian_whiten_embeddings_matches_dense_numpy(tmp_path: Path, counts_file, dtype: torch.dtype) -> None:  # noqa: ANN001
    """--zipfian-whiten-embeddings (Yokoi et al. 2024) against a dense numpy computation of
    Sigma^(-1/2)(v - mu) with p the add-k unigram of the counts; other tensors byte-identical."""
    from scipy.linalg import sqrtm

    counts_path, counts = counts_file
    src = save(tmp_path / "gpt2.safetensors", gpt2_tensors(dtype=dtype), {"format": "pt"})
    out = tmp_path / "w.safetensors"
    result = invoke("patch-checkpoint", src, "-o", out, "--zipfian-whiten-embeddings", counts_path,
                    "--smoothing", "add-k:0.5", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [op["op"] for op in report["operations"]] == ["zipfian-whiten-embeddings"]
    assert any("tied" in w for w in report["warnings"])  # GPT-2's wte is also the output weight
    v = load_file(str(src))["wte.weight"].double().numpy()
    p = (counts + 0.5) / (counts.sum() + 0.5 * V)
    mu = p @ v
    expected = np.linalg.solve(np.real(sqrtm((v - mu).T @ np.diag(p) @ (v - mu))), (v - mu).T).T
    got = load_file(str(out))["wte.weight"]
    assert got.dtype == dtype
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    np.testing.assert_allclose(got.double().numpy(), expected, rtol=tol, atol=tol * np.abs(expected).max())
    before, after = tensor_digests(src), tensor_digests(out)
    assert {n for n in before if before[n] != after[n]} == {"wte.weight"}
    provenance = json.loads(open_checkpoint(out).metadata["nb.provenance"])
    assert provenance["operations"][0] == {"op": "zipfian-whiten-embeddings", "counts": str(counts_path),
                                           "smoothing": "add-k:0.5"}
    assert provenance["inputs_sha256"]["whiten-counts"] == hashlib.sha256(counts_path.read_bytes()).hexdigest()
    before_counts = counts_path.read_bytes()
    clash = invoke("patch-checkpoint", src, "-o", counts_path, "--zipfian-whiten-embeddings", counts_path)
    assert clash.exit_code == 1 and counts_path.read_bytes() == before_counts  # an output never overwrites an input
    assert_one_line_error(clash.stderr, str(counts_path))


def test_zipfian_whiten_bad_inputs_are_one_line_errors(tmp_path: Path, counts_file) -> None:  # noqa: ANN001
    counts_path, _ = counts_file
    tensors = gpt2_tensors()
    tensors["wte.weight"] = tensors["wte.weight"][:, :1].repeat(1, tensors["wte.weight"].shape[1])  # rank 1
    src = save(tmp_path / "g.safetensors", tensors, {"format": "pt"})
    result = invoke("patch-checkpoint", src, "-o", tmp_path / "o.safetensors", "--zipfian-whiten-embeddings", counts_path)
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "singular")
    assert not (tmp_path / "o.safetensors").exists()
    result = invoke("patch-checkpoint", src, "-o", tmp_path / "o.safetensors", "--zipfian-whiten-embeddings",
                    tmp_path / "missing.safetensors")
    assert result.exit_code != 0 and "Traceback" not in result.stderr
    assert not (tmp_path / "o.safetensors").exists()
