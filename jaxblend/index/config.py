"""Configuration of a GPT data plan and the dataset facts the index layer needs.

`GPTDataConfig` mirrors the Megatron-LM data arguments that change the sample order; it is
validated on construction. `DatasetInfo` carries the only facts about a dataset the index maps
depend on (sequence lengths, document boundaries) plus a content fingerprint for caching, so this
layer never opens files itself.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from jaxblend.index import blend_spec
from jaxblend.index import packing as packing_lib
from jaxblend.index import split as split_lib
from jaxblend.index.blend_schedule import BlendSchedule
from jaxblend.validation import require_choice, require_int

_COUNT_LIMIT = 2**53  # counts are also handled as float64 by the blend kernels


ArrayOrLoader = np.ndarray | Callable[[], np.ndarray]


class DatasetInfo:
    """What the index maps need to know about one IndexedDataset.

    The arrays may be given as zero-argument callables: they are then loaded (and checked) on
    first use, so a plan loaded from the cache, which needs only the fingerprints, never fetches
    them (a bucket-hosted `.idx` stays unread).

    Args:
      name: the dataset prefix, used in messages (never in cache keys).
      sequence_lengths: int32 `[N]` token count of each sequence, or a loader of it.
      document_indices: int64 `[D + 1]` document boundaries (sequence ids), or a loader of it.
      fingerprint: content identity (e.g. hash of the .idx bytes + .bin size).

    Raises:
      ValueError: on a bad fingerprint or, when given or loaded, malformed arrays.
    """

    __slots__ = ("_documents", "_lengths", "fingerprint", "name")

    def __init__(
        self,
        name: str,
        sequence_lengths: ArrayOrLoader,
        document_indices: ArrayOrLoader,
        fingerprint: str,
    ) -> None:
        self.name = name
        self.fingerprint = fingerprint
        if not isinstance(fingerprint, str) or not fingerprint:
            raise ValueError(f"{name}: fingerprint must be a non-empty string")
        self._lengths = sequence_lengths if callable(sequence_lengths) else self._checked(sequence_lengths)
        self._documents = document_indices

    def __repr__(self) -> str:
        return f"DatasetInfo(name={self.name!r}, fingerprint={self.fingerprint!r})"

    def _checked(self, lengths: np.ndarray) -> np.ndarray:
        lengths = np.asarray(lengths)
        if lengths.ndim != 1:
            raise ValueError(f"{self.name}: sequence_lengths must be 1-D, got {lengths.shape}")
        if lengths.dtype != np.int32:
            if len(lengths) and (lengths.min() < 0 or lengths.max() > np.iinfo(np.int32).max):
                raise ValueError(f"{self.name}: sequence_lengths do not fit int32")
            lengths = lengths.astype(np.int32)
        if len(lengths) > np.iinfo(np.int32).max:
            raise ValueError(
                f"{self.name}: {len(lengths)} sequences overflow Megatron's int32 sequence ids"
            )
        return lengths

    @property
    def sequence_lengths(self) -> np.ndarray:
        """int32 `[N]` token count of each sequence."""
        if callable(self._lengths):
            self._lengths = self._checked(self._lengths())
        return self._lengths

    @property
    def document_indices(self) -> np.ndarray:
        """int64 `[D + 1]` document boundaries."""
        if callable(self._documents):
            self._documents = self._documents()
        return np.asarray(self._documents)

    @property
    def num_sequences(self) -> int:
        """Number of sequences N."""
        return int(self.sequence_lengths.shape[0])


@dataclasses.dataclass(frozen=True)
class GPTDataConfig:
    """Everything that fixes the sample order of a GPT data configuration.

    Attributes:
      blend: the `Blend` of every split, split by `split`, or None when `blend_per_split` is
        used. A Megatron blend list (`["p1", "p2"]`, `["30", "p1", "70", "p2"]`) or a
        white-space separated string of one is accepted and parsed (`blend_spec.parse_blend`).
      blend_per_split: `(train, valid, test)` `Blend`s (each None = no such split); each prefix
        is used whole. Blend lists or strings are accepted and parsed, an empty one meaning None.
        Excludes `blend`; `split` is then ignored.
      split: split string such as "969,30,1".
      seq_length: tokens per sample S (> 0).
      seed: RandomState seed of every dataset and split.
      num_samples: requested samples `(train, valid, test)`; None = Megatron's None (one epoch of
        a single dataset, or an unweighted blend of whole epochs).
      add_extra_token_to_sequence: samples hold S + 1 tokens (inputs/targets shifted by one).
      drop_last_partial_validation_sequence: False keeps the valid split's last partial sample.
      mid_level_dataset_surplus: extra fraction of samples built per blended dataset.
      train_schedule: a staged blend of the train split (`BlendSchedule`), or None. When set, the
        train split is the staged blend of `num_samples[0]` samples (which must be given and
        exceed the last stage's start); `blend` + `split` or `blend_per_split` then give only the
        valid and test splits (both may be None: no valid/test split). With `blend` + `split`,
        every schedule dataset trains on `split`'s train portion of its documents, otherwise on
        all of them.
      multiple_validation_sets: Megatron's `--multiple-validation-sets`: each prefix of the
        validation blend of `blend_per_split` is a validation set of its own
        (`jaxblend.sources.open_validation_sets`); the index maps of this configuration are
        unchanged.
      full_validation: with `multiple_validation_sets`, each set is one whole epoch of its
        prefix instead of `num_samples[valid]` samples.
      packing: how samples are made: "concat" (Megatron's documents concatenated and cut every
        `seq_length + extra` tokens) or "best_fit" (whole documents packed into rows of
        `seq_length + extra` tokens, best-fit decreasing; `jaxblend.index.packed_maps`).
      packing_window: with "best_fit", documents packed together (>= 1).
      packing_overflow: with "best_fit", what happens to a document longer than a row: "cut"
        into row-sized pieces (all trained), "truncate"d to its first row (conversations), or
        "drop"ped; such documents are counted either way (`jaxblend.index.packed_maps`).
    """

    blend: blend_spec.Blend | None = None
    blend_per_split: (
        tuple[blend_spec.Blend | None, blend_spec.Blend | None, blend_spec.Blend | None] | None
    ) = None
    split: str | None = "969,30,1"
    seq_length: int = 2048
    seed: int = 1234
    num_samples: tuple[int | None, int | None, int | None] = (None, None, None)
    add_extra_token_to_sequence: bool = True
    drop_last_partial_validation_sequence: bool = True
    mid_level_dataset_surplus: float = 0.005
    train_schedule: BlendSchedule | None = None
    multiple_validation_sets: bool = False
    full_validation: bool = False
    packing: str = "concat"
    packing_window: int = packing_lib.DEFAULT_WINDOW
    packing_overflow: str = "cut"

    def __post_init__(self) -> None:
        require_choice("GPTDataConfig.packing", self.packing, packing_lib.PACKINGS)
        require_int("GPTDataConfig.packing_window (documents packed together)", self.packing_window, 1)
        object.__setattr__(self, "packing_window", int(self.packing_window))
        require_choice(
            "GPTDataConfig.packing_overflow", self.packing_overflow, packing_lib.OVERFLOWS
        )
        if self.packing_overflow != "cut" and not self.is_packed:
            raise ValueError(
                f"packing_overflow = {self.packing_overflow!r} needs packing='best_fit' (with "
                "'concat' documents are cut across rows)"
            )
        if self.train_schedule is not None and not isinstance(self.train_schedule, BlendSchedule):
            raise TypeError(
                f"train_schedule is a {type(self.train_schedule).__name__}; expected a "
                "BlendSchedule or None"
            )
        staged = self.train_schedule is not None
        if self.blend is not None:
            object.__setattr__(self, "blend", blend_spec.parse_blend(self.blend, "blend"))
        if self.blend_per_split is not None:
            per = tuple(self.blend_per_split)
            if len(per) != 3:
                raise ValueError(
                    f"blend_per_split has {len(per)} entries; expected 3 (train, valid, test)"
                )
            per = tuple(
                blend_spec.parse_optional_blend(b, f"blend_per_split[{name}]")
                for name, b in zip(split_lib.SPLIT_NAMES, per)
            )
            if all(b is None for b in per) and not staged:
                raise ValueError("blend_per_split = (None, None, None) names no dataset")
            object.__setattr__(self, "blend_per_split", per)
        if self.blend is None and self.blend_per_split is None and not staged:
            raise ValueError(
                "one of blend, blend_per_split or train_schedule must be given, got none"
            )
        if self.blend is not None and self.blend_per_split is not None:
            raise ValueError("blend and blend_per_split are exclusive; give one of them")
        if self.blend is not None:
            if self.split is None:
                raise ValueError("split must be given with blend (e.g. '969,30,1'), got None")
            matrix = split_lib.split_matrix(split_lib.parse_split(self.split))
            if staged and matrix[0] is None:
                raise ValueError(
                    f"split = {self.split!r} leaves no documents to the train split, which "
                    "train_schedule draws from; give the train split a share (e.g. '969,30,1')"
                )
        require_int("GPTDataConfig.seq_length", self.seq_length, 1)
        if self.seq_length > np.iinfo(np.int32).max - 1:
            raise ValueError(f"GPTDataConfig.seq_length = {self.seq_length} must be <= 2**31 - 2")
        require_int("GPTDataConfig.seed", self.seed, 0)
        if self.seed > np.iinfo(np.uint32).max:
            raise ValueError(f"GPTDataConfig.seed = {self.seed} must be <= 2**32 - 1 (RandomState)")
        counts = tuple(self.num_samples)
        if len(counts) != 3:
            raise ValueError(
                f"num_samples = {self.num_samples!r} must have 3 entries (train, valid, test)"
            )
        for name, value in zip(split_lib.SPLIT_NAMES, counts):
            if value is not None:
                require_int(f"GPTDataConfig.num_samples[{name}] (or None)", value, 0)
                if value > _COUNT_LIMIT:
                    raise ValueError(
                        f"num_samples[{name}] = {value} overflows the int64 index dtypes (max "
                        f"{_COUNT_LIMIT})"
                    )
        object.__setattr__(
            self, "num_samples", tuple(None if c is None else int(c) for c in counts)
        )
        if staged:
            train = self.num_samples[0]
            last = self.train_schedule.stages[-1].start_sample
            if train is None or train <= last:
                raise ValueError(
                    f"num_samples[train] = {train} but train_schedule's last stage starts at sample "
                    f"{last}; a staged train split needs a sample count past it (--train_samples)"
                )
        surplus = float(self.mid_level_dataset_surplus)
        if not math.isfinite(surplus) or surplus < 0:
            raise ValueError(
                f"mid_level_dataset_surplus = {self.mid_level_dataset_surplus!r} must be finite and >= 0"
            )
        if self.packing != "concat" and self.seq_length + 1 > packing_lib.MAX_CAPACITY:
            raise ValueError(
                f"seq_length = {self.seq_length} is above what packing={self.packing!r} takes "
                f"({packing_lib.MAX_CAPACITY - 1} tokens per row)"
            )

    @property
    def is_packed(self) -> bool:
        """Whether samples are packed rows (`packing != "concat"`)."""
        return self.packing != "concat"

    def packing_fields(self) -> dict[str, object]:
        """The packing options as fingerprint fields: none for "concat" (existing keys and saved
        states stay valid), the method and its window otherwise."""
        if not self.is_packed:
            return {}
        fields: dict[str, object] = {
            "packing": self.packing, "packing_window": int(self.packing_window)
        }
        if self.packing_overflow != "cut":  # the default keeps existing keys
            fields["packing_overflow"] = self.packing_overflow
        return fields

    def sample_fields(self) -> dict[str, object]:
        """The scalar settings that fix the samples of every split, as named fingerprint fields
        (`jaxblend.identity`) of the index maps' and the publication's keys. The validation-set
        options are not among them: they choose which configurations are opened, not the maps
        of this one."""
        return {
            "seq_length": int(self.seq_length),
            "seed": int(self.seed),
            "num_samples": list(self.num_samples),
            "add_extra_token_to_sequence": bool(self.add_extra_token_to_sequence),
            "drop_last_partial_validation_sequence": bool(
                self.drop_last_partial_validation_sequence
            ),
            "mid_level_dataset_surplus": float(self.mid_level_dataset_surplus),
        }

    def split_blend(self, name: str) -> blend_spec.Blend | None:
        """The blend split `name` ("train", "valid" or "test") draws from, as written: `blend`
        (all splits), else its `blend_per_split` entry (None: absent). A `train_schedule`'s stages
        are not a single blend; they are `train_schedule.stages`.

        Raises:
          ValueError: an unknown split name.
        """
        require_choice("split name", name, split_lib.SPLIT_NAMES)
        if self.blend is not None:
            return self.blend
        if self.blend_per_split is None:
            return None
        return self.blend_per_split[split_lib.SPLIT_NAMES.index(name)]
