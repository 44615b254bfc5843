"""Conversation datasets in a GPT source: stored loss masks read beside the tokens.

`loss_mask` = stored mask (of each target token) x what the schema trains (not padding, ...);
datasets without masks (plain text, Megatron-made data) train on every token as before; packed
rows keep each conversation apart (positions and segment ids per conversation); the masks enter
the source's fingerprint; a conversation dataset blends with a text dataset.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from jaxblend import index, storage
from jaxblend.access import DataAccess, IdentityStoreOptions, MapStoreOptions
from jaxblend.loss_masks import loss_mask_prefix
from jaxblend.preprocess import pipeline
from jaxblend.preprocess import tokenizer_spec as tok_spec
from jaxblend.sources import GPTSchemaOptions, GPTSource, open_gpt_sources
from jaxblend.storage.loss_mask_reader import apply_loss_masks, find_loss_masks
from tests.helpers_chat import CHATML, chat_tokenizer, make_conversations, write_chat
from tests.preprocess.conftest import make_documents, small_run_config, write_jsonl

SEQ = 96


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A conversation dataset and a text dataset of the same tokenizer."""
    d = tmp_path_factory.mktemp("convdata")
    tok_dir = chat_tokenizer(d / "tok", CHATML)
    spec = tok_spec.TokenizerSpec("hf", model=tok_dir)
    convs = make_conversations(80, seed=5)
    chat = pipeline.preprocess(small_run_config(
        str(d / "sft"), [write_chat(d / "chat.jsonl", convs)], json_keys=("messages",), chat=True,
        tokenizer=spec,
    )).outputs["messages"]
    text = pipeline.preprocess(small_run_config(
        str(d / "web"), [write_jsonl(str(d / "web.jsonl"), make_documents(120, seed=9))],
        tokenizer=spec,
    )).outputs["text"]
    return {"chat": chat, "text": text, "dir": d}


def _access(d) -> DataAccess:
    return DataAccess(maps=MapStoreOptions(location=str(d / "maps")),
                      identity=IdentityStoreOptions(local_dir=str(d / "memo")))


def _source(blend, d, packing="best_fit", samples=40):
    config = index.GPTDataConfig(blend=blend, split="100,0,0", seq_length=SEQ, seed=3,
                                 num_samples=(samples, None, None), packing=packing)
    options = GPTSchemaOptions()
    return open_gpt_sources(config, options, access=_access(d), splits=("train",))["train"]


def _flat(prefix):
    ds = storage.IndexedDataset(prefix)
    return np.concatenate([ds[i] for i in range(len(ds))])


def _expected_weights(source, ids):
    """Each window position's stored mask (1 for a dataset without one), placed piece by piece
    from the datasets read through `IndexedDataset`, independently of the source's reads."""
    text = source.read_batch(ids)["text"]
    tokens = [_flat(n) for n in source.dataset_names]
    masks = [_flat(loss_mask_prefix(n)) if storage.exists(loss_mask_prefix(n)) else None
             for n in source.dataset_names]
    weights = np.zeros(text.shape, np.uint8)
    filled = np.zeros(len(ids), np.int64)
    pieces = source.span_index.pieces(ids)
    for r, d, off, n in zip(pieces.row, pieces.dataset, pieces.offset, pieces.length):
        at = slice(filled[r], filled[r] + n)
        np.testing.assert_array_equal(text[r, at], tokens[d][off:off + n])
        weights[r, at] = 1 if masks[d] is None else masks[d][off:off + n]
        filled[r] += n
    return weights


def _unmasked(source):
    """The same split read without loss masks."""
    return GPTSource(source.span_index, source.options, seq_length=source.seq_length,
                     packing=source.packing, fingerprint="plan", split="train",
                     access=source.access)


def test_packed_conversations_train_only_on_assistant_targets(data):
    source = _source([data["chat"]], data["dir"])
    assert source.loss_masks is not None
    ids = np.arange(len(source))[:24]
    batch = source.get_batch(ids)
    plain = _unmasked(source).get_batch(ids)
    want = _expected_weights(source, ids)[:, 1 : SEQ + 1]
    np.testing.assert_array_equal(batch["loss_mask"], plain["loss_mask"] * want)
    assert batch["loss_mask"].sum() > 0
    assert batch["loss_mask"].sum() < plain["loss_mask"].sum()
    # each conversation its own segment, positions from 0; padding untrained
    for key in ("inputs", "targets", "positions", "segment_ids"):
        np.testing.assert_array_equal(batch[key], plain[key])
    assert (batch["loss_mask"][batch["segment_ids"] == 0] == 0).all()
    # two-phase reads: the compact form carries the weights, get_batch == assemble(read)
    raw = source.read_batch(ids)
    assert raw["loss_weights"].dtype == np.uint8
    np.testing.assert_array_equal(source.assemble_batch(raw)["loss_mask"], batch["loss_mask"])
    # pickled (a Grain worker) it reads the same
    again = pickle.loads(pickle.dumps(source)).get_batch(ids)
    np.testing.assert_array_equal(again["loss_mask"], batch["loss_mask"])


def test_masks_enter_the_fingerprint_and_text_data_is_unchanged(data):
    source = _source([data["chat"]], data["dir"])
    assert source.fingerprint != _source([data["text"]], data["dir"]).fingerprint
    same_plan = [GPTSource(source.span_index, source.options, seq_length=source.seq_length,
                     packing=source.packing, fingerprint="plan", split="train",
                           access=source.access, loss_masks=masks)
                 for masks in (source.loss_masks, None)]
    assert same_plan[0].fingerprint != same_plan[1].fingerprint
    text = _source([data["text"]], data["dir"])
    assert text.loss_masks is None  # no mask beside it: every token trained, as before
    assert find_loss_masks(text.span_index.bin_datasets, text.access) is None


@pytest.mark.parametrize("packing", ["concat", "best_fit"])
def test_conversations_blend_with_text(data, packing):
    source = _source([0.5, data["chat"], 0.5, data["text"]], data["dir"], packing, samples=60)
    ids = np.arange(60)
    batch = source.get_batch(ids)
    masks = source.loss_masks
    assert masks is not None and [m is not None for m in masks.masks] == [True, False]
    text_rows = batch["dataset_ids"] == 1
    chat_rows = batch["dataset_ids"] == 0
    assert text_rows.any() and chat_rows.any()
    want = _expected_weights(source, ids)
    np.testing.assert_array_equal(source.read_batch(ids)["loss_weights"], want)
    plain = _unmasked(source).get_batch(ids)
    np.testing.assert_array_equal(batch["loss_mask"], plain["loss_mask"] * want[:, 1 : SEQ + 1])
    # the text dataset's rows train as before; the conversations' rows only on assistant tokens
    np.testing.assert_array_equal(batch["loss_mask"][text_rows], plain["loss_mask"][text_rows])
    assert batch["loss_mask"][chat_rows].mean() < batch["loss_mask"][text_rows].mean()


def test_apply_loss_masks_weighs_each_target():
    batch = {"loss_mask": np.ones((2, 4), np.float32)}
    weights = np.array([[0, 1, 1, 0, 1], [1, 0, 0, 0, 0]], np.uint8)
    apply_loss_masks(batch, weights)
    np.testing.assert_array_equal(batch["loss_mask"], [[1, 1, 0, 1], [0, 0, 0, 0]])
    short = {"loss_mask": np.ones((1, 4), np.float32)}  # no extra token: the last has no target
    apply_loss_masks(short, np.ones((1, 4), np.uint8))
    np.testing.assert_array_equal(short["loss_mask"], [[1, 1, 1, 0]])


def test_a_mask_of_another_dataset_is_refused(data, tmp_path):
    import shutil

    prefix = str(tmp_path / "copy_messages_document")
    for ext in ("bin", "idx"):
        shutil.copy(f"{data['text']}.{ext}", f"{prefix}.{ext}")
    mask = loss_mask_prefix(prefix)
    (tmp_path / ".jaxblend").mkdir()
    for ext in ("bin", "idx"):
        shutil.copy(f"{loss_mask_prefix(data['chat'])}.{ext}", f"{mask}.{ext}")
    ds = storage.IndexedDataset(prefix)
    with pytest.raises(ValueError, match="is not one byte per token of"):
        find_loss_masks([ds.bin_dataset], DataAccess.from_env())


def test_conversations_in_the_last_stage_of_a_schedule(data):
    from jaxblend.index.blend_schedule import BlendSchedule, BlendStage

    schedule = BlendSchedule((BlendStage(0, (data["text"],)),
                              BlendStage(30, ("0.5", data["text"], "0.5", data["chat"]))))
    config = index.GPTDataConfig(seq_length=SEQ, seed=3, num_samples=(60, None, None),
                                 packing="best_fit", train_schedule=schedule)
    source = open_gpt_sources(config, GPTSchemaOptions(), access=_access(
        data["dir"]), splits=("train",))["train"]
    batch = source.get_batch(np.arange(60))
    chat = source.dataset_names.index(data["chat"])
    rows = batch["dataset_ids"] == chat
    assert not rows[:30].any() and rows[30:].any()  # conversations only in the last stage
    plain = _unmasked(source).get_batch(np.arange(60))
    np.testing.assert_array_equal(batch["loss_mask"][~rows], plain["loss_mask"][~rows])
    assert batch["loss_mask"][rows].sum() < plain["loss_mask"][rows].sum()


@pytest.mark.parametrize("overflow", ["truncate", "drop"])
def test_a_conversation_longer_than_a_row_is_truncated_or_dropped(data, overflow):
    lengths = storage.IndexedDataset(data["chat"]).sequence_lengths
    seq = int(np.median(lengths))  # about half the conversations are longer than a row
    config = index.GPTDataConfig(blend=[data["chat"]], split="100,0,0", seq_length=seq, seed=3,
                                 num_samples=(None, None, None), packing="best_fit",
                                 packing_overflow=overflow)
    source = open_gpt_sources(config, GPTSchemaOptions(),
                              access=_access(data["dir"]), splits=("train",))["train"]
    maps = source.span_index.maps
    long = int((lengths > seq + 1).sum())
    assert long and maps.packing_stats()["split_documents"] == long  # counted
    ids = np.arange(len(source))
    batch = source.get_batch(ids)
    starts = (batch["positions"] == 0) & (batch["segment_ids"] > 0)
    kept = len(lengths) if overflow == "truncate" else len(lengths) - long
    assert int(starts.sum()) == kept  # each conversation once, from its first token
    assert (batch["loss_mask"] <= 1).all() and batch["loss_mask"].sum() > 0


def test_bucket_conversations_read_their_masks_as_local_ones(data, object_store, tmp_path):
    base = f"conv/{object_store.scheme}"
    name = data["chat"].rsplit("/", 1)[1]
    url = object_store.upload(data["chat"], f"{base}/{name}")
    object_store.upload(loss_mask_prefix(data["chat"]), f"{base}/.jaxblend/{name}_loss_mask")
    assert loss_mask_prefix(url) == object_store.prefix_url(f"{base}/.jaxblend/{name}_loss_mask")
    access = DataAccess.from_env(identity=IdentityStoreOptions(local_dir=str(tmp_path / "memo")))
    config = index.GPTDataConfig(blend=[url], split="100,0,0", seq_length=SEQ, seed=3,
                                 num_samples=(40, None, None), packing="best_fit")
    remote = open_gpt_sources(config, GPTSchemaOptions(), access=access,
                              splits=("train",))["train"]
    local = _source([data["chat"]], data["dir"])
    assert remote.loss_masks is not None and remote.reads_remote
    ids = np.arange(len(local))
    for key, value in local.get_batch(ids).items():
        np.testing.assert_array_equal(remote.get_batch(ids)[key], value, err_msg=key)
    worker = pickle.loads(pickle.dumps(remote))  # a Grain worker reads the masks from the bucket
    np.testing.assert_array_equal(worker.get_batch(ids)["loss_mask"],
                                  local.get_batch(ids)["loss_mask"])
