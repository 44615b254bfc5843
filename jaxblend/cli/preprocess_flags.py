"""Flags of the preprocessing CLI (`jaxblend.tools.preprocess`) and their `PreprocessConfig`.

Named after Megatron-LM's `tools/preprocess_data.py` (whose dashed, space-separated spellings
`jaxblend.cli.call` accepts for `MEGATRON_NARGS`), plus the cleaning flags (docs/cleaning.md), the
bucket output's `--work_dir` and the object-store flags (`jaxblend.cli.object_store_flags`).
"""

from __future__ import annotations

import dataclasses
import json
import os

from absl import app, flags

from jaxblend.cli import flag_help, object_store_flags, tokenizer_flags
from jaxblend.preprocess import config as config_lib
from jaxblend.preprocess import partitions, records, sentences
from jaxblend.preprocess import tokenizer_spec as tok_lib
from jaxblend.preprocess.cleaning import FILTER_NAMES, CleaningConfig

# Megatron-LM's argparse flags that take several space-separated values.
MEGATRON_NARGS = ("json_keys", "tokenizer_special_tokens", "tiktoken_special_tokens", "input")

# Types whose Megatron legacy class (megatron/training/tokenizer/tokenizer.py, with
# --legacy-tokenizer) gives the ids jaxblend gives; read from that source, not run (megatron.training
# is not part of megatron-core): _GPT2BPETokenizer is the byte-level BPE of vocab.json/merges.txt with
# no special tokens in the text (special_tokens=[]), eod = encoder['<|endoftext|>'], vocabulary
# len(encoder); _GPTSentencePieceTokenizer is encode_as_ids, eod = eos, vocabulary = the pieces;
# _NullTokenizer is int() of the space-separated fields, eod = vocab_size.
LEGACY_SAME_IDS = (tok_lib.GPT2BPE, tok_lib.GPT_SENTENCEPIECE, tok_lib.NULL)

# Why the legacy class of the other types gives other ids (the same source).
_LEGACY_DIFFERS = {
    tok_lib.HUGGINGFACE: "it calls the transformers tokenizer with add_special_tokens on (e.g. a "
    "BOS before every text)",
    tok_lib.SENTENCEPIECE: "it appends <CLS>, <SEP>, <EOD>, <MASK> to the vocabulary (another EOD "
    "id) and cuts the text at those strings",
    tok_lib.LLAMA2: "it puts BOS before every text",
    tok_lib.TIKTOKEN: "its special tokens default to <unk>, <s>, </s> (megatron-core's to seven), "
    "so the ids are not checked to be the same",
    tok_lib.BYTE: "Megatron has no legacy ByteTokenizer",
}

_DATASET_IMPL = "mmap"


def define_preprocess_flags() -> None:
    """Defines the preprocessing flags (Megatron-LM's `preprocess_data.py` names, and cleaning),
    grouped for `--help`: the common ones (input, output prefix, tokenizer, workers) first."""
    with flag_help.group(flag_help.INPUT):
        flags.DEFINE_multi_string(
            "input", None,
            "Input files or globs, or gs:// / s3:// objects; comma-separated and/or repeated "
            "(required).",
            required=True
        )
        flags.DEFINE_list(
            "json_keys", ["text"],
            "Fields to tokenize, one dataset per key (comma- or space-separated).",
        )
        flags.DEFINE_enum(
            "text_mode", "line", list(partitions.TEXT_MODES),
            ".txt inputs: one document per line or per file.",
        )
        flags.DEFINE_enum(
            "on_error", "skip", list(records.ON_ERROR), "Bad records: skip (count, report) or fail."
        )
        flags.DEFINE_bool(
            "chat",
            False,
            'Conversations: each --json_keys field (default "messages") is a list of {"role", '
            '"content"} messages, rendered with the HuggingFaceTokenizer\'s own chat template; also '
            "writes each dataset's loss mask (1 on assistant tokens) to .jaxblend/<name>_loss_mask.",
        )
    with flag_help.group(flag_help.OUTPUT):
        _define_output_flags()
    with flag_help.group(flag_help.TOKENIZER):
        _define_tokenizer_flags()
    with flag_help.group(flag_help.WORKERS):
        flags.DEFINE_integer("workers", 0, "Worker processes (0 = all cores).", lower_bound=0)
        flags.DEFINE_integer(
            "partitions", 0, "Partitions (0 = one per 32 MiB of input, at least 8).", lower_bound=0
        )
        flags.DEFINE_enum("engine", "local", ["local", "beam"], "Where partitions run.")
        flags.DEFINE_multi_string(
            "beam_options",
            [],
            "Beam pipeline options passed through, e.g. --beam_options=--runner=DirectRunner.",
        )
    with flag_help.group(flag_help.DOCUMENTS):
        _define_document_flags()
    object_store_flags.define_object_store_flags()
    with flag_help.group(flag_help.RUN):
        flags.DEFINE_bool("progress", True, "Show a progress bar.")
        flags.DEFINE_integer(
            "log_interval", 100_000, "Log progress every this many documents (0 = never).",
            lower_bound=0,
        )
    with flag_help.group(flag_help.MEGATRON):
        _define_megatron_compat_flags()
    with flag_help.group(flag_help.CLEANING):
        _define_cleaning_flags()


def _define_output_flags() -> None:
    flags.DEFINE_string(
        "output_prefix", None,
        "Output prefix (local, or gs:// / s3://): writes {prefix}_{key}_{level}.bin/.idx "
        "(required).",
        required=True
    )
    flags.DEFINE_bool("overwrite", False, "Discard a run with different settings.")
    flags.DEFINE_bool("keep_parts", False, "Keep partial datasets instead of merging.")
    flags.DEFINE_string(
        "work_dir", None,
        "With a gs:// or s3:// --output_prefix: local directory where the run is built (and "
        "resumed) before it is published; default <tmp>/jaxblend-preprocess/<hash of the URL>. "
        "Also holds the downloaded gs:// / s3:// --input objects (<work_dir>/inputs).",
    )
    flags.DEFINE_string(
        "summary_json", None, "Also write the result as JSON here (default: not written)."
    )


def _define_tokenizer_flags() -> None:
    flags.DEFINE_string(
        "tokenizer_type",
        None,
        "Required (as in Megatron): one of "
        + ", ".join(tok_lib.TOKENIZER_TYPES)
        + " (aliases byte, hf, gpt2, sentencepiece, tiktoken).",
    )
    flags.DEFINE_string(
        "tokenizer_model",
        None,
        "Tokenizer file or a directory holding it (tokenizer.json, tokenizer.model, ...); "
        "default: none, for the types that need no file or take --vocab_file.",
    )
    flags.DEFINE_bool("append_eod", False, "Append the EOD token to every document.")
    flags.DEFINE_string(
        "vocab_file", None, "HF tokenizer.json or GPT-2 vocab.json (default: none)."
    )
    flags.DEFINE_string("merge_file", None, "GPT-2 merges.txt (default: none).")
    flags.DEFINE_integer(
        "vocab_size", None, "NullTokenizer: vocabulary size (required by that type only)."
    )
    flags.DEFINE_string(
        "tiktoken_pattern",
        None,
        "TikTokenizer regex: v1/v2 (Megatron's, with a tiktoken JSON vocabulary), or gpt2/cl100k/"
        "a literal regex (with a base64 ranks file); default: none.",
    )
    flags.DEFINE_integer(
        "tiktoken_num_special_tokens", 1000, "TikTokenizer: ids reserved for special tokens."
    )
    flags.DEFINE_list(
        "tokenizer_special_tokens",
        None,
        "TikTokenizer: its first special tokens (space-separated; must include Megatron's "
        "seven; default: Megatron's seven).",
    )


def _define_document_flags() -> None:
    flags.DEFINE_bool(
        "split_sentences", False, "One sequence per sentence; level 'sentence'."
    )
    flags.DEFINE_enum(
        "sentence_splitter",
        sentences.PUNKT,
        list(sentences.SPLITTERS),
        "punkt: NLTK Punkt, as Megatron (needs its punkt_tab data); builtin: no data files.",
    )
    flags.DEFINE_string("lang", "english", "Punkt language for --split_sentences.")
    flags.DEFINE_bool(
        "keep_newlines", False, "Keep newlines between sentences when splitting (Punkt)."
    )
    flags.DEFINE_bool(
        "drop_empty_documents",
        False,
        "Drop records whose text has no tokens (counted as 'empty'); by default they are kept as "
        "documents with zero sequences, as Megatron does.",
    )
    flags.DEFINE_integer(
        "max_document_chars",
        0,
        "Drop documents longer than this (characters; 0 = no limit).",
        lower_bound=0,
    )


def _define_megatron_compat_flags() -> None:
    flags.DEFINE_bool(
        "legacy_tokenizer",
        False,
        "Megatron's legacy tokenizer classes: accepted for "
        + ", ".join(LEGACY_SAME_IDS)
        + " (same ids as without it), refused for the other types.",
    )
    flags.DEFINE_string(
        "dataset_impl",
        None,
        "Accepted for older Megatron command lines: only 'mmap', the one format written "
        "(default: mmap).",
    )
    flags.DEFINE_bool(
        "keep_sequential_samples",
        True,
        "Accepted for Megatron command lines: the output always keeps the input order.",
    )
    flags.DEFINE_list(
        "tiktoken_special_tokens", None,
        "Accepted for Megatron command lines; unused by Megatron too (default: none).",
    )


def _define_cleaning_flags() -> None:
    """Cleaning before tokenization (docs/cleaning.md); every step is off unless asked for."""
    flags.DEFINE_string(
        "clean_config",
        None,
        'JSON file of cleaning settings (the fields of CleaningConfig, e.g. {"pii": true, '
        '"quality": ["all"]}); --clean_* flags given on the command line override it '
        "(default: none, every step off).",
    )
    flags.DEFINE_bool("clean_pii", False, "Replace e-mail and IP addresses.")
    flags.DEFINE_bool(
        "clean_pii_all_ips", False, "Also replace private/loopback IPs (default: global ones only)."
    )
    flags.DEFINE_list(
        "clean_quality", [], "Gopher quality filters: all or some of " + ",".join(FILTER_NAMES) + "."
    )
    flags.DEFINE_list(
        "clean_quality_thresholds",
        [],
        "Bound overrides, e.g. word_count.min=20,dup_lines.max=0.5.",
    )
    flags.DEFINE_string(
        "clean_lang_model", None,
        "fastText language-ID model file (e.g. lid.176.bin); not downloaded (default: none, no "
        "language filter).",
    )
    flags.DEFINE_list("clean_languages", [], "Languages to keep, e.g. en,fr.")
    flags.DEFINE_float(
        "clean_lang_min_score", 0.65, "Minimum language-ID probability."
    )
    flags.DEFINE_list(
        "clean_decontaminate", [], "Evaluation files: drop documents sharing an n-gram with them."
    )
    flags.DEFINE_integer(
        "clean_decontam_ngram", 13, "Decontamination n-gram length (words).", lower_bound=1
    )
    flags.DEFINE_string(
        "clean_decontam_key", "text", "Field of JSON-lines evaluation files."
    )
    flags.DEFINE_bool("clean_exact_dedup", False, "Drop exact (normalized) duplicates.")
    flags.DEFINE_bool("clean_near_dedup", False, "Drop MinHash/LSH near-duplicates.")
    flags.DEFINE_integer("clean_shingle", 5, "MinHash shingle: words per n-gram.")
    flags.DEFINE_integer("clean_num_perm", 112, "MinHash permutations.")
    flags.DEFINE_integer("clean_bands", 14, "LSH bands (num_perm / bands rows each).")
    flags.DEFINE_float(
        "clean_near_threshold", 0.8, "Estimated Jaccard similarity of a near-duplicate."
    )
    flags.DEFINE_integer("clean_seed", 1, "MinHash seed.")
    flags.DEFINE_integer(
        "clean_join_memory_mb", 1024, "Memory budget of the duplicate join (MB).", lower_bound=1
    )
    flags.DEFINE_bool("clean_plot", True, "Write the quality-score PNG (matplotlib).")


# The `CleaningConfig` fields whose flag is not `--clean_<field>` (the flag says the opposite).
_CLEAN_FLAG_OF = {"pii_public_ips_only": "clean_pii_all_ips"}


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
    fl = flags.FLAGS
    values: dict = {}
    path = fl.clean_config
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
    for field in dataclasses.fields(CleaningConfig):  # lists become tuples in the config
        flag = fl[_CLEAN_FLAG_OF.get(field.name, f"clean_{field.name}")]
        if flag.present or field.name not in values:
            v = flag.value
            if field.name == "quality_thresholds":
                v = _thresholds(v or [])
            elif field.name in _CLEAN_FLAG_OF:
                v = not v
            values[field.name] = v
    config = CleaningConfig(**values)
    return config if config.enabled else None


def megatron_compat_notes() -> list[str]:
    """Notes on the Megatron flags accepted that change nothing (``--legacy-tokenizer`` for a type
    whose legacy class gives the same ids, ``--dataset-impl mmap``).

    Raises:
      ValueError: ``--legacy-tokenizer`` for a type whose legacy ids differ, or a ``--dataset-impl``
        other than ``mmap`` (the message says why and what to do).
    """
    fl = flags.FLAGS
    notes = []
    if fl.legacy_tokenizer:
        kind = tok_lib.canonical_type(fl.tokenizer_type)
        if kind not in LEGACY_SAME_IDS:
            raise ValueError(
                f"--legacy-tokenizer with --tokenizer-type {kind} is not supported: Megatron's legacy "
                f"{kind} gives other ids than megatron-core's ({_LEGACY_DIFFERS[kind]}); jaxblend "
                "writes megatron-core's ids (preprocess_data.py's default), so drop --legacy-tokenizer"
            )
        notes.append(
            f"note: --legacy-tokenizer: Megatron's legacy {kind} gives the same ids as "
            "megatron-core's, which jaxblend writes"
        )
    if fl.dataset_impl is not None:
        if fl.dataset_impl != _DATASET_IMPL:
            raise ValueError(
                f"--dataset-impl {fl.dataset_impl} is not supported: jaxblend writes the mmap format "
                "only (the one megatron-core reads); use --dataset-impl mmap or drop the flag"
            )
        notes.append("note: --dataset-impl mmap: the format jaxblend always writes")
    return notes


# The `PreprocessConfig` fields that are the value of the flag of the same name.
_AS_GIVEN = (
    "output_prefix", "chat", "append_eod", "split_sentences", "text_mode", "workers", "partitions",
    "keep_parts", "log_interval", "on_error", "max_document_chars", "overwrite", "work_dir",
    "progress", "sentence_splitter", "lang", "keep_newlines",
)


def preprocess_config_from_flags() -> config_lib.PreprocessConfig:
    """The `PreprocessConfig` of the parsed flags.

    Raises:
      ValueError: an unsupported or inconsistent flag (named in the message).
    """
    fl = flags.FLAGS
    inputs = tuple(p.strip() for value in fl.input for p in value.split(",") if p.strip())
    if not fl.tokenizer_type:
        raise app.UsageError(
            "--tokenizer-type is required (as in Megatron's preprocess_data.py): one of "
            + ", ".join(tok_lib.TOKENIZER_TYPES)
            + "; e.g. --tokenizer-type HuggingFaceTokenizer --tokenizer-model /path/to/tokenizer_dir"
        )
    megatron_compat_notes()  # refuses --legacy-tokenizer / --dataset-impl where they change output
    specials = tuple(fl.tokenizer_special_tokens or ())
    if specials and tok_lib.canonical_type(fl.tokenizer_type) != tok_lib.TIKTOKEN:
        raise ValueError("--tokenizer_special_tokens is supported with TikTokenizer only")
    spec = tokenizer_flags.spec_from_flags(
        tiktoken_pattern=fl.tiktoken_pattern,
        tiktoken_num_special_tokens=fl.tiktoken_num_special_tokens,
        tiktoken_special_tokens=specials,
        vocab_size=fl.vocab_size,
    )
    return config_lib.PreprocessConfig(
        input=inputs,
        json_keys=("messages",) if fl.chat and not fl["json_keys"].present else tuple(fl.json_keys),
        tokenizer=spec,
        drop_empty=fl.drop_empty_documents,
        object_store=object_store_flags.object_store_from_flags(),
        cleaning=cleaning_from_flags(),
        **{name: fl[name].value for name in _AS_GIVEN},
    )
