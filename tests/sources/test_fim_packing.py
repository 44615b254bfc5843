"""Fill-in-the-middle on packed rows (`--fim_data` with `--packing=best_fit`).

Each document of a packed row is rewritten on its own, from the stream (seed, split, sample id,
document), and put back in its own places (`fim.fit_document`): the row's pieces, positions and
segment ids are those of the plain packed row; the FIM padding inside a document is never a
target.
"""

from __future__ import annotations

import math
import pickle
from pathlib import Path

import numpy as np
import pytest

from jaxblend import index
from jaxblend.access import DataAccess, MapStoreOptions
from jaxblend.sources import GPTSchemaOptions, open_gpt_sources
from jaxblend.sources.fim import FIMOptions, sample_draws
from tests.helpers_fim import two_code_datasets

SEQ = 64


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return two_code_datasets(tmp_path_factory.mktemp("fim_packing"), n=400, n_more=120)


def _config(blend, extra=True):
    return index.GPTDataConfig(
        blend=blend, split="90,10,0", seq_length=SEQ, seed=5, num_samples=(None, None, None),
        add_extra_token_to_sequence=extra, packing="best_fit", packing_window=32,
    )


def _open(data, fim=None, blend=None, split="train", extra=True, **schema):
    cfg = _config(blend or [data["prefix"]], extra)
    access = DataAccess(maps=MapStoreOptions(location=str(data["root"] / "maps")))
    options = GPTSchemaOptions(fim=fim, **schema)
    return open_gpt_sources(cfg, options, access=access)[split]


def _documents(raw):
    """(row, start, length, index in row) of every non-empty document of a raw packed batch."""
    out, row, start, j = [], -1, 0, 0
    for r, n in zip(raw["piece_row"].tolist(), raw["piece_length"].tolist()):
        if r != row:
            row, start, j = r, 0, 0
        if n > 0:
            out.append((r, start, n, j))
            j += 1
        start += n
    return out


@pytest.mark.parametrize(("blend", "extra"), [(False, True), (True, False)])
def test_each_document_is_rewritten_in_its_own_places(data, blend, extra):
    names = [data["prefix"], data["other"]] if blend else None
    plain = _open(data, blend=names, extra=extra)
    src = _open(data, FIMOptions(rate=0.7, spm_rate=0.5), blend=names, extra=extra)
    ids = np.arange(len(src))
    before = plain.read_batch(ids)
    text = before["text"].copy()
    raw = src.read_batch(ids)
    for key in ("n_valid", "piece_row", "piece_length", "dataset_ids"):
        np.testing.assert_array_equal(raw[key], before[key])
    tokens, rewriter = src.transform.tokens, src.transform.rewriter()
    rewritten = 0
    for r, start, n, j in _documents(raw):
        old = text[r, start : start + n]
        new = raw["text"][r, start : start + n]
        expected = rewriter.document(old, sample_draws(5, "train", int(ids[r]), j))
        np.testing.assert_array_equal(new, expected)
        if new[0] == tokens.prefix:  # PSM and SPM both open with the prefix sentinel
            rewritten += 1
            real = int(raw["loss_weights"][r, start : start + n].sum())
            assert (new[real:] == tokens.pad).all()
            if old[-1] == tokens.eod:  # the document still ends with its EOD, padding after
                assert new[real - 1] == tokens.eod
        else:
            np.testing.assert_array_equal(new, old)
            assert raw["loss_weights"][r, start : start + n].all()
    assert rewritten > 20
    # the arrays: positions and segments of the plain packed rows; padding never a target
    a, b = plain.assemble_batch(before), src.assemble_batch(raw)
    for key in ("positions", "segment_ids", "dataset_ids", "sample_ids"):
        np.testing.assert_array_equal(b[key], a[key])
    pad_target = b["targets"] == tokens.pad
    assert pad_target.any() or not (raw["loss_weights"] == 0).any()
    assert (b["loss_mask"][pad_target] == 0).all()
    untouched = b["inputs"] == a["inputs"]
    np.testing.assert_array_equal(b["loss_mask"][untouched & ~pad_target],
                                  a["loss_mask"][untouched & ~pad_target])


def test_realized_fim_and_spm_rates_per_document(data):
    src = _open(data, FIMOptions(rate=0.5, spm_rate=0.25))
    raw = src.read_batch(np.arange(len(src)))
    tokens = src.transform.tokens
    firsts = [raw["text"][r, s : s + 2] for r, s, n, _ in _documents(raw) if n > 1]
    fim = [f for f in firsts if f[0] == tokens.prefix]
    spm = sum(int(f[1] == tokens.suffix) for f in fim)
    n, k = len(firsts), len(fim)
    assert abs(k - 0.5 * n) <= 4 * math.sqrt(n * 0.25), (k, n)
    assert abs(spm - 0.25 * k) <= 4 * math.sqrt(k * 0.25 * 0.75), (spm, k)


def test_result_depends_only_on_the_sample(data):
    fim = FIMOptions(rate=0.8, spm_rate=0.5, split_sample="<file_sep>", fragment_rate=0.5)
    src = _open(data, fim)
    ids = np.arange(len(src))
    whole = src.get_batch(ids)
    shuffled = np.random.default_rng(1).permutation(ids)
    for chunk in np.array_split(shuffled, 5):  # other batches, another order
        part = src.get_batch(chunk)
        for key in ("inputs", "targets", "loss_mask", "segment_ids"):
            np.testing.assert_array_equal(part[key], whole[key][chunk])
    clone = pickle.loads(pickle.dumps(src))  # a Grain worker's copy loads its tokenizer again
    assert clone.transform._tokenizer is None
    np.testing.assert_array_equal(clone.get_batch(shuffled[:7])["inputs"], whole["inputs"][shuffled[:7]])
    again = _open(data, fim).get_batch(ids)  # a second opening
    np.testing.assert_array_equal(again["inputs"], whole["inputs"])
    assert _open(data, fim).fingerprint != _open(data).fingerprint


def test_validation_split_and_megatron_compat(data):
    src = _open(data, FIMOptions(rate=1.0, spm_rate=0.0), split="valid", megatron_compat=True,
                inter_document_masking=True)
    plain = _open(data, split="valid", megatron_compat=True, inter_document_masking=True)
    ids = np.arange(len(src))
    a, b = plain.get_batch(ids), src.get_batch(ids)
    for key in ("positions", "segment_ids", "cu_seqlens", "max_seqlen"):
        np.testing.assert_array_equal(b[key], a[key])
    assert (b["inputs"] == src.transform.tokens.prefix).sum() >= len(src)


def test_byte_data_takes_fim_with_its_sentinels_unless_recorded_before_them(tmp_path):
    import json

    from jaxblend.preprocess import pipeline
    from jaxblend.preprocess import tokenizer_spec as tok_spec
    from jaxblend.tokenizer_facts import record_path
    from tests.preprocess.conftest import make_documents, small_run_config, write_jsonl

    docs = write_jsonl(str(tmp_path / "docs.jsonl"), make_documents(60))
    out = pipeline.preprocess(small_run_config(
        str(tmp_path / "byte"), [docs], tokenizer=tok_spec.TokenizerSpec("byte"),
    ))
    data = {"root": tmp_path, "prefix": out.outputs["text"]}
    src = _open(data, FIMOptions(rate=1.0, spm_rate=0.0))
    assert src.transform.tokens.prefix == 263 and src.transform.tokens.eod == 256
    batch = src.get_batch(np.arange(len(src)))
    firsts = batch["inputs"][(batch["positions"] == 0) & (batch["segment_ids"] > 0)]
    assert firsts.size > 20 and (firsts == 263).all()  # rate 1: every document
    assert batch["inputs"].max() < 267
    # a record made when the byte tokenizer had 263 ids: a model sized from it cannot embed 263+
    path = Path(record_path(str(tmp_path / "byte")))
    record = json.loads(path.read_text())
    record["tokenizer_facts"]["vocab_size"] = 263
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=r"recorded with a vocabulary of 263 ids, .* sentinel id "
                                         r"266 .* preprocess it again"):
        _open(data, FIMOptions())


def test_conversations_stay_refused_with_fim(tmp_path):
    from jaxblend.preprocess import pipeline
    from jaxblend.preprocess import tokenizer_spec as tok_spec
    from tests.helpers_chat import CHATML, chat_tokenizer, make_conversations, write_chat
    from tests.preprocess.conftest import small_run_config

    spec = tok_spec.TokenizerSpec("hf", model=chat_tokenizer(tmp_path / "tok", CHATML))
    chat = pipeline.preprocess(small_run_config(
        str(tmp_path / "sft"), [write_chat(tmp_path / "chat.jsonl", make_conversations(30))],
        json_keys=("messages",), chat=True, tokenizer=spec,
    )).outputs["messages"]
    names = {n: "<|im_start|>" for n in ("prefix_token", "middle_token", "suffix_token")}
    fim = FIMOptions(**names, pad_token="<|im_end|>")  # sentinels this tokenizer has
    with pytest.raises(ValueError, match=r"^fill-in-the-middle \(--fim_data\) rewrites the tokens "
                                         r"that conversation datasets' stored loss masks"):
        _open({"root": tmp_path, "prefix": chat}, fim)
