"""Conversations on 1, 2 and 4 processes: packed rows of a conversation dataset blended with text,
their loss masks applied, are the same global batches on any topology, and a state saved on 2
processes resumes on 4 (Grain worker processes reading the masks)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers_multiproc import assert_same_batches, run_cli

from jaxblend.preprocess import pipeline
from jaxblend.preprocess import tokenizer_spec as tok_spec
from tests.helpers_chat import CHATML, chat_tokenizer, make_conversations, write_chat
from tests.preprocess.conftest import make_documents, small_run_config, write_jsonl

pytestmark = pytest.mark.multiprocess

B = 8
SEQ = 96


@pytest.fixture(scope="module")
def blend(tmp_path_factory):
    root = tmp_path_factory.mktemp("mp_chat")
    spec = tok_spec.TokenizerSpec("hf", model=chat_tokenizer(root / "tok", CHATML))
    chat = pipeline.preprocess(small_run_config(
        str(root / "sft"), [write_chat(root / "chat.jsonl", make_conversations(120, seed=8))],
        json_keys=("messages",), chat=True, tokenizer=spec,
    )).outputs["messages"]
    text = pipeline.preprocess(small_run_config(
        str(root / "web"), [write_jsonl(str(root / "web.jsonl"), make_documents(150, seed=2))],
        tokenizer=spec,
    )).outputs["text"]
    return f"40 {chat} 60 {text}", str(root / "cache")


def _args(blend):
    data_path, cache = blend
    return [f"--data_path={data_path}", "--split=100,0,0", f"--seq_length={SEQ}", "--seed=5",
            f"--train_samples={B * 4}", f"--data_cache_path={cache}", "--packing=best_fit",
            "--packing_overflow=truncate"]


def _dump(tmp_path, name, args, procs, devices, mesh_shape, mesh_axes):
    out = tmp_path / name
    run_cli("jaxblend.tools.dump_batches",
            [*args, f"--global_batch_size={B}", f"--mesh_shape={mesh_shape}",
             f"--mesh_axes={mesh_axes}", f"--out={out}"], procs, devices)
    with np.load(out / "batches.npz") as f:
        return {k: f[k] for k in f.files}


def test_conversation_batches_identical_on_1_2_and_4_processes_and_resume(tmp_path, blend):
    args = _args(blend)
    one = _dump(tmp_path, "p1", [*args, "--steps=4"], 1, 8, "8", "data")
    two = _dump(tmp_path, "p2", [*args, "--steps=4"], 2, 4, "4,2", "data,tensor")
    assert_same_batches(one, two)
    assert set(np.unique(one["dataset_ids"])) == {0, 1}
    chat_rows = one["dataset_ids"] == 0
    # the conversations train on part of their tokens only, the text on all but its last
    assert one["loss_mask"][chat_rows].mean() < one["loss_mask"][~chat_rows].mean()
    state = tmp_path / "state.json"
    _dump(tmp_path, "first", [*args, "--steps=2", f"--state_out={state}"], 2, 4, "8", "data")
    assert json.loads(state.read_text())["step"] == 2
    rest = _dump(tmp_path, "rest", [*args, "--steps=2", f"--state_in={state}",
                                    "--worker_count=1"], 4, 2, "8", "data")
    for key in one:
        assert one[key][2:].tobytes() == rest[key].tobytes(), key
