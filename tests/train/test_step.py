"""One optimizer step: the LR schedule, gradient accumulation, the finite-loss guard, batches."""

from __future__ import annotations

import math

import pytest
import torch

from nbcli.errors import TrainingDiverged
from nbcli.models.lm import ModelConfig, Transformer
from nbcli.train.config import build_config
from nbcli.train.data import BlockBatch
from nbcli.train.runtime import Runtime
from nbcli.train.step import count_labels, learning_rate, make_optimizer, optimizer_step, prepare_batch

CPU = Runtime(torch.device("cpu"))


def test_lr_schedule() -> None:
    cfg = build_config("tiny", steps=100, warmup=10, lr=1e-3)
    assert learning_rate(0, cfg) == pytest.approx(1e-4) and learning_rate(9, cfg) == pytest.approx(1e-3)
    assert learning_rate(100, cfg) == pytest.approx(1e-4)
    linear = build_config("roberta-8", steps=110, warmup=10)
    assert linear.lr_schedule == "linear" and linear.min_lr_ratio == 0.0
    assert learning_rate(10, linear) == pytest.approx(1e-4) and learning_rate(60, linear) == pytest.approx(5e-5)
    assert learning_rate(110, linear) == 0.0


def _model_and_batch(seed: int = 0) -> tuple[Transformer, BlockBatch]:
    torch.manual_seed(seed)
    model = Transformer(ModelConfig(vocab_size=30, seq_len=8, n_layer=1, n_head=2, d_model=16))
    inputs = torch.randint(0, 30, (4, 8), generator=torch.Generator().manual_seed(seed))
    labels = inputs.clone()
    labels[1, 5:] = -100                                  # unequal label counts per micro-batch
    return model, BlockBatch(inputs, labels, None)


def _one_update(grad_accum: int) -> list[torch.Tensor]:
    model, batch = _model_and_batch()
    cfg = build_config("tiny", grad_accum=grad_accum, batch_size=4, grad_clip=0.0, device="cpu")
    optimizer = make_optimizer(model, cfg, CPU.device)
    rows = 4 // grad_accum
    batches = [BlockBatch(batch.inputs[i:i + rows], batch.labels[i:i + rows], None) for i in range(0, 4, rows)]
    losses = optimizer_step(model, model, optimizer, batches, count_labels(batches, CPU), None, 0.0, 0, cfg,
                            model.cfg, CPU)
    assert losses.ag_loss == 0.0 and losses.loss > 0
    return [p.detach().clone() for p in model.parameters()]


def test_accumulated_micro_batches_make_the_update_of_one_batch() -> None:
    """Gradients summed over micro-batches, normalised by the whole batch's label count."""
    for whole, split in zip(_one_update(1), _one_update(2)):
        torch.testing.assert_close(whole, split, atol=1e-6, rtol=1e-5)
    before = _model_and_batch()[0]
    assert any(not torch.equal(p, q) for p, q in zip(before.parameters(), _one_update(1)))


def test_a_non_finite_loss_stops_before_the_update() -> None:
    model, batch = _model_and_batch()
    cfg = build_config("tiny", device="cpu")
    optimizer = make_optimizer(model, cfg, CPU.device)
    with torch.no_grad():
        model.head_bias[0] = float("nan")
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(TrainingDiverged, match="no update was applied"):
        optimizer_step(model, model, optimizer, [batch], count_labels([batch], CPU), None, 0.0, 3, cfg, model.cfg, CPU)
    assert all(torch.equal(p.nan_to_num(), q.nan_to_num()) for p, q in zip(model.parameters(), before))
    assert not optimizer.state                            # AdamW never stepped


def test_clm_batches_pass_through_and_mlm_batches_are_masked() -> None:
    model, batch = _model_and_batch()
    assert prepare_batch(batch, model.cfg, None, 0.15) is batch
    mcfg = ModelConfig(vocab_size=30, seq_len=8, n_layer=1, n_head=2, d_model=16, objective="mlm", mask_id=3)
    masked = prepare_batch(batch, mcfg, torch.Generator().manual_seed(0), 0.5)
    selected = masked.labels != -100
    assert selected.any() and torch.equal(masked.labels[selected], batch.inputs[selected])


def test_eval_metrics_under_bf16_autocast_match_float64() -> None:
    """evaluate() under (CPU) bf16 autocast: the output layer and the metrics run in float32, so with a
    body that adds nothing in bf16 (its residual projections zero) kl_unigram, kl_uniform and val_loss
    equal a float64 computation within 1e-5 relative; a bf16 output layer moved kl_unigram by ~0.5 %."""
    import copy

    import numpy as np

    from nbcli.ops import unigram_log_prior
    from nbcli.train.data import BlockStream
    from nbcli.train.step import evaluate

    V, T = 64, 16
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=V, seq_len=T, n_layer=1, n_head=2, d_model=32, tie_embeddings=False,
                                    init_std=0.3))
    counts = np.round(1e6 / np.arange(1, V + 1) ** 3.3).astype(np.int64)  # log u down to about -14
    log_u = unigram_log_prior(counts, V)
    with torch.no_grad():
        model.head_bias.copy_(log_u)
        for block in model.blocks:
            for layer in (block.attn.proj, block.mlp.proj):
                layer.weight.zero_()
                layer.bias.zero_()
    tokens = np.random.default_rng(0).integers(0, V, 8 * T + 1)
    stream = BlockStream(tokens, T, "clm", 0, "validation", allow_partial=True)
    cfg = build_config("tiny", batch_size=4, eval_batches=2, seq_len=T, device="cpu")
    got = evaluate(model, stream, cfg, model.cfg, log_u, Runtime(torch.device("cpu"), amp_dtype=torch.bfloat16))

    batch = stream.batch(list(range(stream.n_blocks)), torch.device("cpu"))
    assert stream.n_blocks == 8 and batch.lengths is None
    with torch.no_grad():
        logits = copy.deepcopy(model).double()(batch.inputs)[0]
    logp = torch.log_softmax(logits.reshape(-1, V), dim=-1)
    p, labels = logp.exp(), batch.labels.reshape(-1)
    expected = {"val_loss": float(-logp.gather(1, labels[:, None]).mean()),
                "kl_unigram": float((p * (logp - log_u.double())).sum(-1).mean()),
                "kl_uniform": float((p * logp).sum(-1).mean() + math.log(V))}
    assert expected["kl_unigram"] > 0.05
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-5), key


def test_an_update_copies_to_the_host_once_and_logs_the_plain_mean(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 34: no `.item()`/`int()`/`float()` per micro-batch (each a CUDA sync): counting the labels
    and the whole update (4 micro-batches) up to the optimizer's step turn tensors into Python numbers
    once; the logged loss
    is the cross-entropy mean over the batch's labels, computed here independently before the update."""
    import torch.nn.functional as F

    model, batch = _model_and_batch()
    cfg = build_config("tiny", grad_accum=4, batch_size=4, grad_clip=1.0, device="cpu")
    with torch.no_grad():
        logits, _ = model(batch.inputs)
        expected = F.cross_entropy(logits.flatten(0, 1).double(), batch.labels.flatten(), ignore_index=-100)
    batches = [BlockBatch(batch.inputs[i:i + 1], batch.labels[i:i + 1], None) for i in range(4)]
    optimizer = make_optimizer(model, cfg, CPU.device)
    copies: list[str] = []
    real_step = optimizer.step
    monkeypatch.setattr(optimizer, "step", lambda: copies.append("optimizer.step") or real_step())
    for name in ("item", "tolist", "__float__", "__int__", "__bool__", "numpy"):
        real = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda self, *a, _real=real, _name=name, **kw:
                            copies.append(_name) or _real(self, *a, **kw))
    losses = optimizer_step(model, model, optimizer, batches, count_labels(batches, CPU), None, 0.0, 0, cfg,
                            model.cfg, CPU)
    monkeypatch.undo()
    # (CPU AdamW reads its step counter with .item() afterwards: a CPU tensor, as fused CUDA AdamW keeps it)
    assert copies[:copies.index("optimizer.step")] == ["tolist"]
    assert losses.loss == pytest.approx(float(expected), rel=1e-6)


def test_the_forward_that_sums_its_loss_makes_the_same_update(monkeypatch: pytest.MonkeyPatch) -> None:
    """lm_forward(causal, label_smoothing) (the model sums the cross-entropy, chunked) updates the
    weights as the logits forward does; with rows in several chunks, within float32 rounding."""
    import nbcli.models.lm as model_module
    from nbcli.train.step import lm_forward

    def update(forward) -> tuple[float, list[torch.Tensor]]:
        model, batch = _model_and_batch()
        cfg = build_config("tiny", batch_size=4, label_smoothing=0.1, device="cpu")
        optimizer = make_optimizer(model, cfg, CPU.device)
        losses = optimizer_step(model, model, optimizer, [batch], count_labels([batch], CPU), None, 0.0, 0, cfg,
                                model.cfg, CPU, forward=forward)
        return losses.loss, [p.detach().clone() for p in model.parameters()]

    loss, params = update(lm_forward(True))
    one_loss, one_params = update(lm_forward(True, 0.1))
    assert one_loss == loss and all(torch.equal(a, b) for a, b in zip(params, one_params))
    monkeypatch.setattr(model_module, "LOSS_CHUNK_ELEMENTS", 30 * 5)   # 5 rows a chunk in the models built next
    chunked_loss, chunked_params = update(lm_forward(True, 0.1))
    assert chunked_loss == pytest.approx(loss, rel=1e-6)
    for a, b in zip(params, chunked_params):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


def test_an_mlm_update_with_dense_guidance_builds_no_device_tensor_and_reads_once(
        monkeypatch: pytest.MonkeyPatch, tmp_path, sp_model, train_corpus) -> None:
    """Issue 34, through `nb train`'s loop (tests/host_copies.py): MLM masking with the special ids and
    [Delim]/[Period] guidance over 2 micro-batches build no tensor from host data per batch (the ids are
    held once per device, `device_ids`) and the update reads one thing on the host, its sums."""
    from nbcli.tasks.language_model import train
    from nbcli.train.runtime import device_ids
    from tests.host_copies import update_copies

    device_ids.cache_clear()
    counter = update_copies(monkeypatch)
    cfg = build_config("tiny", objective="mlm", ag_fraction=0.5, ag_patterns=("delim", "period"), grad_accum=2,
                       batch_size=4, seq_len=32, steps=3, eval_every=10, eval_batches=1, save_every=0, device="cpu")
    train(cfg, [str(train_corpus)], sp_model, tmp_path / "run")
    assert len(counter.updates) == 3
    # built once in the run: the MLM's special ids (at the step-0 evaluation, before any update), the
    # [Delim] and [Period] targets (in the first update, where the guidance first runs)
    first = counter.updates[0]
    assert [kind for kind, where in first if where.startswith("runtime.py")] == ["torch.tensor"] * 2, first
    for events in [[e for e in first if not e[1].startswith("runtime.py")], *counter.updates[1:]]:
        assert [kind for kind, _ in events] == ["tolist"], events
        assert events[0][1].startswith("step.py")


def test_mlm_mask_takes_the_special_ids_it_is_given() -> None:
    """mlm_mask with the special ids as a tensor (what the loop holds) masks as with them built from cfg."""
    from nbcli.models.masking import mlm_mask

    mcfg = ModelConfig(vocab_size=30, seq_len=8, n_layer=1, n_head=2, d_model=16, objective="mlm", mask_id=3,
                       special_ids=(0, 1, 2))
    x = torch.randint(0, 30, (6, 8), generator=torch.Generator().manual_seed(4))
    built = mlm_mask(x, mcfg, torch.Generator().manual_seed(0), rate=0.5)
    given = mlm_mask(x, mcfg, torch.Generator().manual_seed(0), rate=0.5, special=torch.tensor([0, 1, 2]))
    assert all(torch.equal(a, b) for a, b in zip(built, given))
    assert not (given[1] != -100)[x < 3].any()             # a special id is never selected


def test_a_micro_batch_depends_on_its_place_in_the_global_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """2 ranks x 1 micro-step draw what 1 process x 2 micro-steps draws, micro-batch by micro-batch:
    the same blocks and MLM masks (`micro_batches`) and the same dropout seed (`optimizer_step`), so a
    DDP run repeats the accumulating one (tests/train/test_ddp.py runs both)."""
    import numpy as np

    import nbcli.train.step as step_module
    from nbcli.train.data import BlockStream, TrainSampler
    from nbcli.train.step import lm_forward, micro_batches

    mcfg = ModelConfig(vocab_size=30, seq_len=8, n_layer=1, n_head=2, d_model=16, dropout=0.1, objective="mlm",
                       mask_id=3)
    stream = BlockStream(np.random.default_rng(0).integers(4, 30, 400).astype(np.int32), 8, "mlm", 0, "training",
                         prefix=1)
    sampler = TrainSampler(stream.n_blocks, 0)
    # the ranks take their turns in this process: no process group, so the sums stay per rank
    monkeypatch.setattr(step_module, "all_reduce_sum", lambda values, rt: values)

    def draws(world: int, grad_accum: int) -> tuple[list[BlockBatch], list[int]]:
        cfg = build_config("tiny", objective="mlm", batch_size=8, grad_accum=grad_accum, dropout=0.1, device="cpu")
        batches: list[BlockBatch] = []
        seeds: list[int] = []

        def forward(net, batch, guidance, rt):  # noqa: ANN001, ANN202 - the step's Forward
            seeds.append(torch.initial_seed())
            return lm_forward(False)(net, batch, guidance, rt)

        for rank in range(world):
            rt = Runtime(torch.device("cpu"), rank=rank, world=world)
            mine = micro_batches(stream, sampler, cfg, mcfg, rt, 5, 16)
            model = Transformer(mcfg)
            optimizer_step(model, model, make_optimizer(model, cfg, rt.device), mine, count_labels(mine, rt), None,
                           0.0, 5, cfg, mcfg, rt, forward=forward)
            batches += mine
        return batches, seeds

    accumulated, ddp = draws(1, 2), draws(2, 1)
    assert len(accumulated[0]) == len(ddp[0]) == 2
    for one, two in zip(accumulated[0], ddp[0]):
        assert torch.equal(one.inputs, two.inputs) and torch.equal(one.labels, two.labels)
    assert accumulated[1] == ddp[1] and len(set(ddp[1])) == 2
    first, second = accumulated[0]
    assert not torch.equal(first.labels != -100, second.labels != -100)   # the masks differ between micro-batches
