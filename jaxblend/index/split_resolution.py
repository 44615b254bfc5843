"""Which index maps each split of a `GPTDataConfig` needs: the one resolution of splits.

`build_data_maps` (which builds the maps) and `estimate_plan` (which sizes them without building)
both start here, so they agree on every decision (Megatron-Core's `BlendedMegatronDatasetBuilder`
rules, docs/format.md "Blends"):

* `blend` + `split`: one split matrix for every prefix; `blend_per_split`: each split names its own
  blend and uses each prefix whole (bookends `(0, 1)`).
* A single prefix without weights (or any single prefix of `blend_per_split`, whose weight
  Megatron ignores) is a plain GPT dataset ("single"); otherwise a "weighted" or "unweighted"
  blend of one GPT dataset per prefix.
* A weighted blend of N samples asks dataset j for `ceil(ceil(N w_j) (1 + surplus))` samples and
  has size `sum_j ceil(N w_j)`; weights are normalized once here (and once more by the blend, as
  Megatron does).
* Only the validation split keeps a last partial sample, and only with
  `drop_last_partial_validation_sequence=False`.
* A `train_schedule` replaces the train split by a "staged" blend of `num_samples[0]` samples
  over the schedule's datasets (`jaxblend.index.blend_schedule`), on `split`'s train portion of
  their documents with `blend`, else on all of them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping

from jaxblend.index import blend_spec
from jaxblend.index import split as split_lib
from jaxblend.index.blend_schedule import BlendSchedule
from jaxblend.index.config import DatasetInfo, GPTDataConfig

InfoSource = Mapping[str, DatasetInfo] | Callable[[str], DatasetInfo]


@dataclasses.dataclass(frozen=True)
class SplitSpec:
    """One split's datasets and how they combine.

    Attributes:
      name: "train", "valid" or "test".
      prefixes: the datasets, in blend order (a staged split: `schedule.prefixes()`).
      kind: "single", "weighted", "unweighted" or "staged" (see the module docstring).
      bookend: the fraction `[lo, hi)` of every dataset's documents in this split.
      num_samples: the samples requested, or None (one epoch / exhaustive).
      weights: normalized weights of a weighted blend, else None.
      surplus: `mid_level_dataset_surplus` (extra samples asked of each blended dataset).
      drop_last_partial: whether the last partial sample is dropped.
      schedule: the stages of a "staged" split, else None.
    """

    name: str
    prefixes: tuple[str, ...]
    kind: str
    bookend: tuple[float, float]
    num_samples: int | None
    weights: tuple[float, ...] | None
    surplus: float
    drop_last_partial: bool
    schedule: BlendSchedule | None = None

    def blend_targets(self) -> list[int] | None:
        """A weighted blend's samples per dataset, `ceil(N w_j)` (summing to its size), or None."""
        if self.kind != "weighted":
            return None
        return [math.ceil(self.num_samples * w) for w in self.weights]

    def dataset_requests(self) -> list[int | None]:
        """The samples asked of each dataset's GPT maps (None: one epoch).

        A staged split builds whole epochs for the samples its stages draw; this is the upper
        bound `sum_k ceil(len_k w_kj)` of those draws (what `estimate` sizes).
        """
        if self.kind == "staged":
            position = {p: j for j, p in enumerate(self.prefixes)}
            drawn = [0] * len(self.prefixes)
            bounds = self.schedule.bounds(self.num_samples)
            for stage, (start, stop) in zip(self.schedule.stages, bounds):
                for p, w in zip(stage.blend.prefixes, stage.weights()):
                    drawn[position[p]] += math.ceil((stop - start) * w)
            return drawn
        if self.kind == "single":
            return [self.num_samples]
        if self.kind == "weighted":
            return [math.ceil(t * (1 + self.surplus)) for t in self.blend_targets()]
        return [None] * len(self.prefixes)


def resolve_splits(
    config: GPTDataConfig, wanted: tuple[str, ...] = split_lib.SPLIT_NAMES
) -> list[SplitSpec | None]:
    """One spec per split name, in `SPLIT_NAMES` order (None: absent or not in `wanted`).

    Raises:
      ValueError: a bad split string, or a weighted blend without a sample count (the blends
        were parsed and validated with the config).
    """
    per_split = config.blend is None
    if not per_split:
        matrix = split_lib.split_matrix(split_lib.parse_split(config.split))
    specs: list[SplitSpec | None] = []
    for index, name in enumerate(split_lib.SPLIT_NAMES):
        if per_split:
            bookend = (0.0, 1.0)
            blend = None if config.blend_per_split is None else config.blend_per_split[index]
        else:
            bookend, blend = matrix[index], config.blend
        if name not in wanted or bookend is None:
            specs.append(None)
        elif name == "train" and config.train_schedule is not None:
            specs.append(_staged_spec(config, bookend))
        elif blend is None:
            specs.append(None)
        else:
            specs.append(_make_spec(config, name, blend, bookend, index, per_split))
    return specs


def _staged_spec(config: GPTDataConfig, bookend: tuple[float, float]) -> SplitSpec:
    schedule = config.train_schedule
    return SplitSpec(
        name="train",
        prefixes=tuple(schedule.prefixes()),
        kind="staged",
        bookend=bookend,
        num_samples=config.num_samples[0],
        weights=None,
        surplus=float(config.mid_level_dataset_surplus),
        drop_last_partial=True,
        schedule=schedule,
    )


def _make_spec(
    config: GPTDataConfig,
    name: str,
    blend: blend_spec.Blend,
    bookend: tuple[float, float],
    index: int,
    per_split: bool,
) -> SplitSpec:
    num_samples = config.num_samples[index]
    keep_partial = name == "valid" and not config.drop_last_partial_validation_sequence
    common = {
        "name": name,
        "prefixes": blend.prefixes,
        "bookend": bookend,
        "num_samples": num_samples,
        "surplus": float(config.mid_level_dataset_surplus),
        "drop_last_partial": not keep_partial,
    }
    if len(blend.prefixes) == 1 and (per_split or blend.weights is None):
        return SplitSpec(kind="single", weights=None, **common)
    if blend.weights is None:
        return SplitSpec(kind="unweighted", weights=None, **common)
    if num_samples is None:
        raise ValueError(
            f"num_samples[{name}] = None but the {name} blend has weights; weighted blends "
            f"need a sample count (--{name}_samples)"
        )
    return SplitSpec(kind="weighted", weights=blend.normalized_weights(), **common)


def dataset_info(infos: InfoSource, prefix: str) -> DatasetInfo:
    """The `DatasetInfo` of `prefix` from a mapping or a callable.

    Raises:
      ValueError: the mapping has no entry for `prefix`.
      TypeError: the value is not a `DatasetInfo`.
    """
    if callable(infos) and not isinstance(infos, Mapping):
        info = infos(prefix)
    else:
        try:
            info = infos[prefix]
        except KeyError:
            raise ValueError(f"no DatasetInfo given for dataset prefix {prefix!r}") from None
    if not isinstance(info, DatasetInfo):
        raise TypeError(f"dataset {prefix!r}: expected a DatasetInfo, got {type(info).__name__}")
    return info
