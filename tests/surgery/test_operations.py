"""run_surgery's dispatch table and the one builder of SurgeryOptions (nbcli.surgery.options)."""

from __future__ import annotations

import pytest

from nbcli.errors import ConfigError
from nbcli.surgery import OPERATION_ORDER, SurgeryOptions, surgery_options
from nbcli.surgery.options import OPERATION_SPELLINGS, require_operation
from nbcli.surgery.operations import OPERATIONS


def test_every_operation_has_one_function_and_one_spelling() -> None:
    assert set(OPERATIONS) == set(OPERATION_ORDER) == set(OPERATION_SPELLINGS)
    assert len(set(OPERATIONS.values())) == len(OPERATIONS)


@pytest.mark.parametrize(("spelling", "first", "last"), [("option", "--set-output-bias", "--remove-frequency-direction"),
                                                         ("argument", "set_output_bias", "remove_frequency_direction")])
def test_no_operation_names_every_way_to_ask_for_one(spelling: str, first: str, last: str) -> None:
    with pytest.raises(ConfigError, match=rf"^no operation given: use {first}, .* or {last}$") as err:
        surgery_options(smoothing="add-k:0.5", spelling=spelling)  # type: ignore[arg-type]
    assert all(names[spelling == "argument"] in str(err.value) for names in OPERATION_SPELLINGS.values())
    with pytest.raises(ConfigError, match="^no operation given"):
        require_operation(SurgeryOptions(seed=3))


@pytest.mark.parametrize("lam", ["0.5", 0.5, 1, "-2e-1"])
def test_lambda_as_text_or_number(lam: str | float) -> None:
    assert surgery_options(scale_ln_bias=lam).scale_ln_bias == float(lam)


@pytest.mark.parametrize("lam", ["x", "nan", float("inf"), "", [0.5]])
def test_a_bad_lambda_is_one_config_error(lam: object) -> None:
    with pytest.raises(ConfigError, match=r"^--scale-ln-bias .*: LAMBDA must be a finite number$"):
        surgery_options(scale_ln_bias=lam)  # type: ignore[arg-type]


def test_values_are_parsed_once_for_cli_and_api() -> None:
    options = surgery_options(set_output_bias="c.safetensors", smoothing="add-k:0.25", new_tensor_dtype="bfloat16",
                              standardise="mean=0,std=0.02", shuffle=True, seed=7, untie=True)
    assert options.smoothing_k == 0.25 and options.new_tensor_dtype == "BF16"
    assert str(options.output_bias_counts) == "c.safetensors" and options.standardise is not None
    assert (options.standardise.mean, options.standardise.std) == (0.0, 0.02)
    assert [op["op"] for op in options.operations()] == ["set-output-bias", "untie", "standardise-embeddings",
                                                         "shuffle-embeddings"]
