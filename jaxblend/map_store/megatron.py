"""Megatron-Core's index-map cache as a source of GPT maps: find, verify, then use or say why not.

Megatron-Core caches each dataset split's maps as
``{md5}-GPTDataset-{split}-{description.txt,document_index.npy,sample_index.npy,shuffle_index.npy}``
in its ``--data-cache-path``. The md5 is taken over a JSON description that includes the tokenizer
object, which jaxblend does not have, so entries are found by reading the descriptions instead:
an entry is a candidate when its ``dataset_path`` names this dataset (same real path, else the same
file name) and its ``index_split`` is this split.

A candidate is used only when it is the maps of this configuration:

1. its description has this ``num_samples``, ``random_seed``, ``sequence_length`` and split range;
2. its arrays have Megatron's dtypes and the shapes this dataset and configuration imply: the
   document index holds every document of the split exactly ``E`` times (``E`` epochs, which
   depends on ``add_extra_token_to_sequence``, a setting Megatron leaves out of its hash), the
   sample index has the sample count of this configuration (which depends on
   ``drop_last_partial_validation_sequence``, also left out) and is monotone, and the shuffle index
   is a permutation (with the separate final epoch, of each part).

Otherwise it logs the reason. `MegatronCache` is a
`jaxblend.index.PerDatasetMapsProvider`: during a build, `gpt_maps` hands verified maps to the
index layer, or logs why not and lets it build them. Blended-dataset caches (``BlendedDataset``)
are not read: jaxblend builds those exactly and quickly.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any

import numpy as np
from absl import logging

from jaxblend.index import gpt
from jaxblend.index.per_dataset_maps import DatasetMapsRequest as Request
from jaxblend.index.sample_index import num_samples_in
from jaxblend.index.split import SPLIT_NAMES

_FIELDS = ("document_index", "sample_index", "shuffle_index")


class MegatronCache:
    """The GPTDataset entries of a Megatron-Core cache directory (descriptions read once)."""

    def __init__(self, cache_dir: str) -> None:
        self.cache_dir = cache_dir
        self.entries: list[tuple[str, dict[str, Any]]] = []
        pattern = os.path.join(glob.escape(cache_dir), "*-GPTDataset-*-description.txt")
        for path in sorted(glob.glob(pattern)):
            try:
                with open(path, encoding="utf-8") as f:
                    desc = json.load(f)
            except (OSError, ValueError):
                continue
            if isinstance(desc, dict) and desc.get("class") == "GPTDataset":
                self.entries.append((path[: -len("-description.txt")], desc))

    def __bool__(self) -> bool:
        return bool(self.entries)

    def gpt_maps(self, request: Request) -> gpt.GPTIndexMaps | None:
        """`PerDatasetMapsProvider`: Megatron's verified maps for `request`, or None (with a
        warning naming why when this cache has maps of the dataset split but not these)."""
        mine = [(base, d) for base, d in self.entries if _same_dataset(d, request)]
        reasons = []
        for base, desc in mine:
            why = _description_mismatch(desc, request)
            if why is None:
                try:
                    arrays = {
                        f: np.load(f"{base}-{f}.npy", mmap_mode="r", allow_pickle=False)
                        for f in _FIELDS
                    }
                except (OSError, ValueError) as e:
                    why = f"unreadable ({e})"
                else:
                    why = verify(arrays, request)
                    if why is None:
                        logging.info("using Megatron's cached %s maps of %s", request.split,
                                     request.prefix)
                        return gpt.GPTIndexMaps(**arrays)
            reasons.append(f"{os.path.basename(base)}: {why}")
        if reasons:
            logging.warning(
                "Megatron cache in %s has %s maps of %s but not this configuration's (%s); "
                "building them instead", self.cache_dir, request.split, request.prefix,
                "; ".join(reasons),
            )
        return None


def _same_dataset(desc: dict[str, Any], request: Request) -> bool:
    path = desc.get("dataset_path")
    if desc.get("index_split") != request.split or not isinstance(path, str):
        return False
    if os.path.realpath(path) == os.path.realpath(request.prefix):
        return True
    return os.path.basename(path) == os.path.basename(request.prefix)


def _description_mismatch(desc: dict[str, Any], request: Request) -> str | None:
    want = {
        "num_samples": request.num_samples,
        "random_seed": request.seed,
        "sequence_length": request.seq_length,
    }
    for key, value in want.items():
        if desc.get(key) != value:
            return f"{key} is {desc.get(key)!r}, this configuration has {value!r}"
    matrix = desc.get("split_matrix")
    index = SPLIT_NAMES.index(request.split)
    if matrix is None:
        got = (0.0, 1.0)
    else:
        try:
            got = tuple(float(x) for x in matrix[index])
        except (TypeError, ValueError, IndexError):
            return f"split_matrix {matrix!r} is not readable"
    if got != tuple(float(x) for x in request.bookend):
        return f"split range is {got}, this configuration has {tuple(request.bookend)}"
    return None


def verify(arrays: dict[str, np.ndarray], request: Request) -> str | None:
    """Why `arrays` are not the maps `request` implies (None when they pass every check)."""
    documents = np.asarray(request.documents)
    tokens = int(np.sum(request.sequence_lengths[documents], dtype=np.int64))
    if tokens == 0:
        return "the split has no tokens"
    epochs = gpt.num_epochs_for(
        tokens, request.num_samples, request.seq_length, request.add_extra_token
    )
    doc, sample, shuffle = (arrays[f] for f in _FIELDS)
    if doc.dtype != np.int32 or doc.ndim != 1:
        return f"document_index is {doc.dtype} {doc.shape}, not 1-D int32"
    if doc.shape[0] != epochs * documents.shape[0]:
        return (
            f"document_index has {doc.shape[0]} entries; {epochs} epochs of "
            f"{documents.shape[0]} documents need {epochs * documents.shape[0]} "
            "(add_extra_token_to_sequence differs?)"
        )
    if documents.size:
        lo, hi = int(documents.min()), int(documents.max())
        if int(doc.min()) < lo or int(doc.max()) > hi:
            return "document_index holds documents outside the split"
        counts = np.bincount(np.asarray(doc, np.int64) - lo, minlength=hi - lo + 1)
        if not np.all(counts[documents - lo] == epochs):
            return f"document_index does not hold each document {epochs} times"
    n = num_samples_in(  # the sample index has one row more
        epochs, tokens, request.seq_length, request.add_extra_token,
        request.drop_last_partial_sequence,
    )
    if sample.dtype not in (np.int32, np.int64) or sample.shape != (n + 1, 2):
        return (
            f"sample_index is {sample.dtype} {sample.shape}; this configuration has {n} samples "
            "(add_extra_token_to_sequence or drop_last_partial_validation_sequence differs?)"
        )
    if n and (np.any(np.diff(sample[:, 0]) < 0) or int(sample[:, 1].min()) < 0):
        return "sample_index is not monotone"
    if int(sample[-1, 0]) >= doc.shape[0] and n:
        return "sample_index points past the document index"
    if shuffle.dtype not in (np.uint32, np.int64) or shuffle.shape != (n,):
        return f"shuffle_index is {shuffle.dtype} {shuffle.shape}, expected ({n},)"
    if n and not np.all(np.bincount(np.asarray(shuffle, np.int64), minlength=n) == 1):
        return "shuffle_index is not a permutation"
    return None
