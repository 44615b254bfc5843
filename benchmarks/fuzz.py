"""Fuzz campaigns: mutated `.idx` files, mutated preprocessing inputs, corrupted cache entries.

Each case mutates a valid input in one of several kinds of ways, runs the real code on it and
classifies the outcome. Only two outcomes are allowed:

* `correct`: the code accepted the input and its output is right (see each campaign);
* `clean_error`: a `ValueError`/`OSError` (what the CLIs print as one line) naming the file.

Anything else (another exception type, an error that does not name the file, output that differs
from the reference) is a `FAILURE`, listed with the case's seed so it can be replayed.

  .venv/bin/python benchmarks/fuzz.py                         # the full campaigns (10k/10k/1k)
  .venv/bin/python benchmarks/fuzz.py --campaign idx --count 500 --seed 1
  .venv/bin/python benchmarks/fuzz.py --replay idx:1234       # one case, with its traceback

The CI suite runs a small seeded sample of each campaign (tests/test_fuzz_sample.py).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import gzip
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable

import numpy as np

from jaxblend.preprocess import config as config_lib
from jaxblend.preprocess import tokenizer_spec as tok_spec

CORRECT, CLEAN, FAILURE = "correct", "clean_error", "FAILURE"
FULL_COUNTS = {"idx": 10_000, "preprocess": 10_000, "cache": 1_000}


@dataclasses.dataclass
class Tally:
    """Outcome counts per (campaign, kind) and the failing cases."""

    counts: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    failures: list[str] = dataclasses.field(default_factory=list)

    def add(self, campaign: str, kind: str, outcome: str, detail: str = "") -> None:
        self.counts[(campaign, kind, outcome)] += 1
        if outcome == FAILURE:
            self.failures.append(detail)

    def table(self) -> str:
        kinds = sorted({(c, k) for c, k, _ in self.counts})
        lines = ["| campaign | kind | cases | correct | clean error | failures |", "|---|---|---|---|---|---|"]
        for c, k in kinds:
            n = [self.counts[(c, k, o)] for o in (CORRECT, CLEAN, FAILURE)]
            lines.append(f"| {c} | {k} | {sum(n):,} | {n[0]:,} | {n[1]:,} | {n[2]:,} |")
        return "\n".join(lines)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _classify_error(err: BaseException, names: list[str]) -> str:
    if isinstance(err, (ValueError, OSError)) and any(n in str(err) for n in names):
        return CLEAN
    return FAILURE


def _run_case(tally: Tally, campaign: str, seed: int, fn: Callable[[random.Random], tuple[str, str, list[str]]],
              *, verbose: bool = False) -> None:
    """Runs `fn(rng)` -> (kind, outcome if no exception, names a clean error must mention)."""
    rng = random.Random(seed)
    kind, names = "?", []
    try:
        kind, outcome, names = fn(rng)
        tally.add(campaign, kind, outcome, f"{campaign}:{seed} ({kind}): wrong output")
    except _Case as case:
        kind, names = case.kind, case.names
        outcome = _classify_error(case.__cause__, names)
        detail = f"{campaign}:{seed} ({kind}): {type(case.__cause__).__name__}: {case.__cause__}"
        if verbose:
            traceback.print_exception(case.__cause__)
        tally.add(campaign, kind, outcome, detail[:400])


class _Case(Exception):
    """Carries the kind and the names a clean error must mention, from inside a case."""

    def __init__(self, kind: str, names: list[str]) -> None:
        super().__init__(kind)
        self.kind, self.names = kind, names


def _attempt(kind: str, names: list[str], fn: Callable[[], object]) -> object:
    try:
        return fn()
    except Exception as err:
        raise _Case(kind, names) from err


# ----------------------------------------------------------------------------- .idx campaign

IDX_KINDS = ("bitflip", "header_field", "array_value", "overwrite_span", "truncate", "extend",
             "truncate_bin", "extend_bin")


class IdxCampaign:
    """Mutates a valid dataset's `.idx` (or `.bin`) and opens + reads every sequence."""

    def __init__(self, workdir: str) -> None:
        from jaxblend import IndexedDatasetBuilder

        self.workdir = workdir
        self.base = os.path.join(workdir, "base")
        rng = np.random.default_rng(0)
        with IndexedDatasetBuilder(self.base, np.uint16) as b:
            for _ in range(40):
                for _ in range(int(rng.integers(1, 3))):
                    b.add_sequence(rng.integers(0, 60000, int(rng.integers(1, 30))).astype(np.uint16))
                b.end_document()
        with open(self.base + ".idx", "rb") as f:
            self.idx = f.read()
        with open(self.base + ".bin", "rb") as f:
            self.bin = f.read()

    def mutate(self, rng: random.Random) -> tuple[str, bytes, bytes]:
        kind = rng.choice(IDX_KINDS)
        idx, binary = bytearray(self.idx), bytearray(self.bin)
        if kind == "bitflip":
            for _ in range(rng.randint(1, 4)):
                pos = rng.randrange(len(idx))
                idx[pos] ^= 1 << rng.randrange(8)
        elif kind == "header_field":
            # magic (0..9), version (9..17), dtype code (17), sequence count (18..26), docs (26..34)
            start, size = rng.choice([(0, 9), (9, 8), (17, 1), (18, 8), (26, 8)])
            value = rng.choice([0, 1, 2, 255, 2**31, 2**63, rng.getrandbits(8 * size)])
            idx[start:start + size] = (value % (1 << (8 * size))).to_bytes(size, "little")
        elif kind == "array_value":
            width = rng.choice([4, 8])
            pos = rng.randrange(34, len(idx) - width)
            value = rng.choice([0, 1, -1, 2**31 - 1, -(2**31), 2**40, rng.getrandbits(8 * width)])
            idx[pos:pos + width] = (value % (1 << (8 * width))).to_bytes(width, "little")
        elif kind == "overwrite_span":
            pos = rng.randrange(len(idx))
            idx[pos:pos + rng.randint(1, 16)] = rng.randbytes(rng.randint(1, 16))
        elif kind == "truncate":
            del idx[rng.randrange(len(idx)):]
        elif kind == "extend":
            idx += rng.randbytes(rng.randint(1, 64))
        elif kind == "truncate_bin":
            del binary[rng.randrange(len(binary)):]
        else:
            binary += rng.randbytes(rng.randint(1, 64))
        return kind, bytes(idx), bytes(binary)

    def case(self, rng: random.Random) -> tuple[str, str, list[str]]:
        from jaxblend import IndexedDataset

        kind, idx, binary = self.mutate(rng)
        prefix = os.path.join(self.workdir, "case")
        for ext, data in ((".idx", idx), (".bin", binary)):
            with open(prefix + ext, "wb") as f:
                f.write(data)
        names = [prefix]

        def read_all():
            ds = IndexedDataset(prefix)
            try:
                return self._check(ds, binary)
            finally:
                ds.close()

        ok = _attempt(kind, names, read_all)
        return kind, CORRECT if ok else FAILURE, names

    @staticmethod
    def _check(ds, binary: bytes) -> bool:
        """Every sequence reads as the bytes its pointer and length name; documents are sane."""
        lengths = np.asarray(ds.sequence_lengths, np.int64)
        pointers = np.asarray(ds.sequence_pointers, np.int64)
        docs = np.asarray(ds.document_indices, np.int64)
        item = ds.dtype.itemsize
        if docs.size and (docs[0] != 0 or docs[-1] != lengths.size or np.any(np.diff(docs) < 0)):
            return False
        for i in range(lengths.size):
            want = np.frombuffer(binary, ds.dtype, count=int(lengths[i]), offset=int(pointers[i]))
            if int(pointers[i]) + int(lengths[i]) * item > len(binary):
                return False
            if not np.array_equal(ds.get(i), want):
                return False
        return True


# ----------------------------------------------------------------------- preprocessing campaign

JSONL_KINDS = ("bitflip", "insert_bytes", "delete_span", "truncate", "invalid_utf8", "newline",
               "bad_value", "bad_record", "bom_crlf")
INPUT_KINDS = tuple(f"jsonl:{k}" for k in JSONL_KINDS) + (
    "jsonl.gz:corrupt", "parquet:bytes", "parquet:values")


class PreprocessCampaign:
    """Mutates jsonl / jsonl.gz / parquet inputs and runs the real preprocessing on them.

    Correct output: the dataset holds exactly the sequences a plain-Python reading of the input
    gives under Megatron's per-document rules (`jaxblend.preprocess.worker`), with the byte
    tokenizer and EOD.
    """

    def __init__(self, workdir: str) -> None:
        from jaxblend.preprocess import worker

        self.workdir = workdir
        self.tokenizer = worker.tokenizer_for(tok_spec.TokenizerSpec("ByteTokenizer"))
        words = ["alpha", "beta", "gamma", "délta", "ε", "東京", "naïve", "café", "\t", "tab", "\\", "back", '"quote"']
        rng = random.Random(0)
        self.texts = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 12))) for _ in range(30)]

    def _jsonl(self, rng: random.Random, kind: str) -> bytes:
        records: list[object] = [{"text": t, "id": i} for i, t in enumerate(self.texts)]
        if kind == "bad_value":
            for _ in range(rng.randint(1, 5)):
                records[rng.randrange(len(records))]["text"] = rng.choice(
                    [None, 3, 2.5, [], {}, ["a"], True, "", "   ", "\ud800", "x" * 5000, "\x00", "\u2028"])
        if kind == "bad_record":
            for _ in range(rng.randint(1, 5)):
                records[rng.randrange(len(records))] = rng.choice(
                    [[], 7, "text", None, {"txt": "a"}, {"text": {"text": "a"}}])
        data = bytearray(b"".join(json.dumps(r).encode() + b"\n" for r in records))
        if kind == "bitflip":
            for _ in range(rng.randint(1, 8)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif kind == "insert_bytes":
            pos = rng.randrange(len(data))
            data[pos:pos] = rng.randbytes(rng.randint(1, 16))
        elif kind == "delete_span":
            pos = rng.randrange(len(data))
            del data[pos:pos + rng.randint(1, 40)]
        elif kind == "truncate":
            del data[rng.randrange(len(data)):]
        elif kind == "invalid_utf8":
            for _ in range(rng.randint(1, 4)):
                pos = rng.randrange(len(data))
                data[pos:pos] = rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80\x80"])
        elif kind == "newline":
            for _ in range(rng.randint(1, 4)):
                pos = rng.randrange(len(data))
                data[pos:pos] = rng.choice([b"\n", b"\r", b"\n\n", b"\r\n"])
        elif kind == "bom_crlf":
            data = bytearray(b"\xef\xbb\xbf" + bytes(data).replace(b"\n", b"\r\n"))
        return bytes(data)

    def _expected_jsonl(self, data: bytes) -> list[np.ndarray]:
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        texts = []
        for raw in lines:
            raw = raw[:-1] if raw.endswith(b"\r") else raw
            try:
                fields = json.loads(raw.decode("utf-8"))
            except ValueError:
                continue
            if isinstance(fields, dict):
                texts.append(fields.get("text"))
        return self._expected(texts)

    def _expected(self, texts: list[object]) -> list[np.ndarray]:
        """Megatron's rules (docs/preprocessing.md): a string is one piece, a list of strings one
        piece per item; every piece with tokens is a sequence; EOD ends a document's last one."""
        out = []
        for t in texts:
            if isinstance(t, str):
                pieces = [t]
            elif isinstance(t, list) and all(isinstance(v, str) for v in t):
                pieces = t
            else:
                continue
            try:
                seqs = [np.asarray(self.tokenizer.tokenize(p)) for p in pieces]
            except Exception:  # noqa: BLE001, S112 - the pipeline drops what the tokenizer refuses
                continue
            seqs = [q for q in seqs if q.size]
            if seqs:
                seqs[-1] = np.append(seqs[-1], self.tokenizer.eod)
            out.extend(seqs)
        return out

    def _parquet(self, rng: random.Random, path: str, kind: str) -> list[object]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        texts: list[object] = list(self.texts)
        if kind == "parquet:values":
            choice = rng.choice(["nulls", "empty", "ints", "no_column"])
            if choice == "nulls":
                texts = [None if rng.random() < 0.3 else t for t in texts]
            elif choice == "empty":
                texts = ["" if rng.random() < 0.3 else t for t in texts]
            if choice == "ints":
                pq.write_table(pa.table({"text": list(range(len(texts)))}), path, row_group_size=8)
                return [None] * len(texts)
            if choice == "no_column":
                pq.write_table(pa.table({"other": texts}), path, row_group_size=8)
                return [None] * len(texts)
        pq.write_table(pa.table({"text": pa.array(texts, pa.string())}), path, row_group_size=8)
        if kind == "parquet:bytes":
            data = bytearray(_read(path))
            if rng.random() < 0.5:
                del data[rng.randrange(len(data)):]
            else:
                for _ in range(rng.randint(1, 8)):
                    data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            with open(path, "wb") as f:
                f.write(data)
            try:
                return pq.read_table(path).column("text").to_pylist()
            except Exception:  # noqa: BLE001 - unreadable: only a clean error is right
                return None
        return texts

    def case(self, rng: random.Random) -> tuple[str, str, list[str]]:
        from jaxblend.preprocess import pipeline
        from jaxblend.storage import IndexedDataset

        kind = rng.choice(INPUT_KINDS)
        case_dir = os.path.join(self.workdir, "case")
        shutil.rmtree(case_dir, ignore_errors=True)
        os.makedirs(case_dir)
        if kind.startswith("jsonl:"):
            path = os.path.join(case_dir, "in.jsonl")
            data = self._jsonl(rng, kind.split(":")[1])
            with open(path, "wb") as f:
                f.write(data)
            expected = self._expected_jsonl(data)
        elif kind == "jsonl.gz:corrupt":
            path = os.path.join(case_dir, "in.jsonl.gz")
            raw = self._jsonl(rng, "none")
            data = bytearray(gzip.compress(raw, mtime=0))
            if rng.random() < 0.5:
                del data[rng.randrange(len(data)):]
            else:
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            with open(path, "wb") as f:
                f.write(data)
            try:
                expected = self._expected_jsonl(gzip.decompress(bytes(data)))
            except Exception:  # noqa: BLE001 - undecodable: only a clean error is right
                expected = None
        else:
            path = os.path.join(case_dir, "in.parquet")
            texts = self._parquet(rng, path, kind)
            expected = None if texts is None else self._expected(texts)
        prefix = os.path.join(case_dir, "out")
        config = config_lib.PreprocessConfig(
            input=(path,), output_prefix=prefix, tokenizer=tok_spec.TokenizerSpec("ByteTokenizer"),
            append_eod=True, partitions=2, workers=1, progress=False, log_interval=0,
        )
        names = [path]
        result = _attempt(kind, names, lambda: pipeline.preprocess(config))
        if expected is None:
            return kind, FAILURE, names  # accepted an input plain Python cannot read
        ds = IndexedDataset(result.outputs["text"])
        try:
            got = [np.asarray(ds.get(i)) for i in range(len(ds.sequence_lengths))]
        finally:
            ds.close()
        same = len(got) == len(expected) and all(np.array_equal(a, b) for a, b in zip(got, expected))
        return kind, CORRECT if same else FAILURE, names


# ----------------------------------------------------------------------------- cache campaign

CACHE_KINDS = ("delete_array", "delete_manifest", "truncate_array", "extend_array", "flip_array",
               "flip_manifest", "manifest_json", "manifest_types", "array_is_dir", "entry_is_file",
               "empty_entry", "swap_arrays", "symlink_loop", "stray_files")


class CacheCampaign:
    """Corrupts a cache entry in place and builds the plan again: the maps must be right."""

    def __init__(self, workdir: str) -> None:
        from jaxblend import index

        self.workdir = workdir
        lengths = np.random.default_rng(1).integers(1, 60, 800).astype(np.int32)
        self.infos = {
            p: index.DatasetInfo(p, lengths[k::2], np.arange(len(lengths[k::2]) + 1), str(k) * 64)
            for k, p in enumerate(("/d/a", "/d/b"))
        }
        self.config = index.GPTDataConfig(
            blend=("1", "/d/a", "2", "/d/b"), split="90,10,0", seq_length=16,
            num_samples=(300, 30, None),
        )
        self.reference = self._digest(index.build_data_maps(self.config, self.infos))

    @staticmethod
    def _digest(plan) -> str:
        h = hashlib.sha256()
        for name in ("train", "valid", "test"):
            s = plan.split(name)
            if s is None:
                continue
            h.update(np.ascontiguousarray(s.dataset_index).tobytes())
            for j in range(s.num_datasets):
                m = s.constituent(j)
                for a in (m.document_index, m.sample_index, m.shuffle_index):
                    h.update(np.ascontiguousarray(a).tobytes())
        return h.hexdigest()

    def corrupt(self, rng: random.Random, entry: str) -> str:
        from jaxblend.map_store import entries as cache

        kind = rng.choice(CACHE_KINDS)
        arrays = sorted(n for n in os.listdir(entry) if n.endswith(".npy"))
        target = os.path.join(entry, rng.choice(arrays))
        manifest = os.path.join(entry, cache.MANIFEST)
        if kind == "delete_array":
            os.unlink(target)
        elif kind == "delete_manifest":
            os.unlink(manifest)
        elif kind in ("truncate_array", "extend_array", "flip_array", "flip_manifest"):
            path = manifest if kind == "flip_manifest" else target
            data = bytearray(_read(path))
            if kind == "truncate_array":
                del data[rng.randrange(len(data)):]
            elif kind == "extend_array":
                data += rng.randbytes(rng.randint(1, 64))
            else:
                for _ in range(rng.randint(1, 3)):
                    data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            with open(path, "wb") as f:
                f.write(data)
        elif kind == "manifest_json":
            junk = rng.choice([[], {}, 3, "x", None, {"format_version": cache.FORMAT_VERSION},
                               {"arrays": [], "meta": {}}])
            with open(manifest, "w") as f:
                json.dump(junk, f)
        elif kind == "manifest_types":
            with open(manifest) as f:
                doc = json.load(f)
            field = rng.choice(["arrays", "meta", "fingerprint", "format_version"])
            doc[field] = rng.choice([[], "s", 1, None, {"x": 1}])
            doc["checksum"] = cache._manifest_checksum(doc)  # structure wrong, checksum right
            with open(manifest, "w") as f:
                json.dump(doc, f)
        elif kind == "array_is_dir":
            os.unlink(target)
            os.mkdir(target)
        elif kind == "entry_is_file":
            shutil.rmtree(entry)
            with open(entry, "wb") as f:
                f.write(rng.randbytes(rng.randint(0, 64)))
        elif kind == "empty_entry":
            shutil.rmtree(entry)
            os.mkdir(entry)
        elif kind == "swap_arrays":
            other = os.path.join(entry, rng.choice(arrays))
            a, b = _read(target), _read(other)
            with open(target, "wb") as f:
                f.write(b)
            with open(other, "wb") as f:
                f.write(a)
        elif kind == "symlink_loop":
            os.unlink(target)
            os.symlink(target, target)
        else:
            with open(os.path.join(entry, "stray.npy"), "wb") as f:
                f.write(rng.randbytes(32))
            os.makedirs(os.path.join(entry, "stray_dir"))
        return kind

    def case(self, rng: random.Random) -> tuple[str, str, list[str]]:
        from jaxblend.access import DataAccess, MapStoreOptions
        from jaxblend.map_store import load_or_build_data_maps

        cache_dir = os.path.join(self.workdir, "cache")
        shutil.rmtree(cache_dir, ignore_errors=True)
        config = self.config

        def build(verify: str = "summary"):
            access = DataAccess(maps=MapStoreOptions(location=cache_dir, verify=verify))
            return load_or_build_data_maps(config, self.infos, access)

        plan = build()
        kind = self.corrupt(rng, plan.cache_path)
        verify = rng.choice(["summary", "full"])
        names = [cache_dir]
        again = _attempt(kind, names, lambda: build(verify))
        ok = self._digest(again) == self.reference
        # The entry left behind must itself be sound (rebuilt or untouched).
        ok = ok and _attempt(kind, names, lambda: build("full")) is not None
        return kind, CORRECT if ok else FAILURE, names


# ------------------------------------------------------------------------------------ driver

CAMPAIGNS = {"idx": IdxCampaign, "preprocess": PreprocessCampaign, "cache": CacheCampaign}


def run(campaign: str, count: int, seed: int, workdir: str, *, verbose: bool = False) -> Tally:
    """Runs `count` cases of `campaign` with seeds `seed, seed + 1, ...`; returns the tally."""
    from absl import logging

    before = logging.get_verbosity()
    logging.set_verbosity(logging.ERROR)  # corrupt-cache warnings are expected here
    try:
        tally = Tally()
        os.makedirs(workdir, exist_ok=True)
        runner = CAMPAIGNS[campaign](workdir)
        for k in range(count):
            _run_case(tally, campaign, seed + k, runner.case, verbose=verbose)
        return tally
    finally:
        logging.set_verbosity(before)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaign", choices=["all", *CAMPAIGNS], default="all")
    parser.add_argument("--count", type=int, default=None, help="cases per campaign (default: full)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--replay", default=None, help="campaign:seed of one case, run verbosely")
    args = parser.parse_args()
    total = Tally()
    with tempfile.TemporaryDirectory(prefix="jaxblend-fuzz-") as workdir:
        if args.replay:
            name, seed = args.replay.split(":")
            total = run(name, 1, int(seed), workdir, verbose=True)
        else:
            for name in CAMPAIGNS if args.campaign == "all" else [args.campaign]:
                t0 = time.perf_counter()
                count = args.count if args.count is not None else FULL_COUNTS[name]
                tally = run(name, count, args.seed, os.path.join(workdir, name))
                total.counts.update(tally.counts)
                total.failures += tally.failures
                print(f"{name}: {count:,} cases in {time.perf_counter() - t0:.0f} s", flush=True)
    print(total.table())
    for line in total.failures[:50]:
        print(line)
    print(f"{len(total.failures)} failures")
    return 1 if total.failures else 0


if __name__ == "__main__":
    sys.exit(main())
