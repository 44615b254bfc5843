"""Checkpoints of the training example, through Orbax: model + optimizer, loader state, metadata.

Layout: an Orbax `CheckpointManager` directory (a local path, `gs://bucket/dir` or any path
`etils.epath` opens) with one directory per step and three items:

* `state`: the parameters and optimizer state, written by every process for the shards it holds
  (TensorStore/OCDBT; nothing is gathered to one host). Restored into the shardings of the
  restoring job's mesh, so a checkpoint taken on 2 processes resumes on 4, on any mesh shape.
* `loader`: the loader's resume state (`jaxblend.loading.checkpointing`), JSON.
* `meta`: JSON (model configuration, per-dataset sample counts so far).

A resume reads the two small items first (`resume_point`), then the arrays (`restore_state`): the
training example starts its loader's reads between the two.

Orbax commits a step only once every item of every process is written (a rename on a local
filesystem, a `commit_success.txt` marker written last on GCS), and lists only committed steps:
an interrupted save is never taken for a finished one.

Checkpoints of jaxblend 0.1 (`step_<N>/arrays.npz`, gathered to process 0) are no longer written or
read; `Checkpointer` refuses such a directory with a message saying so.
"""

from __future__ import annotations

import logging as logging_lib
import os
import re
from typing import Any

import jax
import orbax.checkpoint as ocp
from absl import logging
from etils import epath

from jaxblend.loading.checkpointing import LoaderStateRestore, LoaderStateSave
from jaxblend.urls import is_url, local_path

_OLD_STEP_DIR = re.compile(r"^step_\d{8}$")


def checkpoint_path(directory: str) -> epath.Path:
    """`directory` as an Orbax path: URLs as given, local paths (and `file://` URLs) absolute."""
    if is_url(directory):
        return epath.Path(directory)
    return epath.Path(os.path.abspath(local_path(directory)))


class _SaveWaitFilter(logging_lib.Filter):
    """Drops Orbax's "Waiting for previous save to complete" warning."""

    def filter(self, record: logging_lib.LogRecord) -> bool:
        return not str(record.msg).startswith("Waiting for previous save to complete")


def _refuse_npz_layout(directory: str) -> None:
    if is_url(directory) or not os.path.isdir(local_path(directory)):
        return
    directory = local_path(directory)
    old = sorted(n for n in os.listdir(directory) if _OLD_STEP_DIR.match(n))
    if old:
        raise ValueError(
            f"--checkpoint_dir {directory} holds npz checkpoints of jaxblend 0.1 ({old[-1]}); "
            "checkpoints are now Orbax directories: give a new --checkpoint_dir (or resume that "
            "run with jaxblend 0.1)"
        )


class Checkpointer:
    """Saves and restores the training example's state (collective: every process calls it).

    Args:
      directory: local path or bucket URL (`gs://...`).
      keep: how many of the newest checkpoints to keep.
      asynchronous: write in the background (`wait()` blocks until the last save is committed).
      chosen_by: how the program's user chose `directory`, for messages that say how to give the
        run another one (e.g. ``--checkpoint_dir``, or ``--workdir`` when it is the default under
        the work directory).
      show_save_waits: let Orbax's "Waiting for previous save to complete took N seconds" warning
        through (a save that had to wait for the one before it; advice, not a fault). Without it
        the warning is dropped from absl's log until `close`, as the training example does
        without ``--verbose``.

    Attributes:
      saved: whether `save` was called (a checkpointer that saved nothing has nothing to wait for
        at `close`).
    """

    def __init__(
        self,
        directory: str,
        keep: int = 2,
        asynchronous: bool = True,
        chosen_by: str = "--checkpoint_dir",
        show_save_waits: bool = True,
    ) -> None:
        _refuse_npz_layout(directory)
        # Orbax logs through absl's logger; the filter lives as long as this checkpointer.
        self._save_wait_filter = None if show_save_waits else _SaveWaitFilter()
        if self._save_wait_filter is not None:
            logging.get_absl_logger().addFilter(self._save_wait_filter)
        self.directory = directory
        self.chosen_by = chosen_by
        self._closed = False
        self.saved = False  # whether a save was started
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, create=True, enable_async_checkpointing=asynchronous,
        )
        self._manager = ocp.CheckpointManager(
            checkpoint_path(directory), item_names=("state", "loader", "meta"), options=options
        )

    def latest_step(self) -> int | None:
        """The newest committed step, or None: as listed when this checkpointer was opened (one
        listing of the directory), with the steps it saved since."""
        return self._manager.latest_step()

    def resume_point(self, step: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """The `loader` and `meta` items of checkpoint `step` (small JSON; no array is read), so
        the loader can start reading while `restore_state` reads the arrays.

        Returns:
          (loader state, meta).

        Raises:
          ValueError: they cannot be read.
        """
        restored = self._restore(
            step, f"checkpoint {self.directory} step {step}: its metadata or loader state cannot "
            "be read", loader=LoaderStateRestore(), meta=ocp.args.JsonRestore(),
        )
        return restored["loader"], dict(restored["meta"] or {})

    def another_run(self, step: int, why: str) -> str:
        """The line refusing checkpoint `step` as another run's (`why`: what differs), with how to
        give this run a directory of its own."""
        return (
            f"{self.directory} (from {self.chosen_by}) holds another run's checkpoint (step "
            f"{step}): {why}; give this run its own {self.chosen_by}, or delete {self.directory} "
            "to start over"
        )

    def save(self, step: int, state: Any, loader: Any, meta: dict[str, Any]) -> None:
        """Starts saving checkpoint `step` (committed in the background unless synchronous).

        Args:
          step: the number of training steps done.
          state: pytree of `jax.Array`s (parameters, optimizer state).
          loader: the data loader (its `state()` is saved).
          meta: JSON-serializable metadata.
        """
        self.saved = True
        self._manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state),
                loader=LoaderStateSave.of(loader),
                meta=ocp.args.JsonSave(meta),
            ),
            force=True,
        )
        logging.info("saving checkpoint %s step %d", self.directory, step)

    def restore_state(self, step: int, like: Any) -> Any:
        """Restores the parameters and optimizer state of checkpoint `step` (the `state` item
        alone: `resume_point` reads the others).

        Args:
          step: a committed step.
          like: pytree of `jax.Array`s or `jax.ShapeDtypeStruct`s with the shardings wanted.

        Returns:
          The state, laid out like `like`.

        Raises:
          ValueError: if the saved arrays do not match `like` (another model configuration) or
            cannot be read.
        """
        abstract = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), like
        )
        return self._restore(
            step, f"checkpoint {self.directory} (from {self.chosen_by}) step {step} cannot be "
            "restored into this model (another run's checkpoint, or an incomplete copy): give "
            f"this run its own {self.chosen_by}, or delete {self.directory} to start over",
            state=ocp.args.StandardRestore(abstract),
        )["state"]

    def _restore(self, step: int, refusal: str, **items: Any) -> Any:
        """Restores `items` of checkpoint `step`; an error Orbax raises becomes one ValueError
        line: `refusal`, then Orbax's own text (shortened)."""
        try:
            return self._manager.restore(step, args=ocp.args.Composite(**items))
        except (ValueError, KeyError, FileNotFoundError) as err:
            raise ValueError(f"{refusal} ({' '.join(str(err).split())[:300]})") from None

    def wait(self) -> None:
        """Blocks until the last save is committed."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        """Waits for pending saves and releases the manager (and stops hiding Orbax's save-wait
        warning); a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            self._manager.close()
        finally:
            if self._save_wait_filter is not None:
                logging.get_absl_logger().removeFilter(self._save_wait_filter)
