"""The shared whole-number checks, and the one-line errors they give where int() used to fail on a string."""

import numpy as np
import pytest

import jumbokit
from jumbokit.encoders.checks import is_integer, whole_number
from jumbokit.timeseries.models import capped_patch_geometry


@pytest.mark.parametrize("value, whole, integer", [
    (3, True, True), (np.int64(3), True, True), (3.0, True, False), (np.float32(3), True, False),
    (True, False, False), ("3", False, False), (2.5, False, False), (float("inf"), False, False),
    (float("nan"), False, False), (None, False, False),
])
def test_whole_number_and_is_integer(value, whole, integer):
    assert whole_number(value) is whole
    assert is_integer(value) is integer


def test_whole_number_minimum():
    assert whole_number(2, 2) and not whole_number(1, 2) and whole_number(0, 0) and not whole_number(-1, 0)


@pytest.mark.parametrize("options, message", [
    (dict(trunk="resnet", trunk_width="abc"), "expected trunk_width to be a positive integer, got 'abc'"),
    (dict(trunk="resnet", trunk_depth=1.5), "expected trunk_depth to be a positive integer, got 1.5"),
    (dict(conv_stem="abc"), "expected conv_stem to be 0 (none) or an integer width >= 2, got 'abc'"),
])
def test_series_options_refuse_strings_in_one_line(options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        jumbokit.create_model("patchtst", num_classes=2, seq_len=32, patches=4, **options)


def test_patching_and_jumbo_refuse_strings_in_one_line():
    with pytest.raises(ValueError, match="expected max_patch_len to be an integer >= 2 \\(or None\\), got 'x'"):
        capped_patch_geometry(64, 4, max_patch_len="x")
    with pytest.raises(ValueError, match="jumbo_multiplier must be an integer >= 1"):
        jumbokit.create_model("patchtst_jumbo", num_classes=2, seq_len=32, patches=4, jumbo_multiplier="4")
