"""Public names of a package resolved on first use (PEP 562's module `__getattr__`).

A package whose members load heavy libraries (TensorStore, JAX, Grain, Numba) re-exports them
through `exports`, so importing the package alone loads nothing heavy.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def exports(
    package: str, names: Mapping[str, str | None]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`(__getattr__, __dir__)` of `package` resolving `names` on first use.

    Args:
      package: the package's `__name__`.
      names: public name -> module defining it (absolute, or relative to `package` when it starts
        with "."); None: the submodule `package.name` itself.
    """

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = names[name]
        if module is None:
            return importlib.import_module(f"{package}.{name}")
        return getattr(importlib.import_module(module, package), name)

    def __dir__() -> list[str]:
        return sorted([*vars(sys.modules[package]), *names])

    return __getattr__, __dir__
