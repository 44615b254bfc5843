r"""Tokenizes raw text into Megatron-compatible IndexedDataset files (``.bin``/``.idx``).

Accepts Megatron-LM's ``tools/preprocess_data.py`` command line as it is (dashed names, lists
separated by spaces: ``--output-prefix out --json-keys text title``) as well as absl spellings
(``--output_prefix=out --json_keys=text,title``). With the same input and tokenizer the output bytes
equal Megatron's (docs/preprocessing.md states the per-document rules and the differences).
Outputs are ``{output_prefix}_{key}_{level}.bin/.idx``, level ``document`` (or ``sentence`` with
``--split_sentences``). ``--tokenizer-type`` is required, as in Megatron. An input that gives no
document (empty, or every record dropped) fails the run, naming it and the main drop reason.
Rerunning with the same flags resumes an interrupted run; different flags into the same prefix are
refused unless ``--overwrite``.

Example::

    python -m jaxblend.tools.preprocess \
      --input data.jsonl --output-prefix out/corpus \
      --tokenizer-type HuggingFaceTokenizer --tokenizer-model /models/llama3 \
      --workers 8 --append-eod

    # from and to a bucket (built in a local --work_dir, published with the run record last)
    python -m jaxblend.tools.preprocess --input gs://raw/web.jsonl.zst --output-prefix gs://tok/web \
      --tokenizer-type HuggingFaceTokenizer --tokenizer-model /models/llama3 --append-eod

    # the same on Apache Beam (any runner; parts must be on a filesystem all workers see)
    python -m jaxblend.tools.preprocess ... --engine=beam --beam_options=--runner=DirectRunner

    # conversations ({"messages": [{"role", "content"}, ...]} lines) with the model's chat
    # template, and a loss mask (1 on assistant tokens) in out/.jaxblend/ (docs/conversations.md)
    python -m jaxblend.tools.preprocess --chat --input sft.jsonl --output-prefix out/sft \
      --tokenizer-type HuggingFaceTokenizer --tokenizer-model /models/my-chat-model --append-eod

    # cleaning before tokenization (docs/cleaning.md): report in out/.jaxblend/corpus.cleaning.json/.png
    python -m jaxblend.tools.preprocess --input data.jsonl --output-prefix out/corpus \
      --tokenizer-type HuggingFaceTokenizer --tokenizer-model /models/llama3 \
      --clean_pii --clean_quality=all --clean_exact_dedup --clean_near_dedup \
      --clean_decontaminate=eval/test.jsonl
"""

from __future__ import annotations

import json
import sys

from absl import flags

from jaxblend.cli import entry, preprocess_flags
from jaxblend.preprocess import pipeline
from jaxblend.preprocess.cleaning import report as report_lib
from jaxblend.tokenizer_facts import TokenizerFacts


def main(argv: list[str]) -> int:
    """Runs preprocessing from flags; prints the summary; returns the exit status."""
    fl = flags.FLAGS
    config = preprocess_flags.preprocess_config_from_flags()
    for note in preprocess_flags.megatron_compat_notes():
        print(note, file=sys.stderr)
    engine = None
    if fl.engine == "beam":
        from jaxblend.preprocess import beam

        engine = beam.BeamEngine(fl.beam_options)
    result = pipeline.preprocess(config, engine)
    print(result.summary())
    if result.tokenizer is not None:
        print(f"tokenizer {TokenizerFacts.from_json(result.tokenizer).describe()}")
    if result.cleaning is not None:
        json_path, _ = report_lib.paths(config.output_prefix)
        print(
            f"cleaning report: {json_path}"
            + (f", {result.cleaning['plot']}" if result.cleaning.get("plot") else "")
        )
    if fl.summary_json:
        with open(fl.summary_json, "w", encoding="utf-8") as f:
            json.dump(result.to_json(), f, indent=1)
    return 0


run = entry.runner(
    main, preprocess_flags.MEGATRON_NARGS, define=preprocess_flags.define_preprocess_flags,
    dashed_help=True,
)


if __name__ == "__main__":
    sys.exit(run())
