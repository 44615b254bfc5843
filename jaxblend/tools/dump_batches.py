r"""Dumps the global batches the loader produces, to prove data order across topologies.

Runs `make_loader` for `--steps` steps from `--start_step` on the current process group (the
loader's stream ends after them: nothing of a later step is read, not even ahead); process 0
writes `<out>/batches.npz` with every batch key stacked as `[steps, global_batch, ...]` (gathered
from all processes). Run it on two topologies and compare the files:

  python -m jaxblend.tools.dump_batches --data_path="30 /d/a 70 /d/b" --split=969,30,1 \
      --seq_length=2048 --train_samples=100000 --global_batch_size=64 --mesh_shape=8 \
      --mesh_axes=data --steps=4 --out=/tmp/one
  python -m jaxblend.tools.launch_local --num_processes=2 --devices_per_process=4 -- \
      python -m jaxblend.tools.dump_batches <same flags> --mesh_shape=4,2 \
      --mesh_axes=data,tensor --out=/tmp/two

Also takes the data flags of `jaxblend.tools.dump_samples` (or `--mock_data`), the distributed
flags, `--rampup_batch_size` (Megatron's batch-size ramp-up; batches of one size are stacked, so
`--steps` must stay within one size or the file holds one array per step: `<key>/<step>`),
`--state_in` (resume from a loader state JSON) and `--state_out` (write the final state), and
`--data_schedule` (the train split's stages over steps, docs/schedules.md; a state saved with
one resumes with a schedule changed only from its step on).
With `--phase_transition_iterations` (Megatron's phases; needs `--train_samples`, the run's samples)
the train split is the fresh blend of the phase holding `--start_step`, sized for that phase, and
step k reads its samples from `(k - phase start) x --global_batch_size`, as a relaunched Megatron
job does; `--steps` must stay within the phase.
The source is opened as training opens it: with a bucket `--data_cache_path` from the published
plan (`jaxblend.map_store.publication`; this process publishes it when it is the builder and
nothing is published yet), else from the datasets and the whole maps.
With `--decode`, process 0 also writes `<out>/batches.decoded.json`: `{"<step>": [text of each
row's inputs, ...]}`, decoded with the tokenizer recorded with the data (`jaxblend.decode`;
`--tokenizer_type` & co. for Megatron-made data); the input tokens the row does not train on (its
`loss_mask` of the position before them is 0: padding, a packed document's first token, a
conversation's prompt) show inside ⟦ ⟧, as with `inspect explain --decode`.

The training job's flagfile works as it is (`--flagfile=run.flags`): the flags of
`jaxblend.train` this tool does not use (model, optimizer, run, ...) are ignored, with one note
line naming them.
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Sequence

from absl import app, flags, logging

from jaxblend import atomic_write, cli
from jaxblend.cli import phase_flags, tool_flags
from jaxblend.tools import _own_process, _training_flags


def define_flags() -> None:
    """The data, schema, source, step-plan, mesh, loader, distributed and tokenizer flags, and the
    tool's (`--eod_id` defaults to the datasets' recorded one)."""
    cli.define_data_flags()
    cli.define_schema_flags()
    cli.define_source_flags()
    cli.define_step_plan_flags()
    cli.define_mesh_flags()
    cli.define_loader_flags()
    cli.define_distributed_flags()
    cli.define_tokenizer_flags()
    tool_flags.define_dump_batches_flags()
    tool_flags.define_decode_flags()
    phase_flags.define_phase_flags()


def _stacked(gathered: dict[str, list], first: int) -> dict:
    """`{key: [steps, B, ...]}` when every step has the same batch size, else `{key/step: ...}`
    (steps numbered from `first`)."""
    import numpy as np

    if all(len({v.shape for v in values}) == 1 for values in gathered.values()):
        return {k: np.stack(v) for k, v in gathered.items()}
    return {f"{k}/{first + i}": v for k, values in gathered.items() for i, v in enumerate(values)}


def _first_step(start_step: int, state: dict | None) -> int:
    """The first step dumped: the step of `--state_in` (as written; the loader checks it), else
    `--start_step`."""
    if state is not None and isinstance(state.get("step"), int):
        return state["step"]
    return start_step


def _phase_plan(fl, state: dict | None):
    """With `--phase_transition_iterations`, the plan of the phase holding the first step dumped
    (`--start_step`, or the step of `--state_in`); steps past the phase's transition are refused
    (the next phase reads other data flags). Other splits than train are not phased."""
    if fl.which != "train":
        return None
    first = _first_step(fl.start_step, state)
    phase = phase_flags.dump_phase_plan_from_flags(fl.global_batch_size, first)
    if phase is not None and first + fl.steps > phase.num_steps:
        raise app.UsageError(
            f"--steps={fl.steps} from step {first} crosses the phase transition at step "
            f"{phase.num_steps}: dump each phase separately, with its own data flags"
        )
    return phase


def main(argv: Sequence[str], own_process: bool = False) -> None:
    """Dumps the batches (see the module docstring); `own_process`: the process exists for this run (the `__main__` block): Grain is imported
    without Orbax and what exists once the loader is made is kept out of later garbage collections
    (`jaxblend.tools._own_process`)."""
    if own_process:  # this tool saves no checkpoint
        _own_process.import_grain_without_orbax()
    cli.initialize_from_flags()
    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    from jaxblend.decode import input_weights
    from jaxblend.loading import make_loader

    fl = flags.FLAGS
    decoder = None
    if fl.decode:  # before any work: a tokenizer that cannot be found fails at once
        prefixes = [] if fl.mock_data else cli.prefixes_from_flags()
        decoder = cli.decoder_from_flags(prefixes, cli.data_access_from_flags())
    mesh = cli.mesh_from_flags()
    state = None
    if fl.state_in:
        with open(fl.state_in) as f:
            state = json.load(f)
    phase = _phase_plan(fl, state)
    start_step = fl.start_step
    if phase is not None and state is not None and state.get("step") == phase.first_step:
        start_step, state = phase.first_step, None  # a new phase: the previous stream ended
    run = cli.checked_run_config_from_flags(phase=phase)
    source = cli.open_source(fl.which, run)  # as training reads
    transform = getattr(source, "transform", None)
    if decoder is not None and transform is not None:  # fill-in-the-middle sentinels shown
        decoder = decoder.with_marks(transform.tokens.marks())
    plan = run.steps.covering(len(source)) if phase is None else phase
    prefetch = cli.prefetch_from_flags()
    steps, first = fl.steps, _first_step(start_step, state)
    end_step = first + steps if 0 <= first <= plan.num_steps else None  # else the state is refused
    if end_step is not None and end_step > plan.num_steps:
        raise app.UsageError(
            f"--steps={steps} from step {first} (--start_step/--state_in) exceeds the "
            f"stream's {plan.num_steps} steps ({len(source)} samples, --global_batch_size="
            f"{fl.global_batch_size}); pass a smaller --steps or a larger --train_samples"
        )
    loader = make_loader(  # reads the dumped steps and none after them
        source, mesh, plan=plan, prefetch=prefetch, start_step=start_step, state=state,
        history=cli.history_of(fl.which, source, run), end_step=end_step,
    )
    if own_process:  # what exists now (modules, the source, the loader) lives until exit:
        gc.freeze()  # later collections, the exit's included, skip it (0.3-2 s under load)
    gathered: dict[str, list[np.ndarray]] = {}
    for _ in range(steps):
        batch = next(loader)
        host = multihost_utils.process_allgather(batch, tiled=True)
        for key, value in host.items():
            gathered.setdefault(key, []).append(np.asarray(value))
    if jax.process_index() == 0:
        os.makedirs(fl.out, exist_ok=True)
        path = os.path.join(fl.out, "batches.npz")
        with atomic_write.atomic_path(path, suffix=".npz") as tmp:
            np.savez(tmp, **_stacked(gathered, first))
        logging.info("wrote %s (%d steps from step %d)", path, steps, first)
        print(f"wrote {path}")
        if decoder is not None:
            text = {
                str(first + i): [
                    decoder.detokenize(row, weights)
                    for row, weights in zip(inputs, input_weights(mask), strict=True)
                ]
                for i, (inputs, mask) in enumerate(
                    zip(gathered["inputs"], gathered["loss_mask"], strict=True)
                )
            }
            text_path = os.path.join(fl.out, "batches.decoded.json")
            with atomic_write.atomic_file(text_path, "w", encoding="utf-8") as f:
                json.dump(text, f, indent=1, ensure_ascii=False)
            print(f"wrote {text_path}")
        if fl.state_out:
            with atomic_write.atomic_file(fl.state_out, "w") as f:
                json.dump(loader.state(), f)
    multihost_utils.sync_global_devices("dump_batches done")


run = _training_flags.data_tool_run(main, define_flags)


if __name__ == "__main__":
    _own_process.exit_now(run(own_process=True))
