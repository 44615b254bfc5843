"""The packed maps' bytes are pinned: a faster packer must build the very same maps.

Digests of every array (name, dtype, shape, bytes) and of the metadata of packed maps built from
generated corpora, recorded from the packer as first released. A change to the packer, the cuts,
the epoch order or the row order that moves one byte fails here.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from helpers_data import dataset_info

from jaxblend import index
from jaxblend.index import data_maps, packing


def _digest(arrays: dict[str, np.ndarray], meta: object = None) -> str:
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    h.update(json.dumps(meta, sort_keys=True).encode())
    return h.hexdigest()[:20]


def _infos() -> dict[str, index.DatasetInfo]:
    rng = np.random.default_rng(30)
    lognormal = np.maximum(1, rng.lognormal(np.log(700) - 0.5, 1.0, 3000)).astype(np.int64)
    long_tail = np.minimum(40_000, 64 * (1 + rng.pareto(1.1, 4000))).astype(np.int64)
    short = rng.integers(0, 90, 2500)  # empty documents too
    return {
        "/d/lognormal": dataset_info("/d/lognormal", lognormal),
        "/d/long_tail": dataset_info("/d/long_tail", long_tail),
        "/d/short": dataset_info("/d/short", short),
    }


CASES = {  # case: (configuration fields, digest)
    "single-2048": ({"blend": ["/d/lognormal"], "seq_length": 2048}, "b43b9806c3e74b5c12fa"),
    "single-511-no-extra": (
        {"blend": ["/d/long_tail"], "seq_length": 511, "add_extra_token_to_sequence": False,
         "packing_window": 100},
        "ec8e18bea2d5fea5a031",
    ),
    "blend-epochs": (
        {"blend": ["30", "/d/lognormal", "50", "/d/long_tail", "20", "/d/short"],
         "seq_length": 1024, "num_samples": (9000, 300, 100), "packing_window": 1000},
        "8bb421c7d77c9b5a61da",
    ),
    "unweighted-8192": (
        {"blend": ["/d/lognormal", "/d/long_tail"], "seq_length": 8192,
         "num_samples": (None, None, None)},
        "7904389e42f268f82121",
    ),
    "truncate": (
        {"blend": ["/d/long_tail"], "seq_length": 300, "packing_overflow": "truncate",
         "packing_window": 37},
        "2455183eeceefbb3a3a9",
    ),
    "drop-window-1": (
        {"blend": ["/d/long_tail", "/d/short"], "seq_length": 200, "packing_overflow": "drop",
         "packing_window": 1, "num_samples": (None, None, None)},
        "f6f1a1b564f827cd6a5e",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_packed_maps_keep_their_bytes(case):
    fields, expected = CASES[case]
    config = index.GPTDataConfig(
        **{"split": "90,8,2", "seed": 1234, "packing": "best_fit", **fields}
    )
    spec = data_maps.DataMapsSpec.resolve(config, _infos())
    arrays, meta = data_maps.build_arrays(spec)
    assert _digest(arrays, meta) == expected


@pytest.mark.parametrize(
    ("capacity", "window", "expected"),
    [
        (32, 1, "b3ba1f0359e5e1712bde"),
        (33, 17, "7501570006a14671e19a"),
        (9000, 1000, "9fb2fc302df686c714c0"),
        (2049, packing.DEFAULT_WINDOW, "ec31499167f4d4a63420"),
    ],
)
def test_the_packer_keeps_its_bytes(capacity, window, expected):
    rng = np.random.default_rng(capacity + window)
    lengths = np.maximum(0, rng.lognormal(np.log(capacity / 3), 1.2, 5000)).astype(np.int64)
    cut = packing.cut_items(lengths, capacity)
    rows = packing.best_fit_pack(cut.length, capacity, window)
    arrays = {
        "item": cut.item, "offset": cut.offset, "length": cut.length, "starts": rows.starts,
        "pieces": rows.pieces, "used": rows.used,
    }
    assert _digest(arrays, cut.split_items) == expected
