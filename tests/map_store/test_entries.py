"""The index cache cannot be fooled: checksums, malformed manifests, code changes, durability."""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import pytest

from jaxblend.map_store import entries as cache

KEY = "k" * 32


def _arrays():
    rng = np.random.default_rng(0)
    return {
        "big": rng.integers(0, 1 << 40, 200_000).astype(np.int64),  # 1.6 MB: summary samples it
        "small": np.arange(10, dtype=np.int32),
    }


def _entry(tmp_path):
    cache.save(str(tmp_path), KEY, _arrays(), {"splits": {}})
    return tmp_path / KEY


def _flip(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def _unsampled_offset(path):
    size = path.stat().st_size
    blocks = [(o, o + cache.SUMMARY_BLOCK) for o in cache._summary_offsets(size)]
    offset = blocks[0][1] + 17
    assert not any(a <= offset < b for a, b in blocks)
    return offset


def test_roundtrip_records_checksums(tmp_path):
    entry = _entry(tmp_path)
    manifest = json.loads((entry / cache.MANIFEST).read_text())
    desc = manifest["arrays"]["big"]
    assert desc["sha256"] == cache.file_digest(str(entry / "big.npy"))
    assert desc["summary"] == cache.summary_digest(str(entry / "big.npy"))
    for verify in cache.VERIFY_MODES:
        arrays, meta = cache.load(str(tmp_path), KEY, verify)
        np.testing.assert_array_equal(arrays["big"], _arrays()["big"])
        assert meta == {"splits": {}}


@pytest.mark.parametrize("where", ["sampled", "unsampled"])
def test_same_size_change_is_caught(tmp_path, caplog, where):
    entry = _entry(tmp_path)
    target = entry / "big.npy"
    _flip(target, target.stat().st_size - 5 if where == "sampled" else _unsampled_offset(target))
    with caplog.at_level(logging.WARNING):
        summary = cache.load(str(tmp_path), KEY, "summary")
    if where == "sampled":
        assert summary is None and "summary digest" in caplog.text
        assert not entry.exists()
        return
    # The start-up check samples blocks: a change between them needs the full check.
    assert summary is not None
    assert "SHA-256" in cache.check_dir(cache.entry_path(str(tmp_path), KEY), KEY)
    assert entry.exists()  # check() only reports
    with caplog.at_level(logging.WARNING):
        assert cache.load(str(tmp_path), KEY, "full") is None
    assert "SHA-256" in caplog.text and not entry.exists()


@pytest.mark.parametrize(
    "damage",
    ["arrays_list", "meta_string", "record_not_dict", "not_object", "edited_meta", "path_name"],
)
def test_malformed_manifest_rebuilds_with_a_warning(tmp_path, caplog, damage):
    entry = _entry(tmp_path)
    path = entry / cache.MANIFEST
    manifest = json.loads(path.read_text())
    if damage == "arrays_list":
        manifest["arrays"] = list(manifest["arrays"])
    elif damage == "meta_string":
        manifest["meta"] = "x"
    elif damage == "record_not_dict":
        manifest["arrays"]["big"] = 3
    elif damage == "not_object":
        manifest = [manifest]
    elif damage == "edited_meta":
        manifest["meta"] = {"splits": {"train": {}}}
    else:
        manifest["arrays"]["../escape"] = manifest["arrays"].pop("big")
    if damage != "edited_meta" and isinstance(manifest, dict):
        manifest["checksum"] = cache._manifest_checksum(manifest)  # only the structure is wrong
    path.write_text(json.dumps(manifest))
    with caplog.at_level(logging.WARNING):
        assert cache.load(str(tmp_path), KEY) is None
    assert "corrupt" in caplog.text and not entry.exists()


def test_entry_that_is_a_file_is_replaced(tmp_path, caplog):
    (tmp_path / KEY).write_text("junk")
    with caplog.at_level(logging.WARNING):
        assert cache.load(str(tmp_path), KEY) is None
    assert not (tmp_path / KEY).exists()
    (tmp_path / KEY).write_text("junk")
    cache.save(str(tmp_path), KEY, _arrays(), {})
    assert cache.load(str(tmp_path), KEY) is not None


def test_files_and_directories_are_fsynced_before_the_rename(tmp_path, monkeypatch):
    events = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def rename(src, dst):
        events.append(("rename", str(src)))
        real_rename(src, dst)

    monkeypatch.setattr(cache.os, "fsync", fsync)
    monkeypatch.setattr(cache.os, "rename", rename)
    cache.save(str(tmp_path), KEY, _arrays(), {})
    kinds = [k for k, _ in events]
    at = kinds.index("rename")
    tmp = events[at][1]
    synced_before = {p for k, p in events[:at] if k == "fsync"}
    for name in ("big.npy", "small.npy", cache.MANIFEST):
        assert os.path.join(tmp, name) in synced_before
    assert tmp in synced_before
    assert ("fsync", str(tmp_path)) in events[at + 1 :]
