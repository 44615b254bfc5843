"""The shared config-field rule: integers (not bools) at or above a bound, one named message."""

from __future__ import annotations

import numpy as np
import pytest

from jaxblend.validation import require_choice, require_int, require_probability


@pytest.mark.parametrize("value", [0, 5, np.int64(3), np.uint8(0)])
def test_integers_at_or_above_the_bound_pass(value):
    require_int("Owner.field", value, 0)


@pytest.mark.parametrize("value", [-1, True, 1.0, "1", None, np.float32(2)])
def test_everything_else_is_refused_with_the_label(value):
    with pytest.raises(ValueError, match=r"^Owner\.field must be an integer >= 0, got "):
        require_int("Owner.field", value, 0)


def test_a_value_outside_the_choices_is_refused_naming_them():
    require_choice("Owner.mode", "b", ("a", "b"))
    with pytest.raises(ValueError, match=r"^Owner\.mode must be one of \('a', 'b'\), got 'c'$"):
        require_choice("Owner.mode", "c", ("a", "b"))


def test_probabilities_are_refused_outside_their_interval():
    for value in (0, 0.5, 1):
        require_probability("Owner.p", value)
    require_probability("Owner.p", 0.5, open_interval=True)
    for value, open_interval in ((0, True), (1, True), (1.5, False), (-0.1, False), (True, False)):
        with pytest.raises(ValueError, match=r"^Owner\.p must be in [\[(]0, 1[\])], got "):
            require_probability("Owner.p", value, open_interval)
