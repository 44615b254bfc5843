"""Real multi-process runs (1, 2 and 4 local JAX processes): batches are topology-independent.

Every dump is `jaxblend.tools.dump_batches` (or a bucketed `make_loader` run) on N processes
joined by jax.distributed on localhost, every process with its own CPU devices; process 0 gathers
the global batches. The module registers all its dumps in one `DumpPlan`, which starts each group
of processes once (2 x 4 devices, then 1 x 8, 4 x 2 and 2 x 8) and runs the group's dumps in
turn: a state saved by a group resumes on a group started later. The tests compare the outputs:

* a blend of two datasets, a state resumed on another process count, mock data on an FSDP mesh,
  a Megatron batch-size ramp-up resumed mid-ramp;
* a 3-stage `--data_schedule` (a dataset joining and one leaving);
* packed rows (`--packing=best_fit`);
* packed conversations with their loss masks, blended with text;
* fill-in-the-middle on concatenated and on packed rows;
* bucketed batches of a saved `TokenBudgetPlan`;
* a step batch-size schedule resumed on 16 data shards, and refused from step 0 on them.

A state resumed on 4 processes is read by Grain worker processes (`--worker_count=1`).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers_data import write_random_dataset
from helpers_multiproc import DumpPlan, assert_same_batches

from jaxblend import IndexedDatasetBuilder
from jaxblend.preprocess import pipeline
from jaxblend.preprocess import tokenizer_spec as tok_spec
from jaxblend.sampling import TokenBudgetConfig, plan_token_budget, save_token_budget_plan
from tests.helpers_chat import CHATML, chat_tokenizer, make_conversations, write_chat
from tests.helpers_fim import make_code_dataset
from tests.preprocess.conftest import make_documents, small_run_config, write_jsonl

# The module's first test starts every group (several minutes on a loaded machine).
pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(1200)]

B = 16
SEQ = 24


def mesh(shape: str, axes: str = "data") -> list[str]:
    return [f"--mesh_shape={shape}", f"--mesh_axes={axes}"]


# --- a blend of two datasets -------------------------------------------------------------------


def blend_data_args(data_path: str, cache, steps_total=8):
    return [
        f"--data_path={data_path}", "--split=90,8,2", f"--seq_length={SEQ}", "--seed=7",
        f"--train_samples={B * steps_total}", "--valid_samples=0", "--test_samples=0",
        f"--data_cache_path={cache}", "--eod_id=999",
        "--reset_position_ids", "--reset_attention_mask",
    ]


def plan_blend(plan: DumpPlan, root) -> None:
    rng = np.random.default_rng(0)
    a, b = (write_random_dataset(str(root / name), rng, docs)
            for name, docs in (("a", 150), ("b", 220)))
    data_path, cache = f"30 {a} 70 {b}", root / "cache"
    args = [*blend_data_args(data_path, cache), f"--global_batch_size={B}"]
    window = [*args, "--steps=3", "--start_step=1"]
    plan.dump("blend_p1", 1, [*window, *mesh("8")])
    plan.dump("blend_p2", 2, [*window, *mesh("4,2", "data,tensor")])
    plan.dump("blend_p4", 4, [*window, *mesh("8")])

    state = plan.out("blend_first") / "state.json"
    plan.dump("blend_full", 1, [*args, "--steps=4", *mesh("8")])
    plan.dump("blend_first", 2, [*args, "--steps=2", f"--state_out={state}", *mesh("8")])
    plan.dump("blend_rest", 4, [*args, "--steps=2", f"--state_in={state}", "--worker_count=1",
                                *mesh("4,2", "data,tensor")])

    mock = ["--mock_data", f"--seq_length={SEQ}", "--mock_num_samples=256", "--steps=2",
            f"--global_batch_size={B}"]
    plan.dump("mock_p1", 1, [*mock, *mesh("2,2,2", "data,fsdp,tensor")])
    plan.dump("mock_p2", 2, [*mock, *mesh("8")])

    # Megatron ramp-up to 32 rows: steps of 8, 8, 16, 24, 32, 32 samples.
    ramp = [*blend_data_args(data_path, cache, steps_total=10), "--rampup_batch_size=8 8 48",
            "--global_batch_size=32"]
    ramp_state = plan.out("ramp_first") / "state.json"
    plan.dump("ramp_full", 1, [*ramp, "--steps=6", *mesh("8")])
    plan.dump("ramp_first", 2, [*ramp, "--steps=3", f"--state_out={ramp_state}", *mesh("8")])
    plan.dump("ramp_rest", 4, [*ramp, "--steps=3", f"--state_in={ramp_state}", "--worker_count=1",
                               *mesh("4,2", "data,tensor")])


# --- a 3-stage --data_schedule -----------------------------------------------------------------

SCHEDULE_STEPS = 8


def plan_schedule(plan: DumpPlan, root) -> None:
    rng = np.random.default_rng(2)
    a, b, c = (write_random_dataset(str(root / n), rng, docs) for n, docs in
               (("a", 80), ("b", 120), ("c", 60)))
    schedule = root / "sched.json"
    schedule.write_text(json.dumps({"stages": [
        {"start_step": 0, "blend": ["30", a, "70", b]},
        {"start_step": 3, "blend": ["40", b, "60", c]},  # a leaves, c joins
        {"start_step": 6, "blend": ["50", a, "50", c]},  # b leaves, a returns
    ]}))
    args = [
        f"--data_schedule={schedule}", f"--seq_length={SEQ}", "--seed=5",
        f"--train_samples={B * SCHEDULE_STEPS}", f"--data_cache_path={root / 'cache'}",
        "--eod_id=999", f"--global_batch_size={B}",
    ]
    every = [*args, f"--steps={SCHEDULE_STEPS}"]
    plan.dump("sched_p1", 1, [*every, *mesh("8")])  # also the full run the resume is checked on
    plan.dump("sched_p2", 2, [*every, *mesh("4,2", "data,tensor")])
    plan.dump("sched_p4", 4, [*every, *mesh("8")])
    state = plan.out("sched_first") / "state.json"
    plan.dump("sched_first", 2, [*args, "--steps=4", f"--state_out={state}", *mesh("8")])
    plan.dump("sched_rest", 4, [*args, f"--steps={SCHEDULE_STEPS - 4}", f"--state_in={state}",
                                "--worker_count=1", *mesh("4,2", "data,tensor")])


# --- packed rows -------------------------------------------------------------------------------


def plan_packed(plan: DumpPlan, root) -> None:
    rng = np.random.default_rng(2)
    a, b = (write_random_dataset(str(root / n), rng, d, lengths=(1, 40), eod=999)
            for n, d in (("a", 150), ("b", 220)))
    args = [
        f"--data_path=30 {a} 70 {b}", "--split=90,8,2", f"--seq_length={SEQ}", "--seed=7",
        f"--train_samples={B * 8}", "--valid_samples=0", "--test_samples=0",
        f"--data_cache_path={root / 'cache'}", "--eod_id=999", "--packing=best_fit",
        "--packing_window=50", "--inter_document_masking", f"--global_batch_size={B}",
    ]
    state = plan.out("packed_first") / "state.json"
    plan.dump("packed_p1", 1, [*args, "--steps=4", *mesh("8")])
    plan.dump("packed_p2", 2, [*args, "--steps=4", *mesh("4,2", "data,tensor")])
    plan.dump("packed_first", 2, [*args, "--steps=2", f"--state_out={state}", *mesh("8")])
    plan.dump("packed_rest", 4, [*args, "--steps=2", f"--state_in={state}", "--worker_count=1",
                                 *mesh("4,2", "data,tensor")])


# --- packed conversations blended with text ----------------------------------------------------

CHAT_B = 8
CHAT_SEQ = 96


def plan_conversations(plan: DumpPlan, root) -> None:
    spec = tok_spec.TokenizerSpec("hf", model=chat_tokenizer(root / "tok", CHATML))
    chat = pipeline.preprocess(small_run_config(
        str(root / "sft"), [write_chat(root / "chat.jsonl", make_conversations(120, seed=8))],
        json_keys=("messages",), chat=True, tokenizer=spec,
    )).outputs["messages"]
    text = pipeline.preprocess(small_run_config(
        str(root / "web"), [write_jsonl(str(root / "web.jsonl"), make_documents(150, seed=2))],
        tokenizer=spec,
    )).outputs["text"]
    args = [f"--data_path=40 {chat} 60 {text}", "--split=100,0,0", f"--seq_length={CHAT_SEQ}",
            "--seed=5", f"--train_samples={CHAT_B * 4}", f"--data_cache_path={root / 'cache'}",
            "--packing=best_fit", "--packing_overflow=truncate", f"--global_batch_size={CHAT_B}"]
    state = plan.out("chat_first") / "state.json"
    plan.dump("chat_p1", 1, [*args, "--steps=4", *mesh("8")])
    plan.dump("chat_p2", 2, [*args, "--steps=4", *mesh("4,2", "data,tensor")])
    plan.dump("chat_first", 2, [*args, "--steps=2", f"--state_out={state}", *mesh("8")])
    plan.dump("chat_rest", 4, [*args, "--steps=2", f"--state_in={state}", "--worker_count=1",
                               *mesh("8")])


# --- fill-in-the-middle ------------------------------------------------------------------------

FIM_PACKINGS = ("concat", "best_fit")  # best_fit: each document of a row rewritten alone


def plan_fim(plan: DumpPlan, root) -> None:
    prefix, _ = make_code_dataset(root, "code", n=150, seed=5)
    for packing in FIM_PACKINGS:
        args = [
            f"--data_path={prefix}", "--split=100,0,0", f"--seq_length={SEQ}", "--seed=7",
            f"--train_samples={B * 6}", f"--data_cache_path={root / 'cache'}",
            "--fim_data", "--fim_rate=0.9", "--fim_spm_rate=0.5",
            "--fim_split_sample=<file_sep>", "--fim_fragment_rate=0.5",
            f"--packing={packing}", f"--global_batch_size={B}", *mesh("8"),
        ]
        state = plan.out(f"fim_{packing}_p2") / "state.json"
        plan.dump(f"fim_{packing}_p1", 1, [*args, "--steps=4"])
        plan.dump(f"fim_{packing}_p2", 2, [*args, "--steps=2", f"--state_out={state}"])
        plan.dump(f"fim_{packing}_p4", 4, [*args, "--steps=2", f"--state_in={state}",
                                           "--worker_count=1"])


# --- bucketed batches of a saved TokenBudgetPlan -----------------------------------------------

BUDGET = TokenBudgetConfig(
    bucket_width=32, max_length=160, token_budget=1280, row_multiple=8, seed=2, leftover="pad"
)


@pytest.fixture(scope="module")
def budget(tmp_path_factory):
    """(dataset prefix, saved plan directory, the `TokenBudgetPlan`): the plan is computed once
    here and saved; the workers only load it."""
    root = tmp_path_factory.mktemp("budget")
    prefix = str(root / "seqs")
    rng = np.random.default_rng(5)
    lengths = np.clip(rng.lognormal(3.5, 0.8, 300), 1, 220).astype(np.int64)
    with IndexedDatasetBuilder(prefix, np.uint16) as builder:
        for n in lengths.tolist():
            builder.add_sequence(rng.integers(1, 3000, n).astype(np.uint16))
            builder.end_document()
    plan = plan_token_budget(lengths, BUDGET)
    save_token_budget_plan(plan, root / "plan")
    return prefix, str(root / "plan"), plan


def plan_token_budget_runs(plan: DumpPlan, budget) -> None:
    prefix, saved, _ = budget
    data = {"data": prefix, "plan": saved}
    plan.token_budget("budget_p1", 1, **data, mesh_shape="8", mesh_axes="data")
    plan.token_budget("budget_p2", 2, **data, mesh_shape="4,2", mesh_axes="data,tensor")
    plan.token_budget("budget_first", 2, **data, mesh_shape="8", mesh_axes="data", steps=2)
    # on 1 process with another mesh, after the 2-process group (groups start 2, 1, 4, 2 x 8)
    plan.token_budget("budget_rest", 1, **data, mesh_shape="2,4", mesh_axes="data,fsdp",
                      state_in=str(plan.out("budget_first") / "state.json"))


# --- a step batch-size schedule on 16 data shards ----------------------------------------------

# 16-token samples, thresholds in tokens: 512 // 16 = 32 samples, so 4 steps of 8 rows, then 32.
STEP_FLAGS = [
    "--mock_data", "--mock_num_samples=160", "--seq_length=16",
    "--step_batch_size_schedule=0:8 512:32",
]
STEPS, RESUME = 7, 5  # 4 x 8 + 3 x 32 = 128 samples; step 5 is the second 32-row step


def plan_step_schedule(plan: DumpPlan, root) -> None:
    state = plan.out("steps_first") / "state.json"
    two_shards = mesh("2,4", "data,tensor")  # 2 data shards on one process's 8 devices
    plan.dump("steps_full", 1, [*STEP_FLAGS, f"--steps={STEPS}", *two_shards])
    plan.dump("steps_first", 1, [*STEP_FLAGS, f"--steps={RESUME}", f"--state_out={state}",
                                 *two_shards])
    plan.dump("steps_rest", 2, [*STEP_FLAGS, f"--steps={STEPS - RESUME}", f"--state_in={state}",
                                *mesh("16")], devices=8)
    plan.dump("steps_refused", 2, [*STEP_FLAGS, "--steps=2", *mesh("16")], devices=8,
              expect_failure=True)


def step_batches(batches: dict, first: int = 0) -> dict:
    """`{(key, step): global batch array}` of a dump whose first step is `first` ("key/step" when
    sizes differ, else "key" stacked over steps)."""
    got = {}
    for stored, value in batches.items():
        key, slash, step = stored.partition("/")
        if slash:
            got[key, int(step)] = value
        else:
            got.update({(key, first + i): batch for i, batch in enumerate(value)})
    return got


# --- every group started once ------------------------------------------------------------------


@pytest.fixture(scope="module")
def runs(tmp_path_factory, budget):
    root = tmp_path_factory.mktemp("multiprocess")
    plan = DumpPlan(root / "out")
    for name, register in (
        ("blend", plan_blend), ("schedule", plan_schedule), ("packed", plan_packed),
        ("chat", plan_conversations), ("fim", plan_fim), ("steps", plan_step_schedule),
    ):
        part = root / name
        part.mkdir()
        register(plan, part)
    plan_token_budget_runs(plan, budget)
    return plan.run()


# --- a blend of two datasets -------------------------------------------------------------------


def test_blend_batches_identical_on_1_2_and_4_processes(runs):
    one, two, four = (runs.batches(f"blend_p{n}") for n in (1, 2, 4))
    assert one["inputs"].shape == (3, B, SEQ)
    np.testing.assert_array_equal(one["sample_ids"][0], np.arange(B, 2 * B))
    assert set(np.unique(one["dataset_ids"])) == {0, 1}
    assert_same_batches(one, two)
    assert_same_batches(one, four)


def test_state_from_2_processes_resumes_on_4(runs):
    full = runs.batches("blend_full")
    assert json.loads((runs.out("blend_first") / "state.json").read_text())["step"] == 2
    rest = runs.batches("blend_rest")
    for key in full:
        assert full[key][2:].tobytes() == rest[key].tobytes(), key


def test_mock_data_with_fsdp_mesh(runs):
    assert_same_batches(runs.batches("mock_p1"), runs.batches("mock_p2"))


def test_rampup_state_from_2_processes_mid_ramp_resumes_on_4(runs):
    full = runs.batches("ramp_full")
    assert [full[f"sample_ids/{k}"].size for k in range(6)] == [8, 8, 16, 24, 32, 32]
    np.testing.assert_array_equal(
        np.concatenate([full[f"sample_ids/{k}"] for k in range(6)]), np.arange(120)
    )
    state = json.loads((runs.out("ramp_first") / "state.json").read_text())
    assert state["step"] == 3  # the next step has 24 rows: mid-ramp
    rest = runs.batches("ramp_rest")
    assert set(rest) == {k for k in full if int(k.split("/")[1]) >= 3}
    for key in rest:
        assert full[key].tobytes() == rest[key].tobytes(), key


# --- a 3-stage --data_schedule -----------------------------------------------------------------


def test_staged_batches_identical_on_1_2_and_4_processes(runs):
    one = runs.batches("sched_p1")
    ids = one["dataset_ids"]
    assert set(np.unique(ids[:3])) == {0, 1}
    assert set(np.unique(ids[3:6])) == {1, 2}
    assert set(np.unique(ids[6:])) == {0, 2}
    assert_same_batches(one, runs.batches("sched_p2"))
    assert_same_batches(one, runs.batches("sched_p4"))


def test_state_mid_stage_on_2_processes_resumes_on_4(runs):
    full = runs.batches("sched_p1")
    state = json.loads((runs.out("sched_first") / "state.json").read_text())
    assert state["step"] == 4  # inside stage 1
    rest = runs.batches("sched_rest")
    for key in full:
        assert full[key][4:].tobytes() == rest[key].tobytes(), key


# --- packed rows -------------------------------------------------------------------------------


def test_packed_batches_on_1_2_and_4_processes_and_a_resume_on_another_count(runs):
    full = runs.batches("packed_p1")
    assert (full["segment_ids"].max(-1) >= 2).any()  # rows of several documents
    assert "cu_seqlens" in full
    assert_same_batches(full, runs.batches("packed_p2"))
    assert json.loads((runs.out("packed_first") / "state.json").read_text())["step"] == 2
    rest = runs.batches("packed_rest")
    for key in full:
        assert full[key][2:].tobytes() == rest[key].tobytes(), key


# --- packed conversations blended with text ----------------------------------------------------


def test_conversation_batches_identical_on_1_2_and_4_processes_and_resume(runs):
    one = runs.batches("chat_p1")
    assert_same_batches(one, runs.batches("chat_p2"))
    assert set(np.unique(one["dataset_ids"])) == {0, 1}
    chat_rows = one["dataset_ids"] == 0
    # the conversations train on part of their tokens only, the text on all but its last
    assert one["loss_mask"][chat_rows].mean() < one["loss_mask"][~chat_rows].mean()
    assert json.loads((runs.out("chat_first") / "state.json").read_text())["step"] == 2
    rest = runs.batches("chat_rest")
    for key in one:
        assert one[key][2:].tobytes() == rest[key].tobytes(), key


# --- fill-in-the-middle ------------------------------------------------------------------------


@pytest.mark.parametrize("packing", FIM_PACKINGS)
def test_fim_batches_identical_on_1_2_and_4_processes_and_resume_across(runs, packing):
    one = runs.batches(f"fim_{packing}_p1")
    assert (one["inputs"][:, :, 0] == 1).mean() > 0.5  # <fim_prefix> (id 1) opens most rows
    two = runs.batches(f"fim_{packing}_p2")
    assert json.loads((runs.out(f"fim_{packing}_p2") / "state.json").read_text())["step"] == 2
    four = runs.batches(f"fim_{packing}_p4")
    assert_same_batches({k: v[:2] for k, v in one.items()}, two)
    assert_same_batches({k: v[2:] for k, v in one.items()}, four)


# --- bucketed batches of a saved TokenBudgetPlan -----------------------------------------------


def test_bucketed_batches_identical_on_1_and_2_processes_and_resume(runs, budget):
    _, _, plan = budget
    one, two = runs.batches("budget_p1"), runs.batches("budget_p2")
    assert one.keys() == two.keys() and len(one) == 4 * len(plan)
    for key in one:
        assert one[key].tobytes() == two[key].tobytes(), key
    for k in range(len(plan)):
        assert one[f"{k}/tokens"].shape == (plan.batch_size(k), plan.padded_length(k))
        np.testing.assert_array_equal(one[f"{k}/sample_ids"], plan.sample_ids(k))
    # a state saved by a 2-process run after 2 steps resumes on 1 process with a different mesh
    first, state = runs.batches("budget_first"), runs.state("budget_first")
    assert state["step"] == 2 and set(first) == {k for k in one if int(k.split("/")[0]) < 2}
    rest = runs.batches("budget_rest")
    assert set(rest) == {k for k in one if int(k.split("/")[0]) >= 2}
    for key in rest:
        assert rest[key].tobytes() == one[key].tobytes(), key


# --- a step batch-size schedule on 16 data shards ----------------------------------------------


def test_resume_mid_schedule_on_16_shards_matches_the_2_shard_run(runs):
    full = step_batches(runs.batches("steps_full"))
    assert [len(full["inputs", k]) for k in range(STEPS)] == [8] * 4 + [32] * 3
    assert json.loads((runs.out("steps_first") / "state.json").read_text())["step"] == RESUME
    rest = step_batches(runs.batches("steps_rest"), first=RESUME)
    assert set(rest) == {(key, k) for key, k in full if k >= RESUME}
    for key, k in rest:
        assert full[key, k].tobytes() == rest[key, k].tobytes(), (key, k)


def test_16_shards_from_step_0_are_refused_with_one_line(runs):
    assert runs.code("steps_refused") != 0
    errors = runs.errors("steps_refused")
    assert len(errors) == 1, errors
    assert "the step plan has batches of 8 rows, which the mesh's batch axes" in errors[0]
    assert "multiple of the data-shard count" in errors[0]
    assert not runs.out("steps_refused").exists()
