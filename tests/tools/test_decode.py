"""`--decode`: dump_samples, dump_batches and inspect explain show samples as text, decoded with
the tokenizer recorded with the data (its files checked by SHA-256), or of `--tokenizer_type` for
data without a record; neither is one line saying how to supply it."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from helpers_cli import run_tool

from jaxblend.decode import EOD_MARK, DocumentDecoder
from jaxblend.preprocess import pipeline
from jaxblend.preprocess import tokenizer_spec as tok_spec
from jaxblend.preprocess import tokenizers as toks
from jaxblend.storage import IndexedDataset
from tests.preprocess.conftest import make_documents, small_run_config, write_jsonl

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = ["--split=100,0,0", "--seq_length=24", "--train_samples=32", "--global_batch_size=8"]
ENDPOINT_ENVS = ("JAXBLEND_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
HOW = "pass --tokenizer_type and --tokenizer_model (or --vocab_file, --merge_file)"


def _tokenizer_json(path: str, docs: list[str]) -> str:
    """A tiny byte-level BPE `tokenizer.json` trained on ``docs`` (decodes back to the text)."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    bpe = tokenizers.Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(docs, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    ))
    bpe.save(path)
    return path


def _make(root, name: str, docs: list[str]) -> tuple[str, str]:
    """A dataset ``<root>/<name>_text_document`` preprocessed with its own tokenizer file; returns
    (prefix, tokenizer file)."""
    os.makedirs(root / name)
    model = _tokenizer_json(str(root / name / "tokenizer.json"), docs)
    src = write_jsonl(str(root / f"{name}.jsonl"), docs)
    spec = tok_spec.TokenizerSpec(type="hf", model=model)
    pipeline.preprocess(small_run_config(str(root / name), [src], tokenizer=spec))
    return str(root / f"{name}_text_document"), model


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("decode")
    # ASCII: a window's edge never cuts a character in two
    docs = [d.encode("ascii", "ignore").decode() for d in make_documents(60, seed=5)]
    prefix, model = _make(root, "web", docs)
    megatron = str(root / "megatron_text_document")  # the same tokens, no record
    for ext in ("bin", "idx"):
        shutil.copy(f"{prefix}.{ext}", f"{megatron}.{ext}")
    return {"prefix": prefix, "model": model, "corpus": "".join(docs), "megatron": megatron,
            "root": root, "docs": docs}


def run(module, *args):
    return run_tool(module, [*args], cwd=ROOT)


def _error(out) -> str:
    lines = [s for s in out.stderr.splitlines() if s.startswith("error: ")]
    assert out.returncode != 0 and len(lines) == 1, out.stderr[-3000:]
    return lines[0]


def _decoder(model: str):
    return toks.load_tokenizer(tok_spec.TokenizerSpec(type="hf", model=model))


def _check(text: str, tokens: np.ndarray, decoder, corpus: str) -> None:
    """``text`` is the decoded ``tokens`` of a sample: between EODs, each part is a piece of the
    corpus (the documents of a sample follow the shuffled order), and each EOD shows as
    `EOD_MARK`."""
    assert len(text) > 20
    cuts = np.flatnonzero(tokens == decoder.eod)
    parts = [decoder.detokenize(p) for p in np.split(tokens, cuts)]
    assert all(p.replace("<|endoftext|>", "") in corpus for p in parts), parts
    assert text == EOD_MARK.join(parts)
    assert text.count(EOD_MARK) == len(cuts)


def test_each_end_of_document_shows_as_a_mark():
    """A row of three documents reads as three texts, not one (the tokenizer drops its EOD)."""
    byte = toks.ByteTokenizer()
    row = np.concatenate([byte.tokenize("ab"), [byte.eod], byte.tokenize("cd"), [byte.eod],
                          byte.tokenize("e")])
    assert byte.detokenize(row) == "abcde"
    assert DocumentDecoder(byte).detokenize(row) == f"ab{EOD_MARK}cd{EOD_MARK}e"
    assert DocumentDecoder(byte).detokenize(row[2:]) == f"{EOD_MARK}cd{EOD_MARK}e"
    assert DocumentDecoder(byte).detokenize(np.asarray([byte.eod, byte.eod])) == EOD_MARK * 2


def test_dump_samples_writes_each_sample_as_text(data, tmp_path):
    out = run("jaxblend.tools.dump_samples", f"--data_path={data['prefix']}", *DATA, "--num=5",
              f"--out={tmp_path}", "--decode")
    assert out.returncode == 0, out.stderr[-3000:]
    texts = json.loads((tmp_path / "train.decoded.json").read_text(encoding="utf-8"))
    with np.load(tmp_path / "train.npz") as f:
        windows = f["samples_text"]
    assert len(texts) == len(windows) == 5
    decoder = _decoder(data["model"])
    for text, window in zip(texts, windows, strict=True):
        _check(text, window[window >= 0], decoder, data["corpus"])
    out = run("jaxblend.tools.dump_samples", f"--data_path={data['prefix']}", *DATA, "--num=5",
              f"--out={tmp_path / 'plain'}")
    assert out.returncode == 0 and not (tmp_path / "plain" / "train.decoded.json").exists()


def test_dump_batches_writes_each_row_as_text(data, tmp_path):
    out = run("jaxblend.tools.dump_batches", f"--data_path={data['prefix']}", *DATA,
              "--global_batch_size=4", "--steps=2", "--start_step=1", "--mesh_shape=1,8", "--mesh_axes=data,tensor",
              f"--out={tmp_path}", "--decode")
    assert out.returncode == 0, out.stderr[-3000:]
    texts = json.loads((tmp_path / "batches.decoded.json").read_text(encoding="utf-8"))
    with np.load(tmp_path / "batches.npz") as f:
        inputs = f["inputs"]
    assert sorted(texts) == ["1", "2"]
    decoder = _decoder(data["model"])
    for i, step in enumerate(("1", "2")):
        assert len(texts[step]) == 4
        for text, row in zip(texts[step], inputs[i], strict=True):
            _check(text, row, decoder, data["corpus"])


def test_inspect_explain_prints_each_rows_text_after_its_pieces(data, tmp_path):
    out = run("jaxblend.tools.inspect", "explain", f"--data_path={data['prefix']}", *DATA,
              "--global_batch_size=4", "--step=2", "--decode", "--decode_chars=30",
              f"--json={tmp_path / 'explain.json'}")
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads((tmp_path / "explain.json").read_text())["rows"]
    lines = out.stdout.splitlines()
    start = next(i for i, s in enumerate(lines) if s.startswith("global batch 2"))
    ds = IndexedDataset(data["prefix"])
    decoder = _decoder(data["model"])
    for r, row in enumerate(rows):
        tokens = np.concatenate([ds.get(p["sequence"], offset=p["start"],
                                        length=p["stop"] - p["start"]) for p in row["pieces"]])
        _check(row["text"], tokens, decoder, data["corpus"])
        assert len(row["text"]) > 30
        assert lines[start + 1 + 2 * r].split()[:2] == [str(r), str(row["sample_id"])]
        assert lines[start + 2 + 2 * r] == f"      text: {row['text'][:30]}…"
    out = run("jaxblend.tools.inspect", "explain", f"--data_path={data['prefix']}", *DATA,
              "--global_batch_size=4", "--step=2", "--decode_chars=0", "--decode")
    shown = [s for s in out.stdout.splitlines() if s.startswith("      text: ")]
    assert shown == [f"      text: {row['text']}" for row in rows]


def test_data_without_a_record_decodes_with_the_tokenizer_flags(data, tmp_path):
    args = [f"--data_path={data['megatron']}", *DATA, "--num=3", "--decode"]
    out = run("jaxblend.tools.dump_samples", *args, f"--out={tmp_path / 'a'}")
    directory, name = os.path.split(data["megatron"])
    stem = name[: -len("_text_document")]
    assert _error(out) == (
        f"error: --decode: {data['megatron']} has no preprocessing record naming its tokenizer "
        f"(looked for {directory}/.jaxblend/{stem}.preprocess.json or "
        f"{directory}/{stem}.preprocess.json); {HOW} to decode it"
    )
    out = run("jaxblend.tools.dump_samples", *args, f"--out={tmp_path / 'b'}",
              "--tokenizer-type=HuggingFaceTokenizer", f"--tokenizer-model={data['model']}")
    assert out.returncode == 0, out.stderr[-3000:]
    texts = json.loads((tmp_path / "b" / "train.decoded.json").read_text(encoding="utf-8"))
    with np.load(tmp_path / "b" / "train.npz") as f:
        windows = f["samples_text"]
    assert len(texts) == 3
    for text, window in zip(texts, windows, strict=True):
        _check(text, window[window >= 0], _decoder(data["model"]), data["corpus"])


def test_a_changed_or_missing_tokenizer_file_is_refused_unless_a_copy_is_given(
    data, tmp_path_factory
):
    root = tmp_path_factory.mktemp("changed")
    prefix, model = _make(root, "own", data["docs"])
    record = str(root / ".jaxblend" / "own.preprocess.json")
    copy = str(root / "copy.json")
    shutil.copy(model, copy)
    with open(model, "a") as f:
        f.write(" ")
    args = ["jaxblend.tools.inspect", "explain", f"--data_path={prefix}", *DATA, "--decode"]
    line = _error(run(*args))
    assert line.startswith(f"error: --decode: tokenizer file {model} has SHA-256 ")
    assert line.endswith(f"recorded in {record}; restore the original or {HOW} naming a copy")
    line = _error(run(*args, "--tokenizer_type=hf", f"--tokenizer_model={model}"))
    assert line.startswith(
        f"error: --decode: --tokenizer_type=HuggingFaceTokenizer with files {model} is not the "
        f"tokenizer recorded in {record} (HuggingFaceTokenizer, SHA-256 "
    )
    os.remove(model)
    assert _error(run(*args)) == (
        f"error: --decode: tokenizer file {model} recorded in {record} does not exist here; copy "
        f"it there or {HOW} naming a copy"
    )
    out = run(*args, "--tokenizer_type=hf", f"--tokenizer_model={copy}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("\n      text: ") == 8


def test_explain_decodes_bucket_data_with_its_record_in_the_bucket(data, s3_server, tmp_path):
    """The record is read from the bucket and the dataset opened with `--s3_endpoint` (the only
    place the endpoint is given)."""
    url = s3_server.upload(data["prefix"], "decode/web_text_document")
    with open(str(data["root"] / ".jaxblend" / "web.preprocess.json"), "rb") as f:
        s3_server.write("decode/.jaxblend/web.preprocess.json", f.read())
    env = {k: v for k, v in os.environ.items() if k not in ENDPOINT_ENVS}
    env.update({k: v for k, v in s3_server.environ().items() if k not in ENDPOINT_ENVS})
    args = ["inspect", "explain", f"--data_path={url}", *DATA, "--global_batch_size=4",
            f"--data_cache_path={tmp_path / 'maps'}", "--decode", "--decode_chars=0",
            f"--json={tmp_path / 'explain.json'}"]
    out = run_tool("jaxblend.tools.inspect", [*args[1:],
                          f"--s3_endpoint={s3_server.url}"], env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads((tmp_path / "explain.json").read_text())["rows"]
    shown = [s for s in out.stdout.splitlines() if s.startswith("      text: ")]
    assert len(rows) == 4 and shown == [f"      text: {row['text']}" for row in rows]
    local = run("jaxblend.tools.inspect", *args[1:-1], f"--json={tmp_path / 'local.json'}",
                f"--data_path={data['prefix']}")
    assert local.returncode == 0, local.stderr[-3000:]
    local_rows = json.loads((tmp_path / "local.json").read_text())["rows"]
    assert [r["text"] for r in rows] == [r["text"] for r in local_rows]


def test_mock_data_needs_the_tokenizer_flags(tmp_path):
    out = run("jaxblend.tools.dump_batches", "--mock_data", "--seq_length=16", "--steps=1",
              "--mesh_shape=1,8", "--mesh_axes=data,tensor", f"--out={tmp_path}", "--decode")
    assert _error(out) == f"error: --decode: mock data has no recorded tokenizer; {HOW} to decode it"
    assert not os.path.exists(tmp_path / "batches.npz")


def test_inspect_explain_decodes_a_packed_rows_documents_one_per_line(data, tmp_path):
    out = run("jaxblend.tools.inspect", "explain", f"--data_path={data['prefix']}", *DATA,
              "--packing=best_fit", "--seq_length=512", "--global_batch_size=4", "--step=0",
              "--decode",
              "--decode_chars=0", f"--json={tmp_path / 'explain.json'}")
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads((tmp_path / "explain.json").read_text())["rows"]
    ds = IndexedDataset(data["prefix"])
    decoder = DocumentDecoder(_decoder(data["model"]))
    shown = [s for s in out.stdout.splitlines() if s.startswith("      document ")]
    expected = []
    for row in rows:
        assert "text" not in row and len(row["texts"]) == len(row["pieces"])
        for j, (p, text) in enumerate(zip(row["pieces"], row["texts"], strict=True), start=1):
            tokens = ds.get(p["sequence"], offset=p["start"], length=p["stop"] - p["start"])
            assert text == decoder.detokenize(tokens)
            expected.append(f"      document {j}: {text}")
    assert shown == expected and len(shown) > len(rows)  # rows of several documents
