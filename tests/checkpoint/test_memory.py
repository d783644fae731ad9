"""A loaded transformers model read as a checkpoint in memory resolves its roles to the model's own
parameters, for every layout of tests/hf_layouts.py, whatever names transformers gives them on load
(GPT-NeoX's embed_out is lm_head in a transformers 5 model's state dict)."""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")  # in the test extras; never skipped in CI

from nbcli.checkpoint.memory import MemoryCheckpoint  # noqa: E402
from nbcli.checkpoint.roles import resolve_roles  # noqa: E402
from tests.hf_layouts import IDS, LAYOUTS, Layout, build  # noqa: E402


@pytest.mark.parametrize("layout", LAYOUTS, ids=IDS)
def test_roles_of_a_loaded_model_are_its_own_parameters(layout: Layout) -> None:
    model = build(layout)
    held = MemoryCheckpoint.from_model(model)
    roles = resolve_roles(held)
    assert roles.architecture == layout.arch and roles.tied is layout.tied
    assert held.get(roles.require("output_weight")).data_ptr() == model.get_output_embeddings().weight.data_ptr()
    assert held.get(roles.require("input_embedding")).data_ptr() == model.get_input_embeddings().weight.data_ptr()
    if layout.final_norm is not None:
        norm = model.get_submodule(layout.final_norm)
        assert held.get(roles.require("final_ln_bias")).data_ptr() == norm.bias.data_ptr()
