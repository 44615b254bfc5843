"""`--decode` on conversations (`inspect explain`, `dump_samples`, `dump_batches`): the tokens the
loss mask does not train (system and user turns, the prompt opening each assistant turn) show
inside ⟦ ⟧, the assistant turns outside them; concat and packed rows."""

from __future__ import annotations

import json

import numpy as np
import pytest

from jaxblend.decode import NOT_TRAINED, DocumentDecoder, input_weights
from jaxblend.loss_masks import loss_mask_prefix
from jaxblend.preprocess import pipeline
from jaxblend.preprocess import tokenizer_spec as tok_spec
from jaxblend.preprocess import tokenizers as tok_lib
from jaxblend.storage import IndexedDataset
from tests.helpers_chat import CHATML, chat_tokenizer, make_conversations, write_chat
from tests.helpers_cli import run_tool
from tests.preprocess.conftest import small_run_config

DATA = ["--split=100,0,0", "--seq_length=128", "--train_samples=16", "--global_batch_size=4"]


@pytest.fixture(scope="module")
def chat(tmp_path_factory):
    root = tmp_path_factory.mktemp("decode_chat")
    tok_dir = chat_tokenizer(root / "tok", CHATML)
    convs = [[{"role": "user", "content": "Question one?"},
              {"role": "assistant", "content": "Answer one."}]] + make_conversations(30, seed=4)
    prefix = pipeline.preprocess(small_run_config(
        str(root / "sft"), [write_chat(root / "chat.jsonl", convs)], json_keys=("messages",),
        chat=True, tokenizer=tok_spec.TokenizerSpec("hf", model=tok_dir),
    )).outputs["messages"]
    return {"prefix": prefix, "tok": tok_dir, "root": root}


def test_decoder_marks_untrained_runs():
    class Chars:
        eod = None

        def detokenize(self, ids):
            return "".join(chr(int(i)) for i in ids)

    decoder = DocumentDecoder(Chars())
    ids = np.array([ord(c) for c in "usr:hi bot:yo"])
    mask = np.array([0] * 11 + [1, 1])
    assert decoder.detokenize(ids, mask) == f"{NOT_TRAINED[0]}usr:hi bot:{NOT_TRAINED[1]}yo"
    assert decoder.detokenize(ids) == "usr:hi bot:yo"


@pytest.mark.parametrize("packing", ["concat", "best_fit"])
def test_explain_decode_marks_what_is_not_trained(chat, tmp_path, packing):
    extra = ["--packing_overflow=truncate"] if packing == "best_fit" else []
    out = run_tool("jaxblend.tools.inspect", [
        "explain", f"--data_path={chat['prefix']}", *DATA, f"--packing={packing}", *extra,
        f"--data_cache_path={tmp_path / 'maps'}", "--decode", "--decode_chars=0",
        f"--json={tmp_path / 'explain.json'}",
    ])
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads((tmp_path / "explain.json").read_text())["rows"]
    decoder = DocumentDecoder(
        tok_lib.load_tokenizer(tok_spec.TokenizerSpec("hf", model=chat["tok"])))
    tokens, masks = IndexedDataset(chat["prefix"]), IndexedDataset(
        loss_mask_prefix(chat["prefix"]))

    def read(ds, p):
        return ds.get(p["sequence"], offset=p["start"], length=p["stop"] - p["start"])

    texts = []
    for row in rows:  # each text, rebuilt from the datasets: the same marks
        if packing == "best_fit":
            want = [decoder.detokenize(read(tokens, p), read(masks, p)) for p in row["pieces"]]
            assert row["texts"] == want
            texts += want
        else:
            ids = np.concatenate([read(tokens, p) for p in row["pieces"]])
            weights = np.concatenate([read(masks, p) for p in row["pieces"]])
            assert row["text"] == decoder.detokenize(ids, weights)
            texts.append(row["text"])
    for text in texts:
        assert NOT_TRAINED[0] in text and NOT_TRAINED[1] in text
        # outside the brackets only assistant turns: no role header is trained
        trained = "".join(part.split(NOT_TRAINED[1])[-1] for part in text.split(NOT_TRAINED[0]))
        assert "user\n" not in trained and "assistant\n" not in trained
        if packing == "best_fit":  # whole conversations, each from its untrained first turn
            assert text.startswith(NOT_TRAINED[0])
    shown = [line for line in out.stdout.splitlines() if NOT_TRAINED[0] in line]
    assert len(shown) == len(texts)


def _check_marked(text: str, plain: str) -> None:
    """``text`` marks untrained text inside ⟦ ⟧ and trains no role header; without its marks it
    is the text decoded whole (``plain``)."""
    assert NOT_TRAINED[0] in text and NOT_TRAINED[1] in text
    trained = "".join(part.split(NOT_TRAINED[1])[-1] for part in text.split(NOT_TRAINED[0]))
    assert "user\n" not in trained and "assistant\n" not in trained
    assert text.replace(NOT_TRAINED[0], "").replace(NOT_TRAINED[1], "") == plain


@pytest.mark.parametrize("packing", ["concat", "best_fit"])
def test_dump_samples_decode_marks_what_is_not_trained(chat, tmp_path, packing):
    extra = ["--packing_overflow=truncate"] if packing == "best_fit" else []
    out = run_tool("jaxblend.tools.dump_samples", [
        f"--data_path={chat['prefix']}", *DATA, f"--packing={packing}", *extra, "--num=4",
        f"--data_cache_path={tmp_path / 'maps'}", f"--out={tmp_path / 'out'}", "--decode",
    ])
    assert out.returncode == 0, out.stderr[-3000:]
    texts = json.loads((tmp_path / "out" / "train.decoded.json").read_text(encoding="utf-8"))
    with np.load(tmp_path / "out" / "train.npz") as f:
        windows = f["samples_text"]
    decoder = DocumentDecoder(
        tok_lib.load_tokenizer(tok_spec.TokenizerSpec("hf", model=chat["tok"])))
    assert len(texts) == len(windows) == 4
    for text, window in zip(texts, windows, strict=True):
        _check_marked(text, decoder.detokenize(window[window >= 0]))


def test_dump_batches_decode_marks_what_is_not_trained(chat, tmp_path):
    out = run_tool("jaxblend.tools.dump_batches", [
        f"--data_path={chat['prefix']}", *DATA, "--packing=best_fit",
        "--packing_overflow=truncate", "--steps=1", "--mesh_shape=1,8", "--mesh_axes=data,tensor",
        f"--data_cache_path={tmp_path / 'maps'}", f"--out={tmp_path / 'out'}", "--decode",
    ])
    assert out.returncode == 0, out.stderr[-3000:]
    texts = json.loads((tmp_path / "out" / "batches.decoded.json").read_text(encoding="utf-8"))
    with np.load(tmp_path / "out" / "batches.npz") as f:
        inputs, loss_mask = f["inputs"][0], f["loss_mask"][0]
    decoder = DocumentDecoder(
        tok_lib.load_tokenizer(tok_spec.TokenizerSpec("hf", model=chat["tok"])))
    assert len(texts["0"]) == len(inputs) == 4
    for text, row, mask in zip(texts["0"], inputs, loss_mask, strict=True):
        _check_marked(text, decoder.detokenize(row))
        assert text == decoder.detokenize(row, input_weights(mask))


def test_input_weights_are_the_loss_of_each_input_token_as_a_target():
    mask = np.array([[1, 1, 0, 0, 1], [0, 0, 0, 0, 0]], np.float32)
    assert input_weights(mask).tolist() == [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0]]


def test_preflight_counts_the_conversations_longer_than_a_row(chat, tmp_path):
    from jaxblend.storage import IndexedDataset as Dataset

    lengths = Dataset(chat["prefix"]).sequence_lengths
    out = run_tool("jaxblend.tools.inspect", [
        "preflight", f"--data_path={chat['prefix']}", *DATA, "--packing=best_fit",
        "--packing_overflow=truncate", f"--data_cache_path={tmp_path / 'maps'}",
    ])
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "longer documents truncated" in out.stdout
    row = next(line for line in out.stdout.splitlines() if "sft_messages_document" in line
               and line.startswith("train") and "%" in line)
    assert row.split()[2:4] == [f"{len(lengths):,}", f"{int((lengths > 129).sum()):,}"]
