"""The architecture table: every entry well formed, found by detection, and its untie rules."""

from __future__ import annotations

import math
import re

import pytest

from nbcli.checkpoint.architectures import (
    ARCHITECTURES, DETECTION_ORDER, ROLES, by_model_type, candidate_names, new_bias_shape, untie_bias_names,
    untie_input_names, untie_rule, untied_output_name,
)


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_entries_are_well_formed(arch: str) -> None:
    spec = ARCHITECTURES[arch]
    assert spec.name == arch and spec.description
    assert set(spec.candidates) <= set(ROLES) and set(spec.absent) <= set(ROLES)
    for pattern in spec.signature:
        re.compile(pattern)
    if spec.candidates:
        assert spec.untied_output, "an entry with a table names its untied output weight"


def test_detection_order_lists_every_entry_with_a_signature_once() -> None:
    assert len(DETECTION_ORDER) == len(set(DETECTION_ORDER))
    assert set(DETECTION_ORDER) == {a for a, spec in ARCHITECTURES.items() if spec.signature}


def test_model_types_name_one_entry_each() -> None:
    seen: dict[str, str] = {}
    for arch, spec in ARCHITECTURES.items():
        for model_type in spec.model_types:
            assert model_type not in seen, (model_type, seen.get(model_type), arch)
            seen[model_type] = arch
            assert by_model_type(model_type) == arch
    assert by_model_type("no-such-model") is None and by_model_type(None) is None


def test_lookups_for_other_modules() -> None:
    assert candidate_names("bert", "output_bias") == ("cls.predictions.bias", "cls.predictions.decoder.bias")
    assert candidate_names("llama", "output_bias") == ("lm_head.bias",)
    assert candidate_names("no-such-arch", "output_bias") == () == candidate_names("custom", "output_bias")
    assert untied_output_name("roberta") == "lm_head.decoder.weight"
    assert untied_output_name("custom") == "lm_head.weight" == untied_output_name("no-such-arch")
    assert untie_bias_names("bert") == ("cls.predictions.decoder.bias",)
    assert untie_bias_names("gpt2") == () == untie_bias_names("no-such-arch")
    assert untie_input_names("marian") == ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")
    assert untie_input_names("gpt2") == () == untie_input_names("no-such-arch")
    assert by_model_type("marian") == "marian" and by_model_type("mbart") == "bart"


def test_a_created_bias_takes_the_stored_shape_of_its_family() -> None:
    """Marian's and BART's final_logits_bias is a [1, V] row (what transformers loads); any other
    created bias, or another name on those families, is [V]."""
    assert new_bias_shape("marian", "final_logits_bias", 9) == (1, 9) == new_bias_shape("bart", "final_logits_bias", 9)
    assert new_bias_shape("marian", "lm_head.bias", 9) == (9,) == new_bias_shape("gpt2", "lm_head.bias", 9)
    assert new_bias_shape("no-such-arch", "final_logits_bias", 9) == (9,)


def test_untie_keeps_logits_of_a_scaled_tied_head() -> None:
    assert untie_rule("gpt2", {"d_model": 64}) == (1.0, {"tie_word_embeddings": False})
    factor, changes = untie_rule("t5", {"d_model": 64})
    assert factor == pytest.approx(64 ** -0.5)
    assert changes == {"tie_word_embeddings": False, "scale_decoder_outputs": False}
    assert untie_rule("t5", {"d_model": 64, "tie_word_embeddings": False}) == (1.0, {"tie_word_embeddings": False})
    assert math.isnan(untie_rule("t5", {})[0])
    assert [a for a, spec in ARCHITECTURES.items() if spec.scaled_tied_head] == ["t5"]
