"""The training job's flags, for the tools that read its data: they accept its flagfile as it is.

`TRAINING` is passed to `jaxblend.cli.call` by `build_index`, `dump_samples`, `dump_batches` and
`inspect` (their `run`, made by `data_tool_run`): the flags of `jaxblend.train` that such a tool does not define (the model, optimizer
and run flags, and whichever data-side flags it has no use for) are dropped with one note line, so
one flagfile serves the training job and every tool.
"""

from __future__ import annotations

from collections.abc import Callable

from jaxblend import train
from jaxblend.cli import MEGATRON_NARGS, entry

# The training example's own list of flag groups, not a copy.
TRAINING = entry.SharedFlags("jaxblend.train", train.define_flags)


def data_tool_run(main: Callable, define: Callable[[], None], **options) -> Callable[..., int]:
    """The `run(argv=None) -> int` of a tool reading the training job's data (`entry.runner`):
    Megatron-LM's spellings and the training job's flagfile work too; `options` go to
    `entry.call`."""
    return entry.runner(main, MEGATRON_NARGS, define=define, shared=TRAINING, **options)
