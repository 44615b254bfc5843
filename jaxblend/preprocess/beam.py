"""Apache Beam engine for preprocessing (optional ``beam`` extra): partitions as Beam work items.

The pipeline is ``Create(partitions) -> Reshuffle -> ParDo(tokenize partition) -> count``: each
element is one partition of :func:`jaxblend.preprocess.readers.plan_partitions`, processed by the same
:func:`jaxblend.preprocess.worker.process_partition` as the local pool (the tokenizer is loaded once per
DoFn instance in ``setup``), so the partial datasets — and the merged output — are byte-identical to
the local engine's for the same input and partitioning. Finished partitions are skipped on a rerun
(done markers), and a retried bundle simply rewrites its partition's files.

Runners: any (DirectRunner, Dataflow, Flink, Spark). The inputs and ``{output_prefix}.parts/`` must be
on a filesystem every Beam worker and the driver see (local disk for the DirectRunner; NFS or a FUSE
mount of a bucket on a cluster); the driver merges the parts after the pipeline finishes.

Usage::

    from jaxblend.preprocess import PreprocessConfig, preprocess
    from jaxblend.preprocess.beam import BeamEngine
    preprocess(config, engine=BeamEngine(["--runner=DirectRunner"]))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from jaxblend.preprocess import readers, worker


class _TokenizePartition(beam.DoFn):
    """Processes one partition per element; yields its index."""

    def __init__(self, config: worker.WorkerConfig) -> None:
        super().__init__()
        self._config = config

    def setup(self) -> None:
        worker.tokenizer_for(self._config.tokenizer)

    def process(self, partition: readers.Partition) -> Any:
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
        partitions: Sequence[readers.Partition],
        progress: Any,
    ) -> None:
        """Processes ``partitions`` on Beam; reports each finished partition's bytes to ``progress``.

        Raises:
          RuntimeError: The pipeline did not finish successfully.
        """
        if not partitions:
            return
        options = PipelineOptions(self.pipeline_args)
        with beam.Pipeline(options=options) as p:
            _ = (
                p
                | "CreatePartitions" >> beam.Create(list(partitions))
                | "SpreadPartitions" >> beam.Reshuffle()
                | "TokenizePartitions" >> beam.ParDo(_TokenizePartition(config))
                | "CountPartitions" >> beam.combiners.Count.Globally()
            )
        for part in partitions:
            progress(part.weight, 0, 0)
