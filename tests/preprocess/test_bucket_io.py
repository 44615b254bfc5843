"""Preprocessing into gs:// and s3:// (fake-gcs-server and moto): local work directory, publish
with the run record last, resume, no local path named after the URL."""

from __future__ import annotations

import dataclasses
import os
import tempfile
import uuid
from pathlib import Path

import pytest
from helpers_cli import run_tool

from jaxblend import storage
from jaxblend.access import ObjectStoreOptions
from jaxblend.preprocess import bucket_input, bucket_output, pipeline
from jaxblend.preprocess import manifest as manifest_lib
from jaxblend.preprocess.cleaning import CleaningConfig
from jaxblend.preprocess.partitions import InputError
from jaxblend.storage.idx_format import IndexFormatError
from jaxblend.storage.object_store.directory import ObjectDirectory
from jaxblend.storage.object_store.errors import ObjectStoreError
from jaxblend.storage.object_store.location import open_kvstore
from jaxblend.tokenizer_facts import legacy_record_path, read_facts, record_path, side_path
from tests.preprocess.conftest import read_bytes, small_run_config, write_jsonl


def _remote_bytes(server, path: str) -> tuple[bytes, bytes]:
    with server.pointed_at():
        kv = server.kvstore()
        return tuple(bytes(kv.read(f"{path}.{ext}").result().value) for ext in ("bin", "idx"))


def _exists(server, key: str) -> bool:
    with server.pointed_at():
        return server.kvstore().read(key).result().state == "value"


@pytest.fixture
def run_dirs(tmp_path, monkeypatch, corpus_docs):
    """(input file, local reference prefix, a clean cwd); system temp under tmp_path."""
    src = write_jsonl(str(tmp_path / "in.jsonl"), corpus_docs[:120])
    ref = pipeline.preprocess(small_run_config(str(tmp_path / "ref" / "c"), [src]))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    return src, ref.outputs["text"], cwd


def test_bucket_output_is_byte_identical_published_once_and_cwd_clean(object_store, run_dirs):
    src, ref, cwd = run_dirs
    path = f"out-{uuid.uuid4().hex}/corpus"
    url = object_store.prefix_url(path)
    result = pipeline.preprocess(small_run_config(url, [src]))
    assert result.outputs == {"text": url + "_text_document"}
    assert result.published == (
        f"published to {url} (.bin, then .idx, then run record {record_path(url)})"
    )
    assert _remote_bytes(object_store, path + "_text_document") == read_bytes(ref)
    assert _exists(object_store, record_path(path))
    local = bucket_output.local_prefix(url)
    assert local.startswith(os.path.join(tempfile.gettempdir(), "jaxblend-preprocess", ""))
    assert "gs:" not in local and "s3:" not in local
    assert os.listdir(cwd) == []

    again = pipeline.preprocess(small_run_config(url, [src]))
    assert again.published == (
        f"{url} is already published (run record {record_path(url)}); nothing uploaded"
    )
    assert again.partitions_reused == again.partitions == 3
    assert os.listdir(cwd) == []


@pytest.mark.parametrize("failing", [".idx", ".preprocess.json"])
def test_publish_killed_midway_is_unfinished_and_rerun_completes(
    object_store, run_dirs, monkeypatch, tmp_path, failing
):
    src, ref, cwd = run_dirs
    path = f"out-{uuid.uuid4().hex}/corpus"
    url = object_store.prefix_url(path)
    config = small_run_config(url, [src], work_dir=str(tmp_path / "work"))
    start_write, write = ObjectDirectory.start_write, ObjectDirectory.write

    def fail(key, data):
        if data is not None and key.endswith(failing):
            raise ObjectStoreError(f"injected failure uploading {key}")

    def failing_start_write(self, key, data):
        fail(key, data)
        return start_write(self, key, data)

    def failing_write(self, key, data, what="writing it"):
        fail(key, data)
        return write(self, key, data, what)

    monkeypatch.setattr(ObjectDirectory, "start_write", failing_start_write)
    monkeypatch.setattr(ObjectDirectory, "write", failing_write)
    with pytest.raises(ObjectStoreError, match="injected"):
        pipeline.preprocess(config)
    assert not _exists(object_store, record_path(path))  # no commit point: unfinished
    assert _exists(object_store, path + "_text_document.bin")
    assert _exists(object_store, path + "_text_document.idx") == (failing != ".idx")
    with object_store.pointed_at():
        store = bucket_output.BucketOutput(url, ObjectStoreOptions.from_env())
        assert store.read_record() is None
        assert read_facts(url + "_text_document") is None  # readers see no finished run
        if failing == ".idx":
            with pytest.raises(IndexFormatError, match="does not exist"):
                storage.IndexedDataset(url + "_text_document")

    monkeypatch.setattr(ObjectDirectory, "start_write", start_write)
    monkeypatch.setattr(ObjectDirectory, "write", write)
    result = pipeline.preprocess(config)
    assert result.published.startswith(f"published to {url} ")
    assert result.partitions_reused == 3  # the partitions were kept in the work directory
    with object_store.pointed_at():
        assert read_facts(url + "_text_document") is not None
        assert len(storage.IndexedDataset(url + "_text_document")) == 120
    assert _remote_bytes(object_store, path + "_text_document") == read_bytes(ref)
    assert _exists(object_store, record_path(path))
    assert os.listdir(cwd) == []


def test_cli_publishes_to_bucket_with_object_store_flags(object_store, run_dirs, tmp_path):
    src, ref, cwd = run_dirs
    path = f"out-{uuid.uuid4().hex}/corpus"
    url = object_store.prefix_url(path)
    env = dict(os.environ, **object_store.environ())
    proc = run_tool("jaxblend.tools.preprocess", [f"--input={src}",
         f"--output-prefix={url}", "--tokenizer-type=byte", "--append-eod", "--partitions=3",
         "--workers=1", "--noprogress", f"--work_dir={tmp_path / 'work'}",
         "--storage_retries=1", "--storage_timeout=30"], cwd=cwd, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"published to {url} " in proc.stdout
    assert _remote_bytes(object_store, path + "_text_document") == read_bytes(ref)
    assert os.listdir(cwd) == []


@pytest.mark.parametrize("fmt", ["jsonl", "jsonl.gz", "jsonl.zst", "txt", "parquet"])
def test_bucket_input_and_output_match_local_files(object_store, tmp_path, monkeypatch, corpus_docs,
                                                   fmt):
    from tests.preprocess.test_pipeline import _write_format

    src = _write_format(tmp_path, fmt, corpus_docs[:120])
    monkeypatch.setattr(bucket_input, "DOWNLOAD_CHUNK", 997)  # many ranges, a short last one
    ref = pipeline.preprocess(small_run_config(str(tmp_path / "ref" / "c"), [src]))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    run = f"io-{uuid.uuid4().hex}"
    object_store.write(f"{run}/in.{fmt}", src.read_bytes())
    url = object_store.prefix_url(f"{run}/out/corpus")
    config = small_run_config(url, [object_store.prefix_url(f"{run}/in.{fmt}")])
    with object_store.pointed_at():
        result = pipeline.preprocess(config)
    assert result.records == ref.records == 120
    assert _remote_bytes(object_store, f"{run}/out/corpus_text_document") == read_bytes(
        ref.outputs["text"]
    )
    assert os.listdir(cwd) == []


def test_changed_bucket_input_is_refused_and_missing_object_named(object_store, run_dirs):
    src, _, _ = run_dirs
    run = f"chg-{uuid.uuid4().hex}"
    object_store.write(f"{run}/in.jsonl", Path(src).read_bytes())
    url = object_store.prefix_url(f"{run}/out/c")
    config = small_run_config(url, [object_store.prefix_url(f"{run}/in.jsonl")])
    with object_store.pointed_at():
        pipeline.preprocess(config)
        object_store.write(f"{run}/in.jsonl", b'{"text": "changed"}\n')
        with pytest.raises(manifest_lib.SettingsMismatchError, match="inputs differs"):
            pipeline.preprocess(config)
        missing = object_store.prefix_url(f"{run}/nothing.jsonl")
        with pytest.raises(InputError) as e:
            pipeline.preprocess(small_run_config(url + "2", [missing]))
    assert str(e.value) == (
        f"--input {missing}: object does not exist (check the URL, the bucket and the credentials)"
    )


def test_cleaning_report_is_published_before_the_record(object_store, run_dirs):
    src, _, cwd = run_dirs
    path = f"clean-{uuid.uuid4().hex}/c"
    url = object_store.prefix_url(path)
    config = small_run_config(url, [src], cleaning=CleaningConfig(pii=True, exact_dedup=True))
    with object_store.pointed_at():
        result = pipeline.preprocess(config)
    assert result.cleaning is not None and result.published.startswith("published to ")
    assert _exists(object_store, side_path(path, ".cleaning.json"))
    assert not _exists(object_store, path + ".cleaning.json")  # beside the record, not the data
    assert os.listdir(cwd) == []


def test_side_files_are_published_where_a_local_run_puts_them(object_store, run_dirs):
    """Directly under the prefix's directory only the .bin/.idx pairs; the record and the cleaning
    report under `.jaxblend/`, as in a local output directory."""
    src, _, _ = run_dirs
    base = f"side-{uuid.uuid4().hex}"
    url = object_store.prefix_url(f"{base}/c")
    config = small_run_config(url, [src], cleaning=CleaningConfig(pii=True, exact_dedup=True))
    with object_store.pointed_at():
        pipeline.preprocess(config)
        keys = sorted(k.decode() for k in object_store.kvstore().list().result())
    mine = [k[len(base) + 1:] for k in keys if k.startswith(base + "/")]
    assert mine == [".jaxblend/c.cleaning.json", ".jaxblend/c.preprocess.json",
                    "c_text_document.bin", "c_text_document.idx"]


def test_a_prefix_published_before_the_side_files_moved_is_still_read(object_store, run_dirs):
    """A record at the older `<prefix>.preprocess.json` is found by readers and by a rerun; a new
    publication removes it."""
    src, _, _ = run_dirs
    path = f"legacy-{uuid.uuid4().hex}/c"
    url = object_store.prefix_url(path)
    with object_store.pointed_at():
        pipeline.preprocess(small_run_config(url, [src]))
        kv = object_store.kvstore()
        record = bytes(kv.read(record_path(path)).result().value)
        kv.write(legacy_record_path(path), record).result()
        kv.write(record_path(path), None).result()
        assert read_facts(url + "_text_document") is not None
        again = pipeline.preprocess(small_run_config(url, [src]))
        assert again.published == (
            f"{url} is already published (run record {record_path(url)}); nothing uploaded"
        )
        other = small_run_config(url, [src], append_eod=False)
        pipeline.preprocess(dataclasses.replace(other, overwrite=True))
    assert _exists(object_store, record_path(path))
    assert not _exists(object_store, legacy_record_path(path))


def test_other_settings_into_a_published_prefix_refused_unless_overwrite(object_store, run_dirs,
                                                                         tmp_path):
    src, _, _ = run_dirs
    path = f"other-{uuid.uuid4().hex}/c"
    url = object_store.prefix_url(path)
    with object_store.pointed_at():
        pipeline.preprocess(small_run_config(url, [src]))
        other = small_run_config(url, [src], append_eod=False, work_dir=str(tmp_path / "w2"))
        with pytest.raises(manifest_lib.SettingsMismatchError) as e:
            pipeline.preprocess(other)
        assert str(e.value) == (
            f"output prefix {url} holds a run made with different settings "
            f"({record_path(url)}); rerun with the original settings, choose another "
            "--output_prefix, or pass --overwrite to replace it"
        )
        result = pipeline.preprocess(dataclasses.replace(other, overwrite=True))
        assert result.published.startswith("published to ")
        assert bucket_output.BucketOutput(url, ObjectStoreOptions.from_env()).read_record()[
            "settings"]["append_eod"] is False


def test_bucket_urls_without_an_object_name_are_refused(tmp_path):
    with pytest.raises(ValueError) as e:
        bucket_output.BucketOutput("gs://bucket", ObjectStoreOptions())
    assert str(e.value) == (
        "--output_prefix gs://bucket: a bucket prefix needs a name after the bucket, "
        "e.g. gs://bucket/tokens/web"
    )
    with pytest.raises(InputError) as e:
        pipeline.preprocess(small_run_config(str(tmp_path / "o"), ["s3://bucket/"]))
    assert str(e.value) == (
        "--input s3://bucket/: name an object, e.g. gs://bucket/data/part-0.jsonl"
    )


@pytest.mark.parametrize("size", [0, 5, 3000, 3001])
def test_download_streams_ranges_and_reuses_an_unchanged_copy(tmp_path, monkeypatch, size):
    monkeypatch.setattr(bucket_input, "DOWNLOAD_CHUNK", 1000)
    kv = open_kvstore("memory://dl/")
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    kv.write(f"{size}.jsonl", data).result()
    url = f"memory://dl/{size}.jsonl"
    (path,) = bucket_input.fetch_inputs([url], str(tmp_path), ObjectStoreOptions())
    assert Path(path).read_bytes() == data and path.endswith(f"{size}.jsonl")
    assert os.stat(path).st_mtime_ns == 0

    reads = []
    real = bucket_input._read_chunk
    monkeypatch.setattr(bucket_input, "_read_chunk", lambda *a, **k: reads.append(a) or real(*a, **k))
    assert bucket_input.fetch_inputs([url], str(tmp_path), ObjectStoreOptions()) == (path,)
    assert len(reads) == 1  # one conditional read, no download

    kv.write(f"{size}.jsonl", data + b"x").result()
    (changed,) = bucket_input.fetch_inputs([url], str(tmp_path), ObjectStoreOptions())
    assert changed != path and Path(changed).read_bytes() == data + b"x"


def test_object_changing_mid_download_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(bucket_input, "DOWNLOAD_CHUNK", 10)
    kv = open_kvstore("memory://mid/")
    kv.write("a.jsonl", b"0123456789" * 3).result()
    real = bucket_input._read_chunk

    def rewrite_after_first(directory, name, offset, *a, **k):
        if offset:
            kv.write("a.jsonl", b"z" * 30).result()
        return real(directory, name, offset, *a, **k)

    monkeypatch.setattr(bucket_input, "_read_chunk", rewrite_after_first)
    with pytest.raises(InputError) as e:
        bucket_input.fetch_inputs(["memory://mid/a.jsonl"], str(tmp_path), ObjectStoreOptions())
    assert str(e.value) == (
        "--input memory://mid/a.jsonl: the object changed while it was downloaded; rerun"
    )


def test_keep_parts_and_a_url_work_dir_are_refused_with_a_bucket_output(tmp_path):
    src = write_jsonl(str(tmp_path / "in.jsonl"), ["a b"])
    with pytest.raises(ValueError) as e:
        pipeline.preprocess(small_run_config("gs://bucket/t/c", [src], keep_parts=True))
    assert str(e.value) == (
        "--keep_parts with a bucket --output_prefix gs://bucket/t/c: the parts stay in the local "
        "work directory; drop --keep_parts or use a local --output_prefix"
    )
    with pytest.raises(ValueError, match=r"work_dir='gs://b/w' must be a local directory"):
        small_run_config("gs://bucket/t/c", [src], work_dir="gs://b/w")
