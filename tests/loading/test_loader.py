"""make_loader in one process with 8 CPU devices: content, layouts, resume, workers, errors."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from jaxblend.loading import GrainSourceAdapter, PrefetchOptions, make_global_batch, make_loader
from jaxblend.sampling import FixedStepPlan, Rampup, RampupStepPlan
from jaxblend.sources import MockSource
from jaxblend.sources.schema import GPTSchemaOptions

B = 16


def mesh(shape, axes):
    return Mesh(np.array(jax.devices()[: int(np.prod(shape))]).reshape(shape), axes)


@pytest.fixture(scope="module")
def source():
    opts = GPTSchemaOptions(eod_id=99, reset_position_ids=True, reset_attention_mask=True)
    return MockSource(B * 6, opts, seq_length=32, vocab_size=100, seed=3, mean_doc_length=9)


def host(batch):
    return {k: np.asarray(v) for k, v in batch.items()}


class TestMakeLoader:
    def test_batches_are_the_global_order(self, source):
        loader = make_loader(source, mesh((8,), ("data",)), global_batch_size=B)
        assert loader.num_steps == 6
        batches = [host(b) for b in loader]
        assert len(batches) == 6
        for k, batch in enumerate(batches):
            expected = source.get_batch(np.arange(k * B, (k + 1) * B))
            assert batch.keys() == expected.keys()
            for key in expected:
                np.testing.assert_array_equal(batch[key], expected[key], err_msg=key)

    def test_layout_follows_the_mesh(self, source):
        loader = make_loader(source, mesh((4, 2), ("data", "tensor")), global_batch_size=B)
        batch = next(loader)
        assert batch["inputs"].shape == (B, 32)
        assert batch["inputs"].sharding.spec == jax.sharding.PartitionSpec("data", None)
        assert batch["sample_ids"].shape == (B,)
        shard_rows = {s.device.id: s.index[0] for s in batch["inputs"].addressable_shards}
        assert shard_rows[0] == shard_rows[1] == slice(0, 4)

    def test_same_batches_for_any_mesh(self, source):
        a = [host(b) for b in make_loader(source, mesh((8,), ("data",)), global_batch_size=B)]
        b = [host(b) for b in make_loader(source, mesh((2, 2, 2), ("data", "fsdp", "tensor")),
                                          global_batch_size=B, batch_axes=("data", "fsdp"))]
        for x, y in zip(a, b, strict=True):
            for key in x:
                np.testing.assert_array_equal(x[key], y[key])

    def test_resume_from_state_continues_the_stream(self, source):
        m = mesh((8,), ("data",))
        full = [host(b) for b in make_loader(source, m, global_batch_size=B)]
        loader = make_loader(source, m, global_batch_size=B, prefetch=PrefetchOptions(device_prefetch=2))
        next(loader), next(loader)
        state = json.loads(json.dumps(loader.state()))
        assert state["step"] == 2
        resumed = make_loader(source, mesh((4, 2), ("data", "tensor")), global_batch_size=B, state=state)
        rest = [host(b) for b in resumed]
        assert len(rest) == 4
        for x, y in zip(rest, full[2:], strict=True):
            np.testing.assert_array_equal(x["inputs"], y["inputs"])
            np.testing.assert_array_equal(x["sample_ids"], y["sample_ids"])

    def test_foreign_state_is_refused(self, source):
        m = mesh((8,), ("data",))
        state = make_loader(source, m, global_batch_size=B).state()
        with pytest.raises(ValueError, match="different data configuration") as err:
            make_loader(source, m, global_batch_size=2 * B, state=state)
        # The refusal says what to do: the same data flags, or a new run / a step number.
        assert "use the same data flags as the run that saved it" in str(err.value)
        assert "new workdir" in str(err.value) and "start_step" in str(err.value)
        other = MockSource(B * 6, source.options, seq_length=32, vocab_size=100, seed=4)
        with pytest.raises(ValueError, match="different data configuration"):
            make_loader(other, m, global_batch_size=B, state=state)
        with pytest.raises(ValueError, match="step"):
            make_loader(source, m, global_batch_size=B, state={**state, "step": 99})
        with pytest.raises(ValueError, match="must be a dict"):
            make_loader(source, m, global_batch_size=B, state={"step": 1})

    def test_worker_process(self, source):
        m = mesh((8,), ("data",))
        ref = [host(b) for b in make_loader(source, m, global_batch_size=B, num_steps=3)]
        got = [host(b) for b in make_loader(source, m, global_batch_size=B, num_steps=3, prefetch=PrefetchOptions(worker_count=1))]
        assert len(got) == 3
        for x, y in zip(got, ref, strict=True):
            for key in x:
                np.testing.assert_array_equal(x[key], y[key])

    def test_bad_configuration(self, source):
        m = mesh((8,), ("data",))
        with pytest.raises(ValueError, match="num_steps=7 needs"):
            make_loader(source, m, global_batch_size=B, num_steps=7)
        with pytest.raises(ValueError, match="worker_count"):
            PrefetchOptions(worker_count=-1)
        with pytest.raises(ValueError, match="global_batch_size"):
            FixedStepPlan(global_batch_size=0, num_steps=1)
        with pytest.raises(ValueError, match="needs 112 samples but the source has 96"):
            make_loader(source, m, plan=FixedStepPlan(B, 7))
        with pytest.raises(ValueError, match="exactly one of plan= .* or global_batch_size="):
            make_loader(source, m, plan=FixedStepPlan(B, 2), global_batch_size=B)
        with pytest.raises(ValueError, match="exactly one of plan="):
            make_loader(source, m)
        with pytest.raises(ValueError, match="exactly one of plan="):
            make_loader(source, m, plan=FixedStepPlan(B, 2), num_steps=2)
        with pytest.raises(TypeError, match="must be a jax.sharding.Mesh, got FixedStepPlan"):
            make_loader(source, FixedStepPlan(B, 2), plan=FixedStepPlan(B, 2))
        with pytest.raises(TypeError, match="prefetch must be a PrefetchOptions"):
            make_loader(source, m, global_batch_size=B, prefetch={"worker_count": 1})
        with pytest.raises(dataclasses.FrozenInstanceError):
            PrefetchOptions().worker_count = 2  # type: ignore[misc]
        with pytest.raises(ValueError, match="not mesh axes"):
            make_loader(source, m, global_batch_size=B, batch_axes=("fsdp",))
        with pytest.raises(ValueError, match=r"axes \('model',\) have neither 'data' nor 'fsdp'"):
            make_loader(source, mesh((8,), ("model",)), global_batch_size=B)
        with pytest.raises(ValueError, match="cannot be laid out"):
            make_loader(source, m, global_batch_size=12)


def test_make_global_batch_names_the_bad_key():
    m = mesh((8,), ("data",))
    with pytest.raises(ValueError, match="'x'.*leading dimension 8"):
        make_global_batch({"x": np.zeros((4, 2))}, np.arange(8), 8, m, ("data",))


class TestStateIdentity:
    def test_state_without_version_is_refused(self, source):
        m = mesh((8,), ("data",))
        state = make_loader(source, m, global_batch_size=B).state()
        unversioned = {k: v for k, v in state.items() if k != "version"}
        with pytest.raises(ValueError, match="'version'"):
            make_loader(source, m, global_batch_size=B, state=unversioned)
        with pytest.raises(ValueError, match="version 0 is not supported"):
            make_loader(source, m, global_batch_size=B, state={**state, "version": 0})

    def test_source_without_fingerprint_cannot_resume(self, source):
        class Anonymous:
            """The mock source's data, without a `fingerprint` (its repr is not an identity)."""

            def __init__(self, inner):
                self._inner = inner

            def __len__(self):
                return len(self._inner)

            fingerprint = None

            def __getattr__(self, name):
                return getattr(self._inner, name)

        m = mesh((8,), ("data",))
        anonymous = Anonymous(source)
        loader = make_loader(anonymous, m, global_batch_size=B)
        next(loader)
        state = loader.state()
        assert state["fingerprint"] is None
        with pytest.raises(ValueError, match="has no fingerprint"):
            make_loader(anonymous, m, global_batch_size=B, state=state)
        # A fingerprinted state does not fit it either, and a step number still works.
        with pytest.raises(ValueError, match="has no fingerprint"):
            make_loader(anonymous, m, global_batch_size=B,
                        state=make_loader(source, m, global_batch_size=B).state())
        resumed = make_loader(anonymous, m, global_batch_size=B, start_step=1)
        np.testing.assert_array_equal(host(next(resumed))["inputs"],
                                      host(next(make_loader(source, m, global_batch_size=B, start_step=1)))["inputs"])


class TestPlans:
    def test_fixed_plan_equals_the_batch_size_spelling(self, source):
        m = mesh((4, 2), ("data", "tensor"))
        a = make_loader(source, m, global_batch_size=B, num_steps=4)
        b = make_loader(source, m, plan=FixedStepPlan(B, 4))
        assert a.state() == b.state()
        for x, y in zip(a, b, strict=True):
            for key in x:
                assert host(x)[key].tobytes() == host(y)[key].tobytes()

    def test_plain_grain_source_through_the_adapter(self, source):
        class DictSource:
            """A Grain random-access source of dict samples (no batched read)."""

            def __len__(self):
                return len(source)

            def __getitem__(self, i):
                return source[i]

        m = mesh((8,), ("data",))
        adapted = GrainSourceAdapter(DictSource(), fingerprint="dicts-v1")
        got = host(next(make_loader(adapted, m, global_batch_size=B, start_step=2)))
        want = host(next(make_loader(source, m, global_batch_size=B, start_step=2)))
        for key in want:
            np.testing.assert_array_equal(got[key], want[key])
        state = make_loader(adapted, m, global_batch_size=B).state()
        assert state["fingerprint"] is not None
        assert make_loader(adapted, m, global_batch_size=B, state=state).step == 0

    def test_close_stops_the_grain_workers(self, source):
        before = set(multiprocessing.active_children())
        loader = make_loader(source, mesh((8,), ("data",)), global_batch_size=B, prefetch=PrefetchOptions(worker_count=2))
        next(loader)
        workers = set(multiprocessing.active_children()) - before
        assert len(workers) == 2
        loader.close()
        with pytest.raises(StopIteration):
            next(loader)
        for worker in workers:
            worker.join(30)
        assert not any(w.is_alive() for w in workers)


class TestRampupLoader:
    plan = RampupStepPlan(Rampup(8, 8, 48), 32, num_steps=5)  # sizes 8, 8, 16, 24, 32: 88 samples

    def test_batches_grow_in_megatron_order(self, source):
        m = mesh((8,), ("data",))
        got = [host(b) for b in make_loader(source, m, plan=self.plan)]
        assert [b["inputs"].shape[0] for b in got] == [8, 8, 16, 24, 32]
        assert len({b["inputs"].shape[0] for b in got}) == len(self.plan.batch_shapes()) > 1
        for k, batch in enumerate(got):
            expected = source.get_batch(self.plan.sample_ids(k))
            for key in expected:
                np.testing.assert_array_equal(batch[key], expected[key], err_msg=key)

    def test_resume_mid_ramp_on_another_mesh(self, source):
        full = [host(b) for b in make_loader(source, mesh((8,), ("data",)), plan=self.plan)]
        loader = make_loader(source, mesh((8,), ("data",)), plan=self.plan)
        next(loader), next(loader)
        state = json.loads(json.dumps(loader.state()))
        assert state["step"] == 2 and self.plan.batch_size(2) < 32
        rest = [host(b) for b in make_loader(
            source, mesh((2, 4), ("data", "fsdp")), plan=self.plan, batch_axes=("data", "fsdp"),
            state=state,
        )]
        for x, y in zip(full[2:], rest, strict=True):
            for key in x:
                assert x[key].tobytes() == y[key].tobytes(), key
        fixed_state = make_loader(source, mesh((8,), ("data",)), global_batch_size=32).state()
        with pytest.raises(ValueError, match="different source or plan"):
            make_loader(source, mesh((8,), ("data",)), plan=self.plan, state=fixed_state)


class TestResumeIdentity:
    OPTIONS = GPTSchemaOptions(eod_id=99, reset_position_ids=True)

    def make_source(self, options=OPTIONS, seed=3, seq_length=32):
        return MockSource(B * 6, options, seq_length=seq_length, vocab_size=100, seed=seed,
                          mean_doc_length=9)

    def test_state_resumes_with_equal_settings(self):
        m = mesh((8,), ("data",))
        first = make_loader(self.make_source(), m, global_batch_size=B)
        next(first), next(first)
        state = json.loads(json.dumps(first.state()))
        want = host(next(first))
        resumed = make_loader(self.make_source(), m, global_batch_size=B, state=state)
        assert resumed.step == 2
        got = host(next(resumed))
        for key in want:
            np.testing.assert_array_equal(got[key], want[key])

    def test_a_new_defaulted_data_neutral_option_still_resumes(self):
        @dataclasses.dataclass(frozen=True)
        class WithNeutralOption(GPTSchemaOptions):
            read_hint: int = 4  # an option added later that leaves every batch unchanged

        m = mesh((8,), ("data",))
        state = make_loader(self.make_source(), m, global_batch_size=B, start_step=3).state()
        extended = self.make_source(WithNeutralOption(eod_id=99, reset_position_ids=True))
        assert make_loader(extended, m, global_batch_size=B, state=state).step == 3

    @pytest.mark.parametrize(
        "source_kw, batch_size",
        [({"options": GPTSchemaOptions(eod_id=98, reset_position_ids=True)}, B),
         ({"options": GPTSchemaOptions(eod_id=99)}, B),
         ({"seq_length": 31}, B),
         ({"seed": 4}, B), ({}, B // 2)],
    )
    def test_a_data_changing_setting_refuses_the_state(self, source_kw, batch_size):
        m = mesh((8,), ("data",))
        state = make_loader(self.make_source(), m, global_batch_size=B).state()
        with pytest.raises(ValueError, match="different data configuration"):
            make_loader(self.make_source(**source_kw), m, global_batch_size=batch_size, state=state)

    def test_a_different_ramp_refuses_the_state(self):
        m = mesh((8,), ("data",))
        source = self.make_source()
        plan = RampupStepPlan.covering(len(source), Rampup(8, 8, 32), B)
        state = make_loader(source, m, plan=plan).state()
        other = RampupStepPlan.covering(len(source), Rampup(8, 8, 48), B)
        assert make_loader(source, m, plan=plan, state=state).step == 0
        with pytest.raises(ValueError, match="different data configuration"):
            make_loader(source, m, plan=other, state=state)
