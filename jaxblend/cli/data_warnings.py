"""Warnings about what training will read: a dataset shorter than one sequence, or repeated more
epochs than `--warn_epochs`.

Neither stops a run (a small dataset upsampled on purpose is legitimate), but neither should go
unnoticed: `training_data_warnings(estimates, seq_length, warn_epochs)` turns the index-map
estimate of a data configuration (`jaxblend.index.estimate.estimate_plan`, the figures
`inspect preflight` prints) into one line per dataset of the train split that needs one. The
training example logs them as warnings; `inspect preflight` prints them and then says
`preflight: ok, with N warnings` instead of `ok`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from absl import flags

from jaxblend.cli import flag_help

DEFAULT_WARN_EPOCHS = 16
"""Training repeats data past this many epochs only by mistake, as a rule: repeated tokens add
less with every epoch, and little past a few dozen (a small dataset upsampled on purpose stays
below it, or raises `--warn_epochs`)."""


def define_data_warning_flags() -> None:
    """Defines `--warn_epochs` (the training example and `inspect preflight`)."""
    with flag_help.group(flag_help.DATA):
        flags.DEFINE_integer(
            "warn_epochs", DEFAULT_WARN_EPOCHS,
            "Warn when the train split repeats a dataset more than this many epochs (0: never).",
            lower_bound=0,
        )


def training_data_warnings(
    estimates: Iterable, seq_length: int, warn_epochs: int
) -> list[str]:
    """One line for each dataset of the train split shorter than one sequence, or repeated more
    than `warn_epochs` epochs.

    Args:
      estimates: `jaxblend.index.estimate.DatasetEstimate`s (split, prefix, tokens, epochs).
      seq_length: the run's `--seq_length`.
      warn_epochs: `--warn_epochs` (0: no warning about epochs).

    Returns:
      The lines, in the estimates' order (each dataset once).
    """
    lines: list[str] = []
    seen: set[str] = set()
    for e in estimates:
        if e.split != "train" or e.prefix in seen or e.tokens == 0:
            continue  # no tokens with samples asked for is a problem the estimate reports
        seen.add(e.prefix)
        name = os.path.basename(e.prefix)
        if e.tokens < seq_length:
            lines.append(
                f"{name} ({e.prefix}) has {e.tokens:,} tokens in the train split, fewer than one "
                f"sequence (--seq_length={seq_length}): every sample repeats it, {e.epochs:,} "
                "epochs in all; give it more data, or a shorter --seq_length"
            )
        elif warn_epochs and e.epochs > warn_epochs:
            lines.append(
                f"{name} ({e.prefix}) is repeated {e.epochs:,} epochs in training (more than "
                f"--warn_epochs={warn_epochs}): lower its blend weight or --train_samples "
                "(--train_iters), or raise --warn_epochs if it is meant"
            )
    return lines
