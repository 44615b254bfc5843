"""The training job's flags, for the tools that read its data: they accept its flagfile as it is.

`TRAINING` is passed to `jaxblend.cli.call` by `build_index`, `dump_samples`, `dump_batches` and
`inspect`: the flags of `jaxblend.train` that such a tool does not define (the model, optimizer
and run flags, and whichever data-side flags it has no use for) are dropped with one note line, so
one flagfile serves the training job and every tool.
"""

from __future__ import annotations

from jaxblend.cli import entry


def _define_training_flags() -> None:
    from jaxblend import train  # the training example's own list of flag groups, not a copy

    train.define_flags()


TRAINING = entry.SharedFlags("jaxblend.train", _define_training_flags)
