"""Heads and pooling against a hand computation; step-0 logits against transformers' own heads."""

from __future__ import annotations

import pytest
import torch
import transformers
from hypothesis import given, strategies as st

from nbcli.models.heads import FAMILIES, PooledSequenceHead, RobertaSequenceHead, TokenHead, pool
from nbcli.models.lm import positions_table
from nbcli.tasks.encoders import open_encoder
from tests.tasks.builders import encoder_folder


@given(st.integers(1, 4), st.integers(1, 6), st.integers(1, 5), st.integers(0, 10_000))
def test_pool_matches_hand_computation(B: int, T: int, d: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(B, T, d, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None] < lengths[:, None]
    mean = pool(h, mask, "mean")
    for b in range(B):
        n = int(lengths[b])
        expected = sum(h[b, t] for t in range(n)) / n
        assert torch.allclose(mean[b], expected)
        assert torch.equal(pool(h, mask, "first")[b], h[b, 0])


def test_heads_match_hand_computation() -> None:
    torch.manual_seed(0)
    h = torch.randn(3, 5, 8)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.bool)
    head = PooledSequenceHead(8, 3, 0.0, "mean").eval()
    W, b = head.classifier.weight, head.classifier.bias
    for row in range(3):
        n = int(mask[row].sum())
        x = h[row, :n].mean(0)
        assert torch.allclose(head(h, mask)[row], W @ x + b, atol=1e-6)
    rob = RobertaSequenceHead(8, 2, 0.0).eval()
    x = torch.tanh(rob.dense.weight @ h[1, 0] + rob.dense.bias)
    assert torch.allclose(rob(h, mask)[1], rob.out_proj.weight @ x + rob.out_proj.bias, atol=1e-6)
    tok = TokenHead(8, 4, 0.0).eval()
    assert torch.allclose(tok(h, mask)[2, 3], tok.classifier.weight @ h[2, 3] + tok.classifier.bias, atol=1e-6)


def test_sinusoidal_positions_are_vaswanis() -> None:
    table = positions_table(7, 6)
    for t in range(7):
        for i in range(3):
            assert abs(table[t, 2 * i] - torch.sin(torch.tensor(t / 10000 ** (2 * i / 6)))) < 1e-6
            assert abs(table[t, 2 * i + 1] - torch.cos(torch.tensor(t / 10000 ** (2 * i / 6)))) < 1e-6


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert"])
@pytest.mark.parametrize("task", ["classification", "tagging"])
def test_step0_logits_equal_transformers(tmp_path, family: str, task: str) -> None:
    folder = encoder_folder(tmp_path / family, family)
    ours = open_encoder(str(folder), task, 3).eval()
    auto = transformers.AutoModelForSequenceClassification if task == "classification" else \
        transformers.AutoModelForTokenClassification
    theirs = auto.from_pretrained(folder, num_labels=3).eval()
    # the same weights everywhere: the exported names are transformers' own (a rename)
    missing, unexpected = theirs.load_state_dict(ours.export_tensors(), strict=False)
    assert not unexpected and all("position_ids" in name for name in missing)
    ids = torch.randint(5, 40, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, 6:] = False
    with torch.no_grad():
        mine = ours(ids, mask)
        ref = theirs(input_ids=ids, attention_mask=mask.long()).logits
    assert mine.shape == ref.shape
    keep = mask if task == "tagging" else torch.ones(2, dtype=torch.bool)
    assert torch.allclose(mine[keep], ref[keep], atol=1e-5)
    assert not torch.allclose(mine, torch.zeros_like(mine))


def test_family_rows_read_transformers_dropout_keys() -> None:
    """head_dropout takes the row's first key that the config sets, by the head's role (DistilBERT:
    seq_classif_dropout for its sentence head, dropout for its token head)."""
    from nbcli.models.heads import head_dropout

    bert, distil = FAMILIES["bert"], FAMILIES["distilbert"]
    assert head_dropout({"classifier_dropout": None, "hidden_dropout_prob": 0.3}, bert, bert.sequence_head) == 0.3
    assert head_dropout({"classifier_dropout": 0.2, "hidden_dropout_prob": 0.3}, bert, TokenHead) == 0.2
    assert head_dropout({"seq_classif_dropout": 0.25, "dropout": 0.05}, distil, distil.sequence_head) == 0.25
    assert head_dropout({"seq_classif_dropout": 0.25, "dropout": 0.05}, distil, TokenHead) == 0.05
    assert head_dropout({}, bert, TokenHead) == 0.1


def test_a_transformers_sentence_head_refuses_mean_pooling() -> None:
    from nbcli.errors import ConfigError

    for row in FAMILIES.values():
        if row.export_class is not None:
            with pytest.raises(ConfigError, match="--pooling mean"):
                row.sequence_head(8, 2, 0.0, "mean")
    assert TokenHead(8, 2, 0.0, "mean") is not None   # a tagger reads every position: pooling does not apply
