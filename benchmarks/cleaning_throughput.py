r"""Cleaning throughput (documents/s per core) vs datatrove's equivalent pipeline, same input, same run.

Generates a corpus (no downloads): documents of 100-300 random words with stop words, of which
~10% are exact duplicates (case/spacing changed), ~10% near duplicates (one word changed), ~3%
low-quality (too short, bullet lists), some with e-mails/IPs, plus an evaluation file overlapping
1% of them. Then, each on one core (``workers=1``, datatrove ``tasks=1, workers=1``):

- ``jaxblend plain``: ``preprocess`` without cleaning (read, validate, ByteTokenizer, write, merge);
- ``jaxblend clean``: the same with PII scrubbing, every Gopher quality filter, decontamination,
  exact and MinHash/LSH near dedup (112 permutations, 14 bands, 5-word shingles);
- ``datatrove``: ``JsonlReader -> PIIFormatter -> GopherRepetitionFilter -> GopherQualityFilter ->
  JsonlWriter``, then its four MinHash stages (signatures, buckets, clusters, filter, with the same
  5-gram/14x8 configuration, 32-bit SHA-1 shingle hashes like datasketch's) writing the kept
  documents; its word tokenizer is a whitespace splitter
  (as jaxblend's heuristics use), so no NLTK/spaCy data is needed.

Documents/s = input documents / wall seconds of all stages. The kept-document counts are printed
so the two pipelines can be seen to do comparable work (they differ in details: datatrove has no
exact dedup or decontamination here, its quality filters count words differently).

datatrove is not a jaxblend dependency: ``pip install datatrove==0.10.1 orjson`` to include it
(without it only the jaxblend rows are printed).

Usage::

    .venv/bin/python benchmarks/cleaning_throughput.py --docs=20000
    .venv/bin/python benchmarks/cleaning_throughput.py --write_corpus=/tmp/clean_demo --docs=300
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import time

from absl import app, flags

from jaxblend.preprocess import config as config_lib

_DOCS = flags.DEFINE_integer("docs", 20000, "Documents in the generated corpus.")
_WRITE_CORPUS = flags.DEFINE_string(
    "write_corpus", None, "Only write corpus.jsonl and eval.jsonl into this directory, then exit."
)
_DATATROVE = flags.DEFINE_bool("datatrove", True, "Also run datatrove's pipeline (if installed).")
_SEED = flags.DEFINE_integer("seed", 0, "Corpus seed.")

_STOP = ("the", "to", "of", "and", "with", "that")


def write_corpus(directory: str, docs: int, seed: int = 0) -> tuple[str, str]:
    """Writes ``corpus.jsonl`` (with planted problems) and ``eval.jsonl``; returns their paths."""
    rng = random.Random(seed)
    vocab = sorted(
        {"".join(rng.choices("abcdefghijklmnoprstuvw", k=rng.randint(3, 9))) for _ in range(5000)}
    )

    def doc(n: int) -> str:
        words = [rng.choice(_STOP) if rng.random() < 0.15 else rng.choice(vocab) for _ in range(n)]
        return " ".join(w + ("." if i % 12 == 11 else "") for i, w in enumerate(words))

    texts: list[str] = []
    evals: list[str] = []
    while len(texts) < docs:
        t = doc(rng.randint(100, 300))
        roll = rng.random()
        if roll < 0.02:
            t += f" Contact {rng.choice(vocab)}@example.com from 8.8.{rng.randint(0, 255)}.4."
        texts.append(t)
        if roll < 0.10:
            texts.append(t.upper() + "  ")
        elif roll < 0.20:
            w = t.split(" ")
            w[len(w) // 2] = "changed"
            texts.append(" ".join(w))
        elif roll < 0.23:
            texts.append(rng.choice(["short one.", "\n".join("- " + doc(5) for _ in range(10))]))
        elif roll < 0.24:
            evals.append(" ".join(t.split(" ")[20:45]))
    os.makedirs(directory, exist_ok=True)
    corpus, ev = os.path.join(directory, "corpus.jsonl"), os.path.join(directory, "eval.jsonl")
    with open(corpus, "w", encoding="utf-8") as f:
        f.writelines(
            json.dumps({"text": t, "id": str(i)}) + "\n" for i, t in enumerate(texts[:docs])
        )
    with open(ev, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for t in evals)
    return corpus, ev


def _jaxblend(corpus: str, ev: str, out: str, clean: bool) -> tuple[float, int]:
    from jaxblend.preprocess import pipeline
    from jaxblend.preprocess.cleaning import CleaningConfig

    cleaning = None
    if clean:
        cleaning = CleaningConfig(
            pii=True,
            quality=("all",),
            decontaminate=(ev,),
            exact_dedup=True,
            near_dedup=True,
            plot=False,
        )
    cfg = config_lib.PreprocessConfig(
        input=(corpus,),
        output_prefix=out,
        workers=1,
        partitions=4,
        progress=False,
        log_interval=0,
        cleaning=cleaning,
    )
    t0 = time.perf_counter()
    r = pipeline.preprocess(cfg)
    return time.perf_counter() - t0, r.keys["text"]["documents"]


def _datatrove(corpus: str, work: str) -> tuple[float, int]:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.filters import GopherQualityFilter, GopherRepetitionFilter
    from datatrove.pipeline.formatters import PIIFormatter
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.word_tokenizers import WordTokenizer

    class Whitespace(WordTokenizer):
        def word_tokenize(self, text: str) -> list[str]:
            return text.split()

        def sent_tokenize(self, text: str) -> list[str]:
            return [s for s in text.split(".") if s.strip()]

        def span_tokenize(self, text: str) -> list[tuple[int, int]]:
            raise NotImplementedError

    tok = Whitespace()
    from datatrove.utils.hashing import HashConfig

    # 32-bit SHA-1 shingle hashes, as datasketch's default (datatrove's xxhash path rejects str
    # with the installed xxhash 4)
    mh = MinhashConfig(
        n_grams=5,
        num_buckets=14,
        hashes_per_bucket=8,
        seed=1,
        hash_config=HashConfig(precision=32, hash_fc="sha1"),
    )
    src = os.path.dirname(corpus)
    name = os.path.basename(corpus)

    def run(steps: list, logs: str, tasks: int = 1) -> None:
        LocalPipelineExecutor(
            steps, tasks=tasks, workers=1, logging_dir=os.path.join(work, logs)
        ).run()

    t0 = time.perf_counter()
    run(
        [
            JsonlReader(src, glob_pattern=name),
            PIIFormatter(),
            GopherRepetitionFilter(language=tok),
            GopherQualityFilter(language=tok),
            JsonlWriter(os.path.join(work, "filtered"), compression=None),
        ],
        "l1",
    )
    filtered = os.path.join(work, "filtered")
    run(
        [
            JsonlReader(filtered),
            MinhashDedupSignature(os.path.join(work, "sigs"), mh, language=tok),
        ],
        "l2",
    )
    run(
        [MinhashDedupBuckets(os.path.join(work, "sigs"), os.path.join(work, "buckets"), config=mh)],
        "l3",
        tasks=mh.num_buckets,  # one task per bucket (datatrove's requirement), run one at a time
    )
    run(
        [
            MinhashDedupCluster(
                os.path.join(work, "buckets"), os.path.join(work, "remove"), config=mh
            )
        ],
        "l4",
    )
    run(
        [
            JsonlReader(filtered),
            MinhashDedupFilter(os.path.join(work, "remove")),
            JsonlWriter(os.path.join(work, "final"), compression=None),
        ],
        "l5",
    )
    seconds = time.perf_counter() - t0
    kept = 0
    for f in os.listdir(os.path.join(work, "final")):
        with open(os.path.join(work, "final", f), encoding="utf-8") as fh:
            kept += sum(1 for _ in fh)
    return seconds, kept


def main(argv: list[str]) -> None:
    del argv
    if _WRITE_CORPUS.value:
        corpus, ev = write_corpus(_WRITE_CORPUS.value, _DOCS.value, _SEED.value)
        print(f"wrote {corpus} and {ev}")
        return
    work = tempfile.mkdtemp(prefix="clean_bench_")
    try:
        corpus, ev = write_corpus(os.path.join(work, "in"), _DOCS.value, _SEED.value)
        n = _DOCS.value
        rows = []
        t, kept = _jaxblend(corpus, ev, os.path.join(work, "plain", "c"), clean=False)
        rows.append(("jaxblend plain (no cleaning)", t, kept))
        t, kept = _jaxblend(corpus, ev, os.path.join(work, "clean", "c"), clean=True)
        rows.append(("jaxblend clean", t, kept))
        if _DATATROVE.value:
            try:
                t, kept = _datatrove(corpus, os.path.join(work, "dt"))
                rows.append(("datatrove (PII, Gopher, MinHash)", t, kept))
            except ImportError as e:
                print(f"datatrove not measured: {e}")
        base = rows[1][1]
        print(f"{n:,} documents, {os.path.getsize(corpus) / 1e6:.1f} MB, one core each")
        print(
            f"{'pipeline':36s} {'seconds':>8s} {'docs/s':>8s} {'kept':>7s} {'time vs jaxblend clean':>24s}"
        )
        for name, t, kept in rows:
            print(f"{name:36s} {t:8.2f} {n / t:8,.0f} {kept:7,d} {t / base:23.2f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    app.run(main)
