"""Attention guidance for transformers models: the same L_AG as nb train, from maps or hooked q/k."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

transformers = pytest.importorskip("transformers")  # in the test extras; never skipped in CI

from nbcli.analysis.patterns import allowed_keys, assign_heads, pattern_matrix  # noqa: E402
from nbcli.errors import ConfigError  # noqa: E402
from nbcli.hf.guidance import attention_guidance_loss, capture_qk, right_padded_lengths  # noqa: E402
from nbcli.train.guidance import Guidance  # noqa: E402
from tests.hf.builders import gpt2_from_nb, nb_model  # noqa: E402

DELIM, PERIOD = (1, 2), (7,)


def _batch(vocab: int = 61, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Three rows, right-padded to T = 12, with delimiters (1, 2) and periods (7) among the tokens."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab - 1, (3, 12), generator=g)
    ids[:, 0] = 1
    ids[0, 5] = ids[1, 3] = 7
    lengths = torch.tensor([12, 9, 6])
    mask = torch.arange(12)[None, :] < lengths[:, None]
    ids[:, 11][lengths == 12] = 2
    return torch.where(mask, ids, torch.zeros_like(ids)), mask.long()


def _nb_train_loss(model, ids, mask, patterns, fraction, reduction):  # noqa: ANN001, ANN202
    """What nb train's optimizer_step computes: the model's guided (q, k) and Guidance.loss."""
    lengths = mask.sum(1)
    guidance = Guidance(assign_heads(model.cfg.n_head, fraction, patterns, model.cfg.causal), DELIM, PERIOD, reduction)
    _, qks = model(ids, key_mask=mask.bool(), guided=guidance.guided)
    return guidance.loss(qks, ids, lengths, model.cfg.causal)


def test_gpt2_built_from_nb_weights_is_the_same_function() -> None:
    model = nb_model()
    gpt2 = gpt2_from_nb(model)
    ids, mask = _batch()
    with torch.no_grad():
        ours = model(ids, key_mask=mask.bool())[0]
        theirs = gpt2(input_ids=ids, attention_mask=mask).logits
    real = mask.bool()
    torch.testing.assert_close(theirs[real], ours[real], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("patterns,fraction", [(None, 0.5), (("prev", "delim", "period"), 0.75), (("first",), 1.0)])
@pytest.mark.parametrize("reduction", ["mse", "frobenius"])
def test_loss_from_transformers_maps_equals_nb_train(patterns, fraction, reduction) -> None:  # noqa: ANN001
    """The same weights and batch (padded): nb train's loss from its model's q/k, the loss from
    GPT-2's output_attentions, and the loss from q/k hooked out of GPT-2 under SDPA are one number."""
    model = nb_model()
    gpt2 = gpt2_from_nb(model)
    ids, mask = _batch()
    expected = _nb_train_loss(model, ids, mask, patterns, fraction, reduction)
    kwargs = dict(attention_mask=mask, patterns=patterns, fraction=fraction, special_ids=DELIM, period_ids=PERIOD,
                  reduction=reduction)
    out = gpt2(input_ids=ids, attention_mask=mask, output_attentions=True)
    from_maps = attention_guidance_loss(out.attentions, ids, **kwargs)
    gpt2.set_attn_implementation("sdpa")
    with capture_qk(gpt2) as qk:
        gpt2(input_ids=ids, attention_mask=mask)
    from_hooks = attention_guidance_loss(qk, ids, **kwargs)
    assert float(expected.detach()) > 0
    torch.testing.assert_close(from_maps, expected, rtol=2e-5, atol=1e-7)
    torch.testing.assert_close(from_hooks, expected, rtol=2e-5, atol=1e-7)


def test_bidirectional_maps_and_qk_give_the_same_loss() -> None:
    """nb's MLM model (every pattern, [Next] included): Guidance.loss from its q/k equals
    attention_guidance_loss on its explicit maps (`Transformer.attention_maps`), causality read from the maps."""
    model = nb_model(objective="mlm", n_head=5)
    ids, mask = _batch()
    patterns = ("next", "prev", "first", "delim", "period")
    expected = _nb_train_loss(model, ids, mask, patterns, 1.0, "mse")
    maps = model.attention_maps(ids, [0, 1], key_mask=mask.bool())
    got = attention_guidance_loss([maps[0], maps[1]], ids, attention_mask=mask, patterns=patterns, fraction=1.0,
                                  special_ids=DELIM, period_ids=PERIOD)
    torch.testing.assert_close(got, expected, rtol=2e-5, atol=1e-7)


def _reference(maps: list[np.ndarray], ids: np.ndarray, lengths: np.ndarray, heads: dict[int, str], causal: bool) -> float:
    """L_AG in "mse" units written out: per layer and pattern group, sum over the group's heads and
    real rows of ||H_i - P_i||^2, divided by B G T^2 (the released code's nn.MSELoss per group)."""
    B, T = ids.shape
    total = 0.0
    for H in maps:
        for name in dict.fromkeys(heads.values()):
            group = [h for h, p in heads.items() if p == name]
            P = pattern_matrix(name, torch.from_numpy(ids), torch.from_numpy(lengths), causal, DELIM, PERIOD).numpy()
            err = 0.0
            for b, h in itertools.product(range(B), group):
                n = lengths[b]
                err += float(((H[b, h, :n] - P[b, :n]) ** 2).sum())
            total += err / (B * len(group) * T * T)
    return total


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.booleans(), st.integers(1, 8))
def test_loss_from_maps_matches_the_written_out_formula(seed: int, causal: bool, T: int) -> None:
    rng = np.random.default_rng(seed)
    B, H = 2, 4
    ids = rng.integers(0, 10, size=(B, T))
    lengths = rng.integers(1, T + 1, size=B)
    allowed = allowed_keys(torch.from_numpy(lengths), T, causal)[:, None].expand(B, H, T, T)
    scores = torch.from_numpy(rng.normal(size=(B, H, T, T)) * 3).float()
    maps = [torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1) for _ in range(2)]
    patterns = ("prev", "first", "delim", "period") if causal else ("next", "prev", "delim", "period")
    got = attention_guidance_loss(maps, torch.from_numpy(ids), attention_mask=torch.arange(T)[None, :] <
                                  torch.from_numpy(lengths)[:, None], patterns=patterns, fraction=1.0,
                                  special_ids=DELIM, period_ids=PERIOD, causal=causal)
    heads = assign_heads(H, 1.0, patterns, causal)
    expected = _reference([m.numpy() for m in maps], ids, lengths, heads, causal)
    assert float(got) == pytest.approx(expected, rel=1e-5, abs=1e-7)


def test_gradients_reach_only_the_guided_heads_queries_and_keys() -> None:
    """In the attention of the last layer, d L_AG reaches the query and key columns of the guided
    heads (0 and 1 of 4) and nothing else: not the values, not the other heads, not what comes after."""
    model = nb_model()
    gpt2 = gpt2_from_nb(model).train()
    ids, mask = _batch()
    out = gpt2(input_ids=ids, attention_mask=mask, output_attentions=True)
    attention_guidance_loss(out.attentions, ids, attention_mask=mask, fraction=0.5).backward()
    d, H = model.cfg.d_model, model.cfg.n_head
    dh = d // H
    last = gpt2.transformer.h[-1]
    grad = last.attn.c_attn.weight.grad.abs().sum(0)                         # [3d]: q | k | v columns
    for part, start in (("q", 0), ("k", d), ("v", 2 * d)):
        for head in range(H):
            cols = grad[start + head * dh:start + (head + 1) * dh]
            if part != "v" and head < 2:
                assert float(cols.sum()) > 0, (part, head)
            else:
                assert float(cols.sum()) == 0, (part, head)
    for unused in (last.attn.c_proj.weight, last.mlp.c_fc.weight, last.ln_2.weight, gpt2.transformer.ln_f.weight,
                   gpt2.lm_head.bias):
        assert unused.grad is None or float(unused.grad.abs().sum()) == 0


def test_capture_qk_on_bert_equals_its_eager_maps() -> None:
    """BERT (bidirectional; separate query/key projections): hooks under SDPA and eager maps agree."""
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=61, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=32, max_position_embeddings=32)
    config._attn_implementation = "eager"
    bert = transformers.BertForMaskedLM(config).eval()
    ids, mask = _batch()
    kwargs = dict(attention_mask=mask, patterns="next,prev,first,delim", fraction=1.0, special_ids=DELIM)
    from_maps = attention_guidance_loss(bert(input_ids=ids, attention_mask=mask, output_attentions=True).attentions,
                                        ids, **kwargs)
    bert.set_attn_implementation("sdpa")
    with capture_qk(bert) as qk:
        bert(input_ids=ids, attention_mask=mask)
    assert qk.causal is False and len(qk.layers) == 2
    torch.testing.assert_close(attention_guidance_loss(qk, ids, **kwargs), from_maps, rtol=2e-5, atol=1e-7)


def test_refusals_are_one_line_config_errors() -> None:
    model = nb_model()
    gpt2 = gpt2_from_nb(model)
    ids, mask = _batch()
    gpt2.set_attn_implementation("sdpa")
    with pytest.raises(ConfigError, match="eager"):
        attention_guidance_loss(gpt2(input_ids=ids, output_attentions=True).attentions, ids)
    with pytest.raises(ConfigError, match="right padding"):
        right_padded_lengths(ids, mask.flip(1))
    maps = model.attention_maps(ids, [0])
    with pytest.raises(ConfigError, match="special_ids"):
        attention_guidance_loss([maps[0]], ids, patterns="delim")
    with pytest.raises(ConfigError, match="impossible"):
        attention_guidance_loss([maps[0]], ids, patterns="next")  # causal maps: [Next] refused
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=61, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=32))
    with pytest.raises(ConfigError, match="eager attention"), capture_qk(llama):
        pass
