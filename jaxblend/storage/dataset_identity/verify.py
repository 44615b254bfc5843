"""A dataset opened by its prefix and identified: `dataset_fingerprint`, the one entry point of
dataset identity (the reader validates the pair and identifies it at the cheapest level; see the
package docstring), and `verify_dataset`, full content verification on request.

Opening a dataset checks sizes and file versions only (docs/robustness.md, "Dataset identity"): a
version pair remembered (`memo`) or reported by the store (`store_checksums`) is not read.
That trusts the bytes behind a version to stay what they were. `verify_dataset` checks it: it reads
the whole `.bin` of the version opened, recomputes its MD5 and compares it with

* the MD5 the store keeps for that object version (GCS `md5Hash`, a single-part S3 ETag), and
* the identity remembered for that version pair, if any (the fingerprint it was opened with).

A disagreement means the bytes changed without a new version (bit rot, an in-place write that kept
a local file's timestamps) or the store's checksum is not an MD5 (AWS SSE-KMS/SSE-C objects). A
consistent result is remembered, so the next open of that version reads nothing.
"""

from __future__ import annotations

import dataclasses
import time

from jaxblend.access import DataAccess
from jaxblend.storage.dataset_identity import levels
from jaxblend.storage.object_store.location import Prefix
from jaxblend.storage.reader import IndexedDataset


def dataset_fingerprint(prefix: Prefix, access: DataAccess | None = None) -> str:
    """The content fingerprint of the dataset at `prefix` (local path, URL or kvstore spec).

    The dataset is opened (its files' versions, sizes and `.idx` header checked) and identified at
    the cheapest level that knows it (see `jaxblend.storage.dataset_identity`).

    Args:
      prefix: the dataset prefix.
      access: how it is reached (default `DataAccess.from_env()`).

    Raises:
      IndexFormatError: a file is missing, malformed, or changed while it was identified.
      ObjectStoreError: the store failed or timed out.
    """
    dataset = IndexedDataset(prefix, access=access)
    try:
        return dataset.fingerprint
    finally:
        dataset.close()


@dataclasses.dataclass(frozen=True)
class Verification:
    """The outcome of reading one dataset in full.

    Attributes:
      prefix: the dataset's prefix as displayed.
      bin_bytes: bytes read.
      read_md5: MD5 (hex) of the `.bin` bytes read.
      store_md5: the store's MD5 (hex) of that object version, or None when it keeps none.
      store_source: where `store_md5` came from, or why there is none.
      fingerprint: the fingerprint of the bytes read.
      remembered: the fingerprint remembered for this version pair, or None.
      problems: one line per disagreement, each naming the file and what to do.
    """

    prefix: str
    bin_bytes: int
    read_md5: str
    store_md5: str | None
    store_source: str
    fingerprint: str
    remembered: str | None
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def line(self) -> str:
        """One line for a listing."""
        if self.problems:
            return "MISMATCH " + " ".join(self.problems)
        store = "matches" if self.store_md5 else f"none ({self.store_source})"
        remembered = "matches" if self.remembered else "none"
        return (
            f"ok {self.prefix}: {self.bin_bytes:,} bytes, md5 {self.read_md5}, store checksum "
            f"{store}, remembered identity {remembered}"
        )


def verify_dataset(ds: IndexedDataset) -> Verification:
    """Reads `ds`'s whole `.bin` and compares its MD5 with the store's and the remembered identity.

    Raises:
      IndexFormatError: a file is missing or malformed, or changed while it was read.
      ObjectStoreError: the store failed.
    """
    began = time.time()
    ds._arrays()  # the `.idx`, downloaded and validated (the fingerprint covers its bytes)
    loc, h, store = ds._location, ds._handles(), ds.object_store
    bin_name = loc.file_name(".bin")
    checksum = levels.reported_md5(loc, h, store)
    read = levels.read_md5(loc, h, store)
    fingerprint = levels.combine(h.idx_buffer, h.bin_size, bytes.fromhex(read))
    known = levels.remembered(loc, h, ds.access)
    problems = []
    store_md5 = checksum.md5.hex() if checksum.md5 is not None else None
    if store_md5 is not None and store_md5 != read:
        problems.append(
            f"{bin_name}: its bytes have MD5 {read} but the store's checksum ({checksum.source}) "
            f"is {store_md5}: the object is corrupt (or encrypted with SSE-KMS/SSE-C, whose ETag "
            "is no MD5); upload it again from a good copy"
        )
    remembered = known.fingerprint if known is not None else None
    if remembered is not None and remembered != fingerprint:
        problems.append(
            f"{bin_name}: its bytes no longer match the identity remembered for this file version "
            f"({remembered}, now {fingerprint}): they changed without a new version (bit rot or an "
            "in-place write); restore the dataset from a good copy, or rewrite it if the new "
            "contents are meant"
        )
    if not problems and remembered is None:
        levels.remember(loc, h, fingerprint, began, ds.access)
    return Verification(
        loc.display,
        h.bin_size,
        read,
        store_md5,
        checksum.source,
        fingerprint,
        remembered,
        tuple(problems),
    )
