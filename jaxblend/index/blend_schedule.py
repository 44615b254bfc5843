"""Staged blends: a train split whose mixture changes at given samples (docs/format.md,
"Staged blends").

A `BlendSchedule` is a list of `BlendStage`s; stage k covers the train samples
`[start_k, start_{k+1})` (the last one runs to the end of the split) with its own Megatron blend.
The index layer works in samples only; turning steps into samples is the sampling layer's job
(`jaxblend.sampling.data_schedule`).

How a staged split is built is in docs/format.md ("Staged blends"): its datasets are
`schedule.prefixes()`; each dataset's samples are independent epochs laid end to end
(`staged_split`, epoch e seeded by `epoch_seed(seed, e)`); stage k runs Megatron's greedy
blending of its weights over its own length, each dataset's sample counter continuing from where
the earlier stages left it (`staged_blend_indices`).

Greedy blending is prefix-stable (position i depends only on i and the weights), so two schedules
that agree on samples `[0, r)` build identical samples `[0, r)`: an edit of the future never
changes the past (`history_stages` cuts a schedule at r for the identity of that past).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
from collections.abc import Sequence

import numba
import numpy as np

from jaxblend.index import blend_index, blend_spec, splitmix

_SAMPLE_LIMIT = 2**53  # sample ids are also handled as float64 by the blend kernels


@dataclasses.dataclass(frozen=True)
class BlendStage:
    """One stage of a staged blend.

    Attributes:
      start_sample: the first train sample (split sample id) of the stage.
      blend: the stage's `Blend`: weight/prefix pairs (`("50", "/d/a", "50", "/d/b")`) or one
        prefix (`("/d/a",)`). A blend list or a white-space separated string is accepted and
        parsed (`blend_spec.parse_stage_blend`: the stages' rules).

    Raises:
      TypeError, ValueError: a bad start or a blend that does not parse, with one line.
    """

    start_sample: int
    blend: blend_spec.Blend

    def __post_init__(self) -> None:
        start = self.start_sample
        if isinstance(start, bool) or not isinstance(start, (int, np.integer)):
            raise TypeError(f"stage start_sample = {start!r} must be an int >= 0")
        if not 0 <= start < _SAMPLE_LIMIT:
            raise ValueError(f"stage start_sample = {start} must be in [0, 2**53)")
        object.__setattr__(self, "start_sample", int(start))
        if self.blend is None or not isinstance(self.blend, (str, Sequence)):
            raise TypeError(f"stage blend = {self.blend!r} must be a list of strings")
        blend = blend_spec.parse_stage_blend(self.blend, f"stage at sample {start}")
        object.__setattr__(self, "blend", blend)

    @property
    def parsed(self) -> blend_spec.Blend:
        """The stage's blend (the same object as `blend`)."""
        return self.blend

    def weights(self) -> list[float]:
        """The stage's weights as the blend uses them: normalized twice, as Megatron does."""
        b = self.blend
        raw = [1.0] * len(b.prefixes) if b.weights is None else list(b.weights)
        return blend_spec.normalize(blend_spec.normalize(raw))


@dataclasses.dataclass(frozen=True)
class BlendSchedule:
    """A staged blend: the stages of the train split in sample order.

    Attributes:
      stages: the stages; the first starts at sample 0 and the starts strictly increase.

    Raises:
      TypeError, ValueError: no stages, a first stage not at 0, starts not increasing, or a bad
        stage, with one line naming the stage.
    """

    stages: tuple[BlendStage, ...]

    def __post_init__(self) -> None:
        if isinstance(self.stages, BlendStage) or not isinstance(self.stages, Sequence):
            raise TypeError(f"stages = {self.stages!r} must be a sequence of BlendStage")
        stages = tuple(self.stages)
        if not stages:
            raise ValueError("a blend schedule needs at least one stage, got none")
        for k, stage in enumerate(stages):
            if not isinstance(stage, BlendStage):
                raise TypeError(f"stages[{k}] is a {type(stage).__name__}; expected a BlendStage")
        if stages[0].start_sample != 0:
            raise ValueError(
                f"stages[0] starts at sample {stages[0].start_sample}; the first stage must start at 0"
            )
        for k in range(1, len(stages)):
            if stages[k].start_sample <= stages[k - 1].start_sample:
                raise ValueError(
                    f"stages[{k}] starts at sample {stages[k].start_sample}, not after stages[{k - 1}] "
                    f"(sample {stages[k - 1].start_sample}); starts must strictly increase"
                )
        object.__setattr__(self, "stages", stages)

    @classmethod
    def single(cls, blend: blend_spec.Blend | Sequence[str] | str) -> BlendSchedule:
        """A one-stage schedule of `blend`."""
        return cls((BlendStage(0, blend),))

    def prefixes(self) -> list[str]:
        """Every dataset the stages name, in order of first appearance (= the split's dataset ids)."""
        return blend_spec.blend_prefixes([s.blend for s in self.stages])

    def stage_of(self, sample: int) -> int:
        """The index of the stage holding train sample `sample` (>= 0).

        Raises:
          ValueError: a negative sample.
        """
        if sample < 0:
            raise ValueError(f"sample {sample} must be >= 0")
        return bisect.bisect_right([s.start_sample for s in self.stages], sample) - 1

    def bounds(self, num_samples: int) -> list[tuple[int, int]]:
        """`[start, stop)` of each stage in a split of `num_samples` samples.

        Raises:
          ValueError: `num_samples` does not exceed the last stage's start (it would be empty).
        """
        last = self.stages[-1].start_sample
        if num_samples <= last:
            raise ValueError(
                f"the train split has {num_samples} samples but the last stage starts at sample "
                f"{last}; the split must run past the last stage's start"
            )
        starts = [s.start_sample for s in self.stages] + [int(num_samples)]
        return list(itertools.pairwise(starts))

    def truncated(self, num_samples: int) -> BlendSchedule | None:
        """The stages that hold samples `[0, num_samples)` (None when `num_samples` is 0)."""
        if num_samples <= 0:
            return None
        kept = tuple(s for s in self.stages if s.start_sample < num_samples)
        return BlendSchedule(kept)

    def to_json(self) -> dict:
        """`{"stages": [{"start_sample": ..., "blend": [...]}, ...]}`."""
        return {
            "stages": [{"start_sample": s.start_sample, "blend": list(s.blend)} for s in self.stages]
        }


def epoch_seed(seed: int, epoch: int) -> int:
    """The RandomState seed of epoch `epoch` of a staged dataset: `seed` for epoch 0 (Megatron's
    maps), else a SplitMix64 hash of `(seed, epoch)` in `[0, 2**32)`."""
    if epoch == 0:
        return int(seed)
    x = splitmix.splitmix64(np.uint64(seed))
    x = splitmix.splitmix64(np.uint64(int(x) ^ int(epoch)))
    return int(x) >> 32


@numba.njit(cache=True, nogil=True)
def _to_split_ids(dataset_index, dataset_sample_index, global_id, carry):  # pragma: no cover
    # One stage's blend, written in place: stage-local dataset ids become split ids and each
    # dataset's sample counter continues from `carry` (then advanced by the stage's draws).
    counts = np.zeros(global_id.shape[0], dtype=np.int64)
    for s in range(dataset_index.shape[0]):
        local = dataset_index[s]
        g = global_id[local]
        dataset_index[s] = g
        dataset_sample_index[s] += carry[g]
        counts[local] += 1
    for j in range(global_id.shape[0]):
        carry[global_id[j]] += counts[j]


def staged_blend_indices(
    schedule: BlendSchedule, num_samples: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which dataset, and which of its samples (counted across its epochs), fills each sample of
    the staged split.

    Args:
      num_samples: the split's size (> the last stage's start).

    Returns:
      `(dataset_index, dataset_sample_index, drawn)`: int16 (int32 for >= 32767 datasets) and
      int64 arrays of `num_samples` entries over the ids of `schedule.prefixes()`, and the int64
      number of samples drawn from each dataset.

    Raises:
      ValueError: `num_samples` not past the last stage's start.
    """
    bounds = schedule.bounds(num_samples)
    prefixes = schedule.prefixes()
    position = {p: k for k, p in enumerate(prefixes)}
    dataset_index = np.empty(num_samples, dtype=blend_index.dataset_index_dtype(len(prefixes)))
    dataset_sample_index = np.empty(num_samples, dtype=np.int64)
    carry = np.zeros(len(prefixes), dtype=np.int64)
    for stage, (start, stop) in zip(schedule.stages, bounds):
        global_id = np.array([position[p] for p in stage.blend.prefixes], dtype=np.int64)
        # The stage's greedy blend is written straight into its slice of the split's arrays.
        view = (dataset_index[start:stop], dataset_sample_index[start:stop])
        blend_index.build_blending_indices(stage.weights(), stop - start, out=view)
        _to_split_ids(*view, global_id, carry)
    return dataset_index, dataset_sample_index, carry


def epochs_needed(drawn: int, per_epoch: int, name: str) -> int:
    """Epochs of a dataset of `per_epoch` samples per epoch from which `drawn` samples are taken
    (at least 1).

    Raises:
      ValueError: samples drawn from a dataset with none per epoch.
    """
    if drawn == 0:
        return 1
    if per_epoch == 0:
        raise ValueError(
            f"the staged train split draws {drawn} samples from dataset {name!r}, which has no "
            "complete sample (fewer tokens than seq_length + 1); drop it from the schedule"
        )
    return max(1, math.ceil(drawn / per_epoch))
