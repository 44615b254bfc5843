"""Tests of `jaxblend.atomic_write`: whole results or nothing, durably, for files and directories."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from jaxblend import atomic_write


class _Boom(RuntimeError):
    pass


def _listing(directory) -> list[str]:
    return sorted(os.listdir(directory))


def test_atomic_file_writes_bytes_and_text(tmp_path):
    with atomic_write.atomic_file(tmp_path / "a.bin") as f:
        f.write(b"\x00\x01")
    with atomic_write.atomic_file(tmp_path / "b.txt", "w") as f:
        f.write("héllo")
    assert (tmp_path / "a.bin").read_bytes() == b"\x00\x01"
    assert (tmp_path / "b.txt").read_text(encoding="utf-8") == "héllo"
    assert _listing(tmp_path) == ["a.bin", "b.txt"]


def test_atomic_file_replaces_an_existing_file(tmp_path):
    (tmp_path / "a.json").write_text("old")
    with atomic_write.atomic_file(tmp_path / "a.json", "w") as f:
        json.dump({"new": 1}, f)
    assert json.loads((tmp_path / "a.json").read_text()) == {"new": 1}
    assert _listing(tmp_path) == ["a.json"]


def test_error_mid_file_write_leaves_nothing_at_the_destination(tmp_path):
    with pytest.raises(_Boom), atomic_write.atomic_file(tmp_path / "a.bin") as f:
        f.write(b"half")
        raise _Boom
    assert _listing(tmp_path) == []


def test_error_mid_file_write_keeps_the_previous_file(tmp_path):
    (tmp_path / "a.txt").write_text("previous")
    with pytest.raises(_Boom), atomic_write.atomic_file(tmp_path / "a.txt", "w") as f:
        f.write("half")
        raise _Boom
    assert (tmp_path / "a.txt").read_text() == "previous"
    assert _listing(tmp_path) == ["a.txt"]


def test_atomic_path_keeps_the_suffix_writers_infer_formats_from(tmp_path):
    with atomic_write.atomic_path(tmp_path / "x.npz", suffix=".npz") as tmp:
        assert tmp.endswith(".npz") and os.path.dirname(tmp) == str(tmp_path)
        np.savez(tmp, a=np.arange(3))
    with np.load(tmp_path / "x.npz") as z:
        np.testing.assert_array_equal(z["a"], np.arange(3))
    assert _listing(tmp_path) == ["x.npz"]


def test_atomic_path_error_removes_the_temporary_file(tmp_path):
    with pytest.raises(_Boom), atomic_write.atomic_path(tmp_path / "x.npz", suffix=".npz") as tmp:
        np.savez(tmp, a=np.arange(3))
        raise _Boom
    assert _listing(tmp_path) == []


def test_atomic_file_rejects_read_modes(tmp_path):
    with pytest.raises(ValueError, match="'r'"), atomic_write.atomic_file(tmp_path / "a", "r"):
        pass
    assert _listing(tmp_path) == []


def _write_dir(path, exists="keep", **arrays):
    with atomic_write.atomic_directory(path, exists=exists) as out:
        for name, array in arrays.items():
            out.save_npy(name, array)
        out.write_json("meta.json", {"names": sorted(arrays)}, sort_keys=True)


def test_atomic_directory_publishes_arrays_and_json(tmp_path):
    dest = tmp_path / "entry"
    _write_dir(dest, a=np.arange(5, dtype=np.int64), b=np.ones((2, 3), np.float32))
    assert _listing(dest) == ["a.npy", "b.npy", "meta.json"]
    np.testing.assert_array_equal(np.load(dest / "a.npy"), np.arange(5))
    assert np.load(dest / "b.npy").dtype == np.float32
    assert json.loads((dest / "meta.json").read_text()) == {"names": ["a", "b"]}
    assert _listing(tmp_path) == ["entry"]  # no temporary directory left


def test_error_mid_directory_write_leaves_nothing_at_the_destination(tmp_path):
    dest = tmp_path / "entry"
    with pytest.raises(_Boom), atomic_write.atomic_directory(dest) as out:
        out.save_npy("a", np.arange(10))
        raise _Boom
    assert _listing(tmp_path) == []


def test_error_mid_directory_replace_keeps_the_previous_directory(tmp_path):
    dest = tmp_path / "entry"
    _write_dir(dest, a=np.arange(3))
    with pytest.raises(_Boom), atomic_write.atomic_directory(dest, exists="replace") as out:
        out.save_npy("a", np.arange(7))
        raise _Boom
    np.testing.assert_array_equal(np.load(dest / "a.npy"), np.arange(3))
    assert _listing(tmp_path) == ["entry"]


def test_keep_leaves_an_entry_published_first(tmp_path):
    dest = tmp_path / "entry"
    _write_dir(dest, a=np.arange(3))
    _write_dir(dest, exists="keep", a=np.arange(9), extra=np.zeros(1))
    assert _listing(dest) == ["a.npy", "meta.json"]
    np.testing.assert_array_equal(np.load(dest / "a.npy"), np.arange(3))
    assert _listing(tmp_path) == ["entry"]


def test_replace_swaps_the_whole_directory(tmp_path):
    dest = tmp_path / "entry"
    _write_dir(dest, a=np.arange(3), old=np.zeros(2))
    _write_dir(dest, exists="replace", a=np.arange(9))
    assert _listing(dest) == ["a.npy", "meta.json"]
    np.testing.assert_array_equal(np.load(dest / "a.npy"), np.arange(9))
    assert _listing(tmp_path) == ["entry"]


@pytest.fixture
def disk_events(monkeypatch) -> list[tuple[str, str]]:
    """Records every fsync (the path synced) and rename/replace (the source) in order."""
    events: list[tuple[str, str]] = []
    real = {name: getattr(os, name) for name in ("fsync", "rename", "replace")}

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real["fsync"](fd)

    def mover(name):
        def move(src, dst):
            events.append((name, str(src)))
            real[name](src, dst)

        return move

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", mover("rename"))
    monkeypatch.setattr(os, "replace", mover("replace"))
    return events


def test_directory_files_and_parent_are_fsynced_around_the_rename(tmp_path, disk_events):
    _write_dir(tmp_path / "entry", a=np.arange(4))
    kinds = [k for k, _ in disk_events]
    at = kinds.index("rename")
    tmp = disk_events[at][1]
    synced_before = {p for k, p in disk_events[:at] if k == "fsync"}
    assert {os.path.join(tmp, "a.npy"), os.path.join(tmp, "meta.json"), tmp} <= synced_before
    assert disk_events[at + 1 :] == [("fsync", str(tmp_path))]


def test_file_is_fsynced_before_it_replaces_the_destination(tmp_path, disk_events):
    with atomic_write.atomic_file(tmp_path / "a.bin") as f:
        f.write(b"x")
    tmp = disk_events[0][1]
    assert os.path.dirname(tmp) == str(tmp_path) and tmp != str(tmp_path / "a.bin")
    assert disk_events == [("fsync", tmp), ("replace", tmp), ("fsync", str(tmp_path))]


def test_directory_writer_refuses_names_outside_the_directory(tmp_path):
    with pytest.raises(ValueError, match=r"'\.\./a\.npy'"), atomic_write.atomic_directory(
        tmp_path / "entry"
    ) as out:
        out.save_npy("../a", np.arange(2))
    assert _listing(tmp_path) == []


def test_unknown_exists_mode_is_refused(tmp_path):
    with pytest.raises(ValueError, match="exists='merge'"), atomic_write.atomic_directory(
        tmp_path / "entry", exists="merge"
    ):
        pass
    assert _listing(tmp_path) == []


def test_publish_directory_moves_a_directory_filled_elsewhere(tmp_path):
    tmp = tmp_path / ".download"
    tmp.mkdir()
    (tmp / "x.bin").write_bytes(b"abc")
    assert atomic_write.publish_directory(str(tmp), tmp_path / "entry") == str(tmp_path / "entry")
    assert (tmp_path / "entry" / "x.bin").read_bytes() == b"abc"
    assert _listing(tmp_path) == ["entry"]


def test_non_durable_file_skips_fsync_but_stays_atomic(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr(atomic_write, "fsync_path", synced.append)
    target = tmp_path / "entry.json"
    with atomic_write.atomic_file(target, "w", durable=False) as f:
        f.write("{}")
    assert target.read_text() == "{}" and synced == []
    with pytest.raises(RuntimeError), atomic_write.atomic_file(target, "w", durable=False) as f:
        f.write("partial")
        raise RuntimeError("interrupted")
    assert target.read_text() == "{}" and sorted(p.name for p in tmp_path.iterdir()) == ["entry.json"]
