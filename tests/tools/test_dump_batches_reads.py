"""dump_batches --steps=N reads nothing past step N (in this process, S3 through a logging proxy).

A first run publishes the plan to a bucket map store and dumps three steps; a fresh host (its own
map mirror and identity memo) then dumps one step with a deep read-ahead. Every `.bin` request
of the one-step run touches the token pieces of step 0's rows and stays within the gap that
coalescing may close between them, every piece of step 0 is read, no `.idx` is read, and the
batch is the first of the three-step run, byte for byte.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from helpers_cli import run_tool
from helpers_data import write_random_dataset
from helpers_fault_proxy import LoggingProxy

from jaxblend import index
from jaxblend.access import DataAccess, MapStoreOptions, ObjectStoreOptions
from jaxblend.sources import GPTSchemaOptions, open_gpt_sources

B, SEQ = 8, 16
GAP = ObjectStoreOptions().coalesce_gap  # bytes coalescing may read between two pieces


@pytest.fixture(scope="module")
def local_prefixes(tmp_path_factory):
    root = tmp_path_factory.mktemp("dump_reads")
    rng = np.random.default_rng(21)
    return [
        write_random_dataset(str(root / n), rng, d, lengths=(2, 60), vocab=(1, 900))
        for n, d in (("a", 150), ("b", 220))
    ]


def _batches(out) -> dict[str, np.ndarray]:
    with np.load(os.path.join(out, "batches.npz")) as f:
        return {k: f[k] for k in f.files}


def _byte_range(header: str) -> tuple[int, int]:
    """`bytes=a-b` -> [a, b + 1)."""
    first, last = header.removeprefix("bytes=").split("-")
    return int(first), int(last) + 1


def test_one_step_dump_reads_only_its_rows(s3_server, local_prefixes, tmp_path):
    urls = [s3_server.upload(p, f"dumpreads/{os.path.basename(p)}") for p in local_prefixes]
    maps_url = s3_server.prefix_url("dumpreads/maps")
    proxy = LoggingProxy(s3_server.url)
    env = {**os.environ, **s3_server.environ(proxy.url),
           "JAXBLEND_IDENTITY_CACHE": str(tmp_path / "identity")}
    data = [
        f"--data_path=40 {urls[0]} 60 {urls[1]}", "--split=90,10,0", f"--seq_length={SEQ}",
        "--train_samples=400", "--valid_samples=16", f"--global_batch_size={B}",
        f"--s3_endpoint={proxy.url}", f"--data_cache_path={maps_url}", "--data_cache_wait=60",
        "--read_ahead=8",
    ]
    try:
        three = run_tool("jaxblend.tools.dump_batches", [
            *data, "--steps=3", f"--data_cache_mirror={tmp_path / 'mirror0'}",
            f"--out={tmp_path / 'three'}"], env=env)
        assert three.returncode == 0, three.stderr[-3000:]
        del proxy.log[:]
        env["JAXBLEND_IDENTITY_CACHE"] = str(tmp_path / "identity1")  # a fresh host
        one = run_tool("jaxblend.tools.dump_batches", [
            *data, "--steps=1", f"--data_cache_mirror={tmp_path / 'mirror1'}",
            f"--out={tmp_path / 'one'}"], env=env)
        assert one.returncode == 0, one.stderr[-3000:]
        log = list(proxy.log)
    finally:
        proxy.close()

    got, want = _batches(tmp_path / "one"), _batches(tmp_path / "three")
    assert got.keys() == want.keys() and "inputs" in got
    for key in want:
        assert got[key].tobytes() == want[key][:1].tobytes(), key

    # Step 0's token pieces as byte ranges of each dataset's .bin.
    config = index.GPTDataConfig(
        blend=["40", local_prefixes[0], "60", local_prefixes[1]], split="90,10,0",
        seq_length=SEQ, seed=1234, num_samples=(400, 16, 0))
    source = open_gpt_sources(config, GPTSchemaOptions(), access=DataAccess(
        maps=MapStoreOptions(location=str(tmp_path / "local_maps"))))["train"]
    step0 = np.arange(B, dtype=np.int64)
    np.testing.assert_array_equal(source.get_batch(step0)["inputs"], got["inputs"][0])
    pieces = source.span_index.pieces(step0)
    itemsize = np.dtype(source.span_index.bin_datasets[0].dtype).itemsize
    wanted: dict[str, list[tuple[int, int]]] = {}
    for d, offset, length in zip(pieces.dataset, pieces.offset, pieces.length):
        if length:
            name = os.path.basename(source.dataset_names[int(d)]) + ".bin"
            wanted.setdefault(name, []).append(
                (int(offset) * itemsize, (int(offset) + int(length)) * itemsize))

    assert not any(p.endswith(".idx") or ".idx?" in p for _, p, _ in log), log
    reads: dict[str, list[tuple[int, int]]] = {}
    for method, path, header in log:
        name = path.split("?")[0].rsplit("/", 1)[-1]
        if method == "GET" and name in ("a.bin", "b.bin"):
            assert header, f"a whole .bin was read: {path}"
            reads.setdefault(name, []).append(_byte_range(header))
    assert set(reads) == set(wanted)
    for name, ranges in reads.items():
        mine = wanted[name]
        for start, end in ranges:  # each request reads step 0's pieces and at most gaps between
            inside = [(a, b) for a, b in mine if a < end and start < b]
            assert inside, f"{name} bytes [{start}, {end}) hold no piece of step 0"
            assert start >= min(a for a, _ in inside) and end <= max(b for _, b in inside), (
                name, start, end)
            covered = sum(min(b, end) - max(a, start) for a, b in inside)
            assert (end - start) - covered <= GAP * len(inside), (name, start, end)
        for a, b in mine:  # and every byte of step 0's pieces is read
            assert _covered(a, b, ranges), (name, a, b)


def _covered(a: int, b: int, ranges: list[tuple[int, int]]) -> bool:
    """Whether the ranges together hold every byte of [a, b)."""
    for start, end in sorted(ranges):
        if start <= a < end:
            a = end
    return a >= b
