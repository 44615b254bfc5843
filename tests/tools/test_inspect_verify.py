"""`inspect verify`: full content verification, one line per dataset, non-zero on a mismatch.

Local files through the command line; the store-checksum comparison against fake-gcs-server and
moto in-process (a bucket object cannot be given bytes that disagree with its stored checksum, so
the mismatch case feeds `verify_dataset` a wrong checksum).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from helpers_cli import run_tool
from helpers_data import write_random_dataset

from jaxblend.access import DataAccess, ObjectStoreOptions
from jaxblend.storage import IndexedDataset, dataset_identity
from jaxblend.storage.dataset_identity import memo as identity_memo
from jaxblend.storage.dataset_identity import store_checksums
from jaxblend.storage.dataset_identity.verify import verify_dataset


def _verify(*prefixes: str) -> subprocess.CompletedProcess:
    return run_tool("jaxblend.tools.inspect", ["verify",
            "--data_path=" + " ".join(prefixes)])


@pytest.fixture
def prefixes(tmp_path: Path) -> list[str]:
    rng = np.random.default_rng(11)
    return [
        write_random_dataset(str(tmp_path / name), rng, 40, lengths=(2, 60), vocab=(0, 900))
        for name in ("a", "b")
    ]


def _flip_a_token(prefix: str) -> None:
    path = Path(prefix + ".bin")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x5A
    path.write_bytes(data)


def _plant_memo(prefix: str, fingerprint: str) -> None:
    """Remembers `fingerprint` for the files' current versions: what a memo holds when the bytes
    changed under unchanged version stamps (bit rot, an in-place write that kept the timestamps)."""
    ds = IndexedDataset(prefix)
    h = ds._handles()
    access = DataAccess.from_env()
    identity_memo.record(
        dataset_identity.memo_url(ds._location),
        h.idx_generation,
        h.bin_generation,
        identity_memo.Identity(fingerprint, h.num_tokens, h.bin_size),
        options=access.identity_store(),
        object_store=access.object_store,
    )


def test_good_data_passes_and_is_remembered(prefixes: list[str]) -> None:
    time.sleep(identity_memo.SETTLE_SECONDS)  # settled files are remembered by the first run
    out = _verify(*prefixes)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("ok ") for line in lines)
    for prefix, line in zip(prefixes, lines, strict=True):
        assert prefix in line and "remembered identity none" in line
    again = _verify(*prefixes)
    assert again.returncode == 0 and again.stdout.count("remembered identity matches") == 2


def test_same_size_change_under_the_same_version_fails(prefixes: list[str]) -> None:
    good = IndexedDataset(prefixes[1]).fingerprint
    _flip_a_token(prefixes[1])
    _plant_memo(prefixes[1], good)
    out = _verify(*prefixes)
    assert out.returncode == 1
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("ok ")
    assert lines[1].startswith(f"MISMATCH {prefixes[1]}.bin: its bytes no longer match")
    assert "restore the dataset from a good copy" in lines[1]
    assert f"1 of 2 datasets failed verification ({prefixes[1]})" in out.stderr


def test_bucket_dataset_matches_its_store_checksum(object_store, prefixes) -> None:
    url = object_store.upload(prefixes[0], f"verify/ok{os.getpid()}{time.monotonic_ns()}")
    with object_store.pointed_at():
        checked = verify_dataset(IndexedDataset(url))
    assert checked.ok and checked.store_md5 == checked.read_md5
    assert checked.fingerprint == IndexedDataset(prefixes[0]).fingerprint
    assert checked.line().startswith(f"ok {url}: ") and "store checksum matches" in checked.line()


def test_bucket_checksum_disagreeing_with_the_bytes_fails(object_store, prefixes, monkeypatch):
    url = object_store.upload(prefixes[0], f"verify/bad{os.getpid()}{time.monotonic_ns()}")
    real = store_checksums.reported

    def wrong(*args, **kwargs):
        got = real(*args, **kwargs)
        return store_checksums.StoreChecksum(bytes(16), got.crc32c, got.source)

    monkeypatch.setattr(store_checksums, "reported", wrong)
    with object_store.pointed_at():
        checked = verify_dataset(
            IndexedDataset(
                url, access=DataAccess.from_env(object_store=ObjectStoreOptions.from_env())
            )
        )
    assert not checked.ok
    assert checked.line().startswith(f"MISMATCH {url}.bin: its bytes have MD5 {checked.read_md5}")
    assert "upload it again from a good copy" in checked.line()
