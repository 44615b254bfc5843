"""Conversations (`preprocess --chat`): the model's chat template, tokens and loss masks.

The oracle is ``transformers``' ``apply_chat_template`` on the same tokenizer directory (a test
dependency only; jaxblend renders the template itself). Tokenizers are trained in the test;
nothing downloads.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from jaxblend import storage
from jaxblend.loss_masks import loss_mask_prefix
from jaxblend.preprocess import chat_template, conversations, pipeline
from jaxblend.preprocess import tokenizer_spec as tok_spec
from jaxblend.preprocess import tokenizers as tok_lib
from jaxblend.preprocess.records import PreprocessDataError
from jaxblend.tokenizer_facts import read_facts, record_path
from tests.helpers_chat import CHATML, HEADERS, chat_tokenizer, make_conversations, write_chat
from tests.helpers_cli import run_tool
from tests.preprocess.conftest import read_bytes, small_run_config


@pytest.fixture(scope="module")
def chatml_dir(tmp_path_factory) -> str:
    return chat_tokenizer(tmp_path_factory.mktemp("chatml"), CHATML)


@pytest.fixture(scope="module")
def headers_dir(tmp_path_factory) -> str:
    return chat_tokenizer(tmp_path_factory.mktemp("headers"), HEADERS, eos="<|eot_id|>",
                           bos="<|begin_of_text|>")


def _encoder(directory: str) -> conversations.ConversationEncoder:
    tok = tok_lib.load_tokenizer(tok_spec.TokenizerSpec("hf", model=directory))
    template = chat_template.load_chat_template(f"{directory}/tokenizer.json")
    return conversations.ConversationEncoder(template, tok)


def _oracle(directory: str):
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(directory)


def test_tokens_and_assistant_mask_equal_transformers(chatml_dir):
    encoder, oracle = _encoder(chatml_dir), _oracle(chatml_dir)
    convs = make_conversations(40)
    for conv in convs:
        ids, mask = encoder.encode(conv)
        want = oracle.apply_chat_template(
            conv, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        assert ids.tolist() == list(want["input_ids"])
        assert mask.tolist() == list(want["assistant_masks"])
        assert mask.any()


def test_mask_covers_exactly_the_assistant_turns(headers_dir):
    encoder, oracle = _encoder(headers_dir), _oracle(headers_dir)
    tok = encoder.tokenizer
    for conv in make_conversations(30, seed=1):
        ids, mask = encoder.encode(conv)
        want = oracle.apply_chat_template(conv, tokenize=True, return_dict=True)
        assert ids.tolist() == list(want["input_ids"])
        assert ids[0] == tok.bos  # the template's bos_token came from tokenizer_config.json
        # The trained runs, decoded, are the assistant turns (trimmed by the template) each with
        # its end-of-turn token; nothing else is trained.
        edges = np.flatnonzero(np.diff(np.concatenate([[0], mask, [0]])))
        runs = [ids[a:b] for a, b in zip(edges[::2], edges[1::2])]
        assistant = [m["content"].strip() for m in conv if m["role"] == "assistant"]
        assert len(runs) == len(assistant)
        eot = tok._tok.token_to_id("<|eot_id|>")
        for run, content in zip(runs, assistant):
            assert run[-1] == eot
            assert tok.detokenize(run[:-1]) == content
        assert (mask[ids == tok._tok.token_to_id("<|start_header_id|>")] == 0).all()


def test_template_errors_and_bad_messages_are_conversation_errors(headers_dir):
    encoder = _encoder(headers_dir)
    with pytest.raises(conversations.ConversationError, match="roles must alternate"):
        encoder.encode([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    cases = [
        ("hello", "field 'messages' is str"),
        ([], "empty conversation"),
        (["x"], "message 0 is str"),
        ([{"role": "robot", "content": "x"}], "message 0 has role 'robot'; roles are"),
        ([{"role": "user", "content": ["x"]}], "message 0 \\(user\\) has content of type list"),
    ]
    for value, message in cases:
        with pytest.raises(conversations.ConversationError, match=message):
            conversations.validate_messages(value, "messages")


def test_template_from_chat_template_jinja_and_named_list(tmp_path, chatml_dir):
    import shutil

    d = tmp_path / "tok"
    shutil.copytree(chatml_dir, d)
    (d / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": [{"name": "tool_use", "template": "x"},
                           {"name": "default", "template": CHATML}]}))
    assert chat_template.load_chat_template(str(d / "tokenizer.json")).source == CHATML
    (d / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    template = chat_template.load_chat_template(str(d / "tokenizer.json"))
    assert template.path.endswith("chat_template.jinja")
    assert template.render([{"role": "user", "content": "hi"}], False) == "hi"
    (d / "chat_template.jinja").unlink()
    (d / "tokenizer_config.json").write_text("{}")
    with pytest.raises(tok_spec.TokenizerError, match="has no chat template"):
        chat_template.load_chat_template(str(d / "tokenizer.json"))


@pytest.mark.parity
def test_preprocess_writes_megatron_tokens_and_loss_masks(tmp_path, chatml_dir):
    from megatron.core.datasets import indexed_dataset as mid

    convs = make_conversations(50, seed=2)
    data = write_chat(tmp_path / "chat.jsonl", convs)
    result = pipeline.preprocess(small_run_config(
        str(tmp_path / "out" / "sft"), [data], json_keys=("messages",), chat=True,
        tokenizer=tok_spec.TokenizerSpec("hf", model=chatml_dir),
    ))
    name = str(tmp_path / "out" / "sft_messages_document")
    assert result.outputs == {"messages": name}
    assert result.loss_masks == {"messages": loss_mask_prefix(name)}
    assert loss_mask_prefix(name) == str(tmp_path / "out" / ".jaxblend" /
                                         "sft_messages_document_loss_mask")

    # The oracle: transformers' ids and assistant masks, EOD appended (mask 0), written with
    # megatron-core's own builder: the token dataset is byte for byte Megatron's.
    oracle = _oracle(chatml_dir)
    tok = tok_lib.load_tokenizer(tok_spec.TokenizerSpec("hf", model=chatml_dir))
    ref = str(tmp_path / "ref")
    builder = mid.IndexedDatasetBuilder(ref + ".bin", dtype=mid.DType.optimal_dtype(tok.vocab_size))
    masks = []
    for conv in convs:
        want = oracle.apply_chat_template(
            conv, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        ids = [*want["input_ids"], tok.eod]
        masks.append([*want["assistant_masks"], 0])
        builder.add_document(ids, [len(ids)])
    builder.finalize(ref + ".idx")
    assert read_bytes(name) == read_bytes(ref)

    tokens = storage.IndexedDataset(name)
    mask_ds = storage.IndexedDataset(loss_mask_prefix(name))
    assert mask_ds.dtype == np.uint8
    np.testing.assert_array_equal(mask_ds.sequence_lengths, tokens.sequence_lengths)
    np.testing.assert_array_equal(mask_ds.document_indices, tokens.document_indices)
    for i, want in enumerate(masks):
        assert mask_ds[i].tolist() == want
    assert result.keys["messages"]["trained_tokens"] == sum(map(sum, masks))
    assert "loss mask:" in result.summary()

    with open(record_path(str(tmp_path / "out" / "sft")), encoding="utf-8") as f:
        record = json.load(f)
    assert record["settings"]["chat"]["template_sha256"] == chat_template.load_chat_template(
        f"{chatml_dir}/tokenizer.json").sha256
    assert record["result"]["loss_masks"] == {"messages": loss_mask_prefix(name)}
    facts = read_facts(name)
    assert facts is not None and facts.eod_id == tok.eod and facts.vocab_size == tok.vocab_size


def test_bad_lines_are_dropped_with_their_file_and_line(tmp_path, chatml_dir):
    convs = make_conversations(6)
    data = write_chat(tmp_path / "chat.jsonl", convs, [
        json.dumps({"text": "no messages here"}),
        json.dumps({"messages": [{"role": "user", "content": "hi"},
                                 {"role": "robot", "content": "beep"}]}),
    ])
    spec = tok_spec.TokenizerSpec("hf", model=chatml_dir)
    result = pipeline.preprocess(small_run_config(
        str(tmp_path / "skip" / "sft"), [data], json_keys=("messages",), chat=True, tokenizer=spec
    ))
    assert result.keys["messages"]["documents"] == 6
    assert result.dropped["missing_key"]["examples"] == [f"{data}:7 (key 'messages')"]
    assert result.dropped["bad_conversation"]["examples"] == [f"{data}:8 (key 'messages')"]
    with pytest.raises(PreprocessDataError) as err:
        pipeline.preprocess(small_run_config(
            str(tmp_path / "fail" / "sft"), [data], json_keys=("messages",), chat=True,
            tokenizer=spec, on_error="fail", partitions=1,
        ))
    assert str(err.value) == f"{data}:7 (key 'messages'): missing_key: no field 'messages'"
    bad_role = write_chat(tmp_path / "role.jsonl", convs[:2], [
        json.dumps({"messages": [{"role": "robot", "content": "beep"}]})])
    with pytest.raises(PreprocessDataError) as err:
        pipeline.preprocess(small_run_config(
            str(tmp_path / "fail2" / "sft"), [bad_role], json_keys=("messages",), chat=True,
            tokenizer=spec, on_error="fail", partitions=1,
        ))
    assert str(err.value) == (
        f"{bad_role}:3 (key 'messages'): bad_conversation: message 0 has role 'robot'; roles "
        "are system, developer, user, assistant, tool"
    )


def test_chat_settings_refused_in_one_line(tmp_path, tokenizer_files):
    with pytest.raises(ValueError, match="--chat needs --tokenizer_type=HuggingFaceTokenizer"):
        small_run_config(str(tmp_path / "o"), ["x.jsonl"], chat=True)
    spec = tok_spec.TokenizerSpec(**tokenizer_files["hf_bpe"])  # no chat template beside it
    with pytest.raises(ValueError, match="--chat does not take split_sentences"):
        small_run_config(str(tmp_path / "o"), ["x.jsonl"], chat=True, tokenizer=spec,
                         split_sentences=True)
    data = write_chat(tmp_path / "chat.jsonl", make_conversations(2))
    with pytest.raises(tok_spec.TokenizerError, match="has no chat template"):
        pipeline.preprocess(small_run_config(str(tmp_path / "o"), [data], chat=True,
                                             json_keys=("messages",), tokenizer=spec))


def test_cli_chat_defaults_to_the_messages_key(tmp_path, chatml_dir):
    data = write_chat(tmp_path / "chat.jsonl", make_conversations(5))
    ran = run_tool("jaxblend.tools.preprocess", [
        f"--input={data}", f"--output_prefix={tmp_path / 'sft'}", "--tokenizer_type=hf",
        f"--tokenizer_model={chatml_dir}", "--chat", "--append_eod", "--workers=1",
        "--noprogress",
    ])
    assert ran.returncode == 0, ran.stderr
    assert "loss mask:" in ran.stdout
    name = str(tmp_path / "sft_messages_document")
    assert len(storage.IndexedDataset(name)) == 5
    assert len(storage.IndexedDataset(loss_mask_prefix(name))) == 5


def test_bucket_output_publishes_the_masks_before_the_record(object_store, tmp_path, chatml_dir):
    from jaxblend.access import DataAccess

    data = write_chat(tmp_path / "chat.jsonl", make_conversations(8))
    url = object_store.prefix_url(f"chat-out/{object_store.scheme}/sft")
    spec = tok_spec.TokenizerSpec("hf", model=chatml_dir)
    result = pipeline.preprocess(small_run_config(
        url, [data], json_keys=("messages",), chat=True, tokenizer=spec,
        work_dir=str(tmp_path / "work"),
    ))
    name = f"{url}_messages_document"
    assert result.loss_masks == {"messages": loss_mask_prefix(name)}
    local = pipeline.preprocess(small_run_config(
        str(tmp_path / "local" / "sft"), [data], json_keys=("messages",), chat=True,
        tokenizer=spec,
    ))
    access = DataAccess.from_env()
    for remote_prefix, local_prefix in ((name, local.outputs["messages"]),
                                        (loss_mask_prefix(name),
                                         local.loss_masks["messages"])):
        remote = storage.IndexedDataset(remote_prefix, access=access)
        here = storage.IndexedDataset(local_prefix)
        assert len(remote) == len(here) == 8
        for i in range(8):
            np.testing.assert_array_equal(remote[i], here[i])
    assert read_facts(name, access) is not None  # the record, published last


def test_rerun_resumes_and_a_missing_mask_part_is_redone(tmp_path, chatml_dir):
    import dataclasses
    import os

    from jaxblend.preprocess import layout

    data = write_chat(tmp_path / "chat.jsonl", make_conversations(30))
    spec = tok_spec.TokenizerSpec("hf", model=chatml_dir)
    config = small_run_config(str(tmp_path / "out" / "sft"), [data], json_keys=("messages",),
                              chat=True, tokenizer=spec, keep_parts=True)
    first = pipeline.preprocess(config)
    mask_part = layout.part_prefix(layout.parts_dir(config.output_prefix), 1,
                                   "messages_loss_mask", "document")
    os.remove(mask_part + ".bin")  # a partition whose mask part is gone is not finished
    second = pipeline.preprocess(dataclasses.replace(config, keep_parts=False))
    assert second.partitions_reused == first.partitions - 1
    again = pipeline.preprocess(dataclasses.replace(config, keep_parts=False))
    assert again.partitions_reused == again.partitions and again.loss_masks == second.loss_masks
    fresh = pipeline.preprocess(small_run_config(
        str(tmp_path / "fresh" / "sft"), [data], json_keys=("messages",), chat=True,
        tokenizer=spec))
    assert read_bytes(second.loss_masks["messages"]) == read_bytes(fresh.loss_masks["messages"])
    assert read_bytes(second.outputs["messages"]) == read_bytes(fresh.outputs["messages"])
