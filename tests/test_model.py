"""The reference Transformer: shapes, nb's tensor names, masking, attention vs an explicit computation."""

from __future__ import annotations

import math

import pytest
import torch

from nbcli.errors import ConfigError
from nbcli.models.blocks import attention_mask
from nbcli.models.lm import ModelConfig, Transformer
from nbcli.models.masking import mlm_mask
from nbcli.models.output import lm_loss


def tiny(**kw) -> ModelConfig:
    base = dict(vocab_size=50, seq_len=16, n_layer=2, n_head=4, d_model=32)
    base.update(kw)
    return ModelConfig(**base)


def test_nb_layout_names_follow_ties_bias_and_objective() -> None:
    names = set(Transformer(tiny()).nb_state_dict())
    assert {"tok_emb.weight", "pos_emb.weight", "ln_f.weight", "ln_f.bias", "head.bias",
            "blocks.1.attn.qkv.weight", "blocks.0.mlp.proj.bias", "blocks.0.ln2.weight"} <= names
    assert "head.weight" not in names and not any(n.startswith("mlm.") for n in names)
    names = set(Transformer(tiny(tie_embeddings=False, output_bias=False)).nb_state_dict())
    assert "head.weight" in names and "head.bias" not in names
    names = set(Transformer(tiny(objective="mlm", mask_id=3)).nb_state_dict())
    assert {"mlm.dense.weight", "mlm.dense.bias", "mlm.ln.weight", "mlm.ln.bias"} <= names


def test_state_dict_round_trip_and_config_json() -> None:
    cfg = tiny(tie_embeddings=False, objective="mlm", mask_id=3, special_ids=(0, 1))
    a, b = Transformer(cfg), Transformer(cfg)
    b.load_nb_state_dict(a.nb_state_dict())
    x = torch.randint(0, 50, (2, 16))
    assert torch.equal(a(x)[0], b(x)[0])
    assert ModelConfig.from_json(cfg.to_json()) == cfg
    with pytest.raises(ConfigError, match="does not match"):
        Transformer(tiny()).load_nb_state_dict({"bogus": torch.zeros(1)})


def test_causal_model_does_not_look_ahead() -> None:
    torch.manual_seed(0)
    model = Transformer(tiny()).eval()
    x = torch.randint(0, 50, (1, 12))
    y = x.clone()
    y[0, 7:] = (y[0, 7:] + 1) % 50
    torch.testing.assert_close(model(x)[0][:, :7], model(y)[0][:, :7])
    assert not torch.allclose(model(x)[0][:, 7:], model(y)[0][:, 7:])


def test_padding_keys_are_invisible() -> None:
    torch.manual_seed(0)
    for objective in ("clm", "mlm"):
        model = Transformer(tiny(objective=objective, mask_id=3)).eval()
        x = torch.randint(0, 50, (2, 10))
        y = x.clone()
        y[1, 6:] = 0
        mask = torch.ones(2, 10, dtype=torch.bool)
        mask[1, 6:] = False
        lx, ly = model(x, key_mask=mask)[0], model(y, key_mask=mask)[0]
        torch.testing.assert_close(lx[0], ly[0])
        torch.testing.assert_close(lx[1, :6], ly[1, :6])


def test_attention_equals_explicit_softmax() -> None:
    """One block's SDPA attention vs softmax(QK^T / sqrt(dh)) V written out (paper 001 eq. 1)."""
    torch.manual_seed(1)
    cfg = tiny(objective="mlm", mask_id=3)
    attn = Transformer(cfg).blocks[0].attn.eval()
    x = torch.randn(2, 9, 32)
    y, qk = attn(x, None, [0, 2])
    q, k, v = attn.qkv(x).split(32, dim=2)
    q, k, v = (t.view(2, 9, 4, 8).transpose(1, 2) for t in (q, k, v))
    H = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(8), dim=-1)
    expected = attn.proj((H @ v).transpose(1, 2).reshape(2, 9, 32))
    torch.testing.assert_close(y, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(qk[0], q[:, [0, 2]])


@pytest.mark.parametrize("objective", ["clm", "mlm"])
@pytest.mark.parametrize("padded", [False, True])
def test_attention_maps_reproduce_sdpa(objective: str, padded: bool) -> None:
    """The explicit maps of `attention_maps`: probs @ V equals SDPA's output for the same layer input,
    rows sum to 1, masked entries (future keys, padding keys) are exactly 0."""
    import torch.nn.functional as F

    torch.manual_seed(2)
    model = Transformer(tiny(objective=objective, mask_id=3))
    idx = torch.randint(0, 50, (2, 11))
    key_mask = None
    if padded:
        key_mask = torch.ones(2, 11, dtype=torch.bool)
        key_mask[1, 7:] = False
    inputs: dict[int, torch.Tensor] = {}
    hooks = [model.blocks[layer].attn.register_forward_pre_hook(
        lambda m, args, layer=layer: inputs.__setitem__(layer, args[0])) for layer in (0, 1)]
    maps = model.attention_maps(idx, [0, 1], key_mask)
    for hook in hooks:
        hook.remove()
    assert model.training                                    # the mode it came in with
    assert sorted(maps) == [0, 1]
    for layer, probs in maps.items():
        assert probs.shape == (2, 4, 11, 11) and probs.dtype == torch.float32
        attn = model.blocks[layer].attn
        q, k, v = attn.heads(inputs[layer])
        mask = None if key_mask is None else key_mask[:, None, None, :]
        if objective == "clm":
            causal = torch.ones(11, 11, dtype=torch.bool).tril()
            mask = causal if mask is None else mask & causal
        sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        torch.testing.assert_close(probs @ v, sdpa, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(probs.sum(-1), torch.ones(2, 4, 11), atol=1e-6, rtol=0)
        allowed = torch.ones(2, 1, 11, 11, dtype=torch.bool) if mask is None else mask.expand(2, 1, 11, 11)
        assert torch.all(probs.masked_select(~allowed.expand_as(probs)) == 0)
        assert torch.all(probs.masked_select(allowed.expand_as(probs)) > 0)


def test_guided_heads_qk_returned_per_layer() -> None:
    model = Transformer(tiny())
    logits, qks = model(torch.randint(0, 50, (3, 8)), guided=[1, 3])
    assert logits.shape == (3, 8, 50)
    assert len(qks) == 2 and qks[0][0].shape == (3, 2, 8, 8)
    assert model(torch.randint(0, 50, (3, 8)))[1] == []


def test_mlm_masking_rates_and_specials() -> None:
    cfg = tiny(vocab_size=1000, objective="mlm", mask_id=3, special_ids=(0, 1, 2, 3))
    x = torch.randint(4, 1000, (64, 512))
    x[:, 0] = 1
    inputs, labels = mlm_mask(x, cfg, torch.Generator().manual_seed(0))
    selected = labels != -100
    assert abs(selected.float().mean().item() - 0.15) < 0.005
    assert not selected[:, 0].any()                       # BOS never selected
    assert torch.equal(labels[selected], x[selected])
    masked = (inputs == 3) & selected
    kept = (inputs == x) & selected
    n = selected.sum().item()
    assert abs(masked.sum().item() / n - 0.8) < 0.01
    assert abs(kept.sum().item() / n - 0.1 - 0.1 / 1000) < 0.01   # 10% kept (+ random hits on itself)
    assert torch.equal(inputs[~selected], x[~selected])


def test_lm_loss_ignores_unlabelled_positions() -> None:
    logits = torch.randn(2, 5, 7)
    labels = torch.tensor([[1, 2, -100, 3, -100], [-100, -100, 4, 5, 6]])
    sel = labels != -100
    expected = -torch.log_softmax(logits[sel], -1)[torch.arange(int(sel.sum())), labels[sel]].mean()
    torch.testing.assert_close(lm_loss(logits, labels), expected)


def test_config_validation() -> None:
    with pytest.raises(ConfigError, match="divisible"):
        tiny(n_head=5)
    with pytest.raises(ConfigError, match="mask_id"):
        tiny(objective="mlm")
    with pytest.raises(ConfigError, match="seq_len"):
        Transformer(tiny())(torch.zeros(1, 17, dtype=torch.long))


def test_attention_mask_padding_causality_and_past() -> None:
    key_mask = torch.tensor([[True, True, True, False], [True, True, True, True]])
    mask, is_causal = attention_mask(key_mask, 2, 2, 2, True, torch.device("cpu"))
    assert mask is not None and mask.shape == (2, 1, 2, 4) and not is_causal
    # query 0 sits at position 2: keys 0..2, less row 0's padded key 3; query 1 at position 3: all real keys
    assert mask[0, 0].tolist() == [[True, True, True, False], [True, True, True, False]]
    assert mask[1, 0].tolist() == [[True, True, True, False], [True, True, True, True]]
    assert attention_mask(None, 2, 5, 0, True, torch.device("cpu")) == (None, True)    # SDPA's own causal kernel
    assert attention_mask(None, 2, 1, 7, True, torch.device("cpu")) == (None, False)   # one decoding query
    mask, _ = attention_mask(None, 1, 2, 3, True, torch.device("cpu"))
    assert mask is not None and mask[0, 0].tolist() == [[True] * 4 + [False], [True] * 5]


def test_kv_buffers_give_the_full_forward() -> None:
    """The model keeps no cache: the caller's per-layer buffers receive each step's keys/values."""
    torch.manual_seed(0)
    model = Transformer(tiny()).eval()
    x = torch.randint(0, 50, (2, 10))
    full = model(x)[0]
    kv = [(torch.zeros(2, 4, 16, 8), torch.zeros(2, 4, 16, 8)) for _ in range(2)]
    head = model(x[:, :6], kv=kv)[0]
    tail = [model(x[:, t:t + 1], kv=kv, past=t)[0] for t in range(6, 10)]
    torch.testing.assert_close(torch.cat([head] + tail, 1), full, atol=1e-5, rtol=1e-5)
    assert kv[0][0][:, :, :10].abs().sum() > 0 and kv[0][0][:, :, 10:].abs().sum() == 0
    assert not any(torch.is_tensor(v) for v in vars(model).values())
    with pytest.raises(ConfigError, match="causal"):
        Transformer(tiny(objective="mlm", mask_id=3))(x[:, :2], kv=kv)


def test_initialisation_by_module_type() -> None:
    """GPT-2's init: N(0, 0.02) weights, N(0, 0.02 / sqrt(2L)) residual projections, zero biases, unit LN gains."""
    cfg = tiny(vocab_size=3000, d_model=64, n_layer=4, tie_embeddings=False)
    torch.manual_seed(0)
    model = Transformer(cfg)
    for name, p in model.nb_state_dict().items():
        if name.endswith("bias"):
            assert not p.any(), name
        elif ".ln" in name or name.startswith("ln_f"):
            assert torch.equal(p, torch.ones_like(p)), name
        else:
            expected = 0.02 / math.sqrt(8) if name.endswith("proj.weight") else 0.02
            assert abs(p.std().item() / expected - 1) < 0.1 and abs(p.mean().item()) < 0.1 * expected, name
    torch.manual_seed(0)
    again = Transformer(cfg)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))


@pytest.mark.parametrize("objective", ["clm", "mlm"])
def test_output_layer_is_float32_under_bf16_autocast(objective: str) -> None:
    """Under (CPU) bf16 autocast the logits are h W^T + b computed in float32 from the final hidden
    state h: a bias of -15 is kept to float32 precision, where a bf16 projection rounds it in steps of 1/16."""
    torch.manual_seed(0)
    model = Transformer(tiny(objective=objective, mask_id=3 if objective == "mlm" else None, tie_embeddings=False))
    with torch.no_grad():
        model.head_bias.copy_(torch.randn(50) - 10)
        model.head_bias[7] = -15 + 1 / 3                 # no bf16 number: bf16's step there is 1/16
    final = model.mlm.ln if model.mlm is not None else model.ln_f
    kept: dict[str, torch.Tensor] = {}
    final.register_forward_hook(lambda _module, _args, out: kept.__setitem__("h", out))
    idx = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        logits, _ = model(idx)
        plain = torch.nn.functional.linear(kept["h"], model.output_weight, model.head_bias)  # autocast's own choice
    h, w, b = kept["h"], model.output_weight.detach(), model.head_bias.detach()
    assert logits.dtype == torch.float32 and plain.dtype == torch.bfloat16
    assert torch.equal(logits, torch.nn.functional.linear(h.float(), w, b))       # the float32 computation
    exact = h.double() @ w.double().T + b.double()
    torch.testing.assert_close(logits[..., 7].double(), exact[..., 7], rtol=2e-7, atol=1e-5)
    assert float((plain[..., 7].double() - exact[..., 7]).abs().max()) > 1e-3        # what a bf16 layer would give


@pytest.mark.parametrize("tie,bias,objective", [(True, True, "clm"), (False, True, "clm"), (False, False, "mlm")])
@pytest.mark.parametrize("guided", [0, 3])
def test_flops_per_token_is_a_hand_count(tie: bool, bias: bool, objective: str, guided: int) -> None:
    """MFU's numerator (issue 34): 6 x the weights that multiply, counted by hand from the shapes (the
    output matrix once, tied or not: an untied input table is a lookup), + 12 L T d for attention,
    + 6 L G T dh for the G guided heads' extra q k^T."""
    from nbcli.models.lm import training_flops_per_token

    V, T, L, H, d, ff = 97, 24, 3, 4, 32, 80
    cfg = ModelConfig(vocab_size=V, seq_len=T, n_layer=L, n_head=H, d_model=d, d_ff=ff, tie_embeddings=tie,
                      output_bias=bias, objective=objective, mask_id=0 if objective == "mlm" else None)
    per_layer = (d * 3 * d + 3 * d) + (d * d + d) + (d * ff + ff) + (ff * d + d) + 2 * 2 * d
    n = L * per_layer + 2 * d + V * d + (V if bias else 0) + ((d * d + d + 2 * d) if objective == "mlm" else 0)
    expected = 6 * n + 12 * L * T * d + 6 * L * guided * T * (d // H)
    assert Transformer(cfg).flops_per_token(guided) == expected
    assert training_flops_per_token(n, L, T, d, guided, d // H) == expected
    untied_total = Transformer(cfg).num_parameters() - T * d
    if not tie:   # the ~25 % the old 6 x (all but positions) counted at gpt2-124m: V d twice
        assert 6 * untied_total + 12 * L * T * d + 6 * L * guided * T * (d // H) - expected == 6 * V * d


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("rows_per_chunk", [1, 3, 7])
def test_chunked_lm_loss_equals_the_full_logits_loss(smoothing: float, rows_per_chunk: int) -> None:
    """Issue 34: the summed cross-entropy a chunk of rows at a time (no [N, V] float32 logits) equals
    lm_loss of output_logits on random float32 inputs, value and gradients; one chunk: bit for bit."""
    from nbcli.models.output import chunked_lm_loss, output_logits

    g = torch.Generator().manual_seed(rows_per_chunk)
    N, V, d = 20, 37, 16
    h = torch.randn(N, d, generator=g, requires_grad=True)
    w = (torch.randn(V, d, generator=g) * 0.3).requires_grad_(True)
    b = torch.randn(V, generator=g).requires_grad_(True)
    labels = torch.randint(0, V, (N,), generator=g)
    labels[::4] = -100
    full = lm_loss(output_logits(h, w, b), labels, smoothing, reduction="sum")
    chunked = chunked_lm_loss(h, w, b, labels, smoothing, chunk_elements=rows_per_chunk * V)
    torch.testing.assert_close(chunked, full, rtol=1e-6, atol=1e-5)
    for a, c in zip(torch.autograd.grad(full, (h, w, b)), torch.autograd.grad(chunked, (h, w, b))):
        torch.testing.assert_close(c, a, rtol=1e-5, atol=1e-6)
    one = chunked_lm_loss(h, w, b, labels, smoothing, chunk_elements=N * V)
    assert torch.equal(one, full)


def test_forward_with_labels_sums_the_loss_of_its_logits() -> None:
    cfg = ModelConfig(vocab_size=41, seq_len=12, n_layer=1, n_head=2, d_model=16, tie_embeddings=False)
    torch.manual_seed(0)
    model = Transformer(cfg)
    idx = torch.randint(0, 41, (3, 12))
    labels = torch.randint(0, 41, (3, 12))
    labels[1, 4:] = -100
    logits, _ = model(idx)
    summed, _ = model(idx, labels=labels, label_smoothing=0.1)
    assert torch.equal(summed, lm_loss(logits, labels, 0.1, reduction="sum"))


@pytest.mark.parametrize("V", [37, 64, 65])
def test_padded_output_matmul_gives_the_same_logits_and_gradients(V: int) -> None:
    """Issue 34: the output layer padded to a multiple of 64 rows (as on CUDA) returns the V logits of
    the unpadded one, and the same gradients for W and b (V rows each: checkpoints keep V)."""
    from nbcli.models.output import chunked_lm_loss, output_logits, padded_size

    assert padded_size(50_257, 64) == 50_304 and padded_size(64, 64) == 64 and padded_size(65, 64) == 128
    g = torch.Generator().manual_seed(V)
    h = torch.randn(2, 5, 16, generator=g, requires_grad=True)
    w = torch.randn(V, 16, generator=g, requires_grad=True)
    b = torch.randn(V, generator=g, requires_grad=True)
    plain = output_logits(h, w, b)
    padded = output_logits(h, w, b, multiple=64)
    assert padded.shape == plain.shape == (2, 5, V)
    torch.testing.assert_close(padded, plain, rtol=0, atol=1e-6)
    weights = torch.randn(plain.shape, generator=g)
    for a, c in zip(torch.autograd.grad((plain * weights).sum(), (h, w, b)),
                    torch.autograd.grad((padded * weights).sum(), (h, w, b))):
        assert c.shape == a.shape
        torch.testing.assert_close(c, a, rtol=1e-6, atol=1e-6)
    labels = torch.randint(0, V, (2, 5), generator=g)
    for chunk in (10 * V, 3 * V):   # one chunk; four chunks of 3 rows over W padded once
        torch.testing.assert_close(chunked_lm_loss(h, w, b, labels, 0.1, chunk, multiple=64),
                                   lm_loss(plain, labels, 0.1, reduction="sum"), rtol=1e-6, atol=1e-5)
    assert output_logits(h, w, None, multiple=64).shape == (2, 5, V)


def test_the_model_pads_its_output_matmul_on_cuda_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 34: `output_multiple` pads on CUDA alone; with that rule forced on the CPU the LM's logits and
    its summed loss (one chunk, then several) are those of the unpadded model."""
    import nbcli.models.output as output

    assert output.output_multiple(torch.zeros(1), 64) == 1
    model = Transformer(tiny(vocab_size=37, tie_embeddings=False))
    idx = torch.randint(0, 37, (2, 9), generator=torch.Generator().manual_seed(0))
    labels = torch.randint(0, 37, (2, 9), generator=torch.Generator().manual_seed(1))
    plain, _ = model(idx)
    summed, _ = model(idx, labels=labels, label_smoothing=0.1)
    sizes: list[tuple[int, int]] = []
    padded_size = output.padded_size
    monkeypatch.setattr(output, "PAD_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(output, "padded_size", lambda n, k: sizes.append((n, k)) or padded_size(n, k))
    assert output.output_multiple(torch.zeros(1), 64) == 64
    padded, _ = model(idx)
    assert sizes == [(37, 64)] and padded.shape == plain.shape
    torch.testing.assert_close(padded, plain, rtol=0, atol=1e-6)
    for chunk in (1 << 25, 37 * 4):   # one chunk; 4 rows a chunk (over W padded once)
        model.loss_chunk_elements = chunk
        sizes.clear()
        torch.testing.assert_close(model(idx, labels=labels, label_smoothing=0.1)[0], summed, rtol=1e-6, atol=1e-5)
        assert sizes[0] == (37, 64)
