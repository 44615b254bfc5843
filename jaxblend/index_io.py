"""Opening datasets for the index layer: prefixes -> `IndexedDataset` and `DatasetInfo`.

The index package never opens files; tools and tests use these helpers to hand it the sequence
lengths, document boundaries and content fingerprint of each dataset.
"""

from __future__ import annotations

from collections.abc import Iterable

from jaxblend import index
from jaxblend.storage import IndexedDataset


def dataset_info(dataset: IndexedDataset, name: str) -> index.DatasetInfo:
    """The index layer's view of an opened dataset."""
    return index.DatasetInfo(
        name, dataset.sequence_lengths, dataset.document_indices, dataset.fingerprint
    )


def open_datasets(
    prefixes: Iterable[str], backend: str = "auto"
) -> tuple[dict[str, IndexedDataset], dict[str, index.DatasetInfo]]:
    """Opens each distinct prefix once; returns the datasets and their `DatasetInfo`s."""
    datasets = {p: IndexedDataset(p, backend=backend) for p in dict.fromkeys(prefixes)}
    return datasets, {p: dataset_info(d, p) for p, d in datasets.items()}


def open_dataset_infos(
    prefixes: Iterable[str], backend: str = "auto"
) -> dict[str, index.DatasetInfo]:
    """`DatasetInfo` of each distinct prefix."""
    return open_datasets(prefixes, backend)[1]


def config_prefixes(config: index.GPTDataConfig) -> list[str]:
    """Every distinct prefix a configuration names, in order of first appearance."""
    blends = [config.blend] if config.blend is not None else list(config.blend_per_split)
    return list(
        dict.fromkeys(
            p for raw in blends if raw is not None for p in index.parse_blend(raw).prefixes
        )
    )
