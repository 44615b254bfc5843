"""The cleaning stage end to end: planted problems removed, the rest kept, same bytes everywhere."""

from __future__ import annotations

import json
import os

import pytest

from jaxblend import storage
from jaxblend.preprocess import config as config_lib
from jaxblend.preprocess import engines, pipeline, worker
from jaxblend.preprocess import manifest as manifest_lib
from jaxblend.preprocess.cleaning import CleaningConfig, join, signatures
from tests.preprocess.cleaning.corpus import make_corpus
from tests.preprocess.conftest import read_bytes


@pytest.fixture(scope="module")
def corpus():
    return make_corpus()


@pytest.fixture()
def files(tmp_path, corpus):
    src = corpus.write(str(tmp_path / "corpus.jsonl"))
    ev = tmp_path / "eval.jsonl"
    ev.write_text("".join(json.dumps({"text": t}) + "\n" for t in corpus.eval_texts))
    return src, str(ev)


def _cleaning(ev: str, **kw) -> CleaningConfig:
    """Every cleaning step; no quality-score plot unless `plot=True` (drawing it costs more than
    cleaning this corpus, and only the first test checks it)."""
    kw.setdefault("plot", False)
    return CleaningConfig(
        pii=True,
        quality=("all",),
        decontaminate=(ev,),
        exact_dedup=True,
        near_dedup=True,
        **kw,
    )


def _run(src, ev, prefix, partitions=3, engine=None, **kw) -> config_lib.PreprocessResult:
    cfg = config_lib.PreprocessConfig(
        input=(src,),
        output_prefix=prefix,
        partitions=partitions,
        workers=1,
        progress=False,
        cleaning=_cleaning(ev, **kw),
    )
    return pipeline.preprocess(cfg, engine)


def _texts(prefix: str) -> list[str]:
    ds = storage.IndexedDataset(prefix)
    return [bytes(ds.get(i).astype("uint8")).decode("utf-8") for i in range(len(ds))]


def test_planted_problems_removed_and_the_rest_kept(tmp_path, files, corpus):
    assert min(corpus.similarities["near"]) > 0.9
    assert max(corpus.similarities["distant"]) < 0.6
    src, ev = files
    r = _run(src, ev, str(tmp_path / "out" / "c"), plot=True)
    assert _texts(r.outputs["text"]) == corpus.expected_kept()
    expected: dict[str, int] = {}
    for reason in corpus.reasons.values():
        expected[reason] = expected.get(reason, 0) + 1
    assert {k: v["count"] for k, v in r.dropped.items()} == expected
    lines = {f"{src}:{i + 1}" for i in corpus.reasons}
    for d in r.dropped.values():
        assert set(d["examples"]) <= lines
    rep = r.cleaning
    assert rep["pii"] == {"documents": 1, "email": 1, "ipv4": 1, "ipv6": 1}
    assert rep["kept"]["documents"] == len(corpus.expected_kept())
    assert rep["removed"]["near_dedup"]["documents"] == len(corpus.similarities["near"])
    assert rep["dedup"]["exact_duplicates"] == expected["exact_duplicate"]
    with open(tmp_path / "out" / ".jaxblend" / "c.cleaning.json") as f:
        on_disk = json.load(f)
    assert on_disk["removed"]["quality"]["documents"] == 5
    assert on_disk["removed"]["decontamination"]["bytes"] == sum(
        len(json.dumps({"text": corpus.texts[i]}).encode())
        for i, why in corpus.reasons.items()
        if why == "contaminated"
    )
    assert os.path.getsize(tmp_path / "out" / ".jaxblend" / "c.cleaning.png") > 1000
    assert "near_duplicate" in r.summary() and "kept" in r.summary()


def test_same_bytes_for_reruns_partition_counts_and_join_shards(tmp_path, files, monkeypatch):
    src, ev = files
    first = _run(src, ev, str(tmp_path / "a" / "c"), partitions=1)
    ref = read_bytes(first.outputs["text"])
    again = _run(src, ev, str(tmp_path / "b" / "c"), partitions=5)
    assert read_bytes(again.outputs["text"]) == ref
    monkeypatch.setattr(join, "_BYTES_PER_KEY", 2**18)  # 4 keys per MB: many shards
    sharded = _run(src, ev, str(tmp_path / "d" / "c"), partitions=4, join_memory_mb=1)
    assert sharded.cleaning["dedup"]["shards"] > 10
    assert read_bytes(sharded.outputs["text"]) == ref
    other_seed = _run(src, ev, str(tmp_path / "e" / "c"), seed=7)
    assert _texts(other_seed.outputs["text"]) == _texts(first.outputs["text"])


class _FailOnTokenize(engines.LocalEngine):
    """Runs the signature pass, then fails before tokenizing (an interrupted run)."""

    def __init__(self) -> None:
        super().__init__(1)
        self.modes: list[str] = []

    def run(self, config, partitions, progress):
        self.modes.append(config.mode)
        if config.mode == worker.TOKENIZE:
            raise KeyboardInterrupt
        super().run(config, partitions, progress)


class _Recording(engines.LocalEngine):
    def __init__(self) -> None:
        super().__init__(1)
        self.modes: list[str] = []

    def run(self, config, partitions, progress):
        self.modes.append(config.mode)
        super().run(config, partitions, progress)


def test_resume_after_the_join_does_not_redo_it(tmp_path, files):
    src, ev = files
    prefix = str(tmp_path / "r" / "c")
    with pytest.raises(KeyboardInterrupt):
        _run(src, ev, prefix, engine=_FailOnTokenize())
    parts = prefix + ".parts"
    assert join.read_marker(parts) is not None and signatures.is_done(parts, 0)
    rec = _Recording()
    resumed = _run(src, ev, prefix, engine=rec)
    assert rec.modes == [worker.TOKENIZE]
    clean = _run(src, ev, str(tmp_path / "fresh" / "c"))
    assert read_bytes(resumed.outputs["text"]) == read_bytes(clean.outputs["text"])
    assert (
        resumed.cleaning["dedup"]["near_duplicates"] == clean.cleaning["dedup"]["near_duplicates"]
    )


def test_changed_cleaning_settings_are_refused_on_resume(tmp_path, files):
    src, ev = files
    prefix = str(tmp_path / "s" / "c")
    _run(src, ev, prefix)
    with pytest.raises(manifest_lib.SettingsMismatchError, match="cleaning"):
        _run(src, ev, prefix, near_threshold=0.5)


def test_multi_key_records_stay_aligned(tmp_path):
    corpus = make_corpus(seed=1, good=20)
    src = tmp_path / "two.jsonl"
    with open(src, "w") as f:
        for t in corpus.texts:  # the dedup text is both keys' texts: duplicates' titles match
            title = f"{t.split()[0]} mail a@example.org"
            f.write(json.dumps({"text": t, "title": title}) + "\n")
    cfg = config_lib.PreprocessConfig(
        input=(str(src),),
        output_prefix=str(tmp_path / "o" / "c"),
        json_keys=("text", "title"),
        partitions=2,
        workers=1,
        progress=False,
        cleaning=CleaningConfig(pii=True, exact_dedup=True),
    )
    r = pipeline.preprocess(cfg)
    titles = _texts(r.outputs["title"])
    texts = _texts(r.outputs["text"])
    assert (
        len(titles)
        == len(texts)
        == len(corpus.texts) - list(corpus.reasons.values()).count("exact_duplicate")
    )
    assert all(t.endswith("mail <EMAIL>") for t in titles)
