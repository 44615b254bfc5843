"""make_loader's `end_step`: the stream of a run ends there, nothing past it is read ahead, the
batches and the resume state are those of the whole stream."""

from __future__ import annotations

import threading
import time

import jax
import numpy as np
import pytest
from helpers_data import write_random_dataset
from jax.sharding import Mesh

from jaxblend import index
from jaxblend.access import DataAccess
from jaxblend.loading import PrefetchOptions, make_loader
from jaxblend.sources import MockSource, open_gpt_sources
from jaxblend.sources.schema import GPTSchemaOptions

B, STEPS = 8, 12


def mesh():
    return Mesh(np.array(jax.devices()[:2]), ("data",))


class RecordingSource:
    """A source that records the sample ids of every `read_batch` (any thread), delegating the
    rest to the source it wraps."""

    def __init__(self, source):
        self._source = source
        self._lock = threading.Lock()
        self.reads: list[tuple[int, ...]] = []

    def __len__(self) -> int:
        return len(self._source)

    def __getattr__(self, name):
        return getattr(self._source, name)

    def read_batch(self, sample_ids):
        with self._lock:
            self.reads.append(tuple(int(i) for i in sample_ids))
        return self._source.read_batch(sample_ids)


@pytest.fixture(scope="module")
def mock():
    opts = GPTSchemaOptions(eod_id=99)
    return MockSource(B * STEPS, opts, seq_length=16, vocab_size=100, seed=4, mean_doc_length=7)


def host(batch):
    return {k: np.asarray(v) for k, v in batch.items()}


def rows_of(steps):
    """The read_batch ids of one process holding every row of these steps."""
    return sorted(tuple(range(k * B, (k + 1) * B)) for k in steps)


# A deep read-ahead, so a loader without an end would read well past the steps it is asked for.
AHEAD = PrefetchOptions(read_ahead=6)


@pytest.mark.parametrize("start,end", [(0, 1), (0, 3), (4, 7), (5, 5), (9, STEPS)])
def test_reads_exactly_the_steps_asked(mock, start, end):
    source = RecordingSource(mock)
    loader = make_loader(source, mesh(), global_batch_size=B, prefetch=AHEAD, start_step=start,
                         end_step=end)
    got = [host(b) for b in loader]  # the stream ends at end_step
    loader.close()
    assert len(got) == end - start and loader.step == end
    assert sorted(source.reads) == rows_of(range(start, end))
    whole = [host(b) for b in make_loader(mock, mesh(), global_batch_size=B, start_step=start)]
    for a, b in zip(got, whole[: end - start], strict=True):  # the same bytes as the whole stream
        assert a.keys() == b.keys()
        for key in a:
            assert a[key].tobytes() == b[key].tobytes(), key


@pytest.mark.parametrize("end", [1, 3])
def test_token_bytes_read_are_those_of_the_steps_asked(tmp_path, end):
    """Counted by the source's token reader (every read, ahead or not): a loader ending at
    `end` reads `end` steps' windows of tokens and no more."""
    rng = np.random.default_rng(8)
    prefixes = [write_random_dataset(str(tmp_path / n), rng, 150, lengths=(2, 60),
                                     vocab=(1, 900)) for n in ("a", "b")]
    seq = 16
    config = index.GPTDataConfig(
        blend=["1", prefixes[0], "1", prefixes[1]], split="100,0,0", seq_length=seq, seed=1,
        num_samples=(B * STEPS, None, None))
    access = DataAccess.from_env().with_maps(location=str(tmp_path / "cache"))
    source = open_gpt_sources(config, GPTSchemaOptions(), access=access)["train"]
    loader = make_loader(source, mesh(), global_batch_size=B, prefetch=AHEAD, end_step=end)
    assert len(list(loader)) == end
    loader.close()
    itemsize = np.dtype(source.span_index.bin_datasets[0].dtype).itemsize
    assert source.bytes_read == end * B * (seq + 1) * itemsize


def test_without_an_end_the_read_ahead_goes_past(mock):
    """What `end_step` prevents: a loader asked for one batch reads steps it never yields."""
    source = RecordingSource(mock)
    loader = make_loader(source, mesh(), global_batch_size=B, prefetch=AHEAD)
    next(loader)
    for _ in range(200):  # the reads ahead run in Grain's threads: give them up to 10 s
        if len(source.reads) > 1:
            break
        time.sleep(0.05)
    loader.close()
    assert len(source.reads) > 1


def test_state_at_the_end_resumes_the_rest_of_the_stream(mock):
    m = mesh()
    loader = make_loader(mock, m, global_batch_size=B, end_step=2)
    first = [host(b) for b in loader]
    state = loader.state()
    assert state["step"] == 2
    assert state == make_loader(mock, m, global_batch_size=B, start_step=2).state()
    rest = [host(b) for b in make_loader(mock, m, global_batch_size=B, state=state, end_step=4)]
    whole = [host(b) for b in make_loader(mock, m, global_batch_size=B, end_step=4)]
    for a, b in zip(first + rest, whole, strict=True):
        np.testing.assert_array_equal(a["inputs"], b["inputs"])


def test_workers_stop_at_the_end_too(mock):
    with make_loader(mock, mesh(), global_batch_size=B, end_step=2,
                     prefetch=PrefetchOptions(worker_count=1)) as loader:
        got = [host(b) for b in loader]
    whole = [host(b) for b in make_loader(mock, mesh(), global_batch_size=B, end_step=2)]
    assert len(got) == 2
    for a, b in zip(got, whole, strict=True):
        np.testing.assert_array_equal(a["inputs"], b["inputs"])


@pytest.mark.parametrize("end", [-1, STEPS + 1, True, 1.0, "3"])
def test_bad_end_step_is_refused(mock, end):
    with pytest.raises(ValueError, match="end_step"):
        make_loader(mock, mesh(), global_batch_size=B, end_step=end)


def test_start_past_the_end_is_refused(mock):
    with pytest.raises(ValueError, match=r"start step 3 is past the loader's end_step 2"):
        make_loader(mock, mesh(), global_batch_size=B, start_step=3, end_step=2)
    loader = make_loader(mock, mesh(), global_batch_size=B, end_step=2)
    state = make_loader(mock, mesh(), global_batch_size=B, start_step=3).state()
    with pytest.raises(ValueError, match="past the loader's end_step 2"):
        loader.restore(state)
    assert loader.step == 0  # left as it was
    assert len([host(b) for b in loader]) == 2
