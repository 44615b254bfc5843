"""The reader pool of the adaptive read-ahead: reads only admitted steps, hands records over in
order, runs no more readers than the window holds steps, and ends readers when it shrinks."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest

from jaxblend.loading import read_pool
from jaxblend.loading.read_pool import ReadPool
from jaxblend.loading.read_window import ReadWindow


class Gate:
    """An `Admission` the test moves: steps before `limit` may be read, `size` readers."""

    def __init__(self, limit: int, size: int) -> None:
        self.limit, self.size = limit, size
        self._callbacks: list[Callable[[int, int], None]] = []

    def watch(self, callback: Callable[[int, int], None]) -> None:
        self._callbacks.append(callback)
        callback(self.limit, self.size)

    def set(self, limit: int, size: int) -> None:
        self.limit, self.size = limit, size
        for callback in self._callbacks:
            callback(limit, size)


class Reads:
    """A read whose steps finish when the test lets them (`finish`), recording when each began."""

    def __init__(self) -> None:
        self.begun: list[int] = []
        self._lock = threading.Lock()
        self._finish: dict[int, threading.Event] = {}
        self.running = 0
        self.most_running = 0

    def _event(self, step: int) -> threading.Event:
        with self._lock:
            return self._finish.setdefault(step, threading.Event())

    def __call__(self, step: int) -> str:
        with self._lock:
            self.begun.append(step)
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        assert self._event(step).wait(30), f"step {step} never let finish"
        with self._lock:
            self.running -= 1
        return f"record {step}"

    def finish(self, *steps: int) -> None:
        for step in steps:
            self._event(step).set()


def eventually(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_records_come_in_step_order_whatever_order_the_reads_end():
    reads = Reads()
    pool = ReadPool(reads, start=5, end=9, admission=Gate(limit=9, size=4))
    pool.start_prefetch()
    assert eventually(lambda: sorted(reads.begun) == [5, 6, 7, 8])
    assert pool.threads == 4
    reads.finish(8, 7, 6)
    # every step is taken by a reader: the readers that are done leave
    assert eventually(lambda: pool.threads == 1)
    reads.finish(5)
    assert list(pool) == ["record 5", "record 6", "record 7", "record 8"]
    assert eventually(lambda: pool.threads == 0)


def test_a_step_beyond_the_window_is_read_only_once_the_loader_takes_one():
    window = ReadWindow(start=10, size=2, low=1, high=8, memory=1 << 20)
    reads = Reads()
    pool = ReadPool(reads, start=10, end=20, admission=window)
    pool.start_prefetch()
    assert eventually(lambda: sorted(reads.begun) == [10, 11])
    reads.finish(10, 11)
    assert next(pool) == "record 10"
    time.sleep(0.3)
    assert sorted(reads.begun) == [10, 11]  # 12 >= 10 + 2: not admitted
    assert pool.threads <= 2
    window.taken(10, waited=0.0, step_bytes=100)
    assert eventually(lambda: sorted(reads.begun) == [10, 11, 12])
    time.sleep(0.1)
    assert sorted(reads.begun) == [10, 11, 12]  # a step taken admits one step
    assert next(pool) == "record 11"
    pool.close()
    reads.finish(12)


def reading(limit: int, size: int) -> tuple[Gate, Reads, ReadPool]:
    """A pool over steps from 0 behind a `Gate`, once its first `size` reads are running."""
    gate, reads = Gate(limit, size), Reads()
    pool = ReadPool(reads, start=0, end=100, admission=gate)
    pool.start_prefetch()
    assert eventually(lambda: reads.running == size)
    return gate, reads, pool


def test_readers_grow_with_the_window_and_never_outnumber_it():
    gate, reads, pool = reading(limit=2, size=2)
    gate.set(limit=40, size=6)  # grown: 38 steps admitted, 6 readers
    assert eventually(lambda: reads.running == 6)
    time.sleep(0.1)
    assert pool.threads == 6 and reads.running == 6 and pool.most_threads == 6
    reads.finish(*range(40))
    assert [next(pool) for _ in range(40)] == [f"record {s}" for s in range(40)]
    assert reads.most_running == 6 and pool.most_threads == 6
    pool.close()


def test_readers_leave_when_the_window_shrinks():
    gate, reads, pool = reading(limit=8, size=8)
    reads.finish(*range(8))
    assert [next(pool) for _ in range(8)] == [f"record {s}" for s in range(8)]
    assert eventually(lambda: reads.running == 0)
    assert pool.threads == 8  # idle readers wait for the next admitted steps
    gate.set(limit=10, size=2)  # shrunk: the idle readers beyond 2 leave at once
    assert eventually(lambda: pool.threads == 2)
    assert eventually(lambda: sorted(reads.begun)[8:] == [8, 9])
    # busy readers above the window leave after their read
    gate.set(limit=16, size=6)
    assert eventually(lambda: reads.running == 6)
    gate.set(limit=16, size=1)
    time.sleep(0.1)
    assert pool.threads == 6  # all 6 are reading
    reads.finish(8, 9, 10, 11, 12, 13)
    assert eventually(lambda: pool.threads == 1)
    assert [next(pool) for _ in range(6)] == [f"record {s}" for s in range(8, 14)]
    reads.finish(*range(14, 16))
    assert [next(pool) for _ in range(2)] == ["record 14", "record 15"]
    assert reads.most_running == 8 and pool.threads == 1
    pool.close()
    assert eventually(lambda: pool.threads == 0)


def test_a_read_error_is_raised_at_its_step():
    def read(step: int) -> int:
        if step == 2:
            raise OSError("gs://bucket/a.bin: bytes 0-9: 503")
        return step

    pool = ReadPool(read, start=0, end=5, admission=Gate(limit=5, size=2))
    assert next(pool) == 0 and next(pool) == 1
    with pytest.raises(OSError, match="a.bin"):
        next(pool)
    assert next(pool) == 3
    pool.close()


def test_close_ends_idle_readers_and_the_stream():
    gate = Gate(limit=1, size=4)
    reads = Reads()
    pool = ReadPool(reads, start=0, end=10, admission=gate)
    reads.finish(*range(10))
    assert next(pool) == "record 0"
    assert eventually(lambda: pool.threads == 1)  # one step admitted: one reader
    pool.close()
    assert eventually(lambda: pool.threads == 0)
    with pytest.raises(StopIteration):
        next(pool)
    gate.set(limit=10, size=4)  # the window moves on: a closed pool reads nothing more
    time.sleep(0.05)
    assert reads.begun == [0] and pool.threads == 0


def test_nothing_is_read_before_the_first_next_or_start_prefetch():
    reads = Reads()
    pool = ReadPool(reads, start=0, end=3, admission=Gate(limit=3, size=3))
    time.sleep(0.1)
    assert reads.begun == [] and pool.threads == 0
    reads.finish(0, 1, 2)
    assert list(pool) == ["record 0", "record 1", "record 2"]


def test_a_pool_left_open_does_not_hold_the_process_at_exit(tmp_path):
    # the process boundary is the point: Python joins the readers when the main thread ends
    script = tmp_path / "left_open.py"
    script.write_text(  # the module alone (it imports nothing of jaxblend): no JAX to import
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('read_pool', {read_pool.__file__!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "sys.modules['read_pool'] = module\n"
        "spec.loader.exec_module(module)\n"
        "ReadPool = module.ReadPool\n"
        "class Gate:\n"
        "    def watch(self, callback):\n"
        "        callback(1, 4)\n"
        "pool = ReadPool(lambda step: step, start=0, end=10, admission=Gate())\n"
        "assert next(pool) == 0 and pool.threads == 1  # its reader waits for step 1\n"
    )
    done = subprocess.run([sys.executable, str(script)], check=False, capture_output=True,
                          text=True, timeout=120)  # a reader that never noticed: no exit
    assert done.returncode == 0, done.stderr
