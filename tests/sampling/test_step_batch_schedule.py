"""The step batch-size schedule (megatron-core >= 0.18 `--step-batch-size-schedule`): parsing,
Megatron's step order written out by hand, rows per process for 1, 2 and 4 processes, and resume
in the middle of the schedule on another process count.

megatron-core >= 0.18 does not install here (it needs a newer Python), so the expected orders are
computed by hand from the rules of its `StepBatchsizeNumMicroBatchesCalculator` as Megatron's
training loop drives it: before each step the batch size is that of the last entry whose threshold
(in samples) is <= the samples consumed so far; the step then consumes that many samples.
"""

from __future__ import annotations

import dataclasses
import pickle

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxblend import identity
from jaxblend.sampling import BatchShape, ProcessRows, StepBatchSchedule, StepBatchSchedulePlan

FLAG = "--step_batch_size_schedule"


def schedule(text, seq_length=None):
    return StepBatchSchedule.from_megatron(text, seq_length)


def sizes_and_firsts(plan):
    return ([plan.batch_size(k) for k in range(plan.num_steps)],
            [plan.first_sample(k) for k in range(plan.num_steps)])


def one_step_at_a_time(s: StepBatchSchedule, steps: int) -> list[tuple[int, int]]:
    """(first sample, size) per step, looking the size up before every step."""
    consumed, out = 0, []
    for _ in range(steps):
        size = s.batch_size_at(consumed)
        out.append((consumed, size))
        consumed += size
    return out


class TestParse:
    def test_megatrons_example_in_tokens(self):
        # 250e9 // 4096 = 61_035_156 (.25 dropped); 500e9 // 4096 = 122_070_312 (.5 dropped)
        s = schedule("0:768 250B:1536 500B:3072", 4096)
        assert s.thresholds == (0, 61_035_156, 122_070_312)
        assert s.batch_sizes == (768, 1536, 3072)
        assert s.global_batch_size == 3072

    def test_without_a_sequence_length_thresholds_are_samples(self):
        assert schedule("0:768 61035156250:1536").thresholds == (0, 61_035_156_250)

    def test_suffixes_in_either_case_on_both_numbers(self):
        s = schedule("0:1k 2m:2K 3b:3 1T:4")
        assert s.thresholds == (0, 2_000_000, 3_000_000_000, 1_000_000_000_000)
        assert s.batch_sizes == (1000, 2000, 3, 4)

    def test_decimals_truncate_as_megatron_reads_them(self):
        assert schedule("0:8 1.5K:16 2.4B:32").thresholds == (0, 1500, 2_400_000_000)
        # Megatron computes int(float("2.01") * 1000): 2009.9999999999998 truncates to 2009.
        assert schedule("0:8 2.01K:16").thresholds == (0, 2009)
        assert schedule("0:8 1e3:16 7.9:24").thresholds == (0, 7, 1000)  # sorted
        assert schedule("0:7.9").batch_sizes == (7,)

    def test_commas_and_spaces_separate_entries(self):
        assert schedule("0:8,100:16  200:32") == StepBatchSchedule((0, 100, 200), (8, 16, 32))

    def test_entries_are_taken_in_threshold_order(self):
        assert schedule("300:16 0:4 100:8") == StepBatchSchedule((0, 100, 300), (4, 8, 16))

    def test_tokens_become_samples_by_integer_division(self):
        # 100 // 64 = 1, 1000 // 64 = 15; 50 tokens are sample 0, so the schedule starts at 0.
        assert schedule("0:8 100:16 1K:32", 64).thresholds == (0, 1, 15)
        assert schedule("50:8 1000:16", 64).thresholds == (0, 15)

    def test_text_round_trip_in_samples(self):
        s = schedule("0:768 250B:1536 500B:3072", 4096)
        assert str(s) == "0:768 61035156:1536 122070312:3072"
        assert schedule(str(s)) == s

    @pytest.mark.parametrize(
        "text, seq_length, problem",
        [
            ("5:8 10:16", None, "must start at threshold 0, but its first threshold is sample 5"),
            ("64:8 1K:16", 64, "must start at threshold 0, but its first threshold is sample 1"),
            ("0:8 100:16 100:32", None, "strictly increasing, got sample 100 then 100"),
            # 100 and 120 tokens are both sample 1 at 64 tokens per sample
            ("0:8 100:16 120:32", 64, "strictly increasing, got sample 1 then 1"),
            ("0:8 10X:16", None, "'10X' is not a number with an optional K, M, B or T suffix"),
            ("0:8 10:1Q", None, "'1Q' is not a number"),
            ("0:8 K:16", None, "'K' is not a number"),
            ("0:8 inf:16", None, "'inf' is not a number"),
            ("0:nan", None, "'nan' is not a number"),
            ("0:8 100", None, "entry '100' is not THRESHOLD:BATCH_SIZE"),
            ("0:8 100:16:2", None, "'16:2' is not a number"),
            ("0:0", None, "every batch size must be >= 1, got 0"),
            ("0:8 10:-4", None, "every batch size must be >= 1, got -4"),
            ("", None, "needs at least one THRESHOLD:BATCH_SIZE entry"),
            (" , ", 128, "needs at least one THRESHOLD:BATCH_SIZE entry"),
            ("0:8 1e300T:16", None, "'1e300T' is not a number"),
            ("0:8 1e17:16", None, "below 2**53"),
        ],
    )
    def test_errors_are_one_line_naming_the_flag(self, text, seq_length, problem):
        with pytest.raises(ValueError) as err:
            schedule(text, seq_length)
        message = str(err.value)
        assert message.startswith(f"{FLAG}={text!r}: ") and "\n" not in message
        assert problem in message
        unit = "samples" if seq_length is None else f"tokens of seq_length {seq_length}"
        assert f"thresholds in {unit}" in message

    def test_bad_sequence_length(self):
        with pytest.raises(ValueError, match=f"{FLAG} sequence length must be an integer >= 1"):
            schedule("0:8", 0)

    def test_direct_construction_is_validated(self):
        assert StepBatchSchedule([0, np.int64(5)], [8, 16]).thresholds == (0, 5)
        with pytest.raises(ValueError, match="StepBatchSchedule: the schedule must start at threshold 0"):
            StepBatchSchedule((3,), (8,))
        with pytest.raises(ValueError, match="StepBatchSchedule: thresholds must be strictly increasing"):
            StepBatchSchedule((0, 10, 5), (8, 16, 32))
        with pytest.raises(ValueError, match="2 thresholds but 1 batch sizes"):
            StepBatchSchedule((0, 10), (8,))
        with pytest.raises(ValueError, match=r"StepBatchSchedule.thresholds\[\] must be an integer"):
            StepBatchSchedule((0, 1.5), (8, 8))

    def test_lookup_of_the_size_from_consumed_samples(self):
        s = schedule("0:4 10:8 30:16")
        assert [s.batch_size_at(c) for c in (0, 9, 10, 29, 30, 10**12)] == [4, 4, 8, 8, 16, 16]


class TestStepOrder:
    def test_steps_that_cross_a_threshold_keep_their_size(self):
        plan = StepBatchSchedulePlan(schedule("0:4 10:8 30:16"), 8)
        # 0, 4, 8 are below 10 -> 4; 12, 20, 28 are below 30 -> 8; from 36 on -> 16
        assert sizes_and_firsts(plan) == ([4, 4, 4, 8, 8, 8, 16, 16], [0, 4, 8, 12, 20, 28, 36, 52])
        np.testing.assert_array_equal(plan.sample_ids(3), np.arange(12, 20))
        assert plan.num_samples == 68 and plan.schedule_steps == 6

    def test_an_entry_passed_within_one_step_is_skipped(self):
        plan = StepBatchSchedulePlan(schedule("0:100 50:8 80:16"), 3)
        # step 0 consumes 100 samples: consumed is already past 80, the size-8 entry never runs
        assert sizes_and_firsts(plan) == ([100, 16, 16], [0, 100, 116])
        assert plan.batch_shapes() == {BatchShape(100, None), BatchShape(16, None)}

    def test_token_thresholds(self):
        # 1K // 128 = 7 and 2.5K // 128 = 19 samples
        plan = StepBatchSchedulePlan(schedule("0:2 1K:4 2.5K:8", 128), 9)
        assert sizes_and_firsts(plan) == (
            [2, 2, 2, 2, 4, 4, 4, 8, 8], [0, 2, 4, 6, 8, 12, 16, 20, 28]
        )

    def test_a_threshold_met_exactly(self):
        plan = StepBatchSchedulePlan(schedule("0:4 8:6 20:1"), 6)
        # 0, 4 -> 4; 8 is the threshold itself -> 6; 14 -> 6; 20 -> 1 (sizes may also fall)
        assert sizes_and_firsts(plan) == ([4, 4, 6, 6, 1, 1], [0, 4, 8, 14, 20, 21])

    def test_one_entry_is_a_fixed_batch(self):
        plan = StepBatchSchedulePlan(schedule("0:12"), 4)
        assert sizes_and_firsts(plan) == ([12] * 4, [0, 12, 24, 36]) and plan.schedule_steps == 0

    def test_gpt3_175b_example_at_scale(self):
        # Megatron-LM's GPT-3 175B example at 2048 tokens per sample. Thresholds in samples:
        # 1_171_875, 2_343_750, 3_515_625, 4_687_500, 5_859_375. Steps per entry, each rounded up:
        # ceil(1171875 / 16) = 73243 -> consumed 1_171_888; ceil(1171862 / 320) = 3663 ->
        # 2_344_048; ceil(1171577 / 624) = 1878 -> 3_515_920; ceil(1171580 / 928) = 1263 ->
        # 4_687_984; ceil(1171391 / 1232) = 951 -> 5_859_616 at step 80998.
        s = schedule("0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536", 2048)
        assert s.thresholds == (0, 1_171_875, 2_343_750, 3_515_625, 4_687_500, 5_859_375)
        plan = StepBatchSchedulePlan(s, 1_000_000)
        starts = [0, 73243, 76906, 78784, 80047, 80998]
        firsts = [0, 1_171_888, 2_344_048, 3_515_920, 4_687_984, 5_859_616]
        for start, first, size in zip(starts, firsts, s.batch_sizes):
            assert (plan.first_sample(start), plan.batch_size(start)) == (first, size)
            assert plan.batch_size(start - 1) != size if start else True
        assert plan.schedule_steps == 80998
        last = plan.sample_ids(999_999)
        assert int(last[0]) == 5_859_616 + (999_999 - 80998) * 1536 and last.size == 1536
        assert len(plan.batch_shapes()) == 6

    @pytest.mark.parametrize(
        "text, seq_length",
        [("0:4 10:8 30:16", None), ("0:3 7:5 8:7 100:2 101:9", None),
         ("0:16 100:8 300:32 301:64", None), ("0:2 1K:4 2.5K:8 3K:3", 128),
         ("0:1 1:2 2:3 3:4 4:5 5:6 50:50", None)],
    )
    def test_every_step_matches_a_lookup_before_each_step(self, text, seq_length):
        s = schedule(text, seq_length)
        plan = StepBatchSchedulePlan(s, 200)
        expected = one_step_at_a_time(s, 200)
        for k, (first, size) in enumerate(expected):
            np.testing.assert_array_equal(plan.sample_ids(k), np.arange(first, first + size))
        assert plan.batch_shapes() == {BatchShape(size, None) for _, size in expected}

    def test_shapes_are_those_of_the_plans_steps(self):
        s = schedule("0:4 10:8 30:16")
        assert StepBatchSchedulePlan(s, 3).batch_shapes() == {BatchShape(4, None)}
        assert StepBatchSchedulePlan(s, 4).batch_shapes() == {BatchShape(4, None), BatchShape(8, None)}
        assert StepBatchSchedulePlan(s, 0).batch_shapes() == frozenset()

    def test_steps_out_of_range(self):
        plan = StepBatchSchedulePlan(schedule("0:4 10:8"), 5)
        for bad in (-1, 5):
            with pytest.raises(IndexError, match="out of range"):
                plan.sample_ids(bad)
        assert plan.padded_length(4) is None

    def test_covering(self):
        s = schedule("0:4 10:8 30:16")
        plan = StepBatchSchedulePlan.covering(60, s)
        assert plan.num_steps == 7 and plan.num_samples == 52  # step 7 would need 52..68
        assert StepBatchSchedulePlan.covering(60, s, 4).num_steps == 4
        with pytest.raises(ValueError, match=(
            r"num_steps=8 with --step_batch_size_schedule='0:4 10:8 30:16' needs 68 samples but "
            r"the source has 60 \(7 steps\)"
        )):
            StepBatchSchedulePlan.covering(60, s, 8)
        for n in range(100):
            k = plan.steps_within(n)
            assert plan.first_sample(k) <= n < plan.first_sample(k + 1)

    def test_bad_plan_arguments(self):
        with pytest.raises(TypeError, match="must be a StepBatchSchedule"):
            StepBatchSchedulePlan("0:8", 3)
        with pytest.raises(ValueError, match="num_steps must be an integer >= 0"):
            StepBatchSchedulePlan(schedule("0:8"), -1)


class TestFingerprint:
    def test_value_and_what_it_depends_on(self):
        plan = StepBatchSchedulePlan(schedule("0:4 10:8 30:16"), 8)
        assert plan.fingerprint == identity.fingerprint(
            "step_batch_schedule_plan", 1, thresholds=[0, 10, 30], batch_sizes=[4, 8, 16]
        )
        assert dataclasses.replace(plan, num_steps=100).fingerprint == plan.fingerprint
        for other in ("0:4 10:8 31:16", "0:4 10:8 30:32", "0:4 10:8"):
            assert StepBatchSchedulePlan(schedule(other), 8).fingerprint != plan.fingerprint

    def test_token_and_sample_spellings_of_one_schedule_agree(self):
        tokens = StepBatchSchedulePlan(schedule("0:2 1K:4 2.5K:8", 128), 9)
        samples = StepBatchSchedulePlan(schedule("0:2 7:4 19:8"), 9)
        assert tokens == samples and tokens.fingerprint == samples.fingerprint

    def test_pickles(self):
        plan = StepBatchSchedulePlan(schedule("0:8 40:16 100:32"), 30)
        again = pickle.loads(pickle.dumps(plan))
        assert again == plan and again.fingerprint == plan.fingerprint
        for k in range(30):
            np.testing.assert_array_equal(again.sample_ids(k), plan.sample_ids(k))


# Rows per process: the mesh's 8 devices (pytest runs JAX with 8 CPU devices) shared by 1, 2 or 4
# processes. A real sharding's device -> rows map, with the devices assigned to pretend processes.

@dataclasses.dataclass(frozen=True)
class PretendDevice:
    id: int
    process_index: int


class ProcessSharding:
    """A batch sharding over 8 devices split evenly among `processes` processes."""

    def __init__(self, processes: int):
        mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
        self.sharding = NamedSharding(mesh, P("data"))
        self.per = 8 // processes
        self.order = {d: i for i, d in enumerate(mesh.devices.flat)}

    def devices_indices_map(self, shape):
        return {PretendDevice(d.id, self.order[d] // self.per): index
                for d, index in self.sharding.devices_indices_map(shape).items()}


PLAN = StepBatchSchedulePlan(schedule("0:8 40:16 100:32 180:8"), 24)


def rows_of_every_process(plan, processes, steps):
    sharding = ProcessSharding(processes)
    shares = [ProcessRows.of(plan, sharding, p) for p in range(processes)]
    return {k: np.concatenate([share.sample_ids(k) for share in shares]) for k in steps}


class TestProcesses:
    def test_the_plan_crosses_every_entry(self):
        # 0..40 by 8 (5 steps), 40..104 by 16 (4 steps), 104..200 by 32 (3 steps), then 8
        sizes, firsts = sizes_and_firsts(PLAN)
        assert sizes == [8] * 5 + [16] * 4 + [32] * 3 + [8] * 12
        assert firsts[5:13] == [40, 56, 72, 88, 104, 136, 168, 200]

    @pytest.mark.parametrize("processes", [1, 2, 4])
    def test_processes_together_load_each_step_once(self, processes):
        got = rows_of_every_process(PLAN, processes, range(PLAN.num_steps))
        for k in range(PLAN.num_steps):
            np.testing.assert_array_equal(got[k], PLAN.sample_ids(k))

    def test_each_process_loads_its_contiguous_part(self):
        shares = [ProcessRows.of(PLAN, ProcessSharding(4), p) for p in range(4)]
        # step 10: samples 136..168, 8 per process
        for p, share in enumerate(shares):
            np.testing.assert_array_equal(share.sample_ids(10), np.arange(136 + 8 * p, 144 + 8 * p))

    @pytest.mark.parametrize("before, after, k", [(2, 4, 7), (4, 1, 9), (1, 2, 12), (4, 2, 5)])
    def test_resume_mid_schedule_on_another_process_count(self, before, after, k):
        """Steps < k on `before` processes, then a fresh plan from the same flags on `after`."""
        first = rows_of_every_process(PLAN, before, range(k))
        resumed_plan = StepBatchSchedulePlan.covering(10_000, schedule("0:8 40:16 100:32 180:8"), 24)
        assert resumed_plan.fingerprint == PLAN.fingerprint  # a saved state is accepted
        rest = rows_of_every_process(resumed_plan, after, range(k, 24))
        run = np.concatenate([*(first[i] for i in range(k)), *(rest[i] for i in range(k, 24))])
        np.testing.assert_array_equal(run, np.arange(PLAN.num_samples))  # every sample once, in order
        for i in range(k, 24):
            np.testing.assert_array_equal(rest[i], PLAN.sample_ids(i))

    def test_a_size_the_mesh_cannot_split_is_named(self):
        plan = StepBatchSchedulePlan(schedule("0:8 40:12"), 8)
        with pytest.raises(ValueError, match="batches of 12 rows, which the mesh's batch axes"):
            ProcessRows.of(plan, ProcessSharding(2), 0)
