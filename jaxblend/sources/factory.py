"""Opening the sources of every split of a GPT data configuration.

`open_gpt_sources(config, options, access=...)` returns one `GPTSource` per split (`None` for a
split with no samples) and chooses only its span index (`jaxblend.sources.span_index`):

* a local map store (or none): each prefix is opened once (`IndexedDataset`), all index maps are
  loaded (or built and cached) with `jaxblend.map_store.load_or_build_data_maps`, and each split
  reads through a `SplitMapsSpanIndex` (`source.span_index.maps` is its `SplitMaps`);
* a bucket map store: the published plan's head (`jaxblend.map_store.publication`) is read (or
  published by the builder, or waited for), and each split reads through a `RowTableSpanIndex` over its row table and the publication's
  dataset table (`jaxblend.map_store.dataset_table.PublishedBins`: a dataset is described, by a
  range read of its line, when a batch first reaches it); no dataset is opened before its rows
  are read, and no description is read that no row needs. The splits' dataset names are the
  configuration's prefixes (`publication.table_prefixes`), so asking for them reads nothing.

The `DataAccess` travels with each source (and its re-open recipe) into Grain workers, so a
worker reaches storage, the map store and the identity memo exactly as its parent did.
"""

from __future__ import annotations

import dataclasses

from jaxblend import index
from jaxblend.access import DataAccess
from jaxblend.index.split import wanted_splits
from jaxblend.map_store import entries, open_and_load_data_maps, publication
from jaxblend.map_store.dataset_table import PublishedBins
from jaxblend.map_store.store import MapStore
from jaxblend.sources import base, schema
from jaxblend.sources.gpt_source import GPTSource
from jaxblend.sources.row_tables import ArrayRowTables, BucketRowTables, RowTables
from jaxblend.sources.span_index import RowTableSpanIndex, SpanIndex, SplitMapsSpanIndex
from jaxblend.storage import loss_mask_reader
from jaxblend.storage.reader import IndexedDataset


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
        datasets, plan = open_and_load_data_maps(self.config, self.access, (self.split,))
        if plan.fingerprint != self.fingerprint:
            raise ValueError(
                f"the {self.split} split rebuilt in this worker has fingerprint {plan.fingerprint}, "
                f"the parent process had {self.fingerprint}: a dataset of "
                f"{index.config_prefixes(self.config)} changed while the job was running"
            )
        split_maps = plan.split(self.split)
        return [datasets[n] for n in split_maps.dataset_names], split_maps


def open_gpt_sources(
    config: index.GPTDataConfig,
    options: schema.GPTSchemaOptions,
    *,
    access: DataAccess | None = None,
    splits: tuple[str, ...] | None = None,
) -> dict[str, base.BatchSource | None]:
    """Sources for the train, valid and test splits of `config` (a `GPTDataConfig`).

    One source class, two span indexes (see the module docstring), the same samples, batches and
    fingerprints. Tools that need the whole maps whatever the map store (`inspect explain`/
    `mixture`) take them from `jaxblend.map_store.load_or_build_data_maps`.

    Args:
      config: the data configuration (blend, split, sequence length, seed, sample counts).
      options: schema options (what a sample's arrays hold); the window (`seq_length`, the extra
        token) and whether rows are packed (`packing`) are the configuration's.
      access: how data is reached: storage backend, object-store options, the map store and the
        identity memo (default: `DataAccess.from_env()`, evaluated once here); carried into Grain
        workers by the sources.
      splits: build only these splits' maps (default: all three); the others are left out of
        the result. (A publication always holds every split.)

    Returns:
      `{"train": source | None, "valid": ..., "test": ...}` (only `splits` when given).

    With `options.fim` (fill-in-the-middle) every source rewrites its windows with one
    `jaxblend.sources.fim.FIMTransform` (the tokenizer recorded with the data, else
    `options.fim.tokenizer`; the configuration's seed).

    Raises:
      ValueError: if FIM's tokenizer or a sentinel token cannot be found.
    """
    access = DataAccess.from_env() if access is None else access
    from jaxblend import grain_workers  # a plain script's grain.DataLoader workers

    grain_workers.prepare()
    transform = None
    if options.fim is not None:  # the tokenizer and its sentinels first: a bad name fails at once
        from jaxblend.sources.fim import open_fim_transform

        transform = open_fim_transform(
            options.fim, index.config_prefixes(config), config.seed, access,
            packed=config.is_packed,
        )
    if publication.applies(access):
        indexes, fingerprint = _published_indexes(config, access, splits)
    else:
        indexes, fingerprint = _split_maps_indexes(config, access, splits)
    return {
        split: None if index is None else GPTSource(
            index, options, seq_length=config.seq_length,
            add_extra_token_to_sequence=config.add_extra_token_to_sequence,
            packing=config.packing, fingerprint=fingerprint, split=split, access=access,
            transform=transform, loss_masks=_loss_masks(index, access),
        )
        for split, index in indexes.items()
    }


def _loss_masks(index: SpanIndex, access: DataAccess) -> loss_mask_reader.LossMasks | None:
    """The split's stored loss masks: as the publication records them (nothing probed), else
    looked for next to each dataset."""
    datasets = index.bin_datasets
    if isinstance(datasets, PublishedBins):
        return datasets.loss_masks(access)
    return loss_mask_reader.find_loss_masks(datasets, access)


def _split_maps_indexes(
    config: index.GPTDataConfig, access: DataAccess, splits: tuple[str, ...] | None
) -> tuple[dict[str, SpanIndex | None], str]:
    """`SplitMapsSpanIndex`es of the wanted splits (the datasets opened, the maps loaded or
    built), and the plan's fingerprint."""
    datasets, plan = open_and_load_data_maps(config, access, splits)
    indexes: dict[str, SpanIndex | None] = {}
    for split in plan.built:
        maps = plan.split(split)
        indexes[split] = None if maps is None or len(maps) == 0 else SplitMapsSpanIndex(
            maps, [datasets[n] for n in maps.dataset_names],
            reopen=_SplitOpener(config, split, plan.fingerprint, access),
        )
    return indexes, plan.fingerprint


def _published_indexes(
    config: index.GPTDataConfig, access: DataAccess, splits: tuple[str, ...] | None
) -> tuple[dict[str, SpanIndex | None], str]:
    """`RowTableSpanIndex`es of the wanted splits, from the publication of `config`, and the
    plan's key."""
    wanted = wanted_splits(splits)
    pub = publication.load_or_publish(config, access)
    table = publication.table_reader(pub, access)  # one per process: the splits share its lines
    prefixes = publication.table_prefixes(config, pub)  # the dataset names, nothing read
    indexes: dict[str, SpanIndex | None] = {}
    for name in wanted:
        split = pub.splits.get(name)
        names = None if prefixes is None or split is None else [prefixes[p] for p in split.datasets]
        indexes[name] = None if split is None else RowTableSpanIndex(
            _row_tables(split.rows_url, name, access), PublishedBins(table, split.datasets, names),
            split.length,
        )
    return indexes, pub.plan_key


def _row_tables(rows_url: str, split: str, access: DataAccess) -> RowTables:
    """The split's row table: memory-mapped from this host's mirror when the entry is there (the
    process that published it), else read by range from the bucket."""
    store = MapStore(access)
    key = rows_url.rstrip("/").rsplit("/", 1)[-1]
    if store.local_dir is not None and entries.load(store.local_dir, key) is not None:
        return ArrayRowTables.load(entries.entry_path(store.local_dir, key), split)
    return BucketRowTables(rows_url, split, access)


def open_validation_sets(
    config: index.GPTDataConfig,
    options: schema.GPTSchemaOptions,
    *,
    access: DataAccess | None = None,
) -> dict[str, base.BatchSource]:
    """Megatron's multiple validation sets: each prefix of the valid blend as its own source.

    As megatron-core's builder does with `multiple_validation_sets`, every prefix of the per-split
    validation blend (weights are ignored) becomes a separate GPT dataset drawing the validation
    sample count (one epoch with the configuration's `full_validation`), so each set's samples
    equal Megatron's.

    Args:
      config: a `GPTDataConfig` with `blend_per_split` naming a validation blend (its
        `full_validation` says whether each set is one whole epoch).
      options: schema options (as for `open_gpt_sources`).
      access: how data is reached (as for `open_gpt_sources`; default `DataAccess.from_env()`,
        evaluated once here).

    Returns:
      `{prefix: source}` in blend order.

    Raises:
      ValueError: without a per-split validation blend.
    """
    access = DataAccess.from_env() if access is None else access
    out: dict[str, base.BatchSource] = {}
    for prefix, one in validation_set_configs(config).items():
        source = open_gpt_sources(one, options, access=access)["valid"]
        if source is None:
            raise ValueError(f"validation set {prefix!r} has no samples")
        out[prefix] = source
    return out


def validation_set_configs(config: index.GPTDataConfig) -> dict[str, index.GPTDataConfig]:
    """The data configuration of each of Megatron's multiple validation sets (see
    `open_validation_sets`): `{prefix: config of that prefix alone}`, in blend order; each
    configuration's "valid" split is the set.

    Raises:
      ValueError: without a per-split validation blend.
    """
    per_split = config.blend_per_split
    if per_split is None or per_split[1] is None:
        raise ValueError(
            "multiple validation sets need per-split blends with a validation blend "
            "(--valid_data_path or --per_split_data_args_path), as in Megatron-LM"
        )
    blend = per_split[1]  # a Blend, parsed with the config
    samples = None if config.full_validation else config.num_samples[1]
    return {
        prefix: dataclasses.replace(
            config, blend_per_split=(None, (prefix,), None), num_samples=(None, samples, None)
        )
        for prefix in blend.prefixes
    }
