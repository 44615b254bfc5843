"""The training example takes `--vocab_size` and `--eod_id` from the datasets' records, refuses a
blend of tokenizers (unless `--allow_mixed_tokenizers`) and ids the model vocabulary cannot hold;
Megatron-made data (no record) still needs `--vocab_size`."""

from __future__ import annotations

import numpy as np
import pytest
from helpers_cli import run_tool

from jaxblend.preprocess import pipeline
from jaxblend.preprocess import tokenizer_spec as tok_spec
from jaxblend.preprocess.tokenizers import ByteTokenizer
from tests.helpers_data import write_random_dataset
from tests.preprocess.conftest import make_documents, small_run_config, write_jsonl

pytestmark = pytest.mark.slow

TINY = [
    "--seq_length=16", "--global_batch_size=8", "--train_iters=2", "--split=100,0,0",
    "--hidden_size=16", "--ffn_hidden_size=32", "--num_layers=1", "--num_attention_heads=2",
    "--eval_interval=0", "--save_interval=0", "--log_interval=1",
]

BYTE_VOCAB = ByteTokenizer().vocab_size  # 267: 256 bytes, EOD and the sentinels


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A HuggingFace-tokenized and a byte-tokenized dataset (both with records), and a
    Megatron-made one (no record); the vocabularies are the byte tokenizer's size (267), so each
    run trains one model shape (compiled once)."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, trainers

    d = tmp_path_factory.mktemp("tokdata")
    docs = make_documents(200, seed=3)
    bpe = tokenizers.Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.train_from_iterator(docs, trainers.BpeTrainer(
        vocab_size=BYTE_VOCAB, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    ))
    bpe.save(str(d / "tokenizer.json"))
    src = write_jsonl(str(d / "in.jsonl"), docs)
    hf = tok_spec.TokenizerSpec(type="hf", model=str(d / "tokenizer.json"))
    pipeline.preprocess(small_run_config(str(d / "hf"), [src], tokenizer=hf))
    pipeline.preprocess(small_run_config(str(d / "byte"), [src], tokenizer=tok_spec.TokenizerSpec()))
    megatron = write_random_dataset(
        str(d / "megatron_text_document"), np.random.default_rng(0), 100,
        vocab=(0, BYTE_VOCAB - 1), eod=BYTE_VOCAB - 1,
    )
    return {"hf": str(d / "hf_text_document"), "byte": str(d / "byte_text_document"),
            "megatron": megatron, "dir": d}


def _train(workdir, *args):
    return run_tool("jaxblend.train", [*TINY, f"--workdir={workdir}", *args])


def _error(out) -> str:
    lines = [s for s in out.stderr.splitlines() if s.startswith("error: ")]
    assert len(lines) == 1, out.stderr[-3000:]
    return lines[0]


def test_a_recorded_dataset_trains_without_vocab_and_eod_flags(data, tmp_path):
    out = _train(tmp_path, f"--data_path={data['hf']}", "--eod_mask_loss")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "finished at step 2" in out.stdout


def test_a_blend_of_tokenizers_is_refused_unless_allowed(data, tmp_path):
    blend = f"--data_path=1 {data['hf']} 1 {data['byte']}"
    out = _train(tmp_path / "a", blend)
    assert out.returncode != 0
    line = _error(out)
    assert line.startswith(f"error: datasets {data['hf']} (HuggingFaceTokenizer sha256:")
    assert line.endswith(
        f"and {data['byte']} (ByteTokenizer) were tokenized by different tokenizers; train on "
        "data of one tokenizer, or pass --allow_mixed_tokenizers"
    )
    out = _train(tmp_path / "b", blend, "--allow_mixed_tokenizers")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "finished at step 2" in out.stdout


def test_ids_outside_the_vocabulary_are_refused(data, tmp_path):
    out = _train(tmp_path / "a", f"--data_path={data['byte']}", "--eod_id=256", "--vocab_size=200")
    assert out.returncode != 0
    assert _error(out) == (
        "error: --eod_id=256 is outside the model vocabulary (--vocab_size=200): ids must be in "
        "[0, 200)"
    )
    out = _train(tmp_path / "b", f"--data_path={data['byte']}", "--vocab_size=250", "--eod_id=5")
    assert out.returncode != 0
    assert _error(out) == (
        f"error: dataset {data['byte']} holds token id 256 >= the model vocabulary "
        "(--vocab_size=250); raise --vocab_size to at least 257 or use data of the model's "
        "tokenizer"
    )


def test_megatron_made_data_needs_vocab_size_as_before(data, tmp_path):
    out = _train(tmp_path / "a", f"--data_path={data['megatron']}")
    assert out.returncode != 0
    assert _error(out).startswith(
        "error: --vocab_size is required with --data_path when the datasets have no "
        "preprocessing record"
    )
    out = _train(tmp_path / "b", f"--data_path={data['megatron']}",
                 f"--vocab_size={BYTE_VOCAB}", f"--eod_id={BYTE_VOCAB - 1}", "--eod_mask_loss")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "finished at step 2" in out.stdout
