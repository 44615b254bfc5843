"""The first error is the real one: every tool names a dataset that does not exist (with the likely
prefix) before it asks for a fact the datasets' preprocessing records would give (`--vocab_size`,
`--eod_id`, the tokenizer of `--decode`), and data without its record (Megatron-made, a renamed
copy) says where the record was sought and which flags give the facts."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from helpers_cli import run_tool
from helpers_data import write_random_dataset

from jaxblend.tokenizer_facts import TokenizerFacts, record_path

COMMON = ["--split=100,0,0", "--seq_length=16", "--global_batch_size=4", "--train_iters=2"]
MODEL = ["--hidden_size=16", "--ffn_hidden_size=32", "--num_layers=1", "--num_attention_heads=2",
         "--eval_interval=0", "--save_interval=0"]
BYTE = TokenizerFacts("ByteTokenizer", 267, 256, 257)
TOOLS = ["train", "build_index", "dump_samples", "dump_batches", "preflight", "stats", "explain",
         "mixture", "verify"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """`<tok>/corpus_text_document` with the record preprocessing writes (output prefix
    `<tok>/corpus`), and two copies without it: `<copy>/corpus_text_document` (moved) and
    `<copy>/mine` (renamed)."""
    root = tmp_path_factory.mktemp("first_error")
    tok, copy = root / "tok", root / "copy"
    tok.mkdir()
    copy.mkdir()
    prefix = write_random_dataset(
        str(tok / "corpus_text_document"), np.random.default_rng(3), 60, lengths=(2, 40),
        vocab=(0, 256), eod=256,
    )
    record = {"status": "complete", "outputs": {"text": prefix},
              "tokenizer_facts": BYTE.to_json(), "max_token_id": {"text": 256}}
    os.makedirs(os.path.dirname(record_path(str(tok / "corpus"))))
    with open(record_path(str(tok / "corpus")), "w") as f:
        json.dump(record, f)
    for name in ("corpus_text_document", "mine"):
        for suffix in (".bin", ".idx"):
            shutil.copy(prefix + suffix, str(copy / name) + suffix)
    return {"prefix": prefix, "tok": str(tok), "copy": str(copy), "root": root}


def _tools(root) -> dict[str, tuple[str, list[str]]]:
    """Each tool (and inspect command) as a user runs it, with the flags it needs besides the
    data; those with `--decode` ask for the tokenizer."""
    out = str(root / "out")
    return {
        "train": ("jaxblend.train", [*MODEL, f"--workdir={root / 'run'}"]),
        "build_index": ("jaxblend.tools.build_index", [f"--data_cache_path={root / 'cache'}"]),
        "dump_samples": ("jaxblend.tools.dump_samples", [f"--out={out}", "--decode"]),
        "dump_batches": ("jaxblend.tools.dump_batches", [f"--out={out}", "--decode"]),
        "preflight": ("jaxblend.tools.inspect", ["preflight"]),
        "stats": ("jaxblend.tools.inspect", ["stats"]),
        "explain": ("jaxblend.tools.inspect", ["explain", "--step=0", "--decode"]),
        "mixture": ("jaxblend.tools.inspect", ["mixture"]),
        "verify": ("jaxblend.tools.inspect", ["verify"]),
    }


def _first_failure(out) -> str:
    """The one line a failed run gives: `error: ...` on stderr (`PROBLEM: ...` on stdout for
    preflight, which lists its problems)."""
    assert out.returncode != 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    errors = [s for s in out.stderr.splitlines() if s.startswith("error: ")]
    problems = [s[len("PROBLEM: "):] for s in out.stdout.splitlines() if s.startswith("PROBLEM: ")]
    assert len(errors) + len(problems) == 1, out.stdout[-2000:] + out.stderr[-2000:]
    return errors[0][len("error: "):] if errors else problems[0]


def _wrong_paths(data) -> dict[str, tuple[str, str]]:
    """A wrong --data_path -> the line every tool must give first."""
    good, tok = data["prefix"], data["tok"]
    return {
        "with its .bin suffix": (
            f"{good}.bin",
            f"{good}.bin.idx: index file does not exist; a prefix has no .bin suffix: give {good}",
        ),
        "the output prefix given to preprocess": (
            f"{tok}/corpus",
            (f"{tok}/corpus.idx: index file does not exist; preprocessing appends "
             f"_{{key}}_{{level}} to its output prefix: did you mean {good}?"),
        ),
        "a typo": (
            f"{tok}/corpsu_text_document",
            f"{tok}/corpsu_text_document.idx: index file does not exist; did you mean {good}?",
        ),
        "a directory that does not exist": (
            f"{data['root']}/tk/corpus_text_document",
            (f"{data['root']}/tk/corpus_text_document.idx: index file does not exist; the "
             f"directory {data['root']}/tk does not exist"),
        ),
    }


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize(
    "case", ["with its .bin suffix", "the output prefix given to preprocess", "a typo",
             "a directory that does not exist"],
)
def test_every_tool_names_a_missing_dataset_first(data, tool, case):
    module, extra = _tools(data["root"])[tool]
    given, line = _wrong_paths(data)[case]
    out = run_tool(module, [*extra[:1], f"--data_path={given}", *COMMON, *extra[1:]])
    assert _first_failure(out) == line
    assert out.returncode == 1


def test_a_missing_bucket_object_is_named_before_the_vocabulary_is_asked_for(data):
    url = "memory://first_error_bucket/corpus_text_document"
    module, extra = _tools(data["root"])["train"]
    out = run_tool(module, [f"--data_path={url}", *COMMON, *extra])
    assert _first_failure(out) == (
        f"{url}.idx: index file does not exist (check the path, the bucket name and the "
        "credentials)"
    )
    out = run_tool(module, [f"--data_path={url}.bin", *COMMON, *extra])
    assert _first_failure(out).endswith(f"; a prefix has no .bin suffix: give {url}")


def test_a_missing_dataset_is_named_before_the_eod_id_is_asked_for(data):
    module, extra = _tools(data["root"])["train"]
    given, line = _wrong_paths(data)["a typo"]
    out = run_tool(module, [f"--data_path={given}", *COMMON, *extra, "--vocab_size=300",
                            "--reset_position_ids"])
    assert _first_failure(out) == line


def test_a_copy_without_its_record_says_where_the_record_was_sought(data):
    module, extra = _tools(data["root"])["train"]
    copy = data["copy"]
    moved, renamed = f"{copy}/corpus_text_document", f"{copy}/mine"
    sought = (f"looked for {copy}/.jaxblend/corpus.preprocess.json or "
              f"{copy}/corpus.preprocess.json")
    no_tail = ("its name does not end in _<key>_document or _<key>_sentence, as "
               "jaxblend.tools.preprocess names its outputs, so no record was looked for")
    out = run_tool(module, [f"--data_path={moved}", *COMMON, *extra])
    assert _first_failure(out) == (
        "--vocab_size is required with --data_path when the datasets have no preprocessing record "
        f"(made by Megatron-LM, or a renamed copy): {moved} has none ({sought}); pass "
        "--vocab_size (and --eod_id), or --tokenizer_type (and its files)"
    )
    assert out.returncode == 2
    out = run_tool(module, [f"--data_path=1 {renamed} 1 {moved}", *COMMON, *extra])
    assert _first_failure(out) == (
        "--vocab_size is required with --data_path when the datasets have no preprocessing record "
        f"(made by Megatron-LM, or a renamed copy): {renamed} has none ({no_tail}), nor has 1 "
        "other dataset; pass --vocab_size (and --eod_id), or --tokenizer_type (and its files)"
    )
    out = run_tool(module, [f"--data_path={moved}", *COMMON, *extra, "--vocab_size=300",
                            "--eod_mask_loss", "--reset_attention_mask"])
    assert _first_failure(out) == (
        "--eod_id is required with --eod_mask_loss and --reset_attention_mask when the datasets "
        f"have no preprocessing record: {moved} has none ({sought}); pass --eod_id, or "
        "--tokenizer_type (and its files)"
    )
    assert out.returncode == 2
    module, extra = _tools(data["root"])["explain"]
    out = run_tool(module, [*extra, f"--data_path={renamed}", *COMMON])
    assert _first_failure(out) == (
        f"--decode: {renamed} has no preprocessing record naming its tokenizer ({no_tail}); pass "
        "--tokenizer_type and --tokenizer_model (or --vocab_file, --merge_file) to decode it"
    )


def test_the_original_with_its_record_needs_no_tokenizer_flags(data):
    out = run_tool("jaxblend.tools.inspect", ["preflight", f"--data_path={data['prefix']}",
                                              *COMMON, "--reset_position_ids"])
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "tokenizer ByteTokenizer (vocab 267): eod 256, pad 257" in out.stdout


def test_the_exit_code_of_a_wrong_prefix_in_a_process_of_its_own(data):
    module, extra = _tools(data["root"])["train"]
    given, line = _wrong_paths(data)["with its .bin suffix"]
    out = run_tool(module, [f"--data_path={given}", *COMMON, *extra], own_process=True)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == f"error: {line}"
