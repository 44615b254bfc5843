"""An output directory of `preprocess` is a directory Megatron-LM's ``tools/merge_datasets.py``
accepts as it is: every regular file directly in it is half of a ``.bin``/``.idx`` pair (the side
files, run record and cleaning report, live in ``.jaxblend/``, a subdirectory the tool skips), and
the datasets merge with megatron-core's ``IndexedDatasetBuilder.add_index`` as that tool does.
Every reader still finds the record, also at the place older runs wrote it."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from jaxblend import storage
from jaxblend.decode import recorded_spec
from jaxblend.preprocess import layout, pipeline
from jaxblend.preprocess.cleaning import CleaningConfig
from jaxblend.tokenizer_facts import legacy_record_path, read_facts, record_path
from tests.preprocess.conftest import make_documents, small_run_config, write_jsonl


def merge_tool_prefixes(directory: str) -> list[str]:
    """The dataset prefixes Megatron-LM's merge tool takes from ``directory``, by its rule: each
    regular file directly in it must have its ``.bin``/``.idx`` partner (else the tool stops with
    an AssertionError naming the file); subdirectories are skipped."""
    prefixes = set()
    for entry in os.listdir(directory):
        path = os.path.join(directory, entry)
        if not os.path.isfile(path):
            continue
        stem, ext = os.path.splitext(entry)
        partner = ".bin" if ext == ".idx" else ".idx"
        assert os.path.isfile(os.path.join(directory, stem + partner)), (
            f"ERROR: {partner} file not provided for {os.path.join(directory, stem)}"
        )
        prefixes.add(stem)
    return [os.path.join(directory, p) for p in sorted(prefixes)]


def megatron_merge(prefixes: list[str], output_prefix: str) -> None:
    """Merges ``prefixes`` into ``output_prefix`` with megatron-core, as the merge tool does."""
    from megatron.core.datasets.indexed_dataset import (
        IndexedDataset,
        IndexedDatasetBuilder,
        get_bin_path,
        get_idx_path,
    )

    dtype = IndexedDataset(prefixes[0]).index.dtype
    builder = IndexedDatasetBuilder(get_bin_path(output_prefix), dtype=dtype)
    for prefix in prefixes:
        builder.add_index(prefix)
    builder.finalize(get_idx_path(output_prefix))


CLEANING = CleaningConfig(pii=True, quality=("dup_paragraphs",), exact_dedup=True, plot=True)


@pytest.fixture
def out_dir(tmp_path):
    """``out/`` with two runs: ``a`` plain, ``b`` cleaned (report and plot)."""
    docs = make_documents(80, seed=3)
    a = write_jsonl(str(tmp_path / "a.jsonl"), docs[:40])
    b = write_jsonl(str(tmp_path / "b.jsonl"), docs[40:] + docs[40:50])  # duplicates to drop
    out = tmp_path / "out"
    pipeline.preprocess(small_run_config(str(out / "a"), [a]))
    result = pipeline.preprocess(small_run_config(str(out / "b"), [b], cleaning=CLEANING))
    assert result.cleaning is not None
    return out


def test_megatron_merge_tool_rule_holds_and_megatron_core_merges(out_dir, tmp_path):
    assert sorted(os.listdir(out_dir / ".jaxblend")) == [
        "a.preprocess.json", "b.cleaning.json", "b.cleaning.png", "b.preprocess.json"]
    prefixes = merge_tool_prefixes(str(out_dir))
    assert prefixes == [str(out_dir / "a_text_document"), str(out_dir / "b_text_document")]
    merged = str(tmp_path / "merged")
    megatron_merge(prefixes, merged)
    parts = [storage.IndexedDataset(p) for p in prefixes]
    whole = storage.IndexedDataset(merged)
    assert len(parts[0]) == 40 and 0 < len(parts[1]) <= 40  # b: duplicates dropped
    assert len(whole) == sum(len(p) for p in parts)
    expected = [p.get(i) for p in parts for i in range(len(p))]
    assert all(np.array_equal(whole.get(i), t) for i, t in enumerate(expected))


def test_the_record_is_found_in_its_subdirectory(out_dir):
    for name in ("a", "b"):
        prefix = str(out_dir / f"{name}_text_document")
        record = str(out_dir / ".jaxblend" / f"{name}.preprocess.json")
        assert record_path(str(out_dir / name)) == record
        assert read_facts(prefix) is not None
        assert recorded_spec(prefix) is not None
    assert not os.path.exists(legacy_record_path(str(out_dir / "a")))


def test_a_record_written_before_is_read_and_moved_by_a_rerun(out_dir, tmp_path):
    """A directory made before the side files moved (the record beside the data): readers find
    the record there; a rerun with the same settings moves it into `.jaxblend/`, after which the
    merge tool's rule holds."""
    prefix = str(out_dir / "a")
    facts = read_facts(prefix + "_text_document")
    shutil.move(record_path(prefix), legacy_record_path(prefix))
    with pytest.raises(AssertionError, match=r"\.idx file not provided for .*a\.preprocess"):
        merge_tool_prefixes(str(out_dir))  # what Megatron's tool says about the old layout
    assert read_facts(prefix + "_text_document") == facts
    assert recorded_spec(prefix + "_text_document") is not None
    assert layout.read_json(legacy_record_path(prefix))["status"] == "complete"

    again = pipeline.preprocess(small_run_config(prefix, [tmp_path / "a.jsonl"]))
    assert again.partitions_reused == again.partitions  # the old record was taken as this run's
    assert not os.path.exists(legacy_record_path(prefix))
    assert layout.read_json(record_path(prefix))["status"] == "complete"
    assert len(merge_tool_prefixes(str(out_dir))) == 2


def test_a_cleaned_run_written_before_has_its_report_moved_too(out_dir, tmp_path):
    prefix = str(out_dir / "b")
    for suffix in (".preprocess.json", ".cleaning.json", ".cleaning.png"):
        shutil.move(str(out_dir / ".jaxblend" / f"b{suffix}"), prefix + suffix)
    assert read_facts(prefix + "_text_document") is not None
    again = pipeline.preprocess(small_run_config(prefix, [tmp_path / "b.jsonl"], cleaning=CLEANING))
    assert again.partitions_reused == again.partitions
    assert sorted(os.listdir(out_dir / ".jaxblend")) == [
        "a.preprocess.json", "b.cleaning.json", "b.cleaning.png", "b.preprocess.json"]
    assert len(merge_tool_prefixes(str(out_dir))) == 2
