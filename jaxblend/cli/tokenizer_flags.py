"""Tokenizer flags of the programs that read data (training, inspect, dump_batches) and the run's
`TokenizerFacts`.

`define_tokenizer_flags()` defines `--allow_mixed_tokenizers` and Megatron-LM's
`--tokenizer_type`, `--tokenizer_model`, `--vocab_file`, `--merge_file` (dashed spellings
accepted): they name the tokenizer of datasets without a preprocessing record (made by
Megatron-LM); datasets made by `jaxblend.tools.preprocess` carry their own
(`jaxblend.tokenizer_facts`). `run_tokenizer_from_flags(config, access)` gathers the facts of
every dataset of the configuration, refuses a blend of different tokenizers, and returns the
defaults of `--vocab_size` and `--eod_id`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from absl import flags, logging

from jaxblend import index
from jaxblend.access import DataAccess
from jaxblend.cli import flag_help
from jaxblend.tokenizer_facts import TokenizerFacts, blend_facts


def define_tokenizer_flags() -> None:
    """Defines the tokenizer flags (once per program)."""
    with flag_help.group(flag_help.DATA):
        flags.DEFINE_bool(
            "allow_mixed_tokenizers", False,
            "Accept a blend whose datasets were tokenized by different tokenizers.",
        )
        flags.DEFINE_string(
            "tokenizer_type", None,
            "Tokenizer of datasets without a preprocessing record (Megatron-LM's names, e.g. "
            "HuggingFaceTokenizer); datasets made by jaxblend.tools.preprocess record their own "
        "(default: none, the recorded tokenizers only).",
        )
        flags.DEFINE_string(
            "tokenizer_model", None, "With --tokenizer_type: its model file (default: none)."
        )
        flags.DEFINE_string(
            "vocab_file", None,
            "With --tokenizer_type: HF tokenizer.json or GPT-2 vocab.json (default: none).",
        )
        flags.DEFINE_string(
            "merge_file", None, "With --tokenizer_type: GPT-2 merges.txt (default: none)."
        )


@dataclasses.dataclass(frozen=True)
class RunTokenizer:
    """The tokenizer facts of a run's datasets.

    Attributes:
      facts: prefix -> facts of each dataset whose tokenizer is known.
      vocab_size: the recorded vocabulary (default of `--vocab_size`; the largest with
        `--allow_mixed_tokenizers`), None when unknown.
      eod_id: the recorded EOD id (default of `--eod_id`), None when unknown or absent.
      pad_id: the recorded pad id, None when unknown or absent.
      spec: the `TokenizerSpec` of `--tokenizer_type` & co., or None (what `--fim_data` loads
        for data without a preprocessing record).
    """

    facts: dict[str, TokenizerFacts]
    vocab_size: int | None = None
    eod_id: int | None = None
    pad_id: int | None = None
    spec: Any = None


def spec_from_flags(**settings):
    """The `TokenizerSpec` of `--tokenizer_type`, `--tokenizer_model`, `--vocab_file`,
    `--merge_file` and the other `settings` (the preprocessing CLI's), or None without a type."""
    fl = flags.FLAGS
    if not fl.tokenizer_type:
        return None
    from jaxblend.preprocess import tokenizer_spec

    return tokenizer_spec.TokenizerSpec(
        type=fl.tokenizer_type, model=fl.tokenizer_model, vocab_file=fl.vocab_file,
        merge_file=fl.merge_file, **settings,
    )


def decoder_from_flags(prefixes: list[str], access: DataAccess):
    """The tokenizer `--decode` uses for ``prefixes`` (recorded, else `--tokenizer_type` & co.).

    Raises:
      DecodeError: it cannot be found or verified (one line saying how to supply it).
    """
    from jaxblend.decode import load_decoder

    return load_decoder(prefixes, access, spec_from_flags())


def run_tokenizer_from_flags(
    config: index.GPTDataConfig | None, access: DataAccess
) -> RunTokenizer:
    """The tokenizer facts of the configuration's datasets (none with mock data).

    Raises:
      TokenizerMismatchError: two datasets come from different tokenizers and
        `--allow_mixed_tokenizers` is not given.
    """
    if config is None:
        return RunTokenizer({})
    from jaxblend.map_store import publication

    spec, fallback = spec_from_flags(), None
    if spec is not None:  # its facts: the tokenizer is loaded, offline
        from jaxblend.preprocess import tokenizer_spec, tokenizers

        fallback = tokenizer_spec.facts_of(spec, tokenizers.load_tokenizer(spec))
    facts = blend_facts(
        index.config_prefixes(config), access, fallback,
        allow_mixed=flags.FLAGS.allow_mixed_tokenizers,
        known=publication.published_tokenizers(config, access),
    )
    if not facts:
        return RunTokenizer({}, spec=spec)
    first = next(iter(facts.values()))
    logging.info("tokenizer of the data: %s", first.describe())
    vocab = max(f.vocab_size for f in facts.values())  # mixed tokenizers: the largest
    return RunTokenizer(facts, vocab, first.eod_id, first.pad_id, spec)
