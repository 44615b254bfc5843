"""PeerWatch's verdicts on an in-memory key-value store (the real one is exercised by
tests/test_train_on_gcs_pod.py with real processes)."""

from __future__ import annotations

import re
import threading
import time

import pytest

from jaxblend.peer_watch import PeerWatch


class Store:
    """A shared in-memory key-value store; `hang` blocks every call (a coordinator that hangs)."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.lock = threading.Lock()
        self.hang = threading.Event()
        self.barriers: dict[str, threading.Barrier] = {}

    def key_value_set(self, key: str, value: str, allow_overwrite: bool = False) -> None:
        while self.hang.is_set():
            time.sleep(0.01)
        with self.lock:
            self.data[key] = value

    def key_value_dir_get(self, key: str) -> list[tuple[str, str]]:
        with self.lock:
            return [(k, v) for k, v in self.data.items() if k.startswith(key)]

    def wait_at_barrier(self, barrier_id: str, timeout_in_ms: int) -> None:
        """Returns once two processes called it with `barrier_id` (raises after the timeout)."""
        with self.lock:
            barrier = self.barriers.setdefault(barrier_id, threading.Barrier(2))
        barrier.wait(timeout_in_ms / 1000)


def _watch(store: Store, pid: int, verdicts: list[str], timeout: float = 0.6) -> PeerWatch:
    done = threading.Event()

    def on_fatal(line: str) -> None:
        verdicts.append(line)
        done.set()

    watch = PeerWatch(timeout, interval=0.05, on_fatal=on_fatal, client=store,
                      process_index=pid, process_count=2)
    watch.done = done
    return watch


def test_a_silent_peer_is_lost_with_its_step_and_phase():
    store, verdicts, peer_verdicts = Store(), [], []
    watch = _watch(store, 0, verdicts).start()
    peer = _watch(store, 1, peer_verdicts).start()
    watch.phase, watch.step, peer.phase, peer.step = "training", 12, "training", 12
    time.sleep(0.3)
    assert verdicts == []  # both alive
    peer.stop()  # its heartbeat stops, like a process killed at step 12
    assert watch.done.wait(10)
    watch.stop()
    assert len(verdicts) == 1
    assert re.fullmatch(
        r"lost process 1 at step 12 \(while training\): no heartbeat for \d+ s "
        r"\(--peer_timeout=0.6\); stopping process 0 at step 12", verdicts[0]
    ), verdicts


def test_a_failed_peer_stops_the_others_with_its_error():
    store, verdicts, peer_verdicts = Store(), [], []
    watch = _watch(store, 0, verdicts, timeout=30).start()
    peer = _watch(store, 1, peer_verdicts, timeout=30).start()
    peer.phase = "opening the data"
    peer.report_failure("gs://b/x.idx: index file does not exist")
    assert watch.done.wait(10)
    watch.stop()
    peer.stop()
    assert verdicts == [
        "process 1 failed while opening the data: gs://b/x.idx: index file does not exist"
    ]
    assert peer_verdicts == []


def test_a_hung_coordinator_is_named():
    store, verdicts = Store(), []
    watch = _watch(store, 1, verdicts).start()
    other = _watch(store, 0, []).start()
    time.sleep(0.2)
    store.hang.set()
    assert watch.done.wait(10)
    watch.stop()
    other.stop()
    store.hang.clear()
    assert verdicts[0].startswith("lost process 0 (the coordinator) at step 0: no answer from it")


def test_single_process_does_not_watch():
    watch = PeerWatch(5, client=Store(), process_index=0, process_count=1).start()
    assert not watch.active


def test_timeout_must_be_positive():
    with pytest.raises(ValueError, match="--peer_timeout"):
        PeerWatch(0, client=Store(), process_index=0, process_count=2)


def test_a_new_phase_reaches_the_peers_before_the_next_interval():
    # A phase that lasts less than a heartbeat interval (the first training steps once the step
    # was compiled beforehand) must still be the one a peer names if this process dies in it.
    store = Store()
    watch = PeerWatch(60, interval=30, on_fatal=lambda line: None, client=store,
                      process_index=1, process_count=2).start()
    try:
        deadline = time.monotonic() + 20
        while "beat/1" not in " ".join(store.data) and time.monotonic() < deadline:
            time.sleep(0.01)
        watch.phase, watch.step = "training", 3
        beat = ""
        while time.monotonic() < deadline:
            beat = next((v for k, v in store.data.items() if k.endswith("beat/1")), "")
            if beat.endswith(" 3 training"):
                break
            time.sleep(0.01)
        assert beat.endswith(" 3 training"), beat  # not 30 s later, at the next interval
    finally:
        watch.stop()


def test_wait_for_peers_returns_once_every_process_arrived():
    store = Store()
    first, second = _watch(store, 0, []), _watch(store, 1, [])
    passed = threading.Event()

    def wait() -> None:
        first.wait_for_peers("first step", 10)
        passed.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    assert not passed.wait(0.3)  # process 1 still compiles: process 0 waits
    second.wait_for_peers("first step", 10)
    waiter.join(10)
    assert passed.is_set()


def test_wait_for_peers_is_a_no_op_in_a_single_process_run():
    store = Store()
    watch = PeerWatch(1.0, client=store, process_index=0, process_count=1)
    watch.wait_for_peers("first step", 0.01)  # no barrier: nobody else would come
    assert store.barriers == {}
