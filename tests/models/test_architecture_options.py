"""The architecture choices paper 002 varies (app. A.1-A.2, sec. 6) against independent computations:
post-LN blocks from their parts, x sqrt(D) + positions, frozen sinusoids, and each initialisation
scheme's distribution (Xavier's bound, fairseq's gains, GPT-2's std) for the LM/encoder and the
encoder-decoder; the defaults draw exactly what they drew before."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from nbcli.errors import ConfigError
from nbcli.models.lm import ModelConfig, Transformer, positions_table
from nbcli.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer


def _lm(**kw: object) -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelConfig(vocab_size=50, seq_len=16, n_layer=2, n_head=4, d_model=32, objective="mlm",
                                   mask_id=49, **kw)).eval()


def test_post_ln_block_is_ln_of_the_residual_sums() -> None:
    model = _lm(norm="post")
    block = model.blocks[0]
    x = torch.randn(2, 5, 32)
    q, k, v = block.attn.qkv(x).split(32, dim=2)
    heads = [t.view(2, 5, 4, 8).transpose(1, 2) for t in (q, k, v)]
    scores = heads[0] @ heads[1].transpose(-1, -2) / math.sqrt(8)
    attended = (scores.softmax(-1) @ heads[2]).transpose(1, 2).reshape(2, 5, 32)
    h = block.ln1(x + block.attn.proj(attended))
    expected = block.ln2(h + block.mlp.proj(F.gelu(block.mlp.fc(h))))
    with torch.no_grad():
        assert torch.allclose(block(x, None, None)[0], expected, atol=1e-5)
        pre = _lm().blocks[0]
        assert not torch.allclose(pre(x, None, None)[0], block(x, None, None)[0])


@pytest.mark.parametrize("positions", ["sinusoidal", "none", "learned"])
def test_scaled_embedding_plus_positions(positions: str) -> None:
    """x^0 = sqrt(D) E[x] + P (paper 002 eq. 2-3): a model whose blocks see x^0 (hooked) against it computed by hand."""
    model = _lm(scale_embedding=True, positions=positions)
    seen = {}

    def keep(module: torch.nn.Module, args: tuple) -> None:
        seen["x"] = args[0]

    model.blocks[0].register_forward_pre_hook(keep)
    idx = torch.randint(0, 49, (2, 7))
    with torch.no_grad():
        model.encode(idx)
    table = {"sinusoidal": positions_table(16, 32), "none": torch.zeros(16, 32),
             "learned": model.pos_emb.weight.detach()}[positions]
    assert torch.allclose(seen["x"], model.tok_emb.weight[idx].detach() * math.sqrt(32) + table[:7], atol=1e-6)
    assert model.pos_emb.weight.requires_grad is (positions == "learned")


def _bound(fan_in: int, fan_out: int, gain: float = 1.0) -> float:
    return gain * math.sqrt(6.0 / (fan_in + fan_out))


def _uniform_in(w: torch.Tensor, bound: float) -> None:
    """Within the bound and filling it: the spread of U(-bound, bound) (std bound/sqrt 3, 5 %)."""
    w = w.detach()
    assert float(w.abs().max()) <= bound + 1e-7
    assert float(w.std()) == pytest.approx(bound / math.sqrt(3), rel=0.05)


def test_lm_xavier_scheme_is_xavier_on_every_weight_matrix() -> None:
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=300, seq_len=64, n_layer=2, n_head=4, d_model=64, d_ff=256,
                                    tie_embeddings=False, init="xavier"))
    d = 64
    for block in model.blocks:
        _uniform_in(block.attn.qkv.weight, _bound(d, 3 * d))     # the fused [3d, d], as nn.MultiheadAttention's
        _uniform_in(block.attn.proj.weight, _bound(d, d))
        _uniform_in(block.mlp.fc.weight, _bound(d, 256))
        _uniform_in(block.mlp.proj.weight, _bound(256, d))
        assert not block.attn.qkv.bias.any() and not block.mlp.fc.bias.any()
    _uniform_in(model.head_weight, _bound(d, 300))                # a non-embedding matrix
    assert float(model.tok_emb.weight.detach().std()) == pytest.approx(0.02, rel=0.05)   # embeddings: N(0, 0.02)


def test_lm_fairseq_scheme() -> None:
    torch.manual_seed(0)
    d = 64
    model = Transformer(ModelConfig(vocab_size=300, seq_len=64, n_layer=2, n_head=4, d_model=d, d_ff=256,
                                    tie_embeddings=False, init="fairseq"))
    for part in model.blocks[0].attn.qkv.weight.chunk(3):
        _uniform_in(part, _bound(d, d, 2 ** -0.5))
    _uniform_in(model.blocks[0].mlp.fc.weight, _bound(d, 256))
    for w in (model.tok_emb.weight, model.head_weight):
        assert float(w.detach().std()) == pytest.approx(d ** -0.5, rel=0.05)


def _gpt2_init_as_it_was(model: Transformer) -> None:
    """GPT-2's initialisation as nb wrote it before the schemes: N(0, 0.02), the residual projections
    N(0, 0.02 / sqrt(2L)), embeddings N(0, 0.02), biases 0, LayerNorm 1/0, parent first."""
    std = model.cfg.init_std
    residual = {m for block in model.blocks for m in (block.attn.proj, block.mlp.proj)}
    for module in model.modules():
        if module is model:
            if model.head_weight is not None:
                torch.nn.init.normal_(model.head_weight, 0.0, std)
            if model.head_bias is not None:
                torch.nn.init.zeros_(model.head_bias)
        elif isinstance(module, torch.nn.Linear):
            scale = math.sqrt(2 * model.cfg.n_layer) if module in residual else 1.0
            torch.nn.init.normal_(module.weight, 0.0, std / scale)
            torch.nn.init.zeros_(module.bias)
        elif isinstance(module, torch.nn.Embedding):
            torch.nn.init.normal_(module.weight, 0.0, std)
        elif isinstance(module, torch.nn.LayerNorm):
            torch.nn.init.ones_(module.weight)
            torch.nn.init.zeros_(module.bias)


@pytest.mark.parametrize("tie", [True, False])
def test_lm_gpt2_scheme_draws_as_before(tie: bool) -> None:
    """The default scheme draws exactly what nb drew before the schemes existed (bit for bit)."""
    cfg = ModelConfig(vocab_size=50, seq_len=16, n_layer=3, n_head=4, d_model=32, tie_embeddings=tie)
    ours, theirs = Transformer(cfg), Transformer(cfg)
    torch.manual_seed(1)
    ours.reset_parameters()
    torch.manual_seed(1)
    _gpt2_init_as_it_was(theirs)
    for (name, a), (_, b) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert torch.equal(a, b), name


def test_bad_architecture_values_are_refused() -> None:
    for kw in (dict(norm="sandwich"), dict(positions="rotary"), dict(init="kaiming")):
        with pytest.raises(ConfigError, match=next(iter(kw))):
            ModelConfig(vocab_size=10, **kw)


def _s2s(init: str, d: int = 64, layers: int = 2) -> Seq2SeqTransformer:
    torch.manual_seed(0)
    return Seq2SeqTransformer(Seq2SeqConfig(src_vocab_size=300, tgt_vocab_size=300, eos_id=2, decoder_start_id=1,
                                            encoder_layers=layers, decoder_layers=layers, n_head=4, d_model=d, d_ff=256,
                                            share_embeddings="none", init=init))  # type: ignore[arg-type]


def test_seq2seq_xavier_scheme_is_paper_002s() -> None:
    """Every weight matrix Xavier (paper 002 secs. 5-6), q/k/v at the bound of nn.MultiheadAttention's fused
    in_proj_weight [3d, d], the output W too; embeddings N(0, d^-1/2) (--embedding-init sets them)."""
    model, d = _s2s("xavier"), 64
    for layer in [*model.encoder.layers, *model.decoder.layers]:
        for attn in [m for m in layer.modules() if type(m).__name__ == "Attention"]:
            for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
                _uniform_in(proj.weight, _bound(d, 3 * d))
                assert not proj.bias.any()
            _uniform_in(attn.out_proj.weight, _bound(d, d))
        _uniform_in(layer.fc1.weight, _bound(d, 256))
    _uniform_in(model.lm_head_weight, _bound(d, 300))
    assert float(model.encoder.embed_tokens.weight.detach().std()) == pytest.approx(d ** -0.5, rel=0.05)


def test_seq2seq_gpt2_scheme_and_fairseq_default() -> None:
    model, d = _s2s("gpt2", layers=3), 64
    layer = model.decoder.layers[0]
    assert float(layer.fc1.weight.detach().std()) == pytest.approx(0.02, rel=0.05)
    for w in (layer.fc2.weight, layer.self_attn.out_proj.weight, layer.encoder_attn.out_proj.weight):
        assert float(w.detach().std()) == pytest.approx(0.02 / math.sqrt(6), rel=0.1)
    assert float(model.lm_head_weight.detach().std()) == pytest.approx(0.02, rel=0.05)
    fairseq = _s2s("fairseq")
    _uniform_in(fairseq.encoder.layers[0].self_attn.q_proj.weight, _bound(d, d, 2 ** -0.5))
    assert Seq2SeqConfig(src_vocab_size=5, tgt_vocab_size=5, eos_id=2, decoder_start_id=1).init == "fairseq"


def test_classifier_from_scratch_with_paper_002s_input_round_trips(tmp_path) -> None:
    """nb train classification --norm post --scale-embedding --init-scheme xavier --positions sinusoidal: the
    run's encoder has them (checkpoint metadata), nb predict's loaded model gives the run's logits."""
    import json

    from nbcli.tasks.inference import load_classifier, run_model
    from nbcli.tasks.data import encode_file, padding_id, read_records
    from tests.cli.helpers import invoke
    from tests.tasks.builders import encoder_folder, write_corpus
    from tests.tasks.test_finetune import pairs

    bert = encoder_folder(tmp_path / "bert", "bert")
    train = write_corpus(tmp_path / "train.tsv", pairs(16), "tsv")
    result = invoke("train", "classification", "-t", bert / "tokenizer.json", "--corpus", train, "--text-field",
                    "sentence1", "--norm", "post", "--scale-embedding", "--init-scheme", "xavier", "--positions",
                    "sinusoidal", "--n-layer", "1", "--d-model", "32", "--n-head", "2", "--d-ff", "48", "--steps", "2",
                    "--batch-size", "8", "--out", tmp_path / "run", "--json")
    assert result.exit_code == 0, result.stderr
    loaded = load_classifier(tmp_path / "run")
    cfg = loaded.model.encoder.cfg
    assert (cfg.norm, cfg.scale_embedding, cfg.init, cfg.positions, cfg.d_ff, cfg.n_layer) == \
        ("post", True, "xavier", "sinusoidal", 48, 1)
    assert torch.equal(loaded.model.encoder.pos_emb.weight, positions_table(*loaded.model.encoder.pos_emb.weight.shape))
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["encoder_options"] == {"n_layer": 1, "d_ff": 48, "norm": "post", "scale_embedding": True,
                                         "init_scheme": "xavier"}
    records = read_records(loaded.spec, [str(train)])
    data = encode_file(loaded.spec, loaded.tokenizer, records, loaded.labels)
    logits, loss = run_model(loaded.model, data, padding_id(loaded.tokenizer), 4, torch.device("cpu"))
    assert loss is not None and math.isfinite(loss) and all(torch.isfinite(lg).all() for lg in logits)


def test_lm_with_the_paper_002_input_trains_and_evaluates(tmp_path, sp_model, train_corpus) -> None:
    import json

    from tests.cli.helpers import invoke

    result = invoke("train", "--corpus", train_corpus, "-t", sp_model, "--norm", "post", "--scale-embedding",
                    "--positions", "sinusoidal", "--init-scheme", "fairseq", "--steps", "2", "--eval-every", "1",
                    "--batch-size", "4", "--seq-len", "16", "--out", tmp_path / "lm", "--json")
    assert result.exit_code == 0, result.stderr
    config = json.loads((tmp_path / "lm" / "config.json").read_text())
    assert (config["norm"], config["scale_embedding"], config["positions"], config["init_scheme"]) == \
        ("post", True, "sinusoidal", "fairseq")
    few = tmp_path / "few.txt"
    few.write_text("".join(Path(train_corpus).read_text().splitlines(keepends=True)[:20]))
    scored = invoke("eval", tmp_path / "lm" / "step-2.safetensors", "--corpus", few, "-t", sp_model, "--json")
    assert scored.exit_code == 0, scored.stderr
    assert math.isfinite(json.loads(scored.stdout)["rows"][0]["loss"])


def test_translation_init_scheme_reaches_the_model() -> None:
    from nbcli.tasks.translation import build_translation_config

    cfg = build_translation_config("paper002-multi30k-glove", {"src_lang": "de", "tgt_lang": "en"})
    assert cfg.task_options["init_scheme"] == "xavier"
    assert build_translation_config("tiny", {"src_lang": "de", "tgt_lang": "en"}).task_options["init_scheme"] == \
        "fairseq"
    with pytest.raises(ConfigError, match="--init-scheme"):
        build_translation_config("tiny", {"src_lang": "de", "tgt_lang": "en", "init_scheme": "kaiming"})
