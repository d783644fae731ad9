"""The training loop: step-0 losses vs entropies, log fields, exact resume, checkpoints, inits, refusals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from nbcli.checkpoint.writer import save_tensors
from nbcli.checkpoint.reader import open_checkpoint
from nbcli.checkpoint.roles import resolve_roles
from nbcli.counts import read_counts, unigram_entropy
from nbcli.errors import ConfigError, OutputError
from nbcli.models.lm import ModelConfig
from nbcli.tokenizers import load_tokenizer
from nbcli.train.config import build_config
from nbcli.tasks.language_model import train
from nbcli.train.rundir import read_log
from nbcli.analysis.curves import area_under_curve

# On the CPU whatever the machine: the assertions below hold for float32 (no bf16 autocast, no MFU).
FAST = dict(seq_len=32, batch_size=8, eval_every=2, eval_batches=2, warmup=2, device="cpu")


def run(tmp: Path, corpus: Path, tok: Path, name: str, *, resume: bool = False, stop_at: int | None = None,
        **kw):
    options = {**FAST, **kw}
    cfg = build_config(options.pop("preset", "tiny"), **options)
    return train(cfg, [str(corpus)], tok, tmp / name, resume=resume, stop_at=stop_at)


def test_step0_loss_unigram_vs_zero_bias(tmp_path: Path, sp_model: Path, train_corpus: Path) -> None:
    """Paper 000 sec. 3: with b = log-unigram and small W, the initial loss is about the unigram
    entropy of the training tokens; with b = 0 it is about log V."""
    res = run(tmp_path, train_corpus, sp_model, "u", steps=1, bias_init="unigram")
    step0 = read_log(tmp_path / "u")[0]["loss"]
    entropy = unigram_entropy(read_counts(tmp_path / "u" / "counts.safetensors").counts)
    assert math.isclose(entropy, res.unigram_entropy)
    assert abs(step0 - entropy) < 0.3
    assert res.warnings == []
    zres = run(tmp_path, train_corpus, sp_model, "z", steps=1, bias_init="zero")
    zero0 = read_log(tmp_path / "z")[0]["loss"]
    assert zres.warnings == []            # a few hundredths above log V: within the 0.5-nat margin
    V = load_tokenizer(sp_model).vocab_size
    assert abs(zero0 - math.log(V)) < 0.1
    assert zero0 - step0 > 1.0   # the unigram start is far better on this Zipfian corpus


def test_log_fields_eval_metrics_and_summary(tmp_path: Path, sp_model: Path, train_corpus: Path) -> None:
    res = run(tmp_path, train_corpus, sp_model, "r", steps=4, bias_init="unigram", objective="mlm",
              ag_fraction=0.5, ag_alpha=10.0)
    records = read_log(tmp_path / "r")
    steps = [r for r in records if "loss" in r]
    assert [r["step"] for r in steps] == [0, 1, 2, 3]
    for r in steps:
        assert {"lr", "tokens_per_s", "ag_loss", "ag_alpha"} <= set(r) and "mfu" not in r
    assert steps[0]["ag_alpha"] == 10.0 and steps[2]["ag_alpha"] == 5.0
    evals = [r for r in records if "val_loss" in r]
    assert [r["step"] for r in evals] == [0, 2, 4]
    for r in evals:
        assert {"kl_unigram", "kl_uniform", "bias_kl_unigram", "bias_norm"} <= set(r)
        assert r["kl_unigram"] >= -1e-6 and r["kl_uniform"] >= -1e-6
    assert evals[0]["bias_kl_unigram"] < 1e-6                 # b = log-unigram at step 0
    points = [(r["step"], r["val_loss"]) for r in evals]
    assert math.isclose(res.alc, area_under_curve(points)) and res.final_val_loss == evals[-1]["val_loss"]
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["steps"] == 4 and summary["checkpoint"].endswith("step-4.safetensors")
    assert json.loads((tmp_path / "r" / "config.json").read_text())["objective"] == "mlm"


def test_step0_checkpoint_is_the_initial_model(tmp_path: Path, sp_model: Path, train_corpus: Path) -> None:
    """step-0.safetensors holds the model before its first update (paper 000 fig. 1's first point,
    paper 001 fig. 1's 0 % column), in the layout of every other step; no training state goes with it,
    so resuming works from the saved states as before."""
    from nbcli.train.init import build_model, model_config

    options = {**FAST, "steps": 4, "bias_init": "unigram", "tie_embeddings": False, "lr": 1e-2}
    run(tmp_path, train_corpus, sp_model, "s", stop_at=2, save_every=2, **options)
    out = tmp_path / "s"
    assert sorted(p.name for p in out.glob("step-*")) == ["step-0.safetensors", "step-2.safetensors"]
    assert json.loads((out / "train-state.json").read_text())["checkpoint"] == "step-2.safetensors"
    cfg = build_config("tiny", **options)
    tokenizer = load_tokenizer(sp_model)
    initial = build_model(cfg, model_config(cfg, tokenizer), read_counts(out / "counts.safetensors").counts,
                          tokenizer.vocab_size)
    with open_checkpoint(out / "step-0.safetensors") as step0, open_checkpoint(out / "step-2.safetensors") as step2:
        assert step0.metadata["nb.step"] == "0" and step0.metadata["nb.format"] == step2.metadata["nb.format"]
        assert step0.names() == step2.names()
        for name, tensor in initial.nb_state_dict().items():
            assert torch.equal(step0.get(name), tensor), name
        assert not torch.equal(step0.get("head.weight"), step2.get("head.weight"))  # trained after step 0
    saved = (out / "step-0.safetensors").stat()
    run(tmp_path, train_corpus, sp_model, "s", resume=True, **options)
    assert [r["step"] for r in read_log(out) if "loss" in r] == [0, 1, 2, 3]
    again = (out / "step-0.safetensors").stat()  # not written again on --resume
    assert (again.st_ino, again.st_mtime_ns) == (saved.st_ino, saved.st_mtime_ns)


def test_presets_match_the_papers() -> None:
    """roberta-8 = paper 001 table 10 (8 x 12 x 768, MLM; table 11 lr 1e-4, batch 120); gpt2-124m has
    GPT-2 small's sizes and, with GPT-2's 50257 pieces, tied and without output bias, its 124,439,808
    parameters."""
    from nbcli.models.lm import Transformer

    r = build_config("roberta-8")
    assert (r.n_layer, r.n_head, r.d_model, r.objective, r.lr, r.batch_size) == (8, 12, 768, "mlm", 1e-4, 120)
    g = build_config("gpt2-124m")
    assert (g.n_layer, g.n_head, g.d_model, g.seq_len, g.tie_embeddings) == (12, 12, 768, 1024, True)
    model = Transformer(ModelConfig(vocab_size=50257, seq_len=g.seq_len, n_layer=g.n_layer, n_head=g.n_head,
                                    d_model=g.d_model, output_bias=False))
    assert model.num_parameters() == 124_439_808


def test_ag_alpha_auto_matches_the_lm_loss_at_step_0(tmp_path: Path, sp_model: Path, train_corpus: Path) -> None:
    """Paper 001 sec. 4.5: alpha_0 makes alpha_0 L_AG equal L_LM at the start of training."""
    res = run(tmp_path, train_corpus, sp_model, "auto", steps=4, objective="mlm", ag_fraction=0.5,
              ag_alpha="auto", ag_hold_steps=2)
    steps = [r for r in read_log(tmp_path / "auto") if "loss" in r]
    first = steps[0]
    assert first["ag_alpha"] * first["ag_loss"] == pytest.approx(first["loss"], rel=1e-4)
    assert res.ag_alpha0 == pytest.approx(first["ag_alpha"]) and res.ag_alpha0 > 1.0
    # held for 2 steps, then linear to 0 at step 4
    assert steps[1]["ag_alpha"] == first["ag_alpha"]
    assert steps[3]["ag_alpha"] == pytest.approx(first["ag_alpha"] / 2)
    assert json.loads((tmp_path / "auto" / "summary.json").read_text())["ag_alpha0"] == res.ag_alpha0


@pytest.mark.parametrize("objective,extra", [
    ("clm", dict(bias_init="unigram", dropout=0.1)),
    ("mlm", dict(ag_fraction=0.5, dropout=0.1, grad_accum=2, ag_alpha="auto")),
    ("clm", dict(unigram_reg_lambda=0.5, unigram_reg_steps=4, dropout=0.1)),   # the switch after the resume
])
@pytest.mark.slow
def test_resume_equals_uninterrupted(tmp_path: Path, sp_model: Path, train_corpus: Path,
                                     objective: str, extra: dict) -> None:
    full_result = run(tmp_path, train_corpus, sp_model, "full", steps=6, objective=objective, **extra)
    run(tmp_path, train_corpus, sp_model, "cut", steps=6, objective=objective, stop_at=3, **extra)
    assert (tmp_path / "cut" / "step-3.safetensors").exists()
    cut_result = run(tmp_path, train_corpus, sp_model, "cut", steps=6, objective=objective, resume=True, **extra)
    # the stopped run's final evaluation (step 3, off the --eval-every schedule) is no point of the curve
    assert cut_result.alc == pytest.approx(full_result.alc, rel=1e-6)
    full, cut = read_log(tmp_path / "full"), read_log(tmp_path / "cut")
    assert [r["step"] for r in full] == [r["step"] for r in cut]
    for a, b in zip(full, cut):
        for key in ("loss", "val_loss", "ag_loss", "ag_alpha", "lr", "kl_unigram", "unigram_kl"):
            if key in a:
                assert a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-7), (a["step"], key)
        assert a.get("unigram_reg_on") == b.get("unigram_reg_on")
    with open_checkpoint(tmp_path / "full" / "step-6.safetensors") as fa, \
            open_checkpoint(tmp_path / "cut" / "step-6.safetensors") as fb:
        for name in fa.names():
            torch.testing.assert_close(fa.get(name), fb.get(name), atol=1e-6, rtol=1e-5)


def test_unigram_regulariser_logs_and_switches_off(tmp_path: Path, sp_model: Path, train_corpus: Path) -> None:
    """Paper 000 app. B.3: CE - lambda KL(omega || p_theta) for updates < S, then the standard objective;
    the logged loss stays the cross-entropy, so step 0 (logged before the update) equals a plain run's."""
    run(tmp_path, train_corpus, sp_model, "plain", steps=5)
    run(tmp_path, train_corpus, sp_model, "reg", steps=5, unigram_reg_lambda=2.0, unigram_reg_steps=3)
    plain = [r for r in read_log(tmp_path / "plain") if "loss" in r]
    reg = [r for r in read_log(tmp_path / "reg") if "loss" in r]
    assert [r["unigram_reg_on"] for r in reg] == [True, True, True, False, False]
    assert all("unigram_reg_on" not in r and "unigram_kl" not in r for r in plain)
    for r in reg[:3]:
        assert r["unigram_kl"] > 0 and r["unigram_reg_weighted"] == pytest.approx(-2.0 * r["unigram_kl"])
    assert all("unigram_kl" not in r for r in reg[3:])
    assert reg[0]["loss"] == pytest.approx(plain[0]["loss"], rel=1e-6)
    assert reg[1]["loss"] != pytest.approx(plain[1]["loss"], rel=1e-6)
    # pushed away from omega: the divergence from it grows while the regulariser is on
    assert reg[2]["unigram_kl"] > reg[0]["unigram_kl"]
    config = json.loads((tmp_path / "reg" / "config.json").read_text())
    assert (config["unigram_reg_lambda"], config["unigram_reg_steps"]) == (2.0, 3)


def test_checkpoint_layout_and_roles(tmp_path: Path, sp_model: Path, train_corpus: Path) -> None:
    run(tmp_path, train_corpus, sp_model, "c", steps=1, objective="mlm", bias_init="unigram")
    with open_checkpoint(tmp_path / "c" / "step-1.safetensors") as ckpt:
        meta = ckpt.metadata
        assert meta["nb.format"] == "nb-model/1"
        cfg = ModelConfig.from_json(meta["nb.config"])
        assert cfg.objective == "mlm" and cfg.tie_embeddings
        roles = resolve_roles(ckpt)
        assert roles.get("output_weight") == "tok_emb.weight" and roles.get("output_bias") == "head.bias"
        assert roles.get("final_ln_bias") == "mlm.ln.bias"
        assert "head.weight" not in ckpt
    run(tmp_path, train_corpus, sp_model, "n", steps=1, bias_init="none", tie_embeddings=False)
    with open_checkpoint(tmp_path / "n" / "step-1.safetensors") as ckpt:
        assert "head.bias" not in ckpt and "head.weight" in ckpt
        roles = resolve_roles(ckpt)
        assert roles.get("output_weight") == "head.weight" and roles.get("final_ln_bias") == "ln_f.bias"
    assert not any(r.get("bias_norm") for r in read_log(tmp_path / "n"))


def test_rescale_w_and_embedding_inits(tmp_path: Path, sp_model: Path, train_corpus: Path) -> None:
    V = load_tokenizer(sp_model).vocab_size
    # lr ~ 0 so the step-1 checkpoint still holds the initialisation
    res = run(tmp_path, train_corpus, sp_model, "w", steps=1, bias_init="unigram", tie_embeddings=False,
              rescale_w="fro", lr=1e-12)
    assert read_log(tmp_path / "w")[0]["loss"] > math.log(V)           # paper 000's rescale, read literally
    assert len(res.warnings) == 1 and "exceeds log V" in res.warnings[0] and "--rescale-w fro" in res.warnings[0]
    assert json.loads((tmp_path / "w" / "summary.json").read_text())["warnings"] == res.warnings
    with open_checkpoint(tmp_path / "w" / "step-1.safetensors") as ckpt:
        w, b = ckpt.get("head.weight"), ckpt.get("head.bias")
        assert float(w.norm()) == pytest.approx(float(b.norm()), rel=1e-3)
    source = torch.randn(V, 128) * 3 + 1
    save_tensors(tmp_path / "emb.safetensors", {"emb": source})
    run(tmp_path, train_corpus, sp_model, "p", steps=1, embedding_init=f"pretrained:{tmp_path}/emb.safetensors:emb",
        embedding_standardise="xavier", lr=1e-12)
    with open_checkpoint(tmp_path / "p" / "step-1.safetensors") as ckpt:
        emb = ckpt.get("tok_emb.weight").double()
    assert abs(float(emb.mean())) < 1e-3
    assert float(emb.std()) == pytest.approx(math.sqrt(2 / (V + 128)), rel=1e-2)
    expected = (source.double() - source.double().mean()) / source.double().std() * math.sqrt(2 / (V + 128))
    torch.testing.assert_close(emb, expected, atol=1e-5, rtol=1e-3)
    # an MLM model appends a <mask> row: a file with the tokenizer's V rows fills the rest, which keeps its init
    run(tmp_path, train_corpus, sp_model, "mlm-p", steps=1, objective="mlm",
        embedding_init=f"pretrained:{tmp_path}/emb.safetensors:emb", lr=1e-12)
    with open_checkpoint(tmp_path / "mlm-p" / "step-1.safetensors") as ckpt:
        mlm_emb = ckpt.get("tok_emb.weight")
    assert mlm_emb.shape[0] == V + 1
    torch.testing.assert_close(mlm_emb[:V], source, atol=1e-5, rtol=1e-5)
    # eq. 4 (another tensor's statistics) and rows-and-columns shuffling: the patch-checkpoint functions
    other = torch.randn(50, 7) * 0.3 - 2
    save_tensors(tmp_path / "other.safetensors", {"x": other})
    run(tmp_path, train_corpus, sp_model, "m", steps=1, embedding_init=f"pretrained:{tmp_path}/emb.safetensors:emb",
        embedding_standardise=f"match:{tmp_path}/other.safetensors:x", embedding_shuffle=True,
        embedding_shuffle_mode="rows-columns", lr=1e-12, seed=5)
    with open_checkpoint(tmp_path / "m" / "step-1.safetensors") as ckpt:
        emb = ckpt.get("tok_emb.weight").double()
    mean, std = float(other.double().mean()), float(other.double().std())
    standardised = (source.double() - source.double().mean()) / source.double().std() * std + mean
    g = torch.Generator().manual_seed(5)
    rows, cols = torch.randperm(V, generator=g), torch.randperm(128, generator=g)
    torch.testing.assert_close(emb, standardised[rows][:, cols], atol=1e-5, rtol=1e-3)
    with pytest.raises(ConfigError, match="--standardise-embeddings"):
        build_config("tiny", embedding_standardise="match:nothing")
    save_tensors(tmp_path / "bad.safetensors", {"emb": torch.randn(V + 1, 128)})
    with pytest.raises(ConfigError, match="not vocabulary padding"):
        run(tmp_path, train_corpus, sp_model, "q", steps=1, embedding_init=f"pretrained:{tmp_path}/bad.safetensors")


def test_rescale_w_of_a_tied_output_layer_scales_the_input_embedding(tmp_path: Path, sp_model: Path,
                                                                    train_corpus: Path) -> None:
    """Paper 000 fn. 3 with a tied W (nb's LM default): W is tok_emb.weight, so the embedding is the
    run's without --rescale-w times c = ||b|| / ||E||, and the step-0 warning says W was tied."""
    plain = run(tmp_path, train_corpus, sp_model, "plain", steps=1, bias_init="unigram", lr=1e-12)
    res = run(tmp_path, train_corpus, sp_model, "tied", steps=1, bias_init="unigram", rescale_w="fro", lr=1e-12)
    with open_checkpoint(plain.checkpoint.parent / "step-0.safetensors") as a, \
            open_checkpoint(tmp_path / "tied" / "step-0.safetensors") as b:
        e0, e1, bias = a.get("tok_emb.weight").double(), b.get("tok_emb.weight").double(), b.get("head.bias").double()
        assert "head.weight" not in b.names()
    c = float(bias.norm() / e0.norm())
    assert float(e1.norm()) == pytest.approx(float(bias.norm()), rel=1e-5)
    torch.testing.assert_close(e1, e0 * c, rtol=1e-5, atol=1e-7)
    assert any("W is tied" in w for w in res.warnings)


def test_refusals(tmp_path: Path, sp_model: Path, train_corpus: Path) -> None:
    with pytest.raises(ConfigError, match="impossible in a causal model"):
        build_config("tiny", ag_fraction=0.5, ag_patterns=("next", "prev"))
    with pytest.raises(ConfigError, match="needs --bias-init unigram"):
        build_config("tiny", rescale_w="fro")
    run(tmp_path, train_corpus, sp_model, "x", steps=1)
    with pytest.raises(OutputError, match="already holds a run"):
        run(tmp_path, train_corpus, sp_model, "x", steps=1)
    with pytest.raises(ConfigError, match="options differ"):
        run(tmp_path, train_corpus, sp_model, "x", steps=1, lr=0.5, resume=True)
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA is not available"):
            run(tmp_path, train_corpus, sp_model, "y", steps=1, device="cuda")
    assert not (tmp_path / "y").exists()


def test_bf16_autocast_path_runs_on_cpu(tmp_path: Path, sp_model: Path, train_corpus: Path) -> None:
    """The CUDA precision path (bf16 autocast, AG loss computed in float32) exercised on CPU."""
    run(tmp_path, train_corpus, sp_model, "bf", steps=2, dtype="bfloat16", objective="mlm", ag_fraction=0.5)
    records = read_log(tmp_path / "bf")
    assert all(math.isfinite(r["loss"]) and math.isfinite(r["ag_loss"]) for r in records if "loss" in r)
    assert abs(records[0]["loss"] - math.log(load_tokenizer(sp_model).vocab_size + 1)) < 0.2


def test_word_vocabulary_run_keeps_its_tokenizer(tmp_path: Path, train_corpus: Path) -> None:
    """-t words:min-freq=K: counted over the training documents only (the held-out ones skipped),
    saved as DIR/tokenizer.json, which eval finds beside the checkpoint without -t."""
    from collections import Counter

    from nbcli.tokenizers import model_tokenizer
    from nbcli.tokenizers.words import split_words
    from nbcli.train.data import held_out

    cfg = build_config("tiny", steps=1, eval_every=1, eval_batches=1, batch_size=2, seq_len=16, d_model=32,
                       val_fraction=0.25)
    train(cfg, [str(train_corpus)], "words:min-freq=2,lower", tmp_path / "w")
    saved = tmp_path / "w" / "tokenizer.json"
    assert model_tokenizer(tmp_path / "w" / "step-1.safetensors") == saved
    tok = load_tokenizer(saved)
    lines = [line for line in train_corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    counts = Counter(w for n, line in enumerate(lines) if not held_out(n, 0.25) for w in split_words(line, True))
    assert set(tok.pieces()[4:]) == {w for w, c in counts.items() if c >= 2}
    with open_checkpoint(tmp_path / "w" / "step-1.safetensors") as ckpt:
        assert ckpt.metadata["nb.tokenizer_fingerprint"] == tok.fingerprint


def test_the_next_updates_batches_are_built_ahead_and_equal_those_built_on_demand(
        tmp_path: Path, sp_model: Path, train_corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 34: update s+1's micro-batches are built during update s (after its backward passes are
    queued, before it waits for them) and are the very batches `micro_batches(s + 1, ...)` builds on
    demand (MLM masks included); no batch is built for an update past the last."""
    import nbcli.tasks.language_model as language_model
    import nbcli.train.updates as updates

    events: list[tuple[str, int]] = []
    built: dict[tuple[int, int], list] = {}
    real_micro, real_step = language_model.micro_batches, updates.optimizer_step
    calls: list[tuple] = []

    def micro(stream, sampler, cfg, mcfg, rt, step, sequences):
        calls.append((stream, sampler, cfg, mcfg, rt, step, sequences))
        events.append(("build", step))
        built[(step, sequences)] = real_micro(stream, sampler, cfg, mcfg, rt, step, sequences)
        return built[(step, sequences)]

    def update(net, model, optimizer, batches, n_labels, guidance, alpha, step, *args, **kw):
        assert batches is built[(step, step * 8)]
        events.append(("update", step))
        losses = real_step(net, model, optimizer, batches, n_labels, guidance, alpha, step, *args, **kw)
        events.append(("done", step))
        return losses

    monkeypatch.setattr(language_model, "micro_batches", micro)
    monkeypatch.setattr(updates, "optimizer_step", update)
    run(tmp_path, train_corpus, sp_model, "mlm", objective="mlm", steps=4, grad_accum=2)
    assert events == [("build", 0), ("update", 0), ("build", 1), ("done", 0), ("update", 1), ("build", 2), ("done", 1),
                      ("update", 2), ("build", 3), ("done", 2), ("update", 3), ("done", 3)]
    for stream, sampler, cfg, mcfg, rt, step, sequences in calls:
        fresh = real_micro(stream, sampler, cfg, mcfg, rt, step, sequences)
        for a, b in zip(fresh, built[(step, sequences)]):
            assert torch.equal(a.inputs, b.inputs) and torch.equal(a.labels, b.labels)
            assert (a.lengths is None) == (b.lengths is None)
