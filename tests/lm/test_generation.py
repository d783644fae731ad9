from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nbcli.errors import CorpusError
from nbcli.decoding.sampling import parse_decoding
from nbcli.lm.generation import GenerationOptions, generate, make_prompts
from nbcli.lm.runner import load_runner


def test_prompts_are_the_first_words_verbatim() -> None:
    docs = ["one  two three four", "short", "a b c d e f"]
    prompts = make_prompts(docs, 3)
    assert [(p.index, p.text, p.human) for p in prompts] == [(0, "one  two three", "four"), (2, "a b c", "d e f")]
    assert len(make_prompts(docs, 3, limit=1)) == 1
    with pytest.raises(CorpusError, match="more than 10 words"):
        make_prompts(docs, 10)


@pytest.mark.parametrize("which,tok,rule", [("nb_lm", "sp_model", "top-p:0.9"), ("nb_lm", "sp_model", "sample"),
                                             ("hf_lm", "hf_bytelevel_json", "top-k:20"),
                                             ("hf_lm", "hf_bytelevel_json", "greedy")])
def test_kv_cache_gives_the_same_tokens_as_the_full_forward(which: str, tok: str, rule: str,
                                                            request: pytest.FixtureRequest) -> None:
    """Same seed, same tokens. (Both paths draw the same uniforms; their logits differ by float
    rounding, ~1e-6, so a draw within that distance of a CDF step could still split them.)"""
    from nbcli.tokenizers import load_tokenizer

    runner = load_runner(request.getfixturevalue(which))
    tokenizer = load_tokenizer(request.getfixturevalue(tok))
    prompts = make_prompts(["The model is a bias of the corpus", "Frequency token layer norm attention is"], 4)
    opts = GenerationOptions(parse_decoding(rule), max_new_tokens=10, samples=2, seed=7, batch_size=4)
    cached = generate(runner, tokenizer, prompts, opts)
    full = generate(runner, tokenizer, prompts, GenerationOptions(**{**vars(opts), "use_cache": False}))
    assert [s.tokens for s in cached] == [s.tokens for s in full]
    assert all(len(s.tokens) == 10 or s.eos for s in cached)
    if rule != "greedy":
        assert len({tuple(s.tokens) for s in cached}) > 1   # samples differ from each other
    # a sample depends only on its seed: another batch size, the same tokens
    again = generate(runner, tokenizer, prompts, GenerationOptions(**{**vars(opts), "batch_size": 1}))
    assert [s.tokens for s in again] == [s.tokens for s in cached]


def test_logit_adjustment_changes_what_is_sampled(nb_lm: Path, sp_model: Path) -> None:
    from nbcli.tokenizers import load_tokenizer

    runner = load_runner(nb_lm)
    tokenizer = load_tokenizer(sp_model)
    prompts = make_prompts(["The model is a bias of the corpus"], 4)
    opts = GenerationOptions(parse_decoding("greedy"), max_new_tokens=5)
    plain = generate(runner, tokenizer, prompts, opts)[0].tokens
    first = plain[0]
    prior = torch.zeros(runner.vocab_size)
    prior[first] = 100.0   # log p(first) huge: tau = 1 pushes it out
    assert generate(runner, tokenizer, prompts, opts, adjust=prior)[0].tokens[0] != first
