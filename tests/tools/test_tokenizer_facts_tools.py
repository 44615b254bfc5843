"""inspect preflight, dump_batches and dump_samples take the datasets' recorded tokenizer facts:
`--vocab_size` and `--eod_id` defaults, a blend of tokenizers and out-of-vocabulary ids as
problems, and Megatron's `--tokenizer-type` for data without a record."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers_cli import run_tool
from helpers_data import write_random_dataset

from jaxblend.tokenizer_facts import TokenizerFacts

HF = TokenizerFacts("HuggingFaceTokenizer sha256:0123456789ab", 1000, 0, None)
BYTE = TokenizerFacts("ByteTokenizer", 267, 256, 257)
COMMON = ["--split=100,0,0", "--seq_length=16", "--train_samples=64", "--global_batch_size=8"]


def _recorded(root, name: str, facts: TokenizerFacts | None, rng, high: int) -> str:
    """A dataset `<root>/<name>_text_document` of ids below `high` (EOD `high - 1`), with the
    record preprocessing writes when `facts` is given."""
    prefix = write_random_dataset(
        str(root / f"{name}_text_document"), rng, 80, lengths=(2, 40), vocab=(0, high - 1),
        eod=high - 1,
    )
    if facts is not None:
        record = {"status": "complete", "outputs": {"text": prefix},
                  "tokenizer_facts": facts.to_json(), "max_token_id": {"text": high - 1}}
        (root / f"{name}.preprocess.json").write_text(json.dumps(record))
    return prefix


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("tokfacts")
    rng = np.random.default_rng(7)
    return {
        "hf": _recorded(root, "hf", HF, rng, 1000),
        "byte": _recorded(root, "byte", BYTE, rng, 257),
        "megatron": _recorded(root, "megatron", None, rng, 900),
    }


def run(module, *args):
    return run_tool(module, [*args])


def test_preflight_reports_the_recorded_tokenizer_and_its_vocabulary(data):
    out = run("jaxblend.tools.inspect", "preflight", f"--data_path={data['byte']}", *COMMON)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert (
        "byte_text_document: tokens uint16 (holds ids <= 65,535; vocabulary 267); tokenizer "
        "ByteTokenizer (vocab 267): eod 256, pad 257"
    ) in out.stdout


def test_preflight_problems_mixed_tokenizers_and_ids_outside_the_vocabulary(data):
    blend = f"--data_path=1 {data['hf']} 1 {data['byte']}"
    out = run("jaxblend.tools.inspect", "preflight", blend, *COMMON)
    assert out.returncode == 1
    assert (
        f"PROBLEM: datasets {data['hf']} ({HF.identity}) and {data['byte']} (ByteTokenizer) were "
        "tokenized by different tokenizers; train on data of one tokenizer, or pass "
        "--allow_mixed_tokenizers"
    ) in out.stdout.splitlines()
    out = run("jaxblend.tools.inspect", "preflight", blend, *COMMON, "--allow_mixed_tokenizers")
    assert out.returncode == 0, out.stdout[-2000:]
    out = run("jaxblend.tools.inspect", "preflight", f"--data_path={data['byte']}", *COMMON,
              "--vocab_size=200", "--eod_id=256")
    assert out.returncode == 1
    assert (
        "PROBLEM: --eod_id=256 is outside the model vocabulary (--vocab_size=200): ids must be in "
        "[0, 200)"
    ) in out.stdout.splitlines()
    out = run("jaxblend.tools.inspect", "preflight", f"--data_path={data['hf']}", *COMMON,
              "--vocab_size=500")
    assert out.returncode == 1
    assert f"PROBLEM: dataset {data['hf']} holds token id 999 >= the model vocabulary" in out.stdout


def test_megatron_tokenizer_flags_supply_the_facts_of_data_without_a_record(data):
    out = run("jaxblend.tools.inspect", "preflight", f"--data_path={data['megatron']}", *COMMON)
    assert out.returncode == 0 and "tokenizer" not in out.stdout  # as before: nothing known
    out = run("jaxblend.tools.inspect", "preflight", f"--data_path={data['megatron']}", *COMMON,
              "--tokenizer-type", "ByteTokenizer")
    assert out.returncode == 1
    lines = out.stdout.splitlines()
    assert (
        f"{data['megatron']}: its record has no largest token id; reading the data to find it"
    ) in lines
    assert (
        f"PROBLEM: dataset {data['megatron']} holds token id 899 >= the model vocabulary "
        "(--vocab_size=267); raise --vocab_size to at least 900 or use data of the model's "
        "tokenizer"
    ) in lines


def test_dump_batches_takes_the_recorded_eod(data, tmp_path):
    args = [f"--data_path={data['byte']}", *COMMON, "--eod_mask_loss", "--steps=1",
            "--mesh_shape=1,8", "--mesh_axes=data,tensor", f"--out={tmp_path / 'o'}"]
    out = run("jaxblend.tools.dump_batches", *args)
    assert out.returncode == 0, out.stderr[-2000:]
    batch = np.load(tmp_path / "o" / "batches.npz")
    targets, mask = batch["targets"][0], batch["loss_mask"][0]
    assert targets.shape == (8, 16)
    assert (targets == 256).any() and not mask[targets == 256].any()  # loss masked at EOD 256
    out = run("jaxblend.tools.dump_batches", *args, "--eod_id=300")
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == (
        "error: --eod_id=300 is outside the model vocabulary (the datasets' recorded vocabulary "
        "of 267): ids must be in [0, 267)"
    )


def test_dump_samples_refuses_a_blend_of_tokenizers_unless_allowed(data, tmp_path):
    args = [f"--data_path=1 {data['hf']} 1 {data['byte']}", *COMMON[:3], "--num=2"]
    out = run("jaxblend.tools.dump_samples", *args, f"--out={tmp_path / 'a'}")
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == (
        f"error: datasets {data['hf']} ({HF.identity}) and {data['byte']} (ByteTokenizer) were "
        "tokenized by different tokenizers; train on data of one tokenizer, or pass "
        "--allow_mixed_tokenizers"
    )
    out = run("jaxblend.tools.dump_samples", *args, f"--out={tmp_path / 'b'}",
              "--allow_mixed_tokenizers")
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "b" / "train.npz").exists()
