"""The encoder-decoder (nbcli.models.seq2seq): one layer by hand, masks, positions, the KV cache, layout."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nbcli.errors import ConfigError
from nbcli.models.blocks import sinusoid_table
from nbcli.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
from nbcli.decoding.kv_cache import KVCache


def config(**kw: object) -> Seq2SeqConfig:
    base = dict(src_vocab_size=40, tgt_vocab_size=40, eos_id=2, decoder_start_id=1, pad_id=0, src_eos_id=2,
                d_model=16, n_head=4, d_ff=24, encoder_layers=2, decoder_layers=2, max_positions=64)
    base.update(kw)
    return Seq2SeqConfig(**base)  # type: ignore[arg-type]


def model(seed: int = 0, **kw: object) -> Seq2SeqTransformer:
    torch.manual_seed(seed)
    m = Seq2SeqTransformer(config(**kw)).double().eval()
    with torch.no_grad():   # nonzero biases and LayerNorm affines, so the hand computation checks them too
        for p in m.parameters():
            if p.dim() == 1:
                p.normal_(0, 0.3)
    return m


# -- one layer by hand ------------------------------------------------------------------------------

def layer_norm(x: torch.Tensor, ln: torch.nn.LayerNorm) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + ln.eps) * ln.weight + ln.bias


def attention(x: torch.Tensor, memory: torch.Tensor, attn: torch.nn.Module, allowed: torch.Tensor) -> torch.Tensor:
    """softmax(Q K^T / sqrt(dh) + mask) V written out head by head, for one sequence (x [T, d], memory [S, d])."""
    H = attn.n_head
    d = x.size(-1)
    dh = d // H
    q = x @ attn.q_proj.weight.T + attn.q_proj.bias
    k = memory @ attn.k_proj.weight.T + attn.k_proj.bias
    v = memory @ attn.v_proj.weight.T + attn.v_proj.bias
    heads = []
    for h in range(H):
        cols = slice(h * dh, (h + 1) * dh)
        scores = q[:, cols] @ k[:, cols].T / math.sqrt(dh)
        scores = scores.masked_fill(~allowed, float("-inf"))
        heads.append(torch.softmax(scores, -1) @ v[:, cols])
    return torch.cat(heads, -1) @ attn.out_proj.weight.T + attn.out_proj.bias


def ffn(x: torch.Tensor, layer: torch.nn.Module) -> torch.Tensor:
    return torch.relu(x @ layer.fc1.weight.T + layer.fc1.bias) @ layer.fc2.weight.T + layer.fc2.bias


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_encoder_and_decoder_layers_by_hand(norm: str) -> None:
    m = model(norm=norm)
    enc, dec = m.encoder.layers[0], m.decoder.layers[0]
    torch.manual_seed(1)
    x, y = torch.randn(1, 5, 16, dtype=torch.float64), torch.randn(1, 4, 16, dtype=torch.float64)
    src_mask = torch.tensor([[True, True, True, False, False]])

    def sub(h: torch.Tensor, ln: torch.nn.LayerNorm, f) -> torch.Tensor:  # noqa: ANN001
        return h + f(layer_norm(h, ln)) if norm == "pre" else layer_norm(h + f(h), ln)

    keys = src_mask[0][None, :].expand(5, 5)
    want = sub(x[0], enc.self_attn_layer_norm, lambda h: attention(h, h, enc.self_attn, keys))
    want = sub(want, enc.final_layer_norm, lambda h: ffn(h, enc))
    got, _ = enc(x, src_mask, None)
    torch.testing.assert_close(got[0, :3], want[:3])           # padded rows: never read, not compared

    memory = torch.randn(1, 5, 16, dtype=torch.float64)
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    cross = src_mask[0][None, :].expand(4, 5)
    want = sub(y[0], dec.self_attn_layer_norm, lambda h: attention(h, h, dec.self_attn, causal))
    want = sub(want, dec.encoder_attn_layer_norm, lambda h: attention(h, memory[0], dec.encoder_attn, cross))
    want = sub(want, dec.final_layer_norm, lambda h: ffn(h, dec))
    got, _ = dec(y, dec.encoder_attn.project_kv(memory), src_mask, None, None)
    torch.testing.assert_close(got[0], want)


def test_whole_model_by_hand() -> None:
    """Embeddings scaled by sqrt(d) plus sinusoids, the layers, logits = g W^T + b with W the target embedding."""
    m = model(share_embeddings="decoder", encoder_layers=1, decoder_layers=1)
    src, tgt = torch.tensor([[5, 6, 7, 2]]), torch.tensor([[1, 9, 8]])
    P = sinusoid_table(64, 16).double()
    h = m.encoder.embed_tokens.weight[src[0]] * 4.0 + P[:4]
    h, _ = m.encoder.layers[0](h[None], None, None)
    g = m.decoder.embed_tokens.weight[tgt[0]] * 4.0 + P[:3]
    g, _ = m.decoder.layers[0](g[None], m.decoder.layers[0].encoder_attn.project_kv(h), None, None, None)
    want = g[0] @ m.decoder.embed_tokens.weight.T + m.final_logits_bias
    logits, _ = m(src, tgt)
    assert logits.dtype == torch.float32     # the output layer is float32 whatever the model's dtype (output_logits)
    torch.testing.assert_close(logits[0], want.float())


def test_sinusoids_are_vaswanis_and_marians() -> None:
    d = 10
    P = sinusoid_table(7, d)
    for p in range(7):
        for i in range(d // 2):
            angle = p / 10000 ** (2 * i / d)
            assert P[p, i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert P[p, d // 2 + i].item() == pytest.approx(math.cos(angle), abs=1e-6)
    marian = pytest.importorskip("transformers.models.marian.modeling_marian")
    table = marian.MarianSinusoidalPositionalEmbedding(7, d)
    assert torch.equal(table.create_weight(), P)


@pytest.mark.parametrize("positions,scale", [("learned", True), ("none", False), ("sinusoidal", False)])
def test_positions_and_scale(positions: str, scale: bool) -> None:
    m = model(positions=positions, scale_embedding=scale)
    ids = torch.tensor([[3, 4, 5]])
    x = m.encoder.embed(ids)
    want = m.encoder.embed_tokens.weight[ids[0]] * (4.0 if scale else 1.0)
    if positions == "learned":
        want = want + m.encoder.embed_positions.weight[:3]
    elif positions == "sinusoidal":
        want = want + sinusoid_table(64, 16).double()[:3]
    torch.testing.assert_close(x[0], want)
    if positions == "none":   # no position information: permuting the source permutes the encoder output
        perm = torch.tensor([2, 0, 1])
        out, _ = m.encode(ids)
        out_p, _ = m.encode(ids[:, perm])
        torch.testing.assert_close(out_p[0], out[0][perm])


# -- masks ------------------------------------------------------------------------------------------

@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10**6), pad_len=st.integers(1, 4), s_len=st.integers(1, 6), t_len=st.integers(1, 6))
def test_source_padding_never_leaks(seed: int, pad_len: int, s_len: int, t_len: int) -> None:
    """A sentence's logits are the same alone and padded in a batch, whatever the padding ids are."""
    m = model(seed % 7)
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 40, (1, s_len), generator=g)
    tgt = torch.randint(3, 40, (1, t_len), generator=g)
    alone, _ = m(src, tgt)
    for filler in (torch.zeros(1, pad_len, dtype=torch.long), torch.randint(0, 40, (1, pad_len), generator=g)):
        padded = torch.cat([src, filler], 1)
        mask = torch.arange(s_len + pad_len)[None] < s_len
        got, _ = m(padded, tgt, mask)
        torch.testing.assert_close(got, alone)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10**6), t_len=st.integers(2, 7), cut=st.integers(0, 5))
def test_no_future_target_position_leaks(seed: int, t_len: int, cut: int) -> None:
    """Changing target tokens after position t leaves the logits at positions <= t unchanged; target padding
    at the end changes nothing before it."""
    cut = min(cut, t_len - 2)
    m = model(seed % 5)
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 40, (2, 5), generator=g)
    tgt = torch.randint(3, 40, (2, t_len), generator=g)
    other = tgt.clone()
    shift = torch.randint(1, 37, (2, t_len - cut - 1), generator=g)       # every later token changed (a draw
    other[:, cut + 1:] = 3 + (tgt[:, cut + 1:] - 3 + shift) % 37           # could repeat it: nothing to reach)
    a, _ = m(src, tgt)
    b, _ = m(src, other)
    torch.testing.assert_close(a[:, :cut + 1], b[:, :cut + 1])
    assert not torch.allclose(a[:, cut + 1:], b[:, cut + 1:])          # the perturbation does reach later positions
    tgt_mask = torch.arange(t_len)[None].expand(2, -1) <= cut
    c, _ = m(src, other, None, tgt_mask)
    torch.testing.assert_close(c[:, :cut + 1], a[:, :cut + 1])


def test_incremental_decoding_with_the_cache_equals_the_full_pass() -> None:
    m = model(3)
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    src_mask = torch.tensor([[True] * 4, [True, True, True, False]])
    tgt = torch.tensor([[1, 11, 12, 13, 14], [1, 15, 16, 17, 18]])
    full, _ = m(src, tgt, src_mask)
    memory, _ = m.encode(src, src_mask)
    cross = m.cross_kv(memory)
    cache = KVCache(2, 4, 4, capacity=2)              # grows (doubling, copying) on the way
    steps = []
    for t in range(5):
        kv = cache.reserve(2, 1, torch.float64, torch.device("cpu"))
        logits, _ = m.decode(tgt[:, t:t + 1], cross, src_mask, kv=kv, past=cache.length)
        cache.length += 1
        steps.append(logits[:, 0])
    torch.testing.assert_close(torch.stack(steps, 1), full)


def test_guided_heads_hand_back_their_queries_and_keys() -> None:
    m = model()
    src, tgt = torch.tensor([[5, 6, 7]]), torch.tensor([[1, 9]])
    _, (enc, dec) = m(src, tgt, guided=[0, 2], guided_decoder=[1])
    assert len(enc) == 2 and len(dec) == 2
    assert enc[0][0].shape == (1, 2, 3, 4) and dec[0][1].shape == (1, 1, 2, 4)
    _, (enc, dec) = m(src, tgt)
    assert enc == [] and dec == []


# -- layout -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("share,names", [
    ("all", {"shared.weight"}),
    ("decoder", {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight"}),
    ("none", {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight"}),
])
def test_checkpoint_names_and_round_trip(share: str, names: set[str]) -> None:
    m = model(share_embeddings=share, tgt_vocab_size=40 if share == "all" else 30)
    state = m.nb_state_dict()
    embeddings = {n for n in state if "embed_tokens" in n or n in ("shared.weight", "lm_head.weight")}
    assert embeddings == names
    assert "final_logits_bias" in state and "encoder.layers.1.self_attn.q_proj.weight" in state
    assert "decoder.layers.0.encoder_attn_layer_norm.bias" in state and "decoder.layers.1.fc2.weight" in state
    other = model(seed=9, share_embeddings=share, tgt_vocab_size=40 if share == "all" else 30)
    other.load_nb_state_dict(state)
    src, tgt = torch.tensor([[5, 6]]), torch.tensor([[1, 7]])
    torch.testing.assert_close(other(src, tgt)[0], m(src, tgt)[0])
    with pytest.raises(ConfigError, match="missing"):
        other.load_nb_state_dict({k: v for k, v in state.items() if k != "final_logits_bias"})


def test_no_bias_option_removes_the_parameter() -> None:
    m = model(output_bias=False)
    assert m.final_logits_bias is None and "final_logits_bias" not in m.nb_state_dict()


@pytest.mark.parametrize("kw,fragment", [
    (dict(d_model=15), "divisible"), (dict(share_embeddings="all", tgt_vocab_size=30), "one vocabulary"),
    (dict(eos_id=99), "eos_id"), (dict(norm="sandwich"), "norm"), (dict(d_model=12, n_head=4, positions="sinusoidal",
                                                                        d_ff=8), None),
])
def test_config_checks(kw: dict, fragment: str | None) -> None:
    if fragment is None:
        config(**kw)
        return
    with pytest.raises(ConfigError, match=fragment):
        config(**kw)


def test_sequences_longer_than_the_position_table_are_refused() -> None:
    m = model(max_positions=4)
    with pytest.raises(ConfigError, match="max_positions"):
        m.encode(torch.ones(1, 5, dtype=torch.long))


@pytest.mark.parametrize("V,share,bias", [(37, "decoder", True), (64, "none", False), (65, "all", True)])
def test_the_output_matmul_padded_as_on_cuda_gives_the_same_logits_loss_and_gradients(
        V: int, share: str, bias: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 34: with the CUDA rule forced on the CPU (`nbcli.models.output.PAD_DEVICES`), the decoder's output
    matmul runs over W padded to a multiple of 64 rows, as the LM's (`output_multiple`), and returns the
    same V logits, the same loss and the same gradients; `vocab_multiple = 1` turns the padding off."""
    import nbcli.models.output as output

    torch.manual_seed(V)
    m = Seq2SeqTransformer(config(src_vocab_size=V, tgt_vocab_size=V, share_embeddings=share, output_bias=bias))
    g = torch.Generator().manual_seed(V)
    src, tgt = torch.randint(3, V, (3, 6), generator=g), torch.randint(3, V, (3, 5), generator=g)
    labels = torch.randint(0, V, (3, 5), generator=g)
    labels[0, 3:] = -100

    def run() -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
        logits, _ = m(src, tgt)
        loss = output.lm_loss(logits, labels, 0.1, reduction="sum")
        return logits, loss, torch.autograd.grad(loss, list(m.parameters()))

    plain = run()
    sizes: list[tuple[int, int]] = []
    padded_size = output.padded_size
    monkeypatch.setattr(output, "PAD_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(output, "padded_size", lambda n, k: sizes.append((n, k)) or padded_size(n, k))
    padded = run()
    assert sizes == [(V, 64)]                               # the padded matmul ran, once
    assert padded[0].shape == plain[0].shape == (3, 5, V)
    torch.testing.assert_close(padded[0], plain[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(padded[1], plain[1], rtol=1e-6, atol=1e-5)
    for a, b in zip(plain[2], padded[2]):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    with torch.no_grad():   # an incremental decoding step (a few rows) is not padded
        sizes.clear()
        memory, _ = m.encode(src)
        kv = KVCache(2, 4, 4, capacity=2).reserve(3, 1, torch.float32, torch.device("cpu"))
        m.decode(tgt[:, :1], m.cross_kv(memory), kv=kv, past=0)
        assert sizes == [(V, 1)]
    m.vocab_multiple = 1
    sizes.clear()
    run()
    assert sizes == [(V, 1)]
