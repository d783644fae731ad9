"""The translation presets of `nb train translation --preset` (TrainConfig fields, the task's own options
under task_options), the papers' among them exactly as their appendices state them. What an appendix
leaves unstated is nb's choice, named as such beside it (docs/training.md 'Presets'). Free of torch,
so `nb train --help` lists them without importing a model.

    tiny             seconds on a CPU
    iwslt            fairseq transformer_iwslt_de_en and its IWSLT'14 recipe
    base             Vaswani et al. 2017, base
    kim-3            paper 002 app. A.2, d and FFN from the PyTorch translation tutorial it follows
    paper000-iwslt   paper 000 app. A: the IWSLT and AfroMT En<->Run models (4 heads, FFN 256)
    paper000-afromt  paper 000 app. A: the other AfroMT models (8 heads, FFN 256)
    paper000-wmt     paper 000 app. A: the WMT models (8 heads, FFN 512)
    paper001-mt-base paper 001 sec. 5.5 / table 7: the BASE Transformer, 100,000 steps
    paper001-mt-ag   the same with one encoder head each guided by [Next] and [Prev]
    paper002-<data>-<emb>   paper 002 app. A.2 and Table 5, per experiment: multi30k and iwslt2017 with
                     glove, mbert or mt5 embeddings (D 300 / 768 / 768, 10 heads for GloVe)

and the classification presets of `nb train classification|tagging --preset` (FinetuneConfig keywords):
paper 002's encoder from scratch per experiment, paper002-{sst2,mnli}-{glove,bert,t5} (app. A.2, Table 5).
"""

from __future__ import annotations

import math
from typing import Any

_FAIRSEQ = dict(lr_schedule="inverse-sqrt", adam_beta2=0.98, weight_decay=0.0, grad_clip=0.0, label_smoothing=0.1)
_IWSLT = dict(n_layer=6, n_head=4, d_model=512, seq_len=256, batch_size=128, lr=5e-4, warmup=4000, dropout=0.3,
              **{**_FAIRSEQ, "weight_decay": 1e-4})
_BASE = dict(n_layer=6, n_head=8, d_model=512, seq_len=256, batch_size=256, lr=7e-4, warmup=4000, dropout=0.1,
             **{**_FAIRSEQ, "adam_eps": 1e-9})
# paper 002 app. A.2: 3 layers a side, 8 heads, lr 2e-4 (translation), Adam (0.9, 0.98, 1e-9), dropout 0.1; the
# tutorial it follows: d 512, FFN 512, a constant rate, source and target embeddings and its own generator W
_KIM = dict(n_layer=3, n_head=8, d_model=512, seq_len=256, batch_size=128, lr=2e-4, warmup=0, dropout=0.1,
            **{**_FAIRSEQ, "lr_schedule": "constant", "adam_eps": 1e-9})

# Paper 002 Table 5 per translation experiment: (D, heads, batch size, epochs, training pairs). D: app. A.2
# "D = {300, 512, 768} for GloVe, T5, and BERT/mBERT/mT5"; heads: "8 heads (10 for GloVe)"; epochs, batch
# and the train size ("29k", "206k") from Table 5.
PAPER002_TRANSLATION = {
    "multi30k-glove": (300, 10, 64, 20, 29_000), "multi30k-mbert": (768, 8, 128, 20, 29_000),
    "multi30k-mt5": (768, 8, 96, 20, 29_000), "iwslt2017-glove": (300, 10, 128, 20, 206_000),
    "iwslt2017-mbert": (768, 8, 128, 20, 206_000), "iwslt2017-mt5": (768, 8, 112, 20, 206_000),
}


def updates_per_epoch(pairs: int, batch_size: int) -> int:
    """Updates in one pass over `pairs` training pairs at `batch_size` pairs an update."""
    return math.ceil(pairs / batch_size)


def _paper000(unstated: dict[str, Any], heads: int, d_ff: int) -> dict[str, Any]:
    """Paper 000 app. A's model over the `unstated` preset's other settings (module doc)."""
    return dict(unstated, n_layer=6, n_head=heads, d_model=512, dropout=0.1, adam_beta1=0.9, adam_beta2=0.997,
                label_smoothing=0.1, task_options=dict(d_ff=d_ff, share_embeddings="none", select_by="val_bleu",
                                                       beam=5, lenpen=1.0))


def _paper002(d: int, heads: int, batch: int, epochs: int, pairs: int) -> dict[str, Any]:
    """kim-3 at one experiment's D, heads and batch, Xavier on every non-embedding weight (secs. 5-6); Table 5's
    epochs as updates (the table's rounded train size), evaluated once an epoch; the checkpoint of the lowest
    validation loss (secs. 5-6)."""
    per_epoch = updates_per_epoch(pairs, batch)
    return dict(_KIM, d_model=d, n_head=heads, batch_size=batch, steps=epochs * per_epoch, eval_every=per_epoch,
                task_options=dict(d_ff=512, share_embeddings="none", select_by="val_loss", positions="sinusoidal",
                                  scale_embedding=True, norm="post", init_scheme="xavier"))


TRANSLATION_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(n_layer=2, n_head=4, d_model=64, seq_len=64, batch_size=32, lr=2e-3, warmup=20, dropout=0.1,
                 **_FAIRSEQ, task_options=dict(d_ff=256, eval_sentences=64)),
    "iwslt": dict(_IWSLT, task_options=dict(d_ff=1024)),
    "base": dict(_BASE, task_options=dict(d_ff=2048)),
    "kim-3": dict(_KIM, task_options=dict(d_ff=512, share_embeddings="none")),
    # paper 000 app. A: 6+6 layers, 4 heads (IWSLT) / 8 (WMT), Adam (0.9, 0.997), dropout 0.1, FFN 256 / 512, W its
    # own matrix drawn from normal variables (sec. 4.1: N(0, 1/sqrt d), then rescaled with --rescale-w); sec. 4.1:
    # label smoothing 0.1, the checkpoint of the best validation BLEU, beam 5, length-normalised. Unstated (nb's
    # choice): d 512 (Vaswani's "standard Transformer"), the rest of the iwslt / base preset.
    "paper000-iwslt": _paper000(_IWSLT, heads=4, d_ff=256),
    "paper000-afromt": _paper000(_IWSLT, heads=8, d_ff=256),
    "paper000-wmt": _paper000(_BASE, heads=8, d_ff=512),
    # paper 001 sec. 5.5 and table 7: the BASE Transformer (Vaswani et al.) trained for 100,000 steps; AG: one
    # encoder head each with [Next] and [Prev] (2 of 8 heads), no decoder head, cross-attention never guided
    "paper001-mt-base": dict(_BASE, steps=100_000, task_options=dict(d_ff=2048)),
    "paper001-mt-ag": dict(_BASE, steps=100_000, ag_fraction=0.25, ag_patterns=("next", "prev"),
                           task_options=dict(d_ff=2048, ag_decoder_fraction=0.0)),
    **{f"paper002-{name}": _paper002(*row) for name, row in PAPER002_TRANSLATION.items()},
}


# Paper 002 Table 5 per classification experiment: (D, heads, batch size, epochs); D and heads from app. A.2
# (GloVe 300, T5 512, BERT 768; 10 heads for GloVe). The encoder's FFN is unstated: 512, which Table 5's
# parameter counts fit (tests/test_paper_presets.py), as kim-3's tutorial.
PAPER002_CLASSIFICATION = {
    "sst2-glove": (300, 10, 128, 5), "sst2-bert": (768, 8, 128, 5), "sst2-t5": (512, 8, 128, 5),
    "mnli-glove": (300, 10, 128, 9), "mnli-bert": (768, 8, 128, 10), "mnli-t5": (512, 8, 128, 10),
}


def _paper002_encoder(d: int, heads: int, batch: int, epochs: int) -> dict[str, Any]:
    """Paper 002 app. A.2's encoder trained from scratch (FinetuneConfig keywords): 3 layers, lr 1e-4, Adam
    (0.9, 0.98, 1e-9) without weight decay, dropout 0.1, x sqrt(D) plus sinusoids (app. A.1 eq. 2-3), every
    non-embedding parameter Xavier (secs. 5-6), post-LN (PyTorch's nn.Transformer, its implementation). Unstated,
    nb's choice: a constant rate without warm-up (the paper names no schedule) and no gradient clipping."""
    return dict(preset="tiny", d_model=d, n_head=heads, batch_size=batch, epochs=float(epochs), lr=1e-4,
                adam_beta1=0.9, adam_beta2=0.98, adam_eps=1e-9, weight_decay=0.0, dropout=0.1, lr_schedule="constant",
                warmup_ratio=0.0, grad_clip=0.0, positions="sinusoidal",
                encoder_options=dict(n_layer=3, d_ff=512, norm="post", scale_embedding=True, init_scheme="xavier"))


CLASSIFICATION_PRESETS: dict[str, dict[str, Any]] = {
    f"paper002-{name}": _paper002_encoder(*row) for name, row in PAPER002_CLASSIFICATION.items()}
# Settings given one way of two: an option setting either replaces the preset's of either (--steps over epochs).
_ONE_OF = (("warmup", "warmup_ratio"), ("steps", "epochs"))


def with_classification_preset(given: dict[str, Any]) -> dict[str, Any]:
    """FinetuneConfig keywords: the options set (`given`, None-free, `preset` among them) over the paper
    preset `preset` names, with `recipe` (its name) and `preset_overridden` (the preset values an option
    replaced, `nbcli.train.config.preset_overrides`); an architecture preset (tiny, small, ...) passes through."""
    from nbcli.train.config import preset_overrides

    name = given.get("preset", "tiny")
    if name not in CLASSIFICATION_PRESETS:
        return given
    fixed = CLASSIFICATION_PRESETS[name]
    given = {k: v for k, v in given.items() if k != "preset"}
    replaced = {k for pair in _ONE_OF if any(k in given for k in pair) for k in pair}
    base = {k: v for k, v in fixed.items() if k not in replaced}
    values = {**base, **given,
              "encoder_options": {**fixed.get("encoder_options", {}), **given.get("encoder_options", {})}}
    final = {**values, **{k: None for k in replaced if k not in values}}   # replaced the other way: not in effect
    return {**values, "recipe": name, "preset_overridden": preset_overrides(fixed, final)}
