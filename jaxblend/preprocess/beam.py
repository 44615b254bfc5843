"""Apache Beam engine for preprocessing (optional ``beam`` extra): partitions as Beam work items.

The pipeline is ``Create(partitions) -> Reshuffle -> ParDo(tokenize partition) -> count``: each
element is one partition of :func:`jaxblend.preprocess.readers.plan_partitions`, processed by the same
:func:`jaxblend.preprocess.worker.process_partition` as the local pool (the tokenizer is loaded once per
DoFn instance in ``setup``), so the partial datasets — and the merged output — are byte-identical to
the local engine's for the same input and partitioning. Finished partitions are skipped on a rerun
(done markers), and a retried bundle simply rewrites its partition's files.

With deduplication (docs/cleaning.md) the same engine first runs the signature pass over the
partitions, then the duplicate join as a Beam pipeline (:meth:`BeamEngine.join_duplicates`): every
partition's signature files emit ``(band, key) -> record`` pairs, a ``GroupByKey`` forms the LSH
buckets (and the exact-hash groups), each bucket's later members are checked against its first
record's signature, and each partition's drop list is written by a worker. It decides exactly what
the local join decides.

Runners: any (DirectRunner, Dataflow, Flink, Spark). The inputs and ``{output_prefix}.parts/`` must be
on a filesystem every Beam worker and the driver see (local disk for the DirectRunner; NFS or a FUSE
mount of a bucket on a cluster); the driver merges the parts after the pipeline finishes.

Usage::

    from jaxblend.preprocess import PreprocessConfig, preprocess
    from jaxblend.preprocess.beam import BeamEngine
    preprocess(config, engine=BeamEngine(["--runner=DirectRunner"]))
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

from jaxblend.preprocess import partitions as partitions_lib
from jaxblend.preprocess import worker
from jaxblend.preprocess.cleaning import join as join_lib
from jaxblend.preprocess.cleaning import signatures as sig_lib
from jaxblend.preprocess.cleaning.config import CleaningConfig

_EXACT_BAND = -1


class _BucketKeys(beam.DoFn):
    """(plan ordinal, partition index) -> ((band or -1 for the exact hash, key), record id)."""

    def __init__(self, parts: str, config: CleaningConfig) -> None:
        super().__init__()
        self._parts = parts
        self._config = config

    def process(self, element: tuple[int, int]) -> Iterable[tuple[tuple[int, int], int]]:
        p, index = element
        ids = join_lib.record_ids(p, np.arange(sig_lib.load(self._parts, index, "words").shape[0]))
        if self._config.exact_dedup:
            exact = sig_lib.load(self._parts, index, "exact")
            for key, rid in zip(exact.tolist(), ids.tolist()):
                yield (_EXACT_BAND, key), rid
        if self._config.near_dedup:
            words = np.asarray(sig_lib.load(self._parts, index, "words"))
            bands = np.asarray(sig_lib.load(self._parts, index, "bands"))
            for row in np.flatnonzero(words).tolist():
                rid = int(ids[row])
                for b, key in enumerate(bands[row].tolist()):
                    yield (b, key), rid


class _Decide(beam.DoFn):
    """One bucket -> (record id, reason) of its later members that are duplicates of its first."""

    def __init__(self, parts: str, indices: Sequence[int], config: CleaningConfig) -> None:
        super().__init__()
        self._parts = parts
        self._indices = list(indices)
        self._config = config
        self._candidates = Metrics.counter("jaxblend_dedup", "near_candidates")

    def setup(self) -> None:
        self._minhash = functools.cache(
            lambda p: sig_lib.load(self._parts, self._indices[p], "minhash")
        )

    def process(self, element: tuple[tuple[int, int], Iterable[int]]) -> Iterable[tuple[int, int]]:
        (band, _), members = element
        ids = np.sort(np.fromiter(members, np.int64))
        if ids.shape[0] < 2:
            return
        later = ids[1:]
        if band == _EXACT_BAND:
            for rid in later.tolist():
                yield rid, join_lib.EXACT
            return
        self._candidates.inc(int(later.shape[0]))
        sigs = join_lib.gather(ids, self._minhash, self._config)
        keep = join_lib.similar(sigs[1:], np.broadcast_to(sigs[0], sigs[1:].shape), self._config)
        for rid in later[keep].tolist():
            yield rid, join_lib.NEAR


def _by_partition(kv: tuple[int, int]) -> tuple[int, tuple[int, int]]:
    """(record id, reason) -> (plan ordinal, (signature row, reason))."""
    p, row = join_lib.split_id(np.int64(kv[0]))
    return int(p), (int(row), kv[1])


class _WriteDrops(beam.DoFn):
    """(plan ordinal, {"all": [index], "drops": [(row, reason)]}) -> writes the drop list."""

    def __init__(self, parts: str) -> None:
        super().__init__()
        self._parts = parts

    def process(self, element: tuple[int, dict[str, Any]]) -> Iterable[int]:
        _, groups = element
        (index,) = groups["all"]
        drops = sorted(groups["drops"])
        rows = np.asarray([r for r, _ in drops], np.int64)
        reasons = np.asarray([why for _, why in drops], np.int64)
        join_lib.write_drops(self._parts, index, rows, reasons)
        yield index


class _TokenizePartition(beam.DoFn):
    """Processes one partition per element; yields its index."""

    def __init__(self, config: worker.WorkerConfig) -> None:
        super().__init__()
        self._config = config

    def setup(self) -> None:
        worker.tokenizer_for(self._config.run.tokenizer)

    def process(self, partition: partitions_lib.Partition) -> Any:
        worker.process_partition(self._config, partition)
        yield partition.index


class BeamEngine:
    """Runs partitions as a Beam pipeline and waits for it to finish.

    Args:
      pipeline_args: Beam pipeline options as command-line strings (e.g. ``--runner=DirectRunner``,
        ``--direct_num_workers=2``); default: the DirectRunner.
    """

    def __init__(self, pipeline_args: Sequence[str] | None = None) -> None:
        self.pipeline_args = list(pipeline_args or ["--runner=DirectRunner"])

    def run(
        self,
        config: worker.WorkerConfig,
        partitions: Sequence[partitions_lib.Partition],
        progress: Any,
    ) -> None:
        """Processes ``partitions`` on Beam; reports each finished partition's bytes to ``progress``.

        Raises:
          RuntimeError: The pipeline did not finish successfully.
        """
        if not partitions:
            return
        with beam.Pipeline(options=PipelineOptions(self.pipeline_args)) as p:
            _ = (
                p
                | "CreatePartitions" >> beam.Create(list(partitions))
                | "SpreadPartitions" >> beam.Reshuffle()
                | "TokenizePartitions" >> beam.ParDo(_TokenizePartition(config))
                | "CountPartitions" >> beam.combiners.Count.Globally()
            )
        for part in partitions:
            progress(part.weight, 0, 0)

    def join_duplicates(
        self, parts: str, indices: Sequence[int], config: CleaningConfig
    ) -> dict[str, Any]:
        """The duplicate join as a Beam pipeline (module docstring); returns its statistics."""
        p = beam.Pipeline(options=PipelineOptions(self.pipeline_args))
        plan = p | "Partitions" >> beam.Create(list(enumerate(indices)))
        drops = (
            plan
            | "Spread" >> beam.Reshuffle()
            | "BucketKeys" >> beam.ParDo(_BucketKeys(parts, config))
            | "Buckets" >> beam.GroupByKey()
            | "Decide" >> beam.ParDo(_Decide(parts, indices, config))
            | "FirstReason" >> beam.CombinePerKey(min)  # exact (1) before near (2)
            | "ByPartition" >> beam.Map(_by_partition)
        )
        _ = (
            {"all": plan, "drops": drops}
            | "Join" >> beam.CoGroupByKey()
            | "WriteDrops" >> beam.ParDo(_WriteDrops(parts))
        )
        result = p.run()
        result.wait_until_finish()
        counters = result.metrics().query(MetricsFilter().with_name("near_candidates"))["counters"]
        candidates = sum(c.committed or c.attempted or 0 for c in counters)
        return join_lib.finish(
            parts, indices, {"near_candidates": int(candidates), "engine": "beam"}
        )
