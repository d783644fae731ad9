"""One random stream per initialised tensor, derived from `--seed` and the tensor's role.

A random initialisation nb draws outside the model's own `reset_parameters` (Xavier embeddings,
paper 002 sec. 3.1; `--missing xavier` rows of word vectors or a transplant, sec. 3.2-3.3; the
Pre-trained_Shuffled permutation, sec. 3.4) for one of several tensors (the source, target or shared
embedding of a translation model; the rows a transplant fills for one target tokenizer) takes its own
`torch.Generator`, seeded by

    stream_seed(seed, *role) = SeedSequence(seed, spawn_key=(sha256_32(role[0]), sha256_32(role[1]), ...))
                               .generate_state(1, uint64)[0] >> 1

where sha256_32(s) is the first 4 bytes (little-endian) of the SHA-256 of s's UTF-8 bytes. So two
tensors (the source and the target embedding of a translation model) never share a stream, nor does one tensor's Xavier draw share the stream of its permutation,
and the same `--seed` gives bit-identical tensors on every machine and in every run (the derivation
uses no Python `hash`, which is salted per process). The roles nb uses are named where they are drawn
(`nbcli.train.init.draw_seed`, `nbcli.transplant.transplant_rows`); the one embedding of an LM or
encoder is drawn from `--seed` itself.
"""

from __future__ import annotations

import hashlib

import numpy as np


def _word(name: str) -> int:
    """The first 4 bytes of sha256(name) as an unsigned 32-bit integer (a stable spawn key)."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:4], "little")


def stream_seed(seed: int, *role: str) -> int:
    """The seed (in [0, 2^63)) of the random stream of one tensor's initialisation: numpy's
    SeedSequence of `seed` with the role's names as spawn key (module docstring)."""
    key = tuple(_word(name) for name in role)
    state = np.random.SeedSequence(int(seed), spawn_key=key).generate_state(1, dtype=np.uint64)
    return int(state[0] >> np.uint64(1))
