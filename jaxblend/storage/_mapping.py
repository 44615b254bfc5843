"""Read-only memory maps of local files that hold no file descriptor.

CPython's `mmap.mmap` keeps a duplicate of the file descriptor for as long as the map lives (until
Python 3.13's `trackfd=False`), so a blend of 10,000 local datasets (an `.idx` and a `.bin` each)
needs 20,000 descriptors and fails with EMFILE under common limits. `map_readonly` maps the file
with libc's `mmap` and closes the descriptor at once; the mapping is released by `munmap` when the
last array or memoryview over it is gone. Where libc cannot be loaded, it falls back to
`mmap.mmap`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import weakref

import numpy as np

_PROT_READ = 0x1
_MAP_SHARED = 0x01


def _load_libc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        libc.munmap.restype = ctypes.c_int
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        return libc
    except (OSError, AttributeError):  # pragma: no cover - platforms without a loadable libc
        return None


_LIBC = _load_libc() if os.name == "posix" else None
_MAP_FAILED = ctypes.c_void_p(-1).value


class _Mapping:
    """One libc mapping, exposed to numpy by its address (`__array_interface__`, read-only).

    Arrays made from it keep it as their base, and their views keep those arrays, so it lives as
    long as any array over the pages; `map_readonly` unmaps it when it is collected. (A ctypes
    array over the address would do the same, but would create and keep a new ctypes type for
    every file size: ~20 us and a little memory per mapping, 2,000 of them in a 1,000-dataset
    start.)
    """

    __slots__ = ("__array_interface__", "__weakref__")

    def __init__(self, address: int, size: int) -> None:
        self.__array_interface__ = {
            "data": (address, True),  # read-only: the pages are PROT_READ
            "shape": (size,),
            "typestr": "|u1",
            "version": 3,
        }


def map_readonly(path: str) -> np.ndarray | mmap.mmap:
    """Maps a whole non-empty file read-only: a read-only uint8 array over the mapping.

    Raises:
      OSError: if the file cannot be opened or mapped.
    """
    fd = os.open(path, os.O_RDONLY)  # (not inheritable: PEP 446)
    try:
        size = os.fstat(fd).st_size
        if _LIBC is None or size == 0:  # pragma: no cover - fallback
            return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        address = _LIBC.mmap(None, size, _PROT_READ, _MAP_SHARED, fd, 0)
        if address is None or address == _MAP_FAILED:
            err = ctypes.get_errno()
            raise OSError(err, f"mmap failed: {os.strerror(err)}", path)
    finally:
        os.close(fd)
    mapping = _Mapping(address, size)
    release = weakref.finalize(mapping, _LIBC.munmap, address, size)  # when the last view is gone
    release.atexit = False  # at exit the process goes away anyway; views may outlive finalizers
    view = np.asarray(mapping)
    view.flags.writeable = False  # (already so) the pages are PROT_READ: a write would crash
    return view
