r"""Tokenizes raw text into Megatron-compatible IndexedDataset files (``.bin``/``.idx``).

Accepts Megatron-LM's ``tools/preprocess_data.py`` command line as it is (dashed names, lists
separated by spaces: ``--output-prefix out --json-keys text title``) as well as absl spellings
(``--output_prefix=out --json_keys=text,title``). With the same input and tokenizer the output bytes
equal Megatron's (docs/preprocessing.md states the per-document rules and the differences).
Outputs are ``{output_prefix}_{key}_{level}.bin/.idx``, level ``document`` (or ``sentence`` with
``--split_sentences``). Rerunning with the same flags resumes an interrupted run; different flags
into the same prefix are refused unless ``--overwrite``.

Example::

    python -m jaxblend.tools.preprocess \
      --input data.jsonl --output-prefix out/corpus \
      --tokenizer-type HuggingFaceTokenizer --tokenizer-model /models/llama3 \
      --workers 8 --append-eod

    # the same on Apache Beam (any runner; parts must be on a filesystem all workers see)
    python -m jaxblend.tools.preprocess ... --engine=beam --beam_options=--runner=DirectRunner

    # cleaning before tokenization (docs/cleaning.md): report in out/corpus.cleaning.json/.png
    python -m jaxblend.tools.preprocess --input data.jsonl --output-prefix out/corpus \
      --clean_pii --clean_quality=all --clean_exact_dedup --clean_near_dedup \
      --clean_decontaminate=eval/test.jsonl
"""

from __future__ import annotations

import dataclasses
import json
import os

from absl import app, flags

from jaxblend.preprocess import config as config_lib
from jaxblend.preprocess import partitions as partitions_lib
from jaxblend.preprocess import pipeline, records, sentences
from jaxblend.preprocess import tokenizer_spec as tok_spec
from jaxblend.preprocess.cleaning import FILTER_NAMES, CleaningConfig
from jaxblend.preprocess.cleaning import report as report_lib
from jaxblend.tools import _entry

_INPUT = flags.DEFINE_multi_string(
    "input", None, "Input files or globs; comma-separated and/or repeated.", required=True
)
_OUTPUT_PREFIX = flags.DEFINE_string(
    "output_prefix", None, "Output prefix: writes {prefix}_{key}_{level}.bin/.idx.", required=True
)
_JSON_KEYS = flags.DEFINE_list(
    "json_keys", ["text"], "Fields to tokenize, one dataset per key (comma- or space-separated)."
)
_TOKENIZER_TYPE = flags.DEFINE_string(
    "tokenizer_type",
    "ByteTokenizer",
    "One of "
    + ", ".join(tok_spec.TOKENIZER_TYPES)
    + " (aliases byte, hf, gpt2, sentencepiece, tiktoken).",
)
_TOKENIZER_MODEL = flags.DEFINE_string(
    "tokenizer_model",
    None,
    "Tokenizer file or a directory holding it (tokenizer.json, tokenizer.model, ...).",
)
_VOCAB_FILE = flags.DEFINE_string("vocab_file", None, "HF tokenizer.json or GPT-2 vocab.json.")
_MERGE_FILE = flags.DEFINE_string("merge_file", None, "GPT-2 merges.txt.")
_TIKTOKEN_PATTERN = flags.DEFINE_string(
    "tiktoken_pattern",
    None,
    "TikTokenizer regex: v1/v2 (Megatron's, with a tiktoken JSON vocabulary), or gpt2/cl100k/"
    "a literal regex (with a base64 ranks file).",
)
_TIKTOKEN_NUM_SPECIAL = flags.DEFINE_integer(
    "tiktoken_num_special_tokens", 1000, "TikTokenizer: ids reserved for special tokens."
)
_TOKENIZER_SPECIAL = flags.DEFINE_list(
    "tokenizer_special_tokens",
    None,
    "TikTokenizer: its first special tokens (space-separated; must include Megatron's seven).",
)
_TIKTOKEN_SPECIAL = flags.DEFINE_list(
    "tiktoken_special_tokens", None, "Accepted for Megatron command lines; unused by Megatron too."
)
_VOCAB_SIZE = flags.DEFINE_integer("vocab_size", None, "NullTokenizer: vocabulary size.")
_LEGACY_TOKENIZER = flags.DEFINE_bool(
    "legacy_tokenizer",
    False,
    "Megatron's legacy tokenizer classes: not supported (the ids are megatron-core's).",
)
_APPEND_EOD = flags.DEFINE_bool("append_eod", False, "Append the EOD token to every document.")
_SPLIT_SENTENCES = flags.DEFINE_bool(
    "split_sentences", False, "One sequence per sentence; level 'sentence'."
)
_SENTENCE_SPLITTER = flags.DEFINE_enum(
    "sentence_splitter",
    sentences.PUNKT,
    list(sentences.SPLITTERS),
    "punkt: NLTK Punkt, as Megatron (needs its punkt_tab data); builtin: no data files.",
)
_LANG = flags.DEFINE_string("lang", "english", "Punkt language for --split_sentences.")
_KEEP_NEWLINES = flags.DEFINE_bool(
    "keep_newlines", False, "Keep newlines between sentences when splitting (Punkt)."
)
_KEEP_SEQUENTIAL = flags.DEFINE_bool(
    "keep_sequential_samples",
    True,
    "Accepted for Megatron command lines: the output always keeps the input order.",
)
_DROP_EMPTY = flags.DEFINE_bool(
    "drop_empty_documents",
    False,
    "Drop records whose text has no tokens (counted as 'empty'); by default they are kept as "
    "documents with zero sequences, as Megatron does.",
)
_TEXT_MODE = flags.DEFINE_enum(
    "text_mode", "line", list(partitions_lib.TEXT_MODES), ".txt inputs: one document per line or per file."
)
_WORKERS = flags.DEFINE_integer("workers", 0, "Worker processes (0 = all cores).", lower_bound=0)
_PARTITIONS = flags.DEFINE_integer(
    "partitions", 0, "Partitions (0 = one per 32 MiB of input, at least 8).", lower_bound=0
)
_KEEP_PARTS = flags.DEFINE_bool("keep_parts", False, "Keep partial datasets instead of merging.")
_LOG_INTERVAL = flags.DEFINE_integer(
    "log_interval", 100_000, "Log progress every this many documents (0 = never).", lower_bound=0
)
_ON_ERROR = flags.DEFINE_enum(
    "on_error", "skip", list(records.ON_ERROR), "Bad records: skip (count, report) or fail."
)
_MAX_DOCUMENT_CHARS = flags.DEFINE_integer(
    "max_document_chars",
    0,
    "Drop documents longer than this (characters; 0 = no limit).",
    lower_bound=0,
)
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "Discard a run with different settings.")
_PROGRESS = flags.DEFINE_bool("progress", True, "Show a progress bar.")
_ENGINE = flags.DEFINE_enum("engine", "local", ["local", "beam"], "Where partitions run.")
_BEAM_OPTIONS = flags.DEFINE_multi_string(
    "beam_options",
    [],
    "Beam pipeline options passed through, e.g. --beam_options=--runner=DirectRunner.",
)
_SUMMARY_JSON = flags.DEFINE_string("summary_json", None, "Also write the result as JSON here.")

# Cleaning before tokenization (docs/cleaning.md); every step is off unless asked for.
_CLEAN_CONFIG = flags.DEFINE_string(
    "clean_config",
    None,
    'JSON file of cleaning settings (the fields of CleaningConfig, e.g. {"pii": true, '
    '"quality": ["all"]}); --clean_* flags given on the command line override it.',
)
_CLEAN_PII = flags.DEFINE_bool("clean_pii", False, "Replace e-mail and IP addresses.")
_CLEAN_PII_ALL_IPS = flags.DEFINE_bool(
    "clean_pii_all_ips", False, "Also replace private/loopback IPs (default: global ones only)."
)
_CLEAN_QUALITY = flags.DEFINE_list(
    "clean_quality", [], "Gopher quality filters: all or some of " + ",".join(FILTER_NAMES) + "."
)
_CLEAN_QUALITY_THRESHOLDS = flags.DEFINE_list(
    "clean_quality_thresholds",
    [],
    "Bound overrides, e.g. word_count.min=20,dup_lines.max=0.5.",
)
_CLEAN_LANG_MODEL = flags.DEFINE_string(
    "clean_lang_model", None, "fastText language-ID model file (e.g. lid.176.bin); not downloaded."
)
_CLEAN_LANGUAGES = flags.DEFINE_list("clean_languages", [], "Languages to keep, e.g. en,fr.")
_CLEAN_LANG_MIN_SCORE = flags.DEFINE_float(
    "clean_lang_min_score", 0.65, "Minimum language-ID probability."
)
_CLEAN_DECONTAMINATE = flags.DEFINE_list(
    "clean_decontaminate", [], "Evaluation files: drop documents sharing an n-gram with them."
)
_CLEAN_DECONTAM_NGRAM = flags.DEFINE_integer(
    "clean_decontam_ngram", 13, "Decontamination n-gram length (words).", lower_bound=1
)
_CLEAN_DECONTAM_KEY = flags.DEFINE_string(
    "clean_decontam_key", "text", "Field of JSON-lines evaluation files."
)
_CLEAN_EXACT = flags.DEFINE_bool("clean_exact_dedup", False, "Drop exact (normalized) duplicates.")
_CLEAN_NEAR = flags.DEFINE_bool("clean_near_dedup", False, "Drop MinHash/LSH near-duplicates.")
_CLEAN_SHINGLE = flags.DEFINE_integer("clean_shingle", 5, "MinHash shingle: words per n-gram.")
_CLEAN_NUM_PERM = flags.DEFINE_integer("clean_num_perm", 112, "MinHash permutations.")
_CLEAN_BANDS = flags.DEFINE_integer("clean_bands", 14, "LSH bands (num_perm / bands rows each).")
_CLEAN_NEAR_THRESHOLD = flags.DEFINE_float(
    "clean_near_threshold", 0.8, "Estimated Jaccard similarity of a near-duplicate."
)
_CLEAN_SEED = flags.DEFINE_integer("clean_seed", 1, "MinHash seed.")
_CLEAN_JOIN_MEMORY_MB = flags.DEFINE_integer(
    "clean_join_memory_mb", 1024, "Memory budget of the duplicate join (MB).", lower_bound=1
)
_CLEAN_PLOT = flags.DEFINE_bool("clean_plot", True, "Write the quality-score PNG (matplotlib).")

# flag -> CleaningConfig field, and how to read the flag's value.
_CLEAN_FLAGS = (
    (_CLEAN_PII, "pii", bool),
    (_CLEAN_PII_ALL_IPS, "pii_public_ips_only", lambda v: not v),
    (_CLEAN_QUALITY, "quality", tuple),
    (_CLEAN_QUALITY_THRESHOLDS, "quality_thresholds", None),
    (_CLEAN_LANG_MODEL, "lang_model", None),
    (_CLEAN_LANGUAGES, "languages", tuple),
    (_CLEAN_LANG_MIN_SCORE, "lang_min_score", float),
    (_CLEAN_DECONTAMINATE, "decontaminate", tuple),
    (_CLEAN_DECONTAM_NGRAM, "decontam_ngram", int),
    (_CLEAN_DECONTAM_KEY, "decontam_key", str),
    (_CLEAN_EXACT, "exact_dedup", bool),
    (_CLEAN_NEAR, "near_dedup", bool),
    (_CLEAN_SHINGLE, "shingle", int),
    (_CLEAN_NUM_PERM, "num_perm", int),
    (_CLEAN_BANDS, "bands", int),
    (_CLEAN_NEAR_THRESHOLD, "near_threshold", float),
    (_CLEAN_SEED, "seed", int),
    (_CLEAN_JOIN_MEMORY_MB, "join_memory_mb", int),
    (_CLEAN_PLOT, "plot", bool),
)


def _thresholds(items: list[str]) -> tuple[tuple[str, float], ...]:
    out = []
    for item in items:
        name, sep, value = item.partition("=")
        try:
            out.append((name.strip(), float(value)))
        except ValueError:
            sep = ""
        if not sep:
            raise ValueError(
                f"--clean_quality_thresholds entry {item!r} must be <filter>.min=<number> or "
                "<filter>.max=<number>"
            )
    return tuple(sorted(out))


def cleaning_from_flags() -> CleaningConfig | None:
    """The cleaning settings: ``--clean_config``'s file, then the ``--clean_*`` flags given."""
    values: dict = {}
    path = _CLEAN_CONFIG.value
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                values = json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError(f"--clean_config={path}: cannot read a JSON object ({e})") from None
        known = {f.name for f in dataclasses.fields(CleaningConfig)}
        unknown = sorted(set(values) - known) if isinstance(values, dict) else ["(not an object)"]
        if unknown:
            raise ValueError(
                f"--clean_config={os.path.abspath(path)}: unknown setting(s) {unknown}; "
                f"known: {', '.join(sorted(known))}"
            )
        if isinstance(values.get("quality_thresholds"), dict):
            values["quality_thresholds"] = tuple(sorted(values["quality_thresholds"].items()))
    for flag, field, convert in _CLEAN_FLAGS:
        if flags.FLAGS[flag.name].present or field not in values:
            v = flag.value
            if field == "quality_thresholds":
                v = _thresholds(v or [])
            elif convert is not None:
                v = convert(v if v is not None else ())
            values[field] = v
    config = CleaningConfig(**values)
    return config if config.enabled else None


def config_from_flags() -> config_lib.PreprocessConfig:
    """Builds the run configuration from the parsed flags."""
    inputs = tuple(p.strip() for value in _INPUT.value for p in value.split(",") if p.strip())
    if _LEGACY_TOKENIZER.value:
        raise ValueError(
            "--legacy_tokenizer is not supported: jaxblend produces the ids of megatron-core's "
            "tokenizers (preprocess_data.py's default); drop the flag"
        )
    specials = tuple(_TOKENIZER_SPECIAL.value or ())
    if specials and tok_spec.canonical_type(_TOKENIZER_TYPE.value) != tok_spec.TIKTOKEN:
        raise ValueError("--tokenizer_special_tokens is supported with TikTokenizer only")
    spec = tok_spec.TokenizerSpec(
        type=_TOKENIZER_TYPE.value,
        model=_TOKENIZER_MODEL.value,
        vocab_file=_VOCAB_FILE.value,
        merge_file=_MERGE_FILE.value,
        tiktoken_pattern=_TIKTOKEN_PATTERN.value,
        tiktoken_num_special_tokens=_TIKTOKEN_NUM_SPECIAL.value,
        tiktoken_special_tokens=specials,
        vocab_size=_VOCAB_SIZE.value,
    )
    return config_lib.PreprocessConfig(
        input=inputs,
        output_prefix=_OUTPUT_PREFIX.value,
        json_keys=tuple(_JSON_KEYS.value),
        tokenizer=spec,
        append_eod=_APPEND_EOD.value,
        split_sentences=_SPLIT_SENTENCES.value,
        text_mode=_TEXT_MODE.value,
        workers=_WORKERS.value,
        partitions=_PARTITIONS.value,
        keep_parts=_KEEP_PARTS.value,
        log_interval=_LOG_INTERVAL.value,
        on_error=_ON_ERROR.value,
        max_document_chars=_MAX_DOCUMENT_CHARS.value,
        overwrite=_OVERWRITE.value,
        progress=_PROGRESS.value,
        drop_empty=_DROP_EMPTY.value,
        sentence_splitter=_SENTENCE_SPLITTER.value,
        lang=_LANG.value,
        keep_newlines=_KEEP_NEWLINES.value,
        cleaning=cleaning_from_flags(),
    )


def main(argv: list[str]) -> int:
    """Runs preprocessing from flags; prints the summary; returns the exit status."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    config = config_from_flags()
    engine = None
    if _ENGINE.value == "beam":
        from jaxblend.preprocess import beam

        engine = beam.BeamEngine(_BEAM_OPTIONS.value)
    result = pipeline.preprocess(config, engine)
    print(result.summary())
    if result.cleaning is not None:
        json_path, _ = report_lib.paths(config.output_prefix)
        print(
            f"cleaning report: {json_path}"
            + (f", {result.cleaning['plot']}" if result.cleaning.get("plot") else "")
        )
    if _SUMMARY_JSON.value:
        with open(_SUMMARY_JSON.value, "w", encoding="utf-8") as f:
            json.dump(result.to_json(), f, indent=1)
    return 0


# Megatron-LM's argparse flags that take several space-separated values.
MEGATRON_NARGS = ("json_keys", "tokenizer_special_tokens", "tiktoken_special_tokens", "input")


def run() -> None:
    """Entry point: parses Megatron or absl spellings, then runs :func:`main` (one-line errors)."""
    _entry.run(main, megatron_nargs=MEGATRON_NARGS)


if __name__ == "__main__":
    run()
