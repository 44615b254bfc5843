"""Read-only maps of local files: contents, read-only pages, and unmapping when the last view goes."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

from jaxblend.storage import _mapping


def _mapped(path) -> int:
    """How many regions of this process map `path` (from /proc/self/maps)."""
    real = os.path.realpath(path)
    with open("/proc/self/maps") as f:
        return sum(line.rstrip("\n").endswith(" " + real) for line in f)


@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "tokens.bin"
    np.arange(10_000, dtype=np.uint16).tofile(path)
    return path


def test_a_map_is_the_file_read_only_and_holds_no_descriptor(data_file) -> None:
    before = len(os.listdir("/proc/self/fd"))
    view = _mapping.map_readonly(str(data_file))
    assert len(os.listdir("/proc/self/fd")) == before
    assert view.dtype == np.uint8 and view.shape == (20_000,)
    np.testing.assert_array_equal(view, np.fromfile(data_file, np.uint8))
    assert not view.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        view[0] = 1


def test_the_pages_stay_mapped_while_any_view_lives(data_file) -> None:
    view = _mapping.map_readonly(str(data_file))
    assert _mapped(data_file) == 1
    tokens = np.frombuffer(view, dtype=np.uint16)[100:110]
    del view
    gc.collect()
    assert _mapped(data_file) == 1
    window = memoryview(tokens)
    del tokens
    gc.collect()
    assert _mapped(data_file) == 1
    assert window.tolist() == list(range(100, 110))
    window.release()
    del window
    gc.collect()
    assert _mapped(data_file) == 0


def test_a_missing_file_raises(tmp_path) -> None:
    with pytest.raises(FileNotFoundError):
        _mapping.map_readonly(str(tmp_path / "missing.bin"))
