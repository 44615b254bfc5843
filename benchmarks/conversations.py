"""Reading conversations with their loss masks against the same tokens without masks.

One synthetic conversation corpus (uint16 tokens; lengths lognormal around `--mean` tokens; each
conversation a few alternating untrained/trained runs), written once under `--data_dir` as a
token dataset and, for the masked figure, its loss-mask dataset in `.jaxblend/`. For `concat`
and `best_fit` (with `--packing_overflow=truncate`) rows, `GPTSource.get_batch` over steps of
`--batch` consecutive samples from the local page cache: tokens per second with the masks
(`loss_mask` x stored mask) and without them (the same token dataset under another name, no mask
beside it).

Usage:
    .venv/bin/python benchmarks/conversations.py
    .venv/bin/python benchmarks/conversations.py --tokens=2e8 --seq_lengths=2048,8192
"""

from __future__ import annotations

import os
import shutil
import time

import numpy as np
from absl import app, flags

_DATA_DIR = flags.DEFINE_string("data_dir", "/tmp/jaxblend_conversation_bench", "Corpus directory.")
_TOKENS = flags.DEFINE_float("tokens", 5e7, "Tokens of the corpus.")
_MEAN = flags.DEFINE_integer("mean", 700, "Mean conversation length (tokens).")
_SEQS = flags.DEFINE_list("seq_lengths", ["2048", "8192"], "Sequence lengths S.")
_BATCH = flags.DEFINE_integer("batch", 64, "Rows per read step.")
_READ_SECONDS = flags.DEFINE_float("read_seconds", 2.0, "Measuring time per round.")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Rounds per figure, the two sources alternated.")


def _write(prefix: str, values: np.ndarray, lengths: np.ndarray) -> None:
    from jaxblend.storage import idx_format

    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    values.tofile(prefix + ".bin")
    with open(prefix + ".idx", "wb") as f:
        idx_format.write_index(f, values.dtype, lengths, np.arange(lengths.size + 1), None)


def write_corpus(root: str) -> tuple[str, str]:
    """(masked prefix, unmasked prefix): the same tokens, the first with a loss mask."""
    from jaxblend.loss_masks import loss_mask_prefix

    masked, plain = os.path.join(root, "chat_document"), os.path.join(root, "plain_document")
    if os.path.exists(plain + ".idx"):
        return masked, plain
    rng = np.random.default_rng(0)
    n = int(_TOKENS.value // _MEAN.value) + 1
    lengths = np.maximum(8, rng.lognormal(np.log(_MEAN.value) - 0.5, 1.0, n)).astype(np.int64)
    total = int(lengths.sum())
    tokens = rng.integers(1, 50000, total, dtype=np.uint16)
    # Runs of 1..200 tokens alternating untrained (prompt) and trained (answer).
    runs = rng.integers(1, 200, total // 50 + 2)
    mask = (np.repeat(np.arange(runs.size) % 2, runs)[:total]).astype(np.uint8)
    _write(masked, tokens, lengths)
    _write(loss_mask_prefix(masked), mask, lengths)
    for ext in ("bin", "idx"):
        shutil.copyfile(f"{masked}.{ext}", f"{plain}.{ext}")
    return masked, plain


def read_rate(source, seconds: float, batch: int) -> float:
    """Row tokens per second of `get_batch` over consecutive steps."""
    n = len(source)
    starts = np.arange(0, max(1, n - batch), batch)
    source.get_batch(np.arange(batch))  # compile
    tokens, start, step = 0, time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        lo = starts[step % len(starts)]
        source.get_batch(np.arange(lo, lo + batch))
        tokens += batch * source.options.seq_length
        step += 1
    return tokens / (time.perf_counter() - start)


def main(argv):
    del argv
    from jaxblend import index
    from jaxblend.access import DataAccess
    from jaxblend.sources import GPTSchemaOptions, open_gpt_sources

    masked, plain = write_corpus(_DATA_DIR.value)
    for prefix in (masked, plain):
        np.fromfile(prefix + ".bin", np.uint8).sum()  # warm the page cache
    rows = []
    for s in (int(x) for x in _SEQS.value):
        for packing in ("concat", "best_fit"):
            sources = {}
            for name, prefix in (("masks", masked), ("none", plain)):
                extra = {"packing_overflow": "truncate"} if packing == "best_fit" else {}
                config = index.GPTDataConfig(blend=[prefix], split="100,0,0", seq_length=s,
                                             seed=1234, packing=packing, **extra)
                source = open_gpt_sources(config, GPTSchemaOptions(),
                                          access=DataAccess(), splits=("train",))["train"]
                assert (source.loss_masks is not None) == (name == "masks")
                sources[name] = source
            rates = dict.fromkeys(sources, 0.0)
            for _ in range(_ROUNDS.value):  # alternated, best kept: a shared machine is noisy
                for name, source in sources.items():
                    rate = read_rate(source, _READ_SECONDS.value, _BATCH.value)
                    rates[name] = max(rates[name], rate)
            rows.append((s, packing, rates["none"], rates["masks"]))
            print("  ", rows[-1])
    print()
    print("| S | rows | tokens/s without masks | with masks | ratio |")
    print("|---|---|---|---|---|")
    for s, packing, none, masks in rows:
        print(f"| {s:,} | {packing} | {none / 1e6:,.1f} M | {masks / 1e6:,.1f} M | "
              f"{masks / none:.2f} |")


if __name__ == "__main__":
    app.run(main)
