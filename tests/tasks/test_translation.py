"""`nb train --task translation` (nbcli.tasks.translation): step-0 losses, exact resume, the best
checkpoint by validation BLEU, frozen embeddings, guidance, presets, refusals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from nbcli.checkpoint.reader import open_checkpoint
from nbcli.counts import read_counts, unigram_entropy
from nbcli.errors import ConfigError
from nbcli.models.seq2seq import Seq2SeqConfig
from nbcli.ops import unigram_log_prior
from nbcli.tasks.translation import PRESETS, bleu_chrf, build_translation_config, train_translation
from nbcli.train.rundir import read_log
from nbcli.analysis.curves import area_under_curve

SMALL = dict(d_model=32, batch_size=16, eval_batches=1, eval_every=2)


def run(tmp: Path, corpus: Path, name: str, *, options: dict | None = None, resume: bool = False,
        stop_at: int | None = None, **kw: object):  # noqa: ANN201
    cfg = build_translation_config("tiny", {"src_lang": "de", "tgt_lang": "en", "d_ff": 64, "eval_sentences": 8,
                                            **(options or {})}, **{**SMALL, **kw})
    return train_translation(cfg, [str(corpus / "train")], corpus / "joint.model", corpus / "joint.model",
                             tmp / name, valid=[str(corpus / "valid")], resume=resume, stop_at=stop_at)


def test_step0_loss_unigram_vs_zero_bias(tmp_path: Path, parallel_corpus: Path) -> None:
    """Paper 000 sec. 3 on the target side: with b = log-unigram of the target training tokens the first
    loss is about their unigram entropy; with b = 0 about log V."""
    u = run(tmp_path, parallel_corpus, "u", steps=1, bias_init="unigram", label_smoothing=0.0, dropout=0.0)
    z = run(tmp_path, parallel_corpus, "z", steps=1, bias_init="zero", label_smoothing=0.0, dropout=0.0)
    counts = read_counts(tmp_path / "u" / "counts.safetensors").counts
    assert u.unigram_entropy == pytest.approx(unigram_entropy(counts))
    loss_u, loss_z = read_log(tmp_path / "u")[0]["loss"], read_log(tmp_path / "z")[0]["loss"]
    # logits g W^T have std about 1 at init (post-LN g, W ~ N(0, 1/d)): about 1/2 nat above log V
    assert abs(loss_z - u.log_v) < 0.5 and abs(loss_u - u.unigram_entropy) < 0.6 and loss_u < loss_z - 1
    with open_checkpoint(tmp_path / "u" / "step-1.safetensors") as ckpt:
        config = Seq2SeqConfig.from_json(ckpt.metadata["nb.config"])
        step0 = ckpt.get("final_logits_bias")
    prior = unigram_log_prior(counts, config.tgt_vocab_size, 1.0)
    assert float((step0 - prior).abs().max()) < 0.05                   # b moved little in one update (app. B.5)


@pytest.mark.parametrize("extra", [
    dict(bias_init="unigram", grad_accum=2),
    dict(bias_init="zero", ag_fraction=0.5, ag_patterns=("next", "prev"), ag_alpha="auto",
         options=dict(ag_decoder_fraction=0.25)),
])
@pytest.mark.slow
def test_resume_equals_uninterrupted(tmp_path: Path, parallel_corpus: Path, extra: dict) -> None:
    run(tmp_path, parallel_corpus, "full", steps=6, save_every=3, **extra)
    run(tmp_path, parallel_corpus, "cut", steps=6, stop_at=3, **extra)
    run(tmp_path, parallel_corpus, "cut", steps=6, resume=True, **extra)
    full, cut = read_log(tmp_path / "full"), read_log(tmp_path / "cut")
    assert [r["step"] for r in full] == [r["step"] for r in cut]
    for a, b in zip(full, cut):
        for key in ("loss", "val_loss", "val_bleu", "val_chrf", "ag_loss", "ag_alpha", "lr", "kl_unigram"):
            if key in a:
                assert a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-7), (a["step"], key)
    for name in ("step-6.safetensors", "best.safetensors"):
        with open_checkpoint(tmp_path / "full" / name) as fa, open_checkpoint(tmp_path / "cut" / name) as fb:
            assert fa.metadata["nb.step"] == fb.metadata["nb.step"]
            for tensor in fa.names():
                torch.testing.assert_close(fa.get(tensor), fb.get(tensor), atol=1e-6, rtol=1e-5)
    sa = json.loads((tmp_path / "full" / "summary.json").read_text())
    sb = json.loads((tmp_path / "cut" / "summary.json").read_text())
    for key in ("best_val_bleu", "best_step", "alc_val_bleu", "final_val_loss"):
        assert sa[key] == pytest.approx(sb[key], rel=1e-6), key
    if extra.get("ag_fraction"):
        assert all("ag_loss" in r for r in full if "loss" in r) and full[0]["ag_loss"] > 0


def test_log_summary_and_best_checkpoint(tmp_path: Path, parallel_corpus: Path) -> None:
    res = run(tmp_path, parallel_corpus, "r", steps=6, eval_every=2, options=dict(beam=2))
    log = read_log(tmp_path / "r")
    evals = [r for r in log if "val_loss" in r]
    assert [r["step"] for r in evals] == [0, 2, 4, 6]
    for r in evals:
        assert {"val_bleu", "val_chrf", "kl_unigram", "kl_uniform", "bias_norm"} <= set(r)
        assert 0 <= r["val_bleu"] <= 100 and 0 <= r["val_chrf"] <= 100
    best = max(evals, key=lambda r: (r["val_bleu"], -r["step"]))
    assert res.best_val_bleu == best["val_bleu"] and res.best_step == best["step"]
    assert res.alc_val_bleu == pytest.approx(area_under_curve([(r["step"], r["val_bleu"]) for r in evals]))
    with open_checkpoint(tmp_path / "r" / "best.safetensors") as ckpt:
        assert ckpt.metadata["nb.step"] == str(best["step"])
        assert json.loads(ckpt.metadata["nb.train_config"])["task_options"]["beam"] == 2
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["best_step"] == best["step"] and summary["bleu_signature"].startswith("nrefs:1|")
    assert summary["pairs"] == 640 and summary["skipped_long_pairs"] == 0
    assert (tmp_path / "r" / "source-tokenizer.model").read_bytes() == (parallel_corpus / "joint.model").read_bytes()


def test_frozen_embeddings_stay_and_the_rest_trains(tmp_path: Path, parallel_corpus: Path) -> None:
    run(tmp_path, parallel_corpus, "f", steps=3, options=dict(freeze_embeddings=True, share_embeddings="decoder"),
        save_every=1)
    with open_checkpoint(tmp_path / "f" / "step-1.safetensors") as a, \
            open_checkpoint(tmp_path / "f" / "step-3.safetensors") as b:
        for name in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"):
            assert torch.equal(a.get(name), b.get(name)), name
        assert not torch.equal(a.get("encoder.layers.0.fc1.weight"), b.get("encoder.layers.0.fc1.weight"))


def test_no_positions_and_pre_ln_train(tmp_path: Path, parallel_corpus: Path) -> None:
    run(tmp_path, parallel_corpus, "p", steps=2, options=dict(positions="none", norm="pre", scale_embedding=False))
    with open_checkpoint(tmp_path / "p" / "step-2.safetensors") as ckpt:
        config = Seq2SeqConfig.from_json(ckpt.metadata["nb.config"])
        assert (config.positions, config.norm, config.scale_embedding) == ("none", "pre", False)
        assert "decoder.layer_norm.weight" in ckpt and not any("embed_positions" in n for n in ckpt.names())


def test_presets_match_the_papers() -> None:
    cfg = build_translation_config("iwslt", {"src_lang": "de", "tgt_lang": "en"})
    assert (cfg.n_layer, cfg.n_head, cfg.d_model, cfg.task_options["d_ff"], cfg.dropout) == (6, 4, 512, 1024, 0.3)
    assert (cfg.lr, cfg.warmup, cfg.lr_schedule, cfg.adam_beta2, cfg.weight_decay) == (5e-4, 4000, "inverse-sqrt",
                                                                                      0.98, 1e-4)
    base = build_translation_config("base", {"src_lang": "de", "tgt_lang": "en"})
    assert (base.n_layer, base.n_head, base.d_model, base.task_options["d_ff"]) == (6, 8, 512, 2048)
    assert base.lr == pytest.approx(512 ** -0.5 * 4000 ** -0.5, rel=0.02)   # Vaswani eq. 3 at its peak
    kim = build_translation_config("kim-3", {"src_lang": "de", "tgt_lang": "en"})
    assert (kim.n_layer, kim.n_head, kim.lr, kim.adam_beta2, kim.adam_eps) == (3, 8, 2e-4, 0.98, 1e-9)
    for name in PRESETS:
        cfg = build_translation_config(name, {"src_lang": "de", "tgt_lang": "en"})
        assert cfg.label_smoothing == 0.1 and cfg.task == "translation" and cfg.task_options["norm"] == "post"


def test_base_parameter_count_is_vaswanis_formula() -> None:
    """Vaswani base with a shared 37000-piece vocabulary: embeddings + 6 encoder layers (attention,
    FFN, 2 LN) + 6 decoder layers (2 attentions, FFN, 3 LN) + b, counted by formula."""
    from nbcli.models.seq2seq import Seq2SeqTransformer

    V, d, f, L = 37000, 512, 2048, 6
    attn, ffn, ln = 4 * (d * d + d), 2 * d * f + f + d, 2 * d
    expected = V * d + L * (attn + ffn + 2 * ln) + L * (2 * attn + ffn + 3 * ln) + V
    with torch.device("meta"):
        model = Seq2SeqTransformer(Seq2SeqConfig(src_vocab_size=V, tgt_vocab_size=V, eos_id=2, decoder_start_id=1,
                                                 share_embeddings="all", d_model=d, d_ff=f, n_head=8,
                                                 encoder_layers=L, decoder_layers=L))
    assert model.num_parameters() == expected
    assert 60e6 < expected < 66e6                                    # "65M" in Vaswani et al. table 3


@pytest.mark.parametrize("options,kw,fragment", [
    (dict(ag_decoder_patterns=("next",), ag_decoder_fraction=0.5), {}, "causal decoder"),
    (dict(positions="rotary"), {}, "--positions"),
    ({}, dict(seq_len=4096), "position table"),
])
def test_refusals(options: dict, kw: dict, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        build_translation_config("tiny", {"src_lang": "de", "tgt_lang": "en", **options}, **kw)


def test_rescale_w_with_separate_output_matrix(tmp_path: Path, parallel_corpus: Path) -> None:
    """Paper 000 sec. 4.1: ||W||_F = ||b||_2 at step 0 (W is lm_head.weight, share none)."""
    res = run(tmp_path, parallel_corpus, "w", steps=1, bias_init="unigram", rescale_w="fro", lr=1e-9,
              options=dict(share_embeddings="none"))
    with open_checkpoint(res.checkpoint) as ckpt:
        w, b = ckpt.get("lm_head.weight"), ckpt.get("final_logits_bias")
    assert float(torch.linalg.norm(w)) == pytest.approx(float(torch.linalg.norm(b)), rel=1e-3)


@pytest.mark.parametrize("share", ["decoder", "all"])
def test_rescale_w_of_a_tied_output_layer_scales_the_embedding_it_is(tmp_path: Path, parallel_corpus: Path,
                                                                      share: str) -> None:
    """Paper 000 fn. 3 on a tied model: W is the target (or the shared) embedding, so ||E_tgt||_F = ||b||_2
    at step 0 and it is the same matrix times c = ||b|| / ||E|| as the run without --rescale-w; the
    source embedding of `decoder` sharing is untouched."""
    kw = dict(steps=1, bias_init="unigram", lr=1e-12, options=dict(share_embeddings=share))
    plain = run(tmp_path, parallel_corpus, "plain", **kw)
    scaled = run(tmp_path, parallel_corpus, "scaled", rescale_w="fro", **kw)
    with open_checkpoint(plain.checkpoint.parent / "step-0.safetensors") as a, \
            open_checkpoint(scaled.checkpoint.parent / "step-0.safetensors") as b:
        name = "shared.weight" if share == "all" else "decoder.embed_tokens.weight"
        e0, e1, bias = a.get(name), b.get(name), b.get("final_logits_bias")
        assert "lm_head.weight" not in b.names()
        assert float(torch.linalg.norm(e1.double())) == pytest.approx(float(torch.linalg.norm(bias.double())), rel=1e-5)
        c = float(torch.linalg.norm(bias.double()) / torch.linalg.norm(e0.double()))
        torch.testing.assert_close(e1.double(), e0.double() * c, rtol=1e-5, atol=1e-7)
        if share == "decoder":
            torch.testing.assert_close(a.get("encoder.embed_tokens.weight"), b.get("encoder.embed_tokens.weight"),
                                       rtol=0, atol=0)


def test_bleu_and_chrf_are_sacrebleus() -> None:
    bleu, chrf, sig_b, sig_c = bleu_chrf(["the cat sat on the mat", "a b"], ["the cat sat on the mat", "a b c"])
    import sacrebleu

    assert bleu == pytest.approx(sacrebleu.corpus_bleu(["the cat sat on the mat", "a b"],
                                                       [["the cat sat on the mat", "a b c"]]).score)
    assert 0 < chrf <= 100 and "tok:13a" in sig_b and sig_c.startswith("nrefs:1")
    assert bleu_chrf(["x"], ["x y z w"])[0] < 100 and math.isfinite(bleu)
    assert np.isclose(bleu_chrf(["same words here now"], ["same words here now"])[0], 100.0)


@pytest.mark.parametrize("share,norm,roles", [
    ("all", "post", dict(input_embedding="shared.weight", output_weight="shared.weight", final_ln_bias=None)),
    ("decoder", "post", dict(input_embedding="decoder.embed_tokens.weight", output_weight="decoder.embed_tokens.weight")),
    ("none", "pre", dict(input_embedding="decoder.embed_tokens.weight", output_weight="lm_head.weight",
                         final_ln_bias="decoder.layer_norm.bias")),
])
def test_roles_of_translation_checkpoints(tmp_path: Path, share: str, norm: str, roles: dict) -> None:
    """probe-bias / patch-checkpoint / inspect find the output layer of nb's translation checkpoints: W (tied
    to the target embedding unless share none), b = final_logits_bias."""
    from nbcli.checkpoint.roles import resolve_roles
    from nbcli.models.seq2seq import Seq2SeqTransformer
    from nbcli.train.state import save_model

    cfg = Seq2SeqConfig(src_vocab_size=30, tgt_vocab_size=30 if share == "all" else 20, eos_id=2, decoder_start_id=1,
                        share_embeddings=share, norm=norm, d_model=8, n_head=2, d_ff=8)  # type: ignore[arg-type]
    save_model(tmp_path / "m.safetensors", Seq2SeqTransformer(cfg), {"nb.format": "nb-model/1",
                                                                     "nb.config": cfg.to_json()})
    with open_checkpoint(tmp_path / "m.safetensors") as ckpt:
        found = resolve_roles(ckpt)
    assert found.architecture == "nb" and found.get("output_bias") == "final_logits_bias"
    for role, name in roles.items():
        assert found.get(role) == name, role
    assert found.tied == (share != "none")


def test_word_vocabularies_are_built_from_the_training_pairs_and_kept(tmp_path: Path, parallel_corpus: Path) -> None:
    """-t words:min-freq=K (one joint vocabulary of both sides) and --src/--tgt-tokenizer words:... (one per
    side): built from the training pairs only, kept in the run, recorded by fingerprint."""
    from collections import Counter

    from nbcli.tokenizers import load_tokenizer
    from nbcli.tokenizers.words import split_words

    cfg = build_translation_config("tiny", {"src_lang": "de", "tgt_lang": "en", "d_ff": 64, "eval_sentences": 8},
                                   **{**SMALL, "steps": 1})
    train_translation(cfg, [str(parallel_corpus / "train")], "words:min-freq=3", "words:min-freq=3", tmp_path / "j",
                      valid=[str(parallel_corpus / "valid")])
    joint = load_tokenizer(tmp_path / "j" / "source-tokenizer.json")
    assert (tmp_path / "j" / "target-tokenizer.json").read_bytes() == joint.serialized()
    counts = Counter(w for side in ("de", "en") for line in (parallel_corpus / f"train.{side}").read_text().splitlines()
                     for w in split_words(line))
    assert set(joint.pieces()[4:]) == {w for w, c in counts.items() if c >= 3}
    with open_checkpoint(tmp_path / "j" / "step-1.safetensors") as ckpt:
        assert ckpt.metadata["nb.src_tokenizer_fingerprint"] == joint.fingerprint

    train_translation(cfg, [str(parallel_corpus / "train")], "words:min-freq=2", "words:min-freq=2,lower",
                      tmp_path / "s", valid=[str(parallel_corpus / "valid")])
    source = load_tokenizer(tmp_path / "s" / "source-tokenizer.json")
    de = Counter(w for line in (parallel_corpus / "train.de").read_text().splitlines() for w in split_words(line))
    assert set(source.pieces()[4:]) == {w for w, c in de.items() if c >= 2}


def test_word_vectors_initialise_each_side_by_word(tmp_path: Path, parallel_corpus: Path) -> None:
    """--embedding-init pretrained:VECTORS with a tokenizer per side: each side's rows matched to its own
    words (coverage per side in the summary); frozen, they stay the vectors."""
    from nbcli.tokenizers import load_tokenizer
    from tests.vectors.writers import write

    vocab = sorted({w for side in ("de", "en") for w in (parallel_corpus / f"train.{side}").read_text().split()})[:60]
    x = np.random.default_rng(0).normal(size=(len(vocab), 32)).astype(np.float32)
    vectors = write(tmp_path / "v.vec", "vec", vocab, x)
    cfg = build_translation_config("tiny", {"src_lang": "de", "tgt_lang": "en", "d_ff": 64, "eval_sentences": 8,
                                            "share_embeddings": "none", "freeze_embeddings": True},
                                   **{**SMALL, "steps": 1, "embedding_init": f"pretrained:{vectors}"})
    result = train_translation(cfg, [str(parallel_corpus / "train")], "words:min-freq=2", "words:min-freq=3",
                               tmp_path / "v", valid=[str(parallel_corpus / "valid")])
    assert set(result.embedding_coverage) == {"source", "target"}
    with open_checkpoint(tmp_path / "v" / "step-1.safetensors") as ckpt:
        for side, name in (("source", "encoder.embed_tokens.weight"), ("target", "decoder.embed_tokens.weight")):
            tok = load_tokenizer(tmp_path / "v" / f"{side}-tokenizer.json")
            emb = ckpt.get(name)
            hits = [(i, vocab.index(p)) for i, p in enumerate(tok.pieces()) if i >= 4 and p in vocab]
            assert result.embedding_coverage[side]["matched"] == len(hits) > 0
            for i, j in hits:
                assert torch.allclose(emb[i], torch.from_numpy(x[j]))


def test_an_update_builds_no_device_tensor_and_reads_once(tmp_path: Path, parallel_corpus: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 34 (tests/host_copies.py): with [Delim] guidance in the encoder and [Period] in the decoder
    over 2 micro-batches, an update builds no tensor from host data per batch (the target ids held once
    per device) and reads one thing on the host, its sums; its tokens are counted on the host, and they
    are the labelled target tokens."""
    from nbcli.train.runtime import device_ids
    from tests.host_copies import update_copies

    device_ids.cache_clear()
    counter = update_copies(monkeypatch)
    result = run(tmp_path, parallel_corpus, "r", steps=3, eval_every=10, grad_accum=2, ag_fraction=0.5,
                 ag_patterns=("delim",), options=dict(ag_decoder_fraction=0.25, ag_decoder_patterns=("period",)))
    assert len(counter.updates) == 3
    first = counter.updates[0]   # the [Delim] and [Period] ids of the joint tokenizer, built once in the run
    assert [kind for kind, where in first if where.startswith("runtime.py")] == ["torch.tensor"] * 2, first
    for events in [[e for e in first if not e[1].startswith("runtime.py")], *counter.updates[1:]]:
        assert [kind for kind, _ in events] == ["tolist"], events
        assert events[0][1].startswith("step.py")
    # 3 updates of 16 pairs: each pair's target tokens and its EOS
    from nbcli.tasks.translation_data import collate, conventions, tokenize_pairs
    from nbcli.tokenizers import load_tokenizer
    from nbcli.train.data import TrainSampler

    tok = load_tokenizer(parallel_corpus / "joint.model")
    data = tokenize_pairs([str(parallel_corpus / "train")], [str(parallel_corpus / "valid")], tok, tok, "de", "en",
                          64, 0.0)
    rows = TrainSampler(len(data.train_src), 0).blocks(0, 3 * 16)
    batch = collate(data.train_src, data.train_tgt, rows, conventions(tok, tok), torch.device("cpu"))
    assert result.tokens == batch.tokens == int((batch.labels != -100).sum()) == sum(len(data.train_tgt[i]) + 1
                                                                                    for i in rows)


@pytest.mark.parametrize("preset,share", [("kim-3", None), ("tiny", "none")])
def test_freezing_embeddings_never_freezes_an_untied_output_layer(tmp_path: Path, parallel_corpus: Path,
                                                                  preset: str, share: str | None) -> None:
    """kim-3 is untied, as the PyTorch tutorial paper 002 app. A.2 follows (a separate generator layer):
    --freeze-embeddings (table 3's "Train: no") keeps the source and target embeddings, while the
    output matrix W, its own tensor, trains with the rest."""
    assert PRESETS["kim-3"]["task_options"]["share_embeddings"] == "none"
    options = {"src_lang": "de", "tgt_lang": "en", "d_ff": 64, "eval_sentences": 4, "freeze_embeddings": True,
               "share_embeddings": share}
    cfg = build_translation_config(preset, options, d_model=32, n_head=4, n_layer=1, batch_size=16, eval_batches=1,
                                   eval_every=2, steps=2, seq_len=64, lr=1e-3)
    assert cfg.tie_embeddings is False and cfg.task_options["share_embeddings"] == "none"
    train_translation(cfg, [str(parallel_corpus / "train")], parallel_corpus / "joint.model",
                      parallel_corpus / "joint.model", tmp_path / "k", valid=[str(parallel_corpus / "valid")])
    with open_checkpoint(tmp_path / "k" / "step-0.safetensors") as a, \
            open_checkpoint(tmp_path / "k" / "step-2.safetensors") as b:
        config = Seq2SeqConfig.from_json(b.metadata["nb.config"])
        assert config.share_embeddings == "none"
        for name in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"):
            assert torch.equal(a.get(name), b.get(name)), name
        assert not torch.equal(a.get("lm_head.weight"), b.get("lm_head.weight"))


def test_a_run_begun_before_a_task_option_existed_resumes(tmp_path: Path, parallel_corpus: Path) -> None:
    """config.json of an older run lacks task options added since (here --columns): it resumes, the
    option at its unset default; giving the new option a value on --resume is refused."""
    run(tmp_path, parallel_corpus, "cut", steps=4, stop_at=2)
    config = tmp_path / "cut" / "config.json"
    data = json.loads(config.read_text())
    del data["task_options"]["columns"]
    config.write_text(json.dumps(data, indent=2) + "\n")
    run(tmp_path, parallel_corpus, "cut", steps=4, resume=True)
    assert [r["step"] for r in read_log(tmp_path / "cut") if "loss" in r][-1] == 3
    with pytest.raises(ConfigError, match="options differ"):
        run(tmp_path, parallel_corpus, "cut", steps=4, resume=True, options=dict(columns="tgt,src"))


@pytest.mark.parametrize("metric", ["val_loss", "val_chrf"])
def test_select_by_keeps_the_checkpoint_the_metric_names(tmp_path: Path, parallel_corpus: Path, metric: str) -> None:
    """--select-by val_loss keeps the lowest validation loss (paper 002), val_chrf the highest chrF; the
    kept step is the one log.jsonl names, best.safetensors holds it, summary.json says by what."""
    result = run(tmp_path, parallel_corpus, "r", steps=6, eval_every=2, options=dict(select_by=metric))
    evals = [r for r in read_log(tmp_path / "r") if metric in r and (r["step"] % 2 == 0 or r["step"] == 6)]
    pick = min if metric.endswith("loss") else max
    best_value = pick(r[metric] for r in evals)
    expected = next(r["step"] for r in evals if r[metric] == best_value)   # the earliest on a tie
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["best_step"] == expected == result.best_step and summary["select_by"] == metric
    assert summary["best_val_bleu"] == next(r["val_bleu"] for r in evals if r["step"] == expected)
    with open_checkpoint(tmp_path / "r" / "best.safetensors") as ckpt:
        assert int(ckpt.metadata["nb.step"]) == expected


def test_select_by_refuses_a_metric_the_task_does_not_log() -> None:
    with pytest.raises(ConfigError, match="--select-by val_accuracy: nb train translation logs val_bleu, val_chrf, "
                                          "val_loss"):
        build_translation_config("tiny", {"src_lang": "de", "tgt_lang": "en", "select_by": "val_accuracy"})
