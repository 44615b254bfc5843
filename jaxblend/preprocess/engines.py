"""Where preprocessing partitions run: the `Engine` protocol and the local process-pool engine.

The Apache Beam engine is `jaxblend.preprocess.beam.BeamEngine` (optional `beam` extra).
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import queue as queue_lib
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from jaxblend.preprocess import parent_watch, worker
from jaxblend.preprocess.partitions import Partition

Progress = Callable[[int, int, int], None]
"""Called with (input bytes, documents, tokens) as a partition advances."""


class Engine(Protocol):
    """Runs partitions (each via :func:`jaxblend.preprocess.worker.process_partition`).

    An engine may also offer ``join_duplicates(parts, indices, cleaning_config) -> stats`` to run
    the deduplication join itself (the Beam engine does); otherwise it runs on this machine
    (:func:`jaxblend.preprocess.cleaning.join.run_join`).
    """

    def run(
        self,
        config: worker.WorkerConfig,
        partitions: Sequence[Partition],
        progress: Progress,
    ) -> None: ...


class LocalEngine:
    """Runs partitions in this process (``workers <= 1``) or in a spawn process pool whose workers
    end when this process ends, even by ``kill -9`` (:mod:`~jaxblend.preprocess.parent_watch`)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers if workers > 0 else (len(os.sched_getaffinity(0)) or 1)

    def run(
        self,
        config: worker.WorkerConfig,
        partitions: Sequence[Partition],
        progress: Progress,
    ) -> None:
        """Processes ``partitions``; returns when all are done; raises the first failure."""
        if self.workers <= 1 or len(partitions) <= 1:
            for p in partitions:
                worker.process_partition(config, p, progress)
            return
        ctx = multiprocessing.get_context("spawn")
        q = ctx.Queue()
        with cf.ProcessPoolExecutor(
            max_workers=min(self.workers, len(partitions)),
            mp_context=ctx,
            initializer=_init_pool_worker,
            initargs=(config, q, os.getpid()),
        ) as pool:
            futures = [pool.submit(_pool_process, config, p) for p in partitions]
            pending = set(futures)
            try:
                while pending:
                    done, pending = cf.wait(pending, timeout=0.2, return_when=cf.FIRST_COMPLETED)
                    _drain(q, progress)
                    for f in done:
                        f.result()  # re-raises a worker's exception
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)
                raise
            _drain(q, progress)


_POOL_QUEUE: Any = None


def _init_pool_worker(config: worker.WorkerConfig, q: Any, parent_pid: int) -> None:
    global _POOL_QUEUE
    parent_watch.die_with_parent(parent_pid)  # no orphans when the driver is killed (kill -9)
    _POOL_QUEUE = q
    # One worker process per core: keep Hugging Face tokenizers from starting a thread pool in each.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    worker.tokenizer_for(config.run.tokenizer)  # load once per process


def _queue_progress(nbytes: int, docs: int, tokens: int) -> None:
    _POOL_QUEUE.put((nbytes, docs, tokens))


def _pool_process(config: worker.WorkerConfig, partition: Partition) -> int:
    worker.process_partition(config, partition, _queue_progress)
    return partition.index


def _drain(q: Any, progress: Progress) -> None:
    while True:
        try:
            nbytes, docs, tokens = q.get_nowait()
        except queue_lib.Empty:
            return
        progress(nbytes, docs, tokens)
