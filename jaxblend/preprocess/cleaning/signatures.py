"""The deduplication pass over one partition: per kept record, its exact hash and MinHash signature.

Each partition writes ``part-NNNNN.sig/`` in the parts directory (written under a temporary name,
then renamed: a directory that exists is complete):

* ``positions.npy`` (int64): the record's position in the partition (0-based, every input record
  counted, so the tokenizing pass finds it again);
* ``exact.npy`` (uint64): BLAKE2b-64 of the normalized text (:func:`.text.normalize`);
* ``words.npy`` (bool): the text has at least one word (only those take part in near-dup search);
* ``bands.npy`` (uint64, n x bands): BLAKE2b-64 of each band's MinHash values;
* ``minhash.npy`` (uint32, n x num_perm): the MinHash signature (datasketch, shingles of
  ``shingle`` normalized words, the config's seed), read back by the join to verify candidates;
* ``filtered.npy`` (int64 rows ``(position, reason index)``) and ``histograms.json``: the
  per-record filters' outcome, which the tokenizing pass reuses instead of recomputing it.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping, Sequence

import numpy as np

from jaxblend import atomic_write
from jaxblend.preprocess.cleaning import text as text_lib
from jaxblend.preprocess.cleaning.config import CleaningConfig

# datasketch's 32-bit affine permutation scheme (its default since 2.0), pinned so that the
# signatures do not change with the library's default.
SCHEME = "affine32"
FILES = ("positions", "exact", "words", "bands", "minhash", "filtered")


def sig_dir(parts: str, index: int) -> str:
    """Returns partition ``index``'s signature directory."""
    return os.path.join(parts, f"part-{index:05d}.sig")


def is_done(parts: str, index: int) -> bool:
    """Whether partition ``index``'s signatures are complete."""
    d = sig_dir(parts, index)
    return all(os.path.exists(os.path.join(d, f"{n}.npy")) for n in FILES)


class SignatureWriter:
    """Collects one partition's signatures and writes them as ``part-NNNNN.sig/``."""

    def __init__(self, config: CleaningConfig) -> None:
        self.config = config
        self.minhash = None  # a new datasketch MinHash with the run's permutations (near dedup)
        if config.near_dedup:
            try:
                from datasketch import MinHash
            except ImportError:
                raise ValueError(
                    "--clean_near_dedup needs datasketch: pip install 'jaxblend[clean]'"
                ) from None
            kind = {"num_perm": config.num_perm, "seed": config.seed, "scheme": SCHEME}
            permutations = MinHash(**kind).permutations  # computed once
            self.minhash = functools.partial(MinHash, permutations=permutations, **kind)
        near = config.near_dedup  # without it, each record has 0 bands and 0 MinHash values
        self.empty_bands = np.zeros(config.bands if near else 0, np.uint64)
        self.empty_minhash = np.zeros(config.num_perm if near else 0, np.uint32)
        self.positions: list[int] = []
        self.exact: list[int] = []
        self.words: list[bool] = []
        self.band_rows: list[np.ndarray] = []
        self.sig_rows: list[np.ndarray] = []

    def add(self, position: int, text: str) -> None:
        """Adds the record at ``position`` with its (cleaned) ``text``."""
        cfg = self.config
        words = text_lib.normalized_words(text)
        self.positions.append(position)
        self.exact.append(text_lib.hash64(" ".join(words).encode("utf-8")))
        self.words.append(bool(words))
        if words and self.minhash is not None:
            m = self.minhash()
            m.update_batch([g.encode("utf-8") for g in text_lib.word_ngrams(words, cfg.shingle)])
            sig = m.hashvalues.astype(np.uint32)
            raw, width = sig.tobytes(), cfg.rows * sig.itemsize  # one 64-bit key per LSH band
            keys = [text_lib.hash64(raw[b * width : (b + 1) * width]) for b in range(cfg.bands)]
            self.band_rows.append(np.array(keys, dtype=np.uint64))
        else:
            sig = self.empty_minhash
            self.band_rows.append(self.empty_bands)
        self.sig_rows.append(sig)

    def write(
        self,
        parts: str,
        index: int,
        filtered: np.ndarray,
        histograms: Mapping[str, Sequence[int]],
    ) -> None:
        """Writes the signature directory atomically (temporary directory, then rename), with the
        per-record filters' outcome (``filtered`` rows, score ``histograms``)."""
        n = len(self.positions)
        arrays = {
            "positions": np.asarray(self.positions, np.int64),
            "exact": np.asarray(self.exact, np.uint64),
            "words": np.asarray(self.words, bool),
            "bands": np.stack(self.band_rows) if n else self.empty_bands[None][:0],
            "minhash": np.stack(self.sig_rows) if n else self.empty_minhash[None][:0],
            "filtered": filtered,
        }
        with atomic_write.atomic_directory(sig_dir(parts, index), exists="replace") as out:
            out.write_json("histograms.json", dict(histograms))
            for name, arr in arrays.items():
                out.save_npy(name, arr)


def load_decisions(
    parts: str, index: int, reasons: Sequence[str]
) -> tuple[dict[int, str], dict[str, list[int]]]:
    """Partition ``index``'s per-record outcome: position -> reason, and the score histograms."""
    rows = np.load(os.path.join(sig_dir(parts, index), "filtered.npy"))
    with open(os.path.join(sig_dir(parts, index), "histograms.json"), encoding="utf-8") as f:
        histograms = json.load(f)
    return {int(p): reasons[int(r)] for p, r in rows.tolist()}, histograms


def load(parts: str, index: int, name: str) -> np.ndarray:
    """Memory-maps one array of partition ``index``'s signatures."""
    return np.load(os.path.join(sig_dir(parts, index), f"{name}.npy"), mmap_mode="r")
