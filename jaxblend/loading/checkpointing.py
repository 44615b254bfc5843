"""The loader's resume state as an item of any Orbax checkpoint.

A loader's state is a small JSON dict (`{"version", "step", "fingerprint"}`, see
`StepLoader.state`): the next step and the identity of the stream. A staged train split
(`--data_schedule`) adds `"data_schedule"`, the schedule in steps, and its fingerprint covers only
the steps before the saved one, so a resumed run may edit later stages (docs/schedules.md). It
holds no topology, so a checkpoint taken on 8 hosts resumes on 4. Saved beside a model in your
own training loop, it is one more item of the `ocp.args.Composite` given to
`CheckpointManager.save` (`LoaderStateSave.of(loader)`) and `restore` (`LoaderStateRestore()`):
docs/pod.md, "The loader state in your own checkpoints", shows both.

The item is one JSON file (`loader_state.json`) written by the primary host only; Orbax commits it
with the rest of the checkpoint, so a checkpoint whose save was interrupted is never listed.
`make_loader` checks the restored fingerprint against the source it is given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import orbax.checkpoint as ocp
from etils import epath

FILENAME = "loader_state.json"
_KEYS = ("version", "step", "fingerprint")


class LoaderStateHandler(ocp.handlers.JsonCheckpointHandler):
    """Orbax handler of a loader's resume state (one JSON file, written by the primary host)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(FILENAME, **kwargs)

    async def async_save(  # type: ignore[override]
        self, directory: epath.Path, item: Any = None, args: LoaderStateSave | None = None
    ):
        if args is None:
            raise ValueError("LoaderStateHandler.save needs args=LoaderStateSave(...)")
        return await super().async_save(directory, args=ocp.args.JsonSave(dict(args.state)))

    def restore(  # type: ignore[override]
        self, directory: epath.Path, item: Any = None, args: LoaderStateRestore | None = None
    ) -> dict[str, Any]:
        state = super().restore(directory)
        if not isinstance(state, dict) or not set(_KEYS) <= set(state):
            raise ValueError(
                f"{directory / FILENAME}: not a loader state (expected keys {list(_KEYS)})"
            )
        return state


@ocp.args.register_with_handler(LoaderStateHandler, for_save=True)
@dataclasses.dataclass
class LoaderStateSave(ocp.args.CheckpointArgs):
    """Saves a loader state (`loader.state()`) as a checkpoint item.

    Attributes:
      state: the JSON-serializable state dict.
    """

    state: Mapping[str, Any]

    @classmethod
    def of(cls, loader: Any) -> LoaderStateSave:
        """The save args of `loader`'s current state (anything with a `state()` method)."""
        return cls(dict(loader.state()))


@ocp.args.register_with_handler(LoaderStateHandler, for_restore=True)
@dataclasses.dataclass
class LoaderStateRestore(ocp.args.CheckpointArgs):
    """Restores a loader state item; the result is the dict to give `make_loader(state=...)`."""
