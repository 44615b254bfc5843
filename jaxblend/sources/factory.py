"""Opening the sources of every split of a GPT data configuration.

`open_gpt_sources(config, options, access=...)` opens each prefix once (`IndexedDataset`), loads
(or builds and caches) all index maps with `jaxblend.map_store.load_or_build_data_maps`, and
returns a `GPTSource` (one prefix) or `BlendedSource` (several) per split, `None` for a split with
no samples. The `DataAccess` travels with each source's re-open recipe into Grain workers, so a
worker reaches storage, the map store and the identity memo exactly as its parent did.
"""

from __future__ import annotations

import dataclasses

from jaxblend import index, opening
from jaxblend.access import DataAccess
from jaxblend.map_store import load_or_build_data_maps
from jaxblend.sources import planned, schema
from jaxblend.storage.reader import IndexedDataset

SPLITS = ("train", "valid", "test")


@dataclasses.dataclass(frozen=True)
class _SplitOpener:
    """Picklable recipe that re-opens one split's datasets and maps (inside Grain workers).

    The rebuilt plan must have the parent's fingerprint: if a dataset changed between the
    parent's open and the worker's, the worker refuses to serve different data.
    """

    config: index.GPTDataConfig
    split: str
    fingerprint: str
    access: DataAccess

    def __call__(self) -> tuple[list[IndexedDataset], index.SplitMaps]:
        datasets, plan = _open(self.config, self.access, (self.split,))
        if plan.fingerprint != self.fingerprint:
            raise ValueError(
                f"the {self.split} split rebuilt in this worker has fingerprint {plan.fingerprint}, "
                f"the parent process had {self.fingerprint}: a dataset of "
                f"{opening.config_prefixes(self.config)} changed while the job was running"
            )
        split_maps = plan.split(self.split)
        return [datasets[n] for n in split_maps.dataset_names], split_maps


def _open(
    config: index.GPTDataConfig,
    access: DataAccess,
    splits: tuple[str, ...] | None = None,
) -> tuple[dict[str, IndexedDataset], index.DataMaps]:
    """Opens every prefix the configuration names (once each, concurrently) and loads or builds
    its maps."""
    datasets, infos = opening.open_config_datasets(config, access)
    return datasets, load_or_build_data_maps(config, infos, access, splits)


def open_gpt_sources(
    config: index.GPTDataConfig,
    options: schema.GPTSchemaOptions,
    *,
    access: DataAccess | None = None,
    splits: tuple[str, ...] | None = None,
) -> dict[str, planned.PlannedSource | None]:
    """Sources for the train, valid and test splits of `config` (a `GPTDataConfig`).

    Args:
      config: the data configuration (blend, split, sequence length, seed, sample counts).
      options: schema options; `seq_length` and `add_extra_token_to_sequence` must equal the
        configuration's.
      access: how data is reached: storage backend, object-store options, the map store and the
        identity memo (default: `DataAccess.from_env()`, evaluated once here); carried into Grain
        workers by the sources.
      splits: build only these splits' maps (default: all three); the others are left out of
        the result.

    Returns:
      `{"train": source | None, "valid": ..., "test": ...}` (only `splits` when given).

    Raises:
      ValueError: if the schema options disagree with the configuration.
    """
    if options.seq_length != config.seq_length:
        raise ValueError(
            f"schema seq_length={options.seq_length} differs from the data configuration's "
            f"seq_length={config.seq_length}"
        )
    if options.add_extra_token_to_sequence != config.add_extra_token_to_sequence:
        raise ValueError(
            "schema add_extra_token_to_sequence="
            f"{options.add_extra_token_to_sequence} differs from the data configuration's "
            f"{config.add_extra_token_to_sequence}"
        )
    access = DataAccess.from_env() if access is None else access
    datasets, plan = _open(config, access, splits)
    sources: dict[str, planned.PlannedSource | None] = {}
    for split in plan.built:
        split_maps = plan.split(split)
        if split_maps is None or len(split_maps) == 0:
            sources[split] = None
            continue
        members = [datasets[n] for n in split_maps.dataset_names]
        cls = planned.GPTSource if len(members) == 1 else planned.BlendedSource
        sources[split] = cls(
            members, split_maps, options, fingerprint=plan.fingerprint, split=split,
            reopen=_SplitOpener(config, split, plan.fingerprint, access),
        )
    return sources


def open_validation_sets(
    config: index.GPTDataConfig,
    options: schema.GPTSchemaOptions,
    *,
    access: DataAccess | None = None,
    full_validation: bool = False,
) -> dict[str, planned.PlannedSource]:
    """Megatron's multiple validation sets: each prefix of the valid blend as its own source.

    As megatron-core's builder does with `multiple_validation_sets`, every prefix of the per-split
    validation blend (weights are ignored) becomes a separate GPT dataset drawing the validation
    sample count (one epoch with `full_validation`), so each set's samples equal Megatron's.

    Args:
      config: a `GPTDataConfig` with `blend_per_split` naming a validation blend.
      options: schema options (as for `open_gpt_sources`).
      access: how data is reached (as for `open_gpt_sources`; default `DataAccess.from_env()`,
        evaluated once here).
      full_validation: one whole epoch of every set instead of the validation sample count.

    Returns:
      `{prefix: source}` in blend order.

    Raises:
      ValueError: without a per-split validation blend.
    """
    per_split = config.blend_per_split
    if per_split is None or per_split[1] is None:
        raise ValueError(
            "multiple validation sets need per-split blends with a validation blend "
            "(--valid_data_path or --per_split_data_args_path), as in Megatron-LM"
        )
    access = DataAccess.from_env() if access is None else access
    blend = index.parse_blend(per_split[1], "blend_per_split[valid]")
    samples = None if full_validation else config.num_samples[1]
    out: dict[str, planned.PlannedSource] = {}
    for prefix in blend.prefixes:
        one = dataclasses.replace(
            config, blend_per_split=(None, (prefix,), None), num_samples=(None, samples, None)
        )
        source = open_gpt_sources(one, options, access=access)["valid"]
        if source is None:
            raise ValueError(f"validation set {prefix!r} has no samples")
        out[prefix] = source
    return out
