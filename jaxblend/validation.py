"""Validation shared by the frozen config dataclasses: one rule, one message.

Configs check their fields in `__post_init__` and refuse bad values with one line naming the
field (`Owner.field`), the rule and the value, e.g.
`TokenBudgetConfig.max_length must be an integer >= 1, got 0`.
"""

from __future__ import annotations

import numpy as np


def require_int(label: str, value: object, low: int) -> None:
    """Refuses `value` unless it is an integer (not a bool) >= `low`.

    Args:
      label: what the value is, as the user knows it (`"Owner.field"` or a flag name).
      value: the value to check (Python or numpy integer).
      low: the smallest accepted value.

    Raises:
      ValueError: naming `label`, the rule and the value.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{label} must be an integer >= {low}, got {value!r}")


def require_choice(label: str, value: object, choices: tuple) -> None:
    """Refuses `value` unless it is one of `choices`, naming `label`, the choices and the value."""
    if value not in choices:
        raise ValueError(f"{label} must be one of {choices}, got {value!r}")


def require_positive(label: str, value: object) -> None:
    """Refuses `value` unless it is a number (int or float, not a bool) > 0, naming `label`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{label} must be a number > 0, got {value!r}")


def require_probability(label: str, value: object, open_interval: bool = False) -> None:
    """Refuses `value` unless it is a number (not a bool) in [0, 1], or in (0, 1) with
    `open_interval`, naming `label`."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not (0 < value < 1 if open_interval else 0 <= value <= 1):
        interval = "(0, 1)" if open_interval else "[0, 1]"
        raise ValueError(f"{label} must be in {interval}, got {value!r}")
