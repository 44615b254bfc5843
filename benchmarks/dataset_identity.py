"""What it costs for a dataset's identity to cover its `.bin` tokens (content digest + memo).

  .venv/bin/python benchmarks/dataset_identity.py            # 1 GB local, 200 MB per server
  .venv/bin/python benchmarks/dataset_identity.py --quick    # 10x smaller

Side by side in one run, for the same files:

* reference: the identity before (`.idx` bytes and `.bin` size only), computed by this script the
  way `IndexedDataset.fingerprint` used to (`_idx_only_identity`);
* first sight: `IndexedDataset(prefix).fingerprint` with an empty identity memo (the `.idx` is
  hashed and the whole `.bin` is read and digested once);
* remembered: the same in a new object after the memo recorded the version (a `stat` locally, the
  two small requests of a cached open on a bucket).

Rows: one large local dataset (page cache warm, then cold when the caches can be dropped), 1,000
small local datasets, and a few datasets on fake-gcs-server and on moto's S3 server (real
processes on loopback, tests/helpers_object_store.py). Prints one markdown table. On the servers
"first sight" takes the `.bin` MD5 from the store (GCS md5Hash, S3 ETag): no `.bin` read.

A second table (`--digest_only` prints only it) compares the `.bin` digests on the large local
file, page cache warm: the MD5 of the fingerprint since v3 (one sequential pass, reads running
ahead in threads: `content_digest.local_file_digest`) against the chunked SHA-256 it replaced
(16 MiB chunks hashed by one thread per core, reimplemented here as `_chunked_sha256`), with each
hash's in-memory rate on this machine as its ceiling.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's jaxblend, not another installed copy
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _corpus import write_corpus


def _idx_only_identity(ds) -> str:
    """The identity before `.bin` digests: blake2b-128 of the `.idx` bytes and the `.bin` size,
    over an opened dataset's `.idx` buffer (as `IndexedDataset.fingerprint` computed it)."""
    _ = ds.sequence_lengths  # remote: downloads the `.idx`
    h = ds._handles()  # benchmark only: the `.idx` bytes the dataset holds
    digest = hashlib.blake2b(digest_size=16, person=b"jaxblend.idx.v1")
    view = memoryview(h.idx_buffer)
    for lo in range(0, len(view), 64 << 20):
        digest.update(view[lo : lo + (64 << 20)])
    digest.update(h.bin_size.to_bytes(8, "little"))
    return digest.hexdigest()


def _reference(prefixes: list[str]) -> None:
    """Opening every dataset and computing the old identity."""
    from jaxblend.storage import IndexedDataset

    for p in prefixes:
        _idx_only_identity(IndexedDataset(p))


def _drop_caches() -> bool:
    try:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def _read_all(prefixes: list[str]) -> None:
    """Brings every file into the page cache."""
    for p in prefixes:
        for suffix in (".idx", ".bin"):
            with open(p + suffix, "rb") as f:
                while f.read(64 << 20):
                    pass


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _chunked_sha256(path: str) -> str:
    """The `.bin` digest of fingerprint v2: SHA-256 over the SHA-256s of 16 MiB chunks, one thread
    per core (what `content_digest` computed before MD5)."""
    import concurrent.futures

    size, chunk = os.path.getsize(path), 16 << 20
    fd = os.open(path, os.O_RDONLY)
    try:
        with concurrent.futures.ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as pool:
            digests = list(pool.map(
                lambda lo: hashlib.sha256(os.pread(fd, min(chunk, size - lo), lo)).digest(),
                range(0, size, chunk),
            ))
    finally:
        os.close(fd)
    top = hashlib.sha256(size.to_bytes(8, "little"))
    for d in digests:
        top.update(d)
    return top.hexdigest()


def _clocked(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process, all threads) of `fn()`."""
    t, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t, time.process_time() - c


def digest_rows(path: str, repeats: int = 3) -> list[tuple[str, float, float]]:
    """(digest, best wall GB/s, least CPU seconds per GB) over `repeats` runs on the warm file,
    for both `.bin` digests and, as ceilings, for one thread hashing memory.

    CPU seconds per GB do not depend on what else the machine runs (wall rates do, on a shared
    machine): with `c` CPU s/GB, one core does at most 1/c GB/s.
    """
    from jaxblend.storage.dataset_identity import content_digest

    size = os.path.getsize(path)
    _read_all([path.removesuffix(".bin")])
    block = os.urandom(16 << 20)
    count = 32
    cases = [
        ("MD5, one pass, reads ahead (fingerprint v3)", size,
         lambda: content_digest.local_file_digest(path, size, path)),
        (f"chunked SHA-256, {max(2, os.cpu_count() or 2)} threads (fingerprint v2)", size,
         lambda: _chunked_sha256(path)),
        ("ceiling: MD5 of memory, 1 thread", count * len(block),
         lambda: [hashlib.md5(block).digest() for _ in range(count)]),
        ("ceiling: SHA-256 of memory, 1 thread", count * len(block),
         lambda: [hashlib.sha256(block).digest() for _ in range(count)]),
    ]
    rows = []
    for label, nbytes, fn in cases:
        runs = [_clocked(fn) for _ in range(repeats)]
        rows.append((label, max(nbytes / w for w, _ in runs) / 1e9,
                     min(c for _, c in runs) / (nbytes / 1e9)))
    return rows


def _print_digests(path: str) -> None:
    print(f"\n`.bin` digest of {os.path.getsize(path) / 1e9:.2f} GB, page cache warm, "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}\n")
    print("| digest | wall GB/s (best of 3) | CPU s per GB (least of 3) |")
    print("|---|---|---|")
    for label, rate, cpu in digest_rows(path):
        print(f"| {label} | {rate:.2f} | {cpu:.2f} |")


def _fingerprints(prefixes: list[str]) -> None:
    from jaxblend.storage import IndexedDataset

    for p in prefixes:
        _ = IndexedDataset(p).fingerprint


def _fresh_memo(work: Path) -> None:
    os.environ["JAXBLEND_IDENTITY_CACHE"] = tempfile.mkdtemp(dir=work, prefix="memo-")


def local_rows(prefixes: list[str], label: str, work: Path, cold: bool) -> list[tuple]:
    from jaxblend.storage.dataset_identity import memo as identity_memo

    identity_memo.SETTLE_SECONDS = 0.0  # the files were written a moment ago; see identity_memo
    size = sum(os.path.getsize(p + ".bin") for p in prefixes)
    rows = []
    for state in ("warm", "cold") if cold else ("warm",):
        if state == "cold":
            _drop_caches()
        else:
            _read_all(prefixes)
        _fresh_memo(work)
        reference = _timed(lambda: _reference(prefixes))
        _fresh_memo(work)
        if state == "cold":
            _drop_caches()
        first = _timed(lambda: _fingerprints(prefixes))
        remembered = _timed(lambda: _fingerprints(prefixes))
        rows.append((f"{label}, page cache {state}", size, reference, first, remembered))
    return rows


def remote_rows(server, prefixes: list[str], work: Path) -> list[tuple]:
    size = sum(os.path.getsize(p + ".bin") for p in prefixes)
    with server.pointed_at():
        urls = [server.upload(p, f"identity/{Path(p).name}") for p in prefixes]
        _fresh_memo(work)
        ref = _timed(lambda: _reference(urls))  # the old first sight: the whole `.idx`, hashed
        _fresh_memo(work)
        first = _timed(lambda: _fingerprints(urls))
        remembered = _timed(lambda: _fingerprints(urls))
    return [(f"{len(urls)} datasets on {server.name}", size, ref, first, remembered)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10x smaller corpora")
    parser.add_argument("--work_dir", default=None, help="where corpora are written (kept)")
    parser.add_argument("--digest_only", action="store_true",
                        help="only the MD5 vs chunked SHA-256 table on the large file")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="jaxblend-identity-"))
    big = write_corpus(work / "big", 1, 500_000_000 // scale)
    if args.digest_only:
        _print_digests(big[0] + ".bin")
        return
    many = write_corpus(work / "many", 1000, 100_000_000 // scale, seed=1)
    remote = write_corpus(work / "remote", 4, 100_000_000 // scale, seed=2)
    cold = _drop_caches()
    rows = local_rows(big, "1 local dataset", work, cold)
    rows += local_rows(many, "1,000 local datasets", work, False)
    from helpers_object_store import GcsServer, S3Server

    for cls in (GcsServer, S3Server):
        server = cls.start(Path(tempfile.mkdtemp(dir=work)))
        try:
            rows += remote_rows(server, remote, work)
        finally:
            with contextlib.suppress(Exception):
                server.stop()
    print("| datasets | .bin MB | reference: .idx only, s | first sight, s | x reference | "
          "GB/s | remembered, s | x reference |")
    print("|---|---|---|---|---|---|---|---|")
    for label, size, ref, first, again in rows:
        print(f"| {label} | {size / 1e6:,.0f} | {ref:.3f} | {first:.3f} | {first / ref:.1f} | "
              f"{size / first / 1e9:.2f} | {again:.3f} | {again / ref:.2f} |")
    print(f"\nceiling: SHA-256 of 1 GB in memory, {os.cpu_count()} threads: {_sha256_ceiling():.2f} GB/s")
    _print_digests(big[0] + ".bin")


def _sha256_ceiling() -> float:
    """GB/s of SHA-256 over memory with one thread per core: what the digest can reach here."""
    import concurrent.futures

    import numpy as np

    chunk = np.random.default_rng(0).bytes(16 << 20)
    count = 64
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
        t = time.perf_counter()
        list(pool.map(lambda _: hashlib.sha256(chunk).digest(), range(count)))
        return count * len(chunk) / (time.perf_counter() - t) / 1e9


if __name__ == "__main__":
    main()
