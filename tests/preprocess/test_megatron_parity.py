"""Preprocessing against Megatron-LM's rules, written with megatron-core's own dataset builder.

Megatron-LM's ``tools/preprocess_data.py`` is not part of the megatron-core package, so the oracle
here follows its per-document rules (docs/preprocessing.md) literally and writes with
``megatron.core.datasets.indexed_dataset.IndexedDatasetBuilder``; jaxblend's output must be the
same bytes.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import shutil

import numpy as np
import pytest
from helpers_cli import run_tool

from jaxblend import storage
from jaxblend.preprocess import pipeline, sentences, worker
from jaxblend.preprocess import tokenizer_spec as tok_spec
from jaxblend.preprocess import tokenizers as tok_lib
from tests.preprocess.conftest import make_documents, read_bytes, small_run_config

# Mixed scripts plus the texts Megatron keeps that a cleaning pass would drop.
_ODD_TEXTS = ["", "\n", "\u3000", " ", "\t\t", "Привет, мир.", "東京は大きい。", "مرحبا", "x"]


def _corpus(n: int = 120) -> list[dict]:
    docs = make_documents(n, seed=7)
    records = []
    for i, d in enumerate(docs):
        text: object = d
        if i % 11 == 3:
            text = _ODD_TEXTS[(i // 11) % len(_ODD_TEXTS)]
        elif i % 13 == 5:
            text = [d, "", "Second item.", " "]  # Megatron's list-of-sentences input form
        records.append({"text": text, "title": f"Title {i}" if i % 9 else ""})
    return records


def _write(path, records) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    return str(path)


def megatron_reference(
    lines: list[str],
    keys: list[str],
    tokenize,
    eod: int,
    vocab_size: int,
    prefix: str,
    append_eod: bool = True,
    splitter=None,
) -> dict[str, str]:
    """preprocess_data.py's per-document rules over megatron-core's IndexedDatasetBuilder."""
    from megatron.core.datasets import indexed_dataset as mid

    dtype = mid.DType.optimal_dtype(vocab_size)
    builders = {
        k: mid.IndexedDatasetBuilder(f"{prefix}_{k}_document.bin", dtype=dtype) for k in keys
    }
    for line in lines:
        data = json.loads(line)
        for key in keys:
            text = data[key]
            if splitter is not None and isinstance(text, str):
                text = splitter(text)
            sents = text if isinstance(text, list) else [text]
            doc_ids: list[int] = []
            lens: list[int] = []
            for s in sents:
                ids = list(tokenize(s))
                if ids:
                    doc_ids.extend(ids)
                    lens.append(len(ids))
            if doc_ids and append_eod:
                doc_ids.append(eod)
                lens[-1] += 1
            builders[key].add_document(doc_ids, lens)
    for k, b in builders.items():
        b.finalize(f"{prefix}_{k}_document.idx")
    return {k: f"{prefix}_{k}_document" for k in keys}


def _run(tmp_path, inputs, **kw):
    return pipeline.preprocess(small_run_config(str(tmp_path / "jb" / "corpus"), inputs, **kw))


@pytest.mark.parity
@pytest.mark.parametrize("kind", ["byte", "hf_bpe", "gpt2", "sentencepiece"])
def test_empty_whitespace_and_list_texts_match_megatron(tmp_path, kind, tokenizer_files):
    records = _corpus()
    path = _write(tmp_path / "in.jsonl", records)
    spec = tok_spec.TokenizerSpec(**tokenizer_files[kind])
    result = _run(tmp_path, [path], tokenizer=spec, json_keys=("text", "title"))
    tok = tok_lib.load_tokenizer(spec)
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    ref = megatron_reference(
        lines, ["text", "title"], tok.tokenize, tok.eod, tok.vocab_size, str(tmp_path / "mg")
    )
    for key in ("text", "title"):
        assert read_bytes(result.outputs[key]) == read_bytes(ref[key]), key
    # every record is a document, empty ones included; nothing dropped
    assert result.keys["text"]["documents"] == len(records)
    assert result.keys["title"]["empty_documents"] == sum(1 for r in records if not r["title"])
    assert result.dropped == {}


@pytest.mark.parity
def test_megatron_dataset_reads_zero_sequence_documents(tmp_path):
    from megatron.core.datasets.indexed_dataset import IndexedDataset as MegatronIndexed

    path = _write(tmp_path / "in.jsonl", [{"text": "ab"}, {"text": ""}, {"text": "c"}])
    out = _run(tmp_path, [path], append_eod=False).outputs["text"]
    ds = MegatronIndexed(out)
    assert list(ds.document_indices) == [0, 1, 1, 2]
    assert [bytes(ds[i].astype(np.uint8)) for i in range(len(ds))] == [b"ab", b"c"]


def test_drop_empty_documents_is_opt_in_and_counted(tmp_path):
    recs = [
        {"text": "a", "t": "x"},
        {"text": "\n", "t": "y"},
        {"text": "b", "t": ""},
        {"text": "c", "t": "z"},
    ]
    path = _write(tmp_path / "in.jsonl", recs)
    kept = _run(tmp_path / "keep", [path], json_keys=("text", "t"), append_eod=False)
    assert kept.keys["text"]["documents"] == 4 and kept.keys["t"]["empty_documents"] == 1
    assert kept.keys["text"]["tokens"] == 4  # "\n" is one byte token
    dropped = _run(
        tmp_path / "drop", [path], json_keys=("text", "t"), append_eod=False, drop_empty=True
    )
    assert dropped.dropped["empty"]["count"] == 1  # record 3: its "t" is empty
    assert dropped.dropped["empty"]["examples"] == [f"{path}:3 (key 't')"]
    for key in ("text", "t"):
        ds = storage.IndexedDataset(dropped.outputs[key])
        assert ds.document_indices.tolist() == [0, 1, 2, 3]
    text = storage.IndexedDataset(dropped.outputs["text"])
    assert [bytes(text.get(i).astype(np.uint8)) for i in range(3)] == [b"a", b"\n", b"c"]


def test_multiple_keys_stay_aligned_record_by_record(tmp_path):
    # Records with a missing or non-string title are dropped for *both* keys: row k of the text
    # dataset and row k of the title dataset always come from the same record.
    recs = []
    for i in range(200):
        r = {"text": f"body {i}"}
        if i % 7 == 3:
            pass  # no title
        elif i % 7 == 5:
            r["title"] = 5
        else:
            r["title"] = f"Title {i}"
        if i % 11 == 4:
            del r["text"]
        recs.append(r)
    path = _write(tmp_path / "in.jsonl", recs)
    res = _run(tmp_path, [path], json_keys=("text", "title"), append_eod=False, partitions=4)
    text = storage.IndexedDataset(res.outputs["text"])
    title = storage.IndexedDataset(res.outputs["title"])
    assert len(text) == len(title) == res.keys["text"]["documents"]
    decode = tok_lib.ByteTokenizer().detokenize
    for k in range(len(text)):
        body, head = decode(text.get(k)), decode(title.get(k))
        assert head == "Title " + body.split()[1], (k, body, head)
    n_bad = sum(1 for i in range(200) if i % 7 in (3, 5) or i % 11 == 4)
    assert sum(d["count"] for d in res.dropped.values()) == n_bad
    assert len(text) == 200 - n_bad


def _punkt_data(tmp_path, docs) -> str:
    """Trains a Punkt model on the test corpus and stores it as NLTK's punkt_tab data."""
    punkt = pytest.importorskip("nltk.tokenize.punkt")
    from nltk.tabdata import TabEncoder

    trainer = punkt.PunktTrainer()
    trainer.train("\n".join(docs), finalize=True)
    params = trainer.get_params()
    root = tmp_path / "nltk_data"
    lang_dir = root / "tokenizers" / "punkt_tab" / "english"
    lang_dir.mkdir(parents=True)
    enc = TabEncoder()
    (lang_dir / "collocations.tab").write_text(enc.tups2tab(params.collocations))
    (lang_dir / "sent_starters.txt").write_text(enc.set2txt(params.sent_starters))
    (lang_dir / "abbrev_types.txt").write_text(enc.set2txt(params.abbrev_types))
    (lang_dir / "ortho_context.tab").write_text(enc.ivdict2tab(params.ortho_context))
    return str(root)


@pytest.mark.parity
@pytest.mark.parametrize("keep_newlines", [False, True])
def test_split_sentences_with_punkt_matches_megatron(tmp_path, monkeypatch, keep_newlines):
    punkt = pytest.importorskip("nltk.tokenize.punkt")
    docs = [d.replace(". ", ".\n", 1) for d in make_documents(80, seed=3, max_sentences=6)]
    monkeypatch.setenv("NLTK_DATA", _punkt_data(tmp_path, docs))
    records = [{"text": d} for d in docs] + [{"text": ""}, {"text": "\n"}]
    path = _write(tmp_path / "in.jsonl", records)
    res = _run(tmp_path, [path], split_sentences=True, keep_newlines=keep_newlines)
    model = punkt.PunktTokenizer("english")
    if keep_newlines:

        class Vars(punkt.PunktLanguageVars):
            _period_context_fmt = r"""
                \S*  %(SentEndChars)s  \s*
                (?=(?P<after_tok> %(NonWord)s | (?P<next_tok>\S+)))"""

        model = punkt.PunktSentenceTokenizer(train_text=model._params, lang_vars=Vars())
    tok = tok_lib.ByteTokenizer()
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    ref = megatron_reference(
        lines,
        ["text"],
        tok.tokenize,
        tok.eod,
        tok.vocab_size,
        str(tmp_path / "mg"),
        splitter=model.tokenize,
    )
    assert res.outputs["text"].endswith("_text_sentence")
    jb_bin, jb_idx = read_bytes(res.outputs["text"])
    mg_bin, mg_idx = read_bytes(ref["text"])
    assert jb_bin == mg_bin and jb_idx == mg_idx
    assert res.keys["text"]["sequences"] > len(docs)  # really split
    if keep_newlines:
        assert b"\n" in jb_bin


def test_split_sentences_without_punkt_data_names_it(tmp_path, monkeypatch):
    pytest.importorskip("nltk")
    monkeypatch.setenv("NLTK_DATA", str(tmp_path / "empty"))
    import nltk

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "empty")])
    monkeypatch.setattr(worker, "splitter_for", functools.cache(worker.splitter_for.__wrapped__))
    with pytest.raises(sentences.SplitterError, match=r"punkt_tab/english.*nltk.downloader"):
        sentences.make_splitter("punkt", "english")
    path = _write(tmp_path / "in.jsonl", [{"text": "One. Two."}])
    with pytest.raises(sentences.SplitterError, match="--sentence_splitter=builtin"):
        _run(tmp_path, [path], split_sentences=True)
    res = _run(tmp_path, [path], split_sentences=True, sentence_splitter="builtin")
    assert res.keys["text"]["sequences"] == 2


def _cli(args, cwd, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    return run_tool("jaxblend.tools.preprocess", [*args], cwd=cwd, env=env)


@pytest.mark.parity
def test_megatron_documented_command_lines_run_verbatim(tmp_path, tokenizer_files):
    # The command of Megatron-LM's docs (user-guide/data-preparation.md), with a tokenizer
    # directory, and the classic GPT-2 one, each with a space-separated --json-keys list.
    records = _corpus(60)
    _write(tmp_path / "data.jsonl", records)
    tok_dir = tmp_path / "tokenizer"
    tok_dir.mkdir()
    shutil.copy(tokenizer_files["hf_bpe"]["model"], tok_dir / "tokenizer.json")
    r = _cli(
        [
            "--input",
            "data.jsonl",
            "--output-prefix",
            "processed_data",
            "--tokenizer-type",
            "HuggingFaceTokenizer",
            "--tokenizer-model",
            str(tok_dir),
            "--workers",
            "8",
            "--append-eod",
            "--json-keys",
            "text",
            "title",
        ],
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    tok = tok_lib.load_tokenizer(tok_spec.TokenizerSpec(**tokenizer_files["hf_bpe"]))
    with open(tmp_path / "data.jsonl", encoding="utf-8") as f:
        lines = f.readlines()
    ref = megatron_reference(
        lines, ["text", "title"], tok.tokenize, tok.eod, tok.vocab_size, str(tmp_path / "mg")
    )
    for key in ("text", "title"):
        assert read_bytes(str(tmp_path / f"processed_data_{key}_document")) == read_bytes(ref[key])

    g = tokenizer_files["gpt2"]
    r = _cli(
        [
            "--input",
            "data.jsonl",
            "--output-prefix",
            "my-gpt2",
            "--vocab-file",
            g["vocab_file"],
            "--tokenizer-type",
            "GPT2BPETokenizer",
            "--merge-file",
            g["merge_file"],
            "--append-eod",
            "--workers",
            "2",
            "--partitions",
            "1",
            "--log-interval",
            "1000",
            "--keep-sequential-samples",
        ],
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    tok = tok_lib.load_tokenizer(tok_spec.TokenizerSpec(**g))
    ref = megatron_reference(
        lines, ["text"], tok.tokenize, tok.eod, tok.vocab_size, str(tmp_path / "g")
    )
    assert read_bytes(str(tmp_path / "my-gpt2_text_document")) == read_bytes(ref["text"])


def test_tokenizer_model_directory_without_model_file_is_one_clear_line(tmp_path):
    (tmp_path / "data.jsonl").write_text('{"text": "a"}\n')
    (tmp_path / "empty_dir").mkdir()
    r = _cli(
        [
            "--input",
            "data.jsonl",
            "--output-prefix",
            "out",
            "--tokenizer-type",
            "HuggingFaceTokenizer",
            "--tokenizer-model",
            "empty_dir",
        ],
        cwd=tmp_path,
    )
    assert r.returncode == 1
    assert "empty_dir" in r.stderr and "tokenizer.json" in r.stderr
    assert "Traceback" not in r.stderr


def _legacy_gpt2_tokenize(vocab_file: str, merge_file: str):
    """Megatron-LM's legacy ``_GPT2BPETokenizer`` (``--legacy-tokenizer``), restated from its source
    (megatron/training/tokenizer/gpt2_tokenization.py; megatron.training is not in megatron-core, so
    it cannot be imported here): GPT-2's regex, bytes mapped to printable characters, merges applied
    lowest rank first, ``special_tokens=[]`` (special-token text is ordinary text), unknown -> 0."""
    import regex

    with open(vocab_file, encoding="utf-8") as f:
        encoder = json.load(f)
    with open(merge_file, encoding="utf-8") as f:
        ranks = {tuple(m.split()): r for r, m in enumerate(f.read().split("\n")[1:-1])}
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    byte_char = {b: chr(b) for b in printable}
    for b in range(256):
        if b not in byte_char:
            byte_char[b] = chr(256 + len(byte_char) - len(printable))
    pattern = regex.compile(
        r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
    )

    def bpe(word: str) -> list[str]:
        parts = list(word)
        while len(parts) > 1:
            best = min(itertools.pairwise(parts), key=lambda p: ranks.get(p, float("inf")))
            if best not in ranks:
                break
            merged, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and (parts[i], parts[i + 1]) == best:
                    merged.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        return parts

    def tokenize(text: str) -> list[int]:
        return [
            encoder.get(piece, 0)
            for chunk in pattern.findall(text)
            for piece in bpe("".join(byte_char[b] for b in chunk.encode("utf-8")))
        ]

    return tokenize, encoder["<|endoftext|>"], len(encoder)


@pytest.mark.parity
def test_legacy_gpt2_command_line_with_dataset_impl_is_byte_identical(tmp_path, tokenizer_files):
    # Megatron's classic GPT-2 command line as older scripts write it: --legacy-tokenizer and
    # --dataset-impl mmap. The legacy GPT-2 tokenizer gives the same ids, so the same files.
    records = _corpus(60)
    records.append({"text": "a <|endoftext|> inside the text", "title": "t"})
    _write(tmp_path / "data.jsonl", records)
    g = tokenizer_files["gpt2"]
    r = _cli(
        ["--input", "data.jsonl", "--output-prefix", "legacy", "--vocab-file", g["vocab_file"],
         "--merge-file", g["merge_file"], "--tokenizer-type", "GPT2BPETokenizer",
         "--legacy-tokenizer", "--dataset-impl", "mmap", "--append-eod", "--workers", "2"],
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert "note: --legacy-tokenizer: Megatron's legacy GPT2BPETokenizer gives the same ids" in r.stderr
    assert "note: --dataset-impl mmap" in r.stderr
    tokenize, eod, vocab_size = _legacy_gpt2_tokenize(g["vocab_file"], g["merge_file"])
    with open(tmp_path / "data.jsonl", encoding="utf-8") as f:
        lines = f.readlines()
    ref = megatron_reference(lines, ["text"], tokenize, eod, vocab_size, str(tmp_path / "mg"))
    assert read_bytes(str(tmp_path / "legacy_text_document")) == read_bytes(ref["text"])


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        ([], 2, ("--tokenizer-type is required (as in Megatron's preprocess_data.py): one of "
                 + ", ".join(tok_spec.TOKENIZER_TYPES))),
        (["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", "tok.json",
          "--legacy-tokenizer"], 1,
         ("--legacy-tokenizer with --tokenizer-type HuggingFaceTokenizer is not supported: "
          "Megatron's legacy HuggingFaceTokenizer gives other ids than megatron-core's (it calls "
          "the transformers tokenizer with add_special_tokens on")),
        (["--tokenizer-type", "SentencePieceTokenizer", "--tokenizer-model", "t.model",
          "--legacy-tokenizer"], 1, "appends <CLS>, <SEP>, <EOD>, <MASK> to the vocabulary"),
        (["--tokenizer-type", "ByteTokenizer", "--dataset-impl", "lazy"], 1,
         ("--dataset-impl lazy is not supported: jaxblend writes the mmap format only (the one "
          "megatron-core reads); use --dataset-impl mmap or drop the flag")),
    ],
    ids=["no_tokenizer_type", "legacy_hf", "legacy_sentencepiece", "dataset_impl_lazy"],
)
def test_megatron_flags_that_would_change_the_output_are_one_clear_line(tmp_path, args, code,
                                                                       message):
    (tmp_path / "data.jsonl").write_text('{"text": "a"}\n')
    r = _cli(["--input", "data.jsonl", "--output-prefix", "out", *args], cwd=tmp_path)
    assert r.returncode == code, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], r.stderr
    assert not list(tmp_path.glob("out*"))


@pytest.mark.parity
@pytest.mark.parametrize("kind", ["GPTSentencePieceTokenizer", "NullTokenizer"])
def test_other_legacy_types_with_the_same_ids_are_byte_identical(tmp_path, tokenizer_files, kind):
    # The legacy classes restated from megatron/training/tokenizer/tokenizer.py:
    # _GPTSentencePieceTokenizer: encode_as_ids, eod = eos_id, vocabulary = the model's pieces;
    # _NullTokenizer: int() of the space-separated fields, eod = vocab_size, vocabulary + 1.
    if kind == "NullTokenizer":
        records = [{"text": " ".join(str((7 * i + j) % 500) for j in range(i % 9 + 1))}
                   for i in range(40)]
        tok_args = ["--vocab-size", "500"]
        tokenize, eod, vocab_size = (lambda t: [int(x) for x in t.split(" ")]), 500, 501
    else:
        import sentencepiece as spm

        records = _corpus(40)
        model = tokenizer_files["sentencepiece"]["model"]
        tok_args = ["--tokenizer-model", model]
        sp = spm.SentencePieceProcessor(model_file=model)
        tokenize, eod, vocab_size = sp.encode_as_ids, sp.eos_id(), len(sp)
    _write(tmp_path / "data.jsonl", records)
    r = _cli(["--input", "data.jsonl", "--output-prefix", "legacy", "--tokenizer-type", kind,
              *tok_args, "--legacy-tokenizer", "--append-eod", "--workers", "2"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"note: --legacy-tokenizer: Megatron's legacy {kind} gives the same ids" in r.stderr
    with open(tmp_path / "data.jsonl", encoding="utf-8") as f:
        lines = f.readlines()
    ref = megatron_reference(lines, ["text"], tokenize, eod, vocab_size, str(tmp_path / "mg"))
    assert read_bytes(str(tmp_path / "legacy_text_document")) == read_bytes(ref["text"])
