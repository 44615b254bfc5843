"""Multiple validation sets: each set equals megatron-core's, through training and inspect."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers_cli import run_tool
from helpers_data import write_random_dataset

from jaxblend import index
from jaxblend.sources import GPTSchemaOptions, open_validation_sets

SEQ = 16


@pytest.fixture(scope="module")
def prefixes(tmp_path_factory):
    root = tmp_path_factory.mktemp("valid_sets")
    rng = np.random.default_rng(8)
    return [
        write_random_dataset(str(root / n), rng, d, lengths=(2, 50), vocab=(1, 400), eod=0)
        for n, d in (("t", 100), ("v1", 40), ("v2", 60))
    ]


def _config(prefixes, weighted=True, full=False):
    t, v1, v2 = prefixes
    return index.GPTDataConfig(
        blend_per_split=((t,), ("0.5", v1, "0.5", v2) if weighted else (v1, v2), None),
        split=None,
        seq_length=SEQ,
        seed=3,
        num_samples=(64, 24 if weighted else None, None),
        multiple_validation_sets=True,
        full_validation=full,
    )


@pytest.mark.parity
@pytest.mark.parametrize("full", [False, True])
def test_each_validation_set_equals_megatron(prefixes, tmp_path, full):
    pytest.importorskip("torch")
    pytest.importorskip("megatron.core")
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    class Tok:
        eod = 0
        unique_identifiers = {"class": "Tok"}  # noqa: RUF012 - megatron reads a dict
        vocab_size = 1000

    t, v1, v2 = prefixes
    mcfg = GPTDatasetConfig(
        random_seed=3,
        sequence_length=SEQ,
        # full validation (one epoch of each set) needs an unweighted blend in Megatron
        blend_per_split=[([t], None), ([v1, v2], None if full else [0.5, 0.5]), None],
        path_to_cache=str(tmp_path),
        tokenizer=Tok(),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
        multiple_validation_sets=True,
        full_validation=full,
    )
    sizes = [64, None if full else 24, None]
    _, theirs, _ = BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, mcfg).build()
    opts = GPTSchemaOptions(eod_id=0, megatron_compat=True)
    ours = open_validation_sets(_config(prefixes, not full, full), opts)
    assert list(ours) == [v1, v2] and len(theirs) == 2
    for src, mds in zip(ours.values(), theirs):
        assert len(src) == len(mds)
        batch = src.get_batch(np.arange(len(src)))
        for i in range(len(mds)):
            np.testing.assert_array_equal(batch["inputs"][i], mds[i]["tokens"].numpy())
            np.testing.assert_array_equal(batch["targets"][i], mds[i]["labels"].numpy())


def test_needs_per_split_validation_blend(prefixes):
    cfg = index.GPTDataConfig(blend=[prefixes[0]], split="90,10,0", seq_length=SEQ, seed=3)
    with pytest.raises(ValueError, match="need per-split blends"):
        open_validation_sets(cfg, GPTSchemaOptions())


def test_training_evaluates_and_inspect_explains_each_set(prefixes, tmp_path):
    t, v1, v2 = prefixes
    args = [
        f"--train_data_path={t}",
        f"--valid_data_path=0.5 {v1} 0.5 {v2}",
        f"--seq_length={SEQ}",
        "--seed=3",
        "--multiple_validation_sets",
        f"--data_cache_path={tmp_path / 'cache'}",
    ]
    train = run_tool("jaxblend.train", [
        *args, "--train_iters=2", "--eval_interval=2", "--eval_iters=1", "--global_batch_size=8",
        "--vocab_size=512", "--hidden_size=32", "--ffn_hidden_size=64", "--num_attention_heads=2",
        "--num_layers=1", f"--workdir={tmp_path / 'run'}", "--save_interval=0",
    ])
    assert train.returncode == 0, train.stderr[-3000:]
    assert "validation valid_0 (v1) loss" in train.stdout, train.stdout
    assert "validation valid_1 (v2) loss" in train.stdout
    out = tmp_path / "explain.json"
    inspect = run_tool("jaxblend.tools.inspect", [
        "explain", *args, "--valid_samples=8", "--which=valid_1", "--global_batch_size=4",
        "--step=0", f"--json={out}",
    ])
    assert inspect.returncode == 0, inspect.stderr[-3000:]
    assert json.loads(out.read_text())["datasets"] == [v2]
