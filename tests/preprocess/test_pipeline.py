"""End-to-end preprocessing: formats, tokenizers, workers, sentences, parts, resume, bad input."""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pytest

from jaxblend import storage
from jaxblend.preprocess import layout, pipeline, records
from jaxblend.preprocess import manifest as manifest_lib
from jaxblend.preprocess import partitions as partitions_lib
from jaxblend.preprocess import tokenizer_spec as tok_spec
from jaxblend.preprocess import tokenizers as tok_lib
from tests.preprocess.conftest import (
    read_bytes,
    reference_dataset,
    small_run_config,
    write_jsonl,
)


def _config(tmp_path, inputs, **kw):
    return small_run_config(str(tmp_path / "out" / "corpus"), inputs, **kw)


def _write_format(tmp_path, fmt, docs):
    body = "".join(json.dumps({"text": d}) + "\n" for d in docs).encode()
    path = tmp_path / f"in.{fmt}"
    if fmt == "jsonl":
        path.write_bytes(body)
    elif fmt == "jsonl.gz":
        path.write_bytes(gzip.compress(body))
    elif fmt == "jsonl.zst":
        zstd = pytest.importorskip("zstandard")
        path.write_bytes(zstd.ZstdCompressor().compress(body))
    elif fmt == "txt":
        path.write_text("".join(d + "\n" for d in docs), encoding="utf-8")
    else:
        pa = pytest.importorskip("pyarrow")
        pq = pytest.importorskip("pyarrow.parquet")
        pq.write_table(pa.table({"text": docs}), path, row_group_size=40)
    return path


@pytest.mark.parametrize("fmt", ["jsonl", "jsonl.gz", "jsonl.zst", "txt", "parquet"])
def test_each_format_matches_reference(tmp_path, fmt, corpus_docs):
    docs = corpus_docs[:150]
    path = _write_format(tmp_path, fmt, docs)
    result = pipeline.preprocess(_config(tmp_path, [path]))
    ref = reference_dataset(str(tmp_path / "ref"), docs, tok_lib.ByteTokenizer())
    assert read_bytes(result.outputs["text"]) == read_bytes(ref)
    assert result.keys["text"]["documents"] == 150 and result.records == 150
    assert result.dtype == "uint16" and not result.dropped
    assert not os.path.exists(layout.parts_dir(str(tmp_path / "out" / "corpus")))


@pytest.mark.parametrize("kind", ["hf_bpe", "hf_wordpiece", "gpt2", "sentencepiece", "tiktoken"])
def test_each_tokenizer_matches_reference(tmp_path, kind, tokenizer_files, corpus_docs):
    spec = tok_spec.TokenizerSpec(**tokenizer_files[kind])
    docs = corpus_docs[:120]
    path = write_jsonl(str(tmp_path / "in.jsonl"), docs)
    result = pipeline.preprocess(_config(tmp_path, [path], tokenizer=spec, partitions=4))
    ref = reference_dataset(str(tmp_path / "ref"), docs, tok_lib.load_tokenizer(spec))
    assert read_bytes(result.outputs["text"]) == read_bytes(ref)
    ds = storage.IndexedDataset(result.outputs["text"])
    assert ds.num_documents == 120 and int(ds.get(0)[-1]) == tok_lib.load_tokenizer(spec).eod


def test_workers_one_and_two_identical(tmp_path, tokenizer_files, corpus_docs):
    spec = tok_spec.TokenizerSpec(**tokenizer_files["hf_bpe"])
    a = write_jsonl(str(tmp_path / "a.jsonl"), corpus_docs[:100])
    b = write_jsonl(str(tmp_path / "b.jsonl"), corpus_docs[100:])
    outs = []
    for workers in (1, 2):
        cfg = _config(
            tmp_path / f"w{workers}",
            [a, b],
            tokenizer=spec,
            workers=workers,
            partitions=5,
        )
        outs.append(pipeline.preprocess(cfg))
    assert read_bytes(outs[0].outputs["text"]) == read_bytes(outs[1].outputs["text"])
    ref = reference_dataset(str(tmp_path / "ref"), corpus_docs, tok_lib.load_tokenizer(spec))
    assert read_bytes(outs[1].outputs["text"]) == read_bytes(ref)


def test_split_sentences_multi_sequence_documents(tmp_path, corpus_docs):
    docs = corpus_docs[:80]
    path = write_jsonl(str(tmp_path / "in.jsonl"), docs)
    result = pipeline.preprocess(
        _config(tmp_path, [path], split_sentences=True, sentence_splitter="builtin")
    )
    assert result.outputs["text"].endswith("corpus_text_sentence")
    ref = reference_dataset(str(tmp_path / "ref"), docs, tok_lib.ByteTokenizer(), split=True)
    assert read_bytes(result.outputs["text"]) == read_bytes(ref)
    ds = storage.IndexedDataset(result.outputs["text"])
    seqs_per_doc = np.diff(ds.document_indices)
    assert (
        ds.num_documents == 80
        and seqs_per_doc.max() > 1
        and len(ds) == result.keys["text"]["sequences"]
    )
    first = ds[0 : int(seqs_per_doc[0])]
    assert tok_lib.ByteTokenizer().detokenize(first[0]).endswith((".", "!", "?"))
    assert int(first[-1][-1]) == 256 and all(256 not in s for s in first[:-1])


def test_keep_parts_then_merge_and_resume(tmp_path, corpus_docs):
    path = write_jsonl(str(tmp_path / "in.jsonl"), corpus_docs)
    cfg = _config(tmp_path, [path], partitions=4, keep_parts=True)
    kept = pipeline.preprocess(cfg)
    assert kept.outputs == {} and len(kept.parts["text"]) == 4
    sizes = [storage.IndexedDataset(p).num_documents for p in kept.parts["text"]]
    assert sum(sizes) == 300 and min(sizes) > 0
    # Simulate a killed partition: marker gone, part file truncated.
    parts = layout.parts_dir(cfg.output_prefix)
    os.remove(layout.done_marker_path(parts, 2))
    with open(kept.parts["text"][2] + ".bin", "r+b") as f:
        f.truncate(10)
    merged = pipeline.preprocess(dataclass_replace(cfg, keep_parts=False))
    assert merged.partitions_reused == 3
    ref = reference_dataset(str(tmp_path / "ref"), corpus_docs, tok_lib.ByteTokenizer())
    assert read_bytes(merged.outputs["text"]) == read_bytes(ref)
    assert not os.path.exists(parts)
    again = pipeline.preprocess(dataclass_replace(cfg, keep_parts=False))
    assert again.partitions_reused == 4 and again.keys == merged.keys


def dataclass_replace(cfg, **kw):
    import dataclasses

    return dataclasses.replace(cfg, **kw)


def test_changed_settings_refused_unless_overwrite(tmp_path, corpus_docs):
    path = write_jsonl(str(tmp_path / "in.jsonl"), corpus_docs[:20])
    cfg = _config(tmp_path, [path])
    pipeline.preprocess(cfg)
    with pytest.raises(
        manifest_lib.SettingsMismatchError, match=r"append_eod: True -> False.*--overwrite"
    ):
        pipeline.preprocess(dataclass_replace(cfg, append_eod=False))
    out = pipeline.preprocess(dataclass_replace(cfg, append_eod=False, overwrite=True))
    ref = reference_dataset(
        str(tmp_path / "ref"), corpus_docs[:20], tok_lib.ByteTokenizer(), append_eod=False
    )
    assert read_bytes(out.outputs["text"]) == read_bytes(ref)


def _bad_input(tmp_path):
    path = tmp_path / "bad.jsonl"
    lines = [
        b'{"text": "good one"}',
        b'{"text": "broken',  # 2 malformed
        b'{"title": "no text"}',  # 3 missing key
        b'{"text": "caf\xe9 latin-1"}',  # 4 invalid utf-8
        b'{"text": "   "}',  # 5 empty
        b'{"text": "' + b"x" * 50 + b'"}',  # 6 oversize
        b'{"text": 7}',  # 7 not a string
        b"[1, 2]",  # 8 not an object
        b'{"text": "lone \\ud800 surrogate"}',  # 9 not encodable
        b"",  # 10 blank line
        b'{"text": "good two"}',
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_bad_input_counted_with_locations(tmp_path):
    path = _bad_input(tmp_path)
    result = pipeline.preprocess(_config(tmp_path, [path], max_document_chars=40, partitions=2))
    d = {r: (v["count"], v["examples"]) for r, v in result.dropped.items()}
    k = " (key 'text')"
    assert d == {
        "malformed_json": (2, [f"{path}:2", f"{path}:8"]),
        "invalid_utf8": (2, [f"{path}:4", f"{path}:9{k}"]),
        "missing_key": (1, [f"{path}:3{k}"]),
        "not_string": (1, [f"{path}:7{k}"]),
        "blank_line": (1, [f"{path}:10"]),
        "oversize": (1, [f"{path}:6{k}"]),
    }
    # "   " (line 5) is kept, as Megatron keeps it: 3 documents
    assert result.keys["text"]["documents"] == 3 and result.records == 11
    assert "malformed_json: 2" in result.summary()
    ds = storage.IndexedDataset(result.outputs["text"])
    assert tok_lib.ByteTokenizer().detokenize(ds.get(1)) == "   "
    assert tok_lib.ByteTokenizer().detokenize(ds.get(2)) == "good two"


def test_on_error_fail_names_file_and_line(tmp_path):
    path = _bad_input(tmp_path)
    with pytest.raises(records.PreprocessDataError, match=rf"^{path}:2: malformed_json"):
        pipeline.preprocess(_config(tmp_path, [path], on_error="fail"))


def test_txt_file_mode_and_errors_before_work(tmp_path):
    (tmp_path / "a.txt").write_text("Doc one.\nStill doc one.\n")
    (tmp_path / "b.txt").write_text("Doc two.")
    result = pipeline.preprocess(_config(tmp_path, [tmp_path / "*.txt"], text_mode="file"))
    ds = storage.IndexedDataset(result.outputs["text"])
    assert ds.num_documents == 2
    assert tok_lib.ByteTokenizer().detokenize(ds.get(0)) == "Doc one.\nStill doc one.\n"
    spec = tok_spec.TokenizerSpec("hf", model=str(tmp_path / "missing.json"))
    with pytest.raises(tok_spec.TokenizerError, match="missing.json"):
        pipeline.preprocess(_config(tmp_path / "x", [tmp_path / "a.txt"], tokenizer=spec))
    with pytest.raises(partitions_lib.InputError, match="matches no file"):
        pipeline.preprocess(_config(tmp_path / "x", [tmp_path / "*.jsonl"]))
    assert not os.path.exists(tmp_path / "x")
    with pytest.raises(ValueError, match="on_error='maybe'"):
        _config(tmp_path, [tmp_path / "a.txt"], on_error="maybe")


def test_existing_output_without_manifest_is_not_clobbered(tmp_path, corpus_docs):
    path = write_jsonl(str(tmp_path / "in.jsonl"), corpus_docs[:10])
    cfg = _config(tmp_path, [path])
    os.makedirs(tmp_path / "out")
    (tmp_path / "out" / "corpus_text_document.bin").write_bytes(b"foreign")
    with pytest.raises(manifest_lib.SettingsMismatchError, match="already exists"):
        pipeline.preprocess(cfg)
    assert (
        pipeline.preprocess(dataclass_replace(cfg, overwrite=True)).keys["text"]["documents"] == 10
    )


def test_no_document_written_fails_naming_input_and_top_reason(tmp_path):
    from jaxblend.preprocess import no_output

    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(no_output.NoDocumentsError) as err:
        pipeline.preprocess(_config(tmp_path / "a", [empty]))
    assert str(err.value) == (
        f"--input {empty}: no documents written: the input holds no records (an empty file?)"
    )

    src = tmp_path / "in.jsonl"
    write_jsonl(src, ["one", "two", "three"])  # every record has "text", none has "body"
    with pytest.raises(no_output.NoDocumentsError) as err:
        pipeline.preprocess(_config(tmp_path / "b", [src], json_keys=("body",)))
    assert str(err.value) == (
        f"--input {src}: no documents written: all 3 records were dropped, most as missing_key "
        f"(3, e.g. {src}:1 (key 'body')); check that --json-keys body names fields the records have"
    )
    assert not os.path.exists(str(tmp_path / "b" / "out" / "corpus_body_document.idx"))

    with pytest.raises(no_output.NoDocumentsError, match=r"most as oversize \(3, .*raise "
                       r"--max-document-chars \(now 2\)"):
        pipeline.preprocess(_config(tmp_path / "c", [src], max_document_chars=2))


def test_one_input_of_several_giving_no_document_is_named(tmp_path):
    from jaxblend.preprocess import no_output

    good, bad, empty = tmp_path / "good.jsonl", tmp_path / "bad.jsonl", tmp_path / "empty.jsonl"
    write_jsonl(good, ["one", "two", "three"])
    bad.write_text('{"body": "x"}\n{"text": 3}\n{"body": "y"}\n')
    empty.write_bytes(b"")
    with pytest.raises(no_output.NoDocumentsError) as err:
        pipeline.preprocess(_config(tmp_path / "a", [good, bad], partitions=1))
    assert str(err.value) == (
        f"--input {bad}: no documents written: all 3 records were dropped, most as missing_key "
        f"(2, e.g. {bad}:1 (key 'text')); check that --json-keys text names fields the records have"
    )
    with pytest.raises(no_output.NoDocumentsError, match=rf"^--input {empty}: .* no records"):
        pipeline.preprocess(_config(tmp_path / "b", [good, empty]))
    assert pipeline.preprocess(_config(tmp_path / "c", [good])).keys["text"]["documents"] == 3
