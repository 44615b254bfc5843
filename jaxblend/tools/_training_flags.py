"""The training job's flags, for the tools that read its data: they accept its flagfile as it is.

`TRAINING` is passed to `jaxblend.cli.call` by `build_index`, `dump_samples`, `dump_batches` and
`inspect` (their `run`, made by `data_tool_run`): the flags of `jaxblend.train` that such a tool does not define (the model, optimizer
and run flags, and whichever data-side flags it has no use for) are dropped with one note line, so
one flagfile serves the training job and every tool.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from jaxblend.cli import entry


def _define_training_flags() -> None:
    from jaxblend import train  # the training example's own list of flag groups, not a copy

    train.define_flags()


TRAINING = entry.SharedFlags("jaxblend.train", _define_training_flags)


def data_tool_run(main: Callable, define: Callable[[], None]) -> Callable[..., int]:
    """The `run(argv=None) -> int` of a tool reading the training job's data: runs `main` as the
    tool's command line does (Megatron-LM's spellings work too), in this process, and returns the
    exit code; `argv` is the arguments after the program name (`sys.argv[1:]` when None), and
    keyword `options` go to `main` (e.g. dump_batches' `own_process`)."""
    from jaxblend import cli

    def run(argv: Sequence[str] | None = None, **options) -> int:
        program = functools.partial(main, **options) if options else main
        return cli.call(program, argv, cli.MEGATRON_NARGS, define=define, shared=TRAINING)

    return run
