"""`jaxblend.training.model.ModelConfig`: a bad size is one line naming the field."""

from __future__ import annotations

import pytest

from jaxblend.training import model


@pytest.mark.parametrize("field", ["vocab_size", "d_model", "num_layers", "num_heads", "mlp_dim"])
def test_a_size_below_one_names_the_field(field):
    sizes = {"vocab_size": 64, "d_model": 16, "num_layers": 1, "num_heads": 2, "mlp_dim": 32}
    with pytest.raises(ValueError, match=rf"^ModelConfig\.{field} must be an integer >= 1, got 0$"):
        model.ModelConfig(**{**sizes, field: 0})


def test_heads_must_divide_the_width():
    with pytest.raises(ValueError, match="num_heads=3 must divide d_model=16"):
        model.ModelConfig(vocab_size=64, d_model=16, num_heads=3)
    assert model.ModelConfig(vocab_size=64, d_model=16, num_heads=2).head_dim == 8
