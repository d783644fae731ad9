"""`nb probe-bias` through CliRunner and a real `nb` process, on small checkpoints written here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file as save_numpy
from safetensors.torch import save_file
from scipy import stats

from nbcli import probes
from nbcli.counts import UnigramCounts, write_counts
from tests.cli.helpers import assert_one_line_error, invoke, run_nb

V, D = 400, 24


def planted(seed: int = 0, v: int = V, d: int = D) -> dict[str, torch.Tensor]:
    """Counts, b_LN, and W whose <b_LN, w_i> grows with log count (plus noise), output bias ~ log count."""
    rng = np.random.default_rng(seed)
    counts = rng.zipf(1.3, size=v).clip(max=10**6)
    counts[rng.choice(v, v // 10, replace=False)] = 0
    b_ln = rng.normal(size=d)
    unit = b_ln / np.linalg.norm(b_ln)
    w = rng.normal(size=(v, d)) * 0.3
    w += np.outer(np.log1p(counts) + 0.1 * rng.normal(size=v), unit)
    bias = np.log1p(counts) + rng.normal(size=v)
    return {"counts": torch.from_numpy(counts), "b_ln": torch.from_numpy(b_ln).float(),
            "w": torch.from_numpy(w).float(), "bias": torch.from_numpy(bias).float()}


def nb_layout(t: dict[str, torch.Tensor], dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    return {"tok_emb.weight": t["w"].to(dtype), "pos_emb.weight": torch.zeros(8, D, dtype=dtype),
            "ln_f.weight": torch.ones(D, dtype=dtype), "ln_f.bias": t["b_ln"].to(dtype),
            "head.bias": t["bias"].to(dtype)}


#: The tokenizer the planted checkpoint and its counts record (a fingerprint: as this nb writes them).
TOKENIZER = {"nb.tokenizer_sha256": "0" * 64, "nb.tokenizer_fingerprint": "nbtok1:" + "0" * 64}


def nb_metadata(tied: bool = True) -> dict[str, str]:
    return {"nb.format": "nb-model/1", **TOKENIZER, "nb.config": json.dumps(
        {"vocab_size": V, "d_model": D, "tie_embeddings": tied, "objective": "clm"})}


@pytest.fixture()
def t() -> dict[str, torch.Tensor]:
    return planted()


@pytest.fixture()
def counts_file(tmp_path: Path, t: dict[str, torch.Tensor]) -> Path:
    path = tmp_path / "counts.safetensors"
    write_counts(path, UnigramCounts(counts=t["counts"].numpy(), metadata=TOKENIZER))
    return path


def probe(*args: str | Path) -> dict:
    result = invoke("probe-bias", *args, "--json")
    assert result.exit_code == 0, result.stderr + result.stdout
    return json.loads(result.stdout)


def expected(t: dict[str, torch.Tensor], w: torch.Tensor | None = None, b_ln: torch.Tensor | None = None) -> dict:
    w = (t["w"] if w is None else w).float().numpy()
    b_ln = (t["b_ln"] if b_ln is None else b_ln).float().numpy()
    c = t["counts"].numpy()
    seen = c > 0
    scores = w.astype(np.float64) @ b_ln
    return {"spearman": stats.spearmanr(scores[seen], c[seen]).statistic,
            "mean_cosine": probes.mean_pairwise_cosine(w), "tokens": int(seen.sum())}


def test_nb_checkpoint_full_report(tmp_path: Path, t: dict, counts_file: Path) -> None:
    ckpt = tmp_path / "model.safetensors"
    save_file(nb_layout(t), str(ckpt), metadata=nb_metadata())
    report = probe(ckpt, "--counts", counts_file, "--bins", "6")
    ref = expected(t)
    fd = report["frequency_direction"]
    assert fd["spearman"] == pytest.approx(ref["spearman"], abs=1e-6) and fd["spearman"] > 0.95
    assert fd["tokens"] == ref["tokens"]
    assert fd["pearson_log"] > 0.95
    iso = report["isotropy"]
    assert iso["mean_cosine"] == pytest.approx(ref["mean_cosine"], rel=1e-6)
    assert iso["mean_cosine_without_bias_direction"] < iso["mean_cosine"]
    assert 0 < iso["partition_ratio"] < 1
    ob = report["output_bias"]
    assert ob["spearman"] > 0.5 and ob["kl_unigram_to_bias"] > 0 and ob["kl_bias_to_unigram"] > 0
    assert ob["norm"] == pytest.approx(float(t["bias"].norm()), rel=1e-5)
    assert len(report["frequency_bins"]) == 6
    assert report["warnings"] == []


def gpt2_layout(t: dict) -> dict[str, torch.Tensor]:
    return {"transformer.wte.weight": t["w"], "transformer.wpe.weight": torch.zeros(8, D),
            "transformer.ln_f.weight": torch.ones(D), "transformer.ln_f.bias": t["b_ln"],
            "transformer.h.0.ln_1.bias": torch.zeros(D)}


def test_gpt2_names_tied_head_and_no_output_bias(tmp_path: Path, t: dict, counts_file: Path) -> None:
    ckpt = tmp_path / "gpt2.safetensors"
    save_file(gpt2_layout(t), str(ckpt))
    report = probe(ckpt, "-c", counts_file, "--arch", "gpt2")
    assert report["frequency_direction"]["spearman"] == pytest.approx(expected(t)["spearman"], abs=1e-6)
    assert report["output_bias"]["present"] is False
    text = invoke("probe-bias", ckpt, "-c", counts_file, "--arch", "gpt2", "--no-partition")
    assert text.exit_code == 0, text.stderr
    assert "no output bias" in text.stdout and "Spearman" in text.stdout


def test_bert_names(tmp_path: Path, t: dict, counts_file: Path) -> None:
    ckpt = tmp_path / "bert.safetensors"
    save_file({"bert.embeddings.word_embeddings.weight": t["w"], "bert.embeddings.LayerNorm.bias": torch.zeros(D),
               "cls.predictions.transform.dense.weight": torch.eye(D),
               "cls.predictions.transform.LayerNorm.weight": torch.ones(D),
               "cls.predictions.transform.LayerNorm.bias": t["b_ln"], "cls.predictions.bias": t["bias"]}, str(ckpt))
    report = probe(ckpt, "-c", counts_file, "--arch", "bert")
    assert report["frequency_direction"]["spearman"] == pytest.approx(expected(t)["spearman"], abs=1e-6)
    seen = t["counts"].numpy() > 0
    assert report["output_bias"]["spearman"] == pytest.approx(
        stats.spearmanr(t["bias"].numpy()[seen], t["counts"].numpy()[seen]).statistic, abs=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_checkpoints(tmp_path: Path, t: dict, counts_file: Path, dtype: torch.dtype) -> None:
    ckpt = tmp_path / "half.safetensors"
    save_file(nb_layout(t, dtype), str(ckpt), metadata=nb_metadata())
    report = probe(ckpt, "-c", counts_file)
    ref = expected(t, w=t["w"].to(dtype), b_ln=t["b_ln"].to(dtype))  # same numbers as upcasting by hand
    assert report["frequency_direction"]["spearman"] == pytest.approx(ref["spearman"], abs=1e-6)
    assert report["isotropy"]["mean_cosine"] == pytest.approx(ref["mean_cosine"], rel=1e-5)


def test_sharded_checkpoint_equals_single_file(tmp_path: Path, t: dict, counts_file: Path) -> None:
    single = tmp_path / "single.safetensors"
    tensors = nb_layout(t)
    save_file(tensors, str(single), metadata=nb_metadata())
    shard_dir = tmp_path / "sharded"
    shard_dir.mkdir()
    names = sorted(tensors)
    weight_map = {}
    for i, part in enumerate((names[:2], names[2:])):
        fname = f"model-{i + 1:05d}-of-00002.safetensors"
        save_file({n: tensors[n] for n in part}, str(shard_dir / fname), metadata=nb_metadata())
        weight_map.update({n: fname for n in part})
    (shard_dir / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    a = probe(single, "-c", counts_file)
    b = probe(shard_dir, "-c", counts_file)
    for section in ("frequency_direction", "isotropy", "output_bias", "frequency_bins"):
        assert a[section] == b[section]


def test_llama_names_without_ln_bias_report_absent_sections(tmp_path: Path, t: dict, counts_file: Path) -> None:
    ckpt = tmp_path / "llama.safetensors"
    save_file({"model.embed_tokens.weight": t["w"], "lm_head.weight": t["w"] * 2, "model.norm.weight": torch.ones(D),
               "model.layers.0.input_layernorm.weight": torch.ones(D)}, str(ckpt))
    report = probe(ckpt, "-c", counts_file, "--arch", "llama")
    assert report["frequency_direction"]["present"] is False and report["frequency_direction"]["spearman"] is None
    assert report["output_bias"]["present"] is False
    assert report["isotropy"]["mean_cosine"] == pytest.approx(probes.mean_pairwise_cosine(t["w"].numpy()), rel=1e-5)


def test_map_overrides_role_names(tmp_path: Path, t: dict, counts_file: Path) -> None:
    ckpt = tmp_path / "custom.safetensors"
    save_file({"lm.W": t["w"], "lm.ln.b": t["b_ln"]}, str(ckpt))
    report = probe(ckpt, "-c", counts_file, "--map", "output_weight=lm.W", "--map", "final_ln_bias=lm.ln.b")
    assert report["frequency_direction"]["spearman"] == pytest.approx(expected(t)["spearman"], abs=1e-6)


def test_no_computable_section_is_an_error_listing_roles(tmp_path: Path, counts_file: Path) -> None:
    ckpt = tmp_path / "other.safetensors"
    save_file({"encoder.conv.weight": torch.zeros(3, 3)}, str(ckpt))
    result = invoke("probe-bias", ckpt, "-c", counts_file)
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, str(ckpt), "output_weight", "final_ln_bias", "output_bias")


def test_foreign_counts_warn_and_short_counts_are_padded(tmp_path: Path, t: dict) -> None:
    ckpt = tmp_path / "model.safetensors"
    save_file(nb_layout(t), str(ckpt), metadata=nb_metadata())
    foreign = tmp_path / "foreign.safetensors"
    save_numpy({"counts": t["counts"].numpy().astype(np.int32)}, str(foreign))
    result = invoke("probe-bias", ckpt, "-c", foreign, "--json")
    assert result.exit_code == 0, result.stderr
    assert "tokenizer" in result.stderr and "warning" in result.stderr
    assert json.loads(result.stdout)["frequency_direction"]["spearman"] > 0.95
    short = tmp_path / "short.safetensors"
    save_numpy({"counts": t["counts"].numpy()[: V - 10]}, str(short))
    refused = invoke("probe-bias", ckpt, "-c", short)  # 10 rows short of V is not vocabulary padding
    assert refused.exit_code == 1
    assert_one_line_error(refused.stderr, str(short), "not vocabulary padding", "--tokenizer")
    # --allow-vocab-mismatch relaxes the tokenizer identity only: not the rows
    still = invoke("probe-bias", ckpt, "-c", short, "--allow-vocab-mismatch")
    assert still.exit_code == 1 and "not vocabulary padding" in still.stderr
    write_counts(short, UnigramCounts(counts=t["counts"].numpy()[: V - 10], metadata=TOKENIZER))
    padded = json.loads(invoke("probe-bias", ckpt, "-c", short, "--json").stdout)  # the tokenizer matched
    assert any("padding (the tokenizer matched)" in w for w in padded["warnings"])
    long = tmp_path / "long.safetensors"
    save_numpy({"counts": np.ones(V + 5, dtype=np.int64)}, str(long))
    result = invoke("probe-bias", ckpt, "-c", long)
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, str(long), str(V + 5), str(V))


def test_bad_inputs_are_one_line_errors(tmp_path: Path, counts_file: Path) -> None:
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\x00" * 64)
    result = invoke("probe-bias", garbage, "-c", counts_file)
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, str(garbage))
    result = invoke("probe-bias", tmp_path / "missing.safetensors", "-c", counts_file)
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    for option, value in (("--zipfian-weights", "zipf"), ("--zipfian-weights", "add-k:-1")):
        result = invoke("probe-bias", garbage, "-c", counts_file, option, value)
        assert result.exit_code == 1
        assert_one_line_error(result.stderr, option, value)
    result = invoke("probe-bias", garbage, "-c", counts_file, "--device", "tpu")
    assert result.exit_code == 2 and "Traceback" not in result.stderr  # not a choice: typer's usage error
    if not torch.cuda.is_available():  # refused before the checkpoint is read
        result = invoke("probe-bias", garbage, "-c", counts_file, "--device", "cuda")
        assert result.exit_code == 1
        assert_one_line_error(result.stderr, "--device cuda", "CUDA is not available")


def test_plot_writes_pngs_with_provenance(tmp_path: Path, t: dict, counts_file: Path) -> None:
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib (the plot extra)")
    ckpt = tmp_path / "model.safetensors"
    save_file(nb_layout(t), str(ckpt), metadata=nb_metadata())
    out = tmp_path / "figs"
    report = probe(ckpt, "-c", counts_file, "--plot", out)
    assert sorted(Path(p).name for p in report["plots"]) == ["cosine_histogram.png", "frequency_direction.png",
                                                             "zipfian.png"]
    for name in ("cosine_histogram.png", "frequency_direction.png", "zipfian.png"):
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        assert b"nb.counts_sha256" in data  # provenance in a PNG text chunk
    assert not list(out.glob("*.nbtmp")) and not list(out.glob(".*"))


def test_subprocess_text_and_json(tmp_path: Path, t: dict, counts_file: Path) -> None:
    ckpt = tmp_path / "model.safetensors"
    save_file(nb_layout(t), str(ckpt), metadata=nb_metadata())
    proc = run_nb("probe-bias", ckpt, "-c", counts_file)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout.decode()
    for title in ("frequency direction", "isotropy", "output bias vs unigram", "log-frequency bin"):
        assert title in text
    # the output bias's correlation sits in its own section, named with the b the definitions define
    assert "b_last" not in text and text.index("Spearman ρ(b, count)") > text.index("output bias vs unigram")
    assert proc.stderr == b""  # no progress bar when piped
    proc = run_nb("probe-bias", ckpt, "-c", counts_file, "--json", "--no-partition")
    report = json.loads(proc.stdout)
    assert report["isotropy"]["partition_ratio"] is None
    assert report["frequency_direction"]["spearman"] == pytest.approx(expected(t)["spearman"], abs=1e-6)


NO_TORCH = """
import runpy, sys
class NoTorch:  # torch cannot be imported in this process
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"{name} is blocked by the test")
sys.meta_path.insert(0, NoTorch())
sys.argv = ["nb", *sys.argv[1:]]
runpy.run_module("nbcli", run_name="__main__")
"""


def test_the_cpu_report_never_imports_torch(tmp_path: Path, t: dict, counts_file: Path) -> None:
    """On the CPU the whole report (Zipfian section and partition functions included) runs on numpy: a
    process that cannot import torch gives the in-process report."""
    import subprocess
    import sys

    ckpt = tmp_path / "model.safetensors"
    save_file(nb_layout(t), str(ckpt), metadata=nb_metadata())
    args = ["probe-bias", str(ckpt), "-c", str(counts_file), "--device", "cpu", "--json"]
    proc = subprocess.run([sys.executable, "-c", NO_TORCH, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report, expected_report = json.loads(proc.stdout), probe(*args[1:-1])
    assert report["zipfian"]["present"] and report["isotropy"]["partition_ratio"] is not None
    assert report["precision"]["device"] == "cpu"
    for section in ("frequency_direction", "isotropy", "zipfian", "output_bias"):
        assert report[section] == expected_report[section]
    figures = tmp_path / "figures"  # the figures too (the cosine histogram's sample without b_LN's direction)
    proc = subprocess.run([sys.executable, "-c", NO_TORCH, *args[:-1], "--plot", str(figures)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert {"cosine_histogram.png", "frequency_direction.png"} <= {p.name for p in figures.iterdir()}


def test_a_hub_repo_id_probes_without_torch(tmp_path: Path, t: dict, counts_file: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A repo id in the Hugging Face cache layout (snapshots of symlinks into blobs), GPT-2's names and
    config.json: resolved and probed in a process that cannot import torch, as from the folder itself."""
    import subprocess
    import sys

    from tests.hub_cache import add_snapshot, commit_hash

    source = tmp_path / "gpt2"
    source.mkdir()
    save_file({k.removeprefix("transformer."): v for k, v in gpt2_layout(t).items()}, str(source / "model.safetensors"))
    (source / "config.json").write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}))
    add_snapshot(tmp_path / "hub", "org/gpt2", source, commit_hash("probe"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    args = ["probe-bias", "org/gpt2", "-c", str(counts_file), "--device", "cpu", "--json"]
    proc = subprocess.run([sys.executable, "-c", NO_TORCH, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["zipfian"]["present"]
    assert report["frequency_direction"]["spearman"] == pytest.approx(expected(t)["spearman"], abs=1e-6)
    from_folder = probe(source, "-c", counts_file, "--device", "cpu")
    assert report["isotropy"] == from_folder["isotropy"] and report["zipfian"] == from_folder["zipfian"]


def test_auto_is_the_cpu_without_a_gpu_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    from nbcli.analysis import kernels
    from nbcli.reports import probe_bias

    monkeypatch.setattr(probe_bias, "accelerator_possible", lambda: False)
    assert probe_bias.probe_device("auto") == "cpu" == probe_bias.probe_device("cpu")
    monkeypatch.setattr(kernels.os.path, "exists", lambda path: False)
    assert not kernels.accelerator_possible()


def test_non_finite_weights_are_an_error_naming_the_tensor(tmp_path: Path, t: dict, counts_file: Path) -> None:
    tensors = nb_layout(t)
    tensors["tok_emb.weight"][7, 3] = float("nan")
    ckpt = tmp_path / "nan.safetensors"
    save_file(tensors, str(ckpt), metadata=nb_metadata())
    result = invoke("probe-bias", ckpt, "-c", counts_file)
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, str(ckpt), "tok_emb.weight", "non-finite")


def test_output_bias_alone_is_enough(tmp_path: Path, t: dict, counts_file: Path) -> None:
    ckpt = tmp_path / "bias-only.safetensors"
    save_file({"decoder.b": t["bias"]}, str(ckpt))
    report = probe(ckpt, "-c", counts_file, "--map", "output_bias=decoder.b")
    assert report["architecture"] == "custom"
    assert report["frequency_direction"]["present"] is False and report["isotropy"]["present"] is False
    assert report["output_bias"]["norm"] == pytest.approx(float(t["bias"].norm()), rel=1e-5)


def test_plot_without_frequency_direction_draws_the_histogram_only(tmp_path: Path, t: dict, counts_file: Path) -> None:
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib (the plot extra)")
    ckpt = tmp_path / "llama.safetensors"
    save_file({"model.embed_tokens.weight": t["w"], "model.norm.weight": torch.ones(D)}, str(ckpt))
    report = probe(ckpt, "-c", counts_file, "--plot", tmp_path / "figs", "--no-partition", "--no-whiten")
    assert [Path(p).name for p in report["plots"]] == ["cosine_histogram.png"]
    # with whitening (no b_LN): the direction is the unigram-weighted mean
    report = probe(ckpt, "-c", counts_file, "--plot", tmp_path / "figs2", "--no-partition")
    assert [Path(p).name for p in report["plots"]] == ["cosine_histogram.png", "zipfian.png"]
    assert report["zipfian"]["direction"] == "unigram-weighted mean"


def test_counts_from_another_tokenizer_are_refused(tmp_path: Path, t: dict) -> None:
    ckpt = tmp_path / "model.safetensors"
    save_file(nb_layout(t), str(ckpt), metadata=nb_metadata())
    other = tmp_path / "other.safetensors"
    write_counts(other, UnigramCounts(counts=t["counts"].numpy(), metadata={"nb.tokenizer_sha256": "1" * 64}))
    result = invoke("probe-bias", ckpt, "-c", other)
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, str(other), "another tokenizer", "--allow-vocab-mismatch")
    allowed = invoke("probe-bias", ckpt, "-c", other, "--allow-vocab-mismatch", "--json")
    assert allowed.exit_code == 0 and any("another tokenizer" in w for w in json.loads(allowed.stdout)["warnings"])


def test_without_counts_computes_what_needs_none(tmp_path: Path, t: dict) -> None:
    ckpt = tmp_path / "model.safetensors"
    save_file(nb_layout(t), str(ckpt), metadata=nb_metadata())
    report = probe(ckpt)
    with_counts = probe(ckpt, "-c", _counts(tmp_path, t))
    assert report["counts"] is None
    # the same statistic; with counts W^T W is summed from float64 products (without, float32 ones:
    # the report's precision section), so the two agree within the documented tolerance, not bit for bit
    for key, value in report["isotropy"].items():
        assert value == (pytest.approx(with_counts["isotropy"][key], rel=1e-6) if isinstance(value, float)
                         else with_counts["isotropy"][key]), key
    assert report["frequency_direction"]["present"] is False and "--counts" in report["frequency_direction"]["note"]
    assert report["frequency_direction"]["b_ln_norm"] == pytest.approx(with_counts["frequency_direction"]["b_ln_norm"])
    assert report["output_bias"]["norm"] == pytest.approx(with_counts["output_bias"]["norm"], rel=1e-6)
    assert report["output_bias"]["kl_unigram_to_bias"] is None and report["frequency_bins"] == []
    text = invoke("probe-bias", ckpt)
    assert text.exit_code == 0 and "counts: none" in text.stdout and "partition ratio" in text.stdout


def _counts(tmp_path: Path, t: dict) -> Path:
    path = tmp_path / "c.safetensors"
    write_counts(path, UnigramCounts(counts=t["counts"].numpy(), metadata=TOKENIZER))
    return path


@pytest.mark.parametrize("seen", [0, 1, 2])
def test_few_or_no_seen_tokens_give_no_numpy_warnings(tmp_path: Path, t: dict, seen: int) -> None:
    """Zero counts (none seen, one seen: no rank correlation exists) print no RuntimeWarning: the
    report says the statistic is undefined (null) instead."""
    import warnings

    counts = np.zeros(V, dtype=np.int64)
    counts[:seen] = 5
    path = tmp_path / "counts.safetensors"
    write_counts(path, UnigramCounts(counts=counts, metadata=TOKENIZER))
    ckpt = tmp_path / "model.safetensors"
    save_file({**nb_layout(t), "head.bias": torch.zeros(V)}, str(ckpt), metadata=nb_metadata())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = probe(ckpt, "--counts", path)
    assert [str(w.message) for w in caught] == []
    assert report["frequency_direction"]["tokens"] == seen
    if seen < 2:
        assert report["frequency_direction"]["spearman"] is None


def test_zipfian_section_against_dense_whitening(tmp_path: Path, t: dict, counts_file: Path) -> None:
    """The zipfian section of the CLI report equals a dense numpy recomputation, under the default
    raw frequencies (Yokoi et al.'s weights) and under --zipfian-weights add-k:1; --smoothing is the
    KL's alone."""
    from scipy.linalg import sqrtm

    ckpt = tmp_path / "model.safetensors"
    save_file(nb_layout(t), str(ckpt), metadata=nb_metadata())
    w = t["w"].double().numpy()
    c = t["counts"].double().numpy()
    u = t["b_ln"].double().numpy()
    u /= np.linalg.norm(u)
    for args, p in (((), c / c.sum()), (("--zipfian-weights", "add-k:1", "--smoothing", "add-k:0.5"),
                                        (c + 1) / (c.sum() + c.size))):
        zipf = probe(ckpt, "-c", counts_file, *args)["zipfian"]
        assert zipf["weighting"] == ("raw" if not args else "add-k:1")
        mu = p @ w
        white = np.linalg.solve(np.real(sqrtm((w - mu).T @ np.diag(p) @ (w - mu))), (w - mu).T).T
        units = white / np.linalg.norm(white, axis=1, keepdims=True)
        assert zipf["whitened"]["mean_cosine_unigram"] == pytest.approx(float(p @ units @ units.T @ p), rel=1e-3,
                                                                        abs=1e-6)
        share = float(p @ ((white @ u) ** 2 / (white * white).sum(axis=1)))
        assert zipf["direction"] == "b_LN"
        assert zipf["frequency_direction"]["share_after"] == pytest.approx(share, rel=1e-3)
        assert zipf["raw"]["sym1_unigram"] == pytest.approx(1 - np.linalg.norm(mu) / (p @ np.linalg.norm(w, axis=1)))
        assert zipf["whitened"]["sym2_unigram"] == pytest.approx(1.0)
    # the planted frequency direction dominates W; whitening removes most of its share
    assert zipf["frequency_direction"]["removed"] > 0.5
    proc = run_nb("probe-bias", ckpt, "-c", counts_file)
    for text in ("Zipfian whitening", "weights: raw", "Sym1 (1st moment), unigram-weighted", "mean cosine, unigram-weighted"):
        assert text in proc.stdout.decode()
    skipped = probe(ckpt, "-c", counts_file, "--no-whiten")["zipfian"]
    assert skipped == {"present": False, "note": "skipped (--no-whiten)"}
    assert probe(ckpt)["zipfian"]["note"] == "needs corpus counts (--counts)"
