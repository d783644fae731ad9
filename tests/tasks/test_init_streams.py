"""Every random initialisation of a distinct tensor has its own stream (issue 40; `nbcli.seeds`):
Xavier (and normal) source vs target embeddings, --missing xavier rows per side (word vectors and
transplant-embeddings), --embedding-shuffle per side, an LM's Xavier embedding vs its untied output
matrix; and the same --seed still gives bit-identical tensors."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from nbcli.checkpoint.reader import open_checkpoint
from nbcli.tasks.translation import build_translation_config, train_translation

SMALL = dict(d_model=32, batch_size=16, eval_batches=1, eval_every=1, steps=1)
EMBEDDINGS = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")


def assert_independent(a: torch.Tensor, b: torch.Tensor, min_elements: int = 2000) -> None:
    """The first elements (row-major) of two draws: |correlation| < 0.1, not elementwise proportional."""
    n = min(a.numel(), b.numel())
    assert n >= min_elements, n
    x, y = a.flatten()[:n].double(), b.flatten()[:n].double()
    corr = float(torch.corrcoef(torch.stack([x, y]))[0, 1])
    ratio = x / y
    assert abs(corr) < 0.1, corr
    assert float(ratio.std() / ratio.abs().mean()) > 0.1, "elementwise proportional"


def step0(run: Path) -> dict[str, torch.Tensor]:
    with open_checkpoint(run / "step-0.safetensors") as ckpt:
        return {name: ckpt.get(name) for name in ckpt.names()}


def train(tmp: Path, corpus: Path, name: str, src: Path | str, tgt: Path | str, options: dict | None = None,
          **kw: object) -> Path:
    cfg = build_translation_config("tiny", {"src_lang": "de", "tgt_lang": "en", "d_ff": 64, "eval_sentences": 4,
                                            **(options or {})}, **{**SMALL, **kw})
    train_translation(cfg, [str(corpus / "train")], src, tgt, tmp / name, valid=[str(corpus / "valid")])
    return tmp / name


def test_stream_seed_is_the_documented_derivation() -> None:
    from nbcli.seeds import stream_seed

    key = tuple(int.from_bytes(hashlib.sha256(s.encode()).digest()[:4], "little") for s in ("a", "xavier"))
    expected = int(np.random.SeedSequence(7, spawn_key=key).generate_state(1, dtype=np.uint64)[0]) >> 1
    assert stream_seed(7, "a", "xavier") == expected and 0 <= expected < 2**63
    seeds = {stream_seed(s, r, p) for s in (0, 1) for r in ("source_embedding", "target_embedding")
             for p in ("xavier", "shuffle")}
    assert len(seeds) == 8 and 7 not in seeds


@pytest.mark.slow
@pytest.mark.parametrize("init", ["xavier", "normal"])
@pytest.mark.parametrize("share", ["decoder", "none"])
def test_source_and_target_embeddings_draw_apart(tmp_path: Path, parallel_corpus: Path,
                                                 side_tokenizers: dict[str, Path], init: str, share: str) -> None:
    """Two tokenizers: encoder.embed_tokens vs decoder.embed_tokens (and a separate output matrix)
    are independent draws; the same --seed again gives every step-0 tensor bit for bit."""
    args = (parallel_corpus, side_tokenizers["de"], side_tokenizers["en"], {"share_embeddings": share})
    a = step0(train(tmp_path, *args[:1], "a", *args[1:], embedding_init=init, seed=3))
    assert_independent(a[EMBEDDINGS[0]], a[EMBEDDINGS[1]])
    if share == "none":
        assert_independent(a["lm_head.weight"], a[EMBEDDINGS[1]])
    b = step0(train(tmp_path, *args[:1], "b", *args[1:], embedding_init=init, seed=3))
    assert a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)
    c = step0(train(tmp_path, *args[:1], "c", *args[1:], embedding_init=init, seed=4))
    assert_independent(a[EMBEDDINGS[0]], c[EMBEDDINGS[0]])


def test_same_sized_sides_are_shuffled_apart(tmp_path: Path, parallel_corpus: Path,
                                             side_tokenizers: dict[str, Path]) -> None:
    """--embedding-init pretrained:FILE --embedding-shuffle on two sides of one size: each side its own
    permutation of the same rows (paper 002 sec. 3.4), reproducible from --seed."""
    from nbcli.checkpoint.writer import save_tensors

    rows = torch.from_numpy(np.random.default_rng(0).normal(size=(400, 32)).astype(np.float32))
    save_tensors(tmp_path / "rows.safetensors", {"emb": rows})
    src, tgt = side_tokenizers["de"], side_tokenizers["en-400"]
    kw = dict(embedding_init=f"pretrained:{tmp_path / 'rows.safetensors'}", embedding_shuffle=True, seed=5)
    a = step0(train(tmp_path, parallel_corpus, "a", src, tgt, {"share_embeddings": "none"}, **kw))
    enc, dec = a[EMBEDDINGS[0]], a[EMBEDDINGS[1]]
    for side in (enc, dec):                                          # a permutation of the rows
        assert sorted(map(tuple, side.tolist())) == sorted(map(tuple, rows.tolist()))
    assert_independent(enc, dec)
    b = step0(train(tmp_path, parallel_corpus, "b", src, tgt, {"share_embeddings": "none"}, **kw))
    assert torch.equal(enc, b[EMBEDDINGS[0]]) and torch.equal(dec, b[EMBEDDINGS[1]])


def test_missing_word_vector_rows_draw_apart_per_side(tmp_path: Path, parallel_corpus: Path) -> None:
    """--embedding-init pretrained:VECTORS --missing xavier: the rows without a vector on the source and
    on the target side are independent draws (paper 002 sec. 3.2), reproducible from --seed."""
    from nbcli.tokenizers import load_tokenizer
    from tests.vectors.writers import write

    vocab = sorted({w for side in ("de", "en") for w in (parallel_corpus / f"train.{side}").read_text().split()
                    if w.isalpha() and w.islower()})[:20]
    x = np.random.default_rng(0).normal(size=(len(vocab), 32)).astype(np.float32)
    vectors = write(tmp_path / "v.vec", "vec", vocab, x)
    kw = dict(embedding_init=f"pretrained:{vectors}", embedding_missing="xavier", seed=2)
    options = {"share_embeddings": "none"}
    runs = [train(tmp_path, parallel_corpus, name, "words:min-freq=2", "words:min-freq=3", options, **kw)
            for name in ("a", "b")]
    missing = []
    for side, name in (("source", EMBEDDINGS[0]), ("target", EMBEDDINGS[1])):
        pieces = load_tokenizer(runs[0] / f"{side}-tokenizer.json").pieces()
        rows = [i for i, p in enumerate(pieces) if i < 4 or (p not in vocab and p.lower() not in vocab)]
        emb = step0(runs[0])[name][rows]
        bound = math.sqrt(6 / (len(pieces) + 32))
        assert float(emb.abs().max()) <= bound and float(emb.abs().max()) > 0.9 * bound
        assert torch.equal(emb, step0(runs[1])[name][rows])
        missing.append(emb)
    assert_independent(*missing)


def test_transplant_missing_rows_draw_apart_per_target(side_tokenizers: dict[str, Path]) -> None:
    """nb transplant-embeddings --missing xavier --seed S for two target tokenizers (a translation
    model's two sides, paper 002 sec. 3.3): independent rows; the same call twice, the same rows."""
    from nbcli.tokenizers import load_tokenizer
    from nbcli.transplant import transplant_rows

    source = load_tokenizer(side_tokenizers["en"])      # 40 pieces of each target below have no source piece
    rows = torch.randn(source.vocab_size, 128, generator=torch.Generator().manual_seed(0))
    missing = []
    for name in ("de", "en-400"):
        target = load_tokenizer(side_tokenizers[name])
        emb, match, _ = transplant_rows(rows, source, target, "xavier", seed=3)
        again, _, _ = transplant_rows(rows, source, target, "xavier", seed=3)
        assert torch.equal(emb, again)
        missing.append(emb[torch.from_numpy(np.nonzero(match < 0)[0])])
    assert_independent(*missing)


def test_lm_xavier_embedding_and_untied_output_matrix_draw_apart() -> None:
    """A guard (it passed before issue 40's fix: an LM's one embedding keeps --seed's stream, unchanged):
    with an untied W and --embedding-init xavier, W's N(0, 0.02) draw (the model's own stream,
    torch.manual_seed(--seed), after the modules' constructors drew theirs) does not reuse the uniforms
    of the Xavier matrix, drawn from --seed too. torch's
    CPU normal_ turns blocks of 16 uniforms u into z_i = r_i cos(2 pi u_(i+8)), z_(i+8) = r_i sin(...),
    r_i^2 = -2 log(1 - u_i): so 1 - exp(-(z_i^2 + z_(i+8)^2) / 2) recovers the u_i W was drawn from."""
    from nbcli.models.lm import ModelConfig
    from nbcli.train.config import build_config
    from nbcli.train.init import build_model

    V, d = 500, 64
    cfg = build_config("tiny", embedding_init="xavier", tie_embeddings=False, d_model=d, seed=1)
    mcfg = ModelConfig(vocab_size=V, seq_len=32, n_layer=1, n_head=2, d_model=d, tie_embeddings=False)
    model = build_model(cfg, mcfg, np.ones(V, dtype=np.int64))
    u_emb = (model.tok_emb.weight.detach().double() / math.sqrt(6 / (V + d)) + 1) / 2
    z = (model.head_weight.detach().double() / 0.02).reshape(-1, 16)
    u_head = 1 - torch.exp(-(z[:, :8] ** 2 + z[:, 8:] ** 2) / 2)
    assert_independent(u_emb.reshape(-1, 16)[:, :8], u_head)
    again = build_model(cfg, mcfg, np.ones(V, dtype=np.int64))
    assert all(torch.equal(p, q) for p, q in zip(model.state_dict().values(), again.state_dict().values()))
