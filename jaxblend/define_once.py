"""`define_once`: makes a function that defines absl flags safe to call from several modules.

absl refuses to define a flag twice, and several entry points (the training example, the tools,
the distributed setup) each ask for the flag groups they need. Decorating a group's defining
function with `define_once` runs its body the first time only:

    @define_once("coordinator_address")
    def define_distributed_flags() -> None:
        flags.DEFINE_string("coordinator_address", ...)

With a `sentinel` flag name, the body is also skipped when that flag is already defined (e.g. by
an earlier import of the same module under another name).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from absl import flags


def define_once(
    sentinel: str | None = None, flag_values: flags.FlagValues = flags.FLAGS
) -> Callable[[Callable[[], None]], Callable[[], None]]:
    """Decorator: the wrapped flag-defining function runs once; later calls do nothing.

    Args:
      sentinel: a flag the function defines; if `flag_values` already holds it, the body is
        skipped.
      flag_values: where `sentinel` is looked up (absl's global `FLAGS` by default).

    Returns:
      The decorator.
    """

    def decorate(define: Callable[[], None]) -> Callable[[], None]:
        done = False

        @functools.wraps(define)
        def wrapper() -> None:
            nonlocal done
            if not done and (sentinel is None or sentinel not in flag_values):
                define()
            done = True

        return wrapper

    return decorate
