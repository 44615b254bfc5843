"""Token-budget bucketed batching vs fixed-size batching, and masked-LM sample throughput.

Usage:
  .venv/bin/python benchmarks/token_budget.py                       # small defaults (~20 s)
  .venv/bin/python benchmarks/token_budget.py --num_samples=1000000 --masked_samples=5000

Part 1 (no data reads; plans only), on two length distributions:
  * "lognormal": SFT/sentence-like lengths, lognormal(mu=5, sigma=0.9) tokens, max length 1024;
  * "stdlib": byte lengths of this Python's standard-library .py files (byte-level tokens),
    truncated to 8192, with twice the token budget.
For each: padding fraction, real and padded tokens per batch, steps, distinct batch shapes, samples
left in buckets at the end of the epoch, plan build time; against (a) fixed B rows padded to the
max length (static shapes, what Megatron-Core's BERT/T5 datasets do: every sample padded to
sequence_length) and (b) fixed B rows padded to the longest row of each batch (the seed's
"token count" baseline: few pads, but one XLA program per distinct length). Then the per-bucket
sampling bias: each bucket's share of samples vs its share of steps.

Part 2: BERT/T5 samples per second, jaxblend `get_batch` vs Megatron-Core's `__getitem__`, same
.bin/.idx (skipped when megatron-core is not installed).
"""

from __future__ import annotations

import collections
import glob
import os
import sys
import sysconfig
import tempfile
import time

import numpy as np
from absl import app, flags

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from jaxblend.sampling import TokenBudgetConfig, plan_token_budget

_N = flags.DEFINE_integer("num_samples", 200_000, "Samples in the lognormal distribution.")
_WIDTH = flags.DEFINE_integer("bucket_width", 64, "Bucket width (tokens).")
_BUDGET = flags.DEFINE_integer("token_budget", 65_536, "Tokens per batch.")
_ROWS = flags.DEFINE_integer("row_multiple", 8, "Rows per batch are a multiple of this.")
_MASKED = flags.DEFINE_integer(
    "masked_samples", 1000, "Samples timed per masked source (0 = skip)."
)


def stdlib_lengths() -> np.ndarray:
    files = glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "**", "*.py"), recursive=True)
    return np.array([os.path.getsize(f) for f in files], dtype=np.int64)


def bucketed_stats(lengths: np.ndarray, config: TokenBudgetConfig) -> dict[str, float]:
    began = time.perf_counter()
    plan = plan_token_budget(lengths, config)
    seconds = time.perf_counter() - began
    clipped = np.minimum(lengths, config.max_length)
    ids = np.asarray(plan.row_ids)
    real = clipped[ids[ids >= 0]].sum()
    padded = sum(
        int(plan.bucket_rows[b]) * int(plan.bucket_lengths[b]) for b in np.asarray(plan.step_bucket)
    )
    kept = int(
        (
            (lengths > 0) & ((lengths <= config.max_length) | (config.over_length == "truncate"))
        ).sum()
    )
    return {
        "steps": len(plan),
        "padding": 1 - real / padded,
        "real_per_batch": real / len(plan),
        "padded_per_batch": padded / len(plan),
        "shapes": len(plan.batch_shapes()),
        "left": kept - int((ids >= 0).sum()),
        "seconds": seconds,
        "plan": plan,
    }


def fixed_stats(lengths: np.ndarray, rows: int, max_length: int, seed: int) -> tuple[dict, dict]:
    order = np.random.default_rng(seed).permutation(lengths.size)
    clipped = np.minimum(lengths[order], max_length)
    steps = clipped.size // rows
    batches = clipped[: steps * rows].reshape(steps, rows)
    real = batches.sum()
    static = {
        "steps": steps,
        "padding": 1 - real / (steps * rows * max_length),
        "real_per_batch": real / steps,
        "padded_per_batch": rows * max_length,
        "shapes": 1,
    }
    longest = batches.max(axis=1)
    dynamic = {
        "steps": steps,
        "padding": 1 - real / (rows * longest).sum(),
        "real_per_batch": real / steps,
        "padded_per_batch": (rows * longest).mean(),
        "shapes": len(np.unique(longest)),
    }
    return static, dynamic


def part1(name: str, lengths: np.ndarray, max_length: int, budget: int) -> None:
    config = TokenBudgetConfig(
        bucket_width=_WIDTH.value,
        max_length=max_length,
        token_budget=budget,
        row_multiple=_ROWS.value,
        over_length="truncate",
        seed=0,
    )
    rows = budget // max_length
    b = bucketed_stats(lengths, config)
    static, dynamic = fixed_stats(lengths, rows, max_length, 0)
    print(
        f"\n### {name}: {lengths.size:,} samples, median length {int(np.median(lengths))}, "
        f"mean {lengths.mean():.0f}, max length {max_length}, budget {budget:,} tokens\n"
    )
    print(
        "| batching | steps | padding fraction | real tokens / batch | padded tokens / batch | distinct shapes | left in buckets |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    print(
        f"| token budget, buckets of {_WIDTH.value} (rows multiple of {_ROWS.value}) | {b['steps']:,} | "
        f"{b['padding']:.3f} | {b['real_per_batch']:,.0f} | {b['padded_per_batch']:,.0f} | {b['shapes']} | {b['left']:,} |"
    )
    print(
        f"| fixed B={rows}, padded to {max_length} (static; Megatron-Core masked datasets) | {static['steps']:,} | "
        f"{static['padding']:.3f} | {static['real_per_batch']:,.0f} | {static['padded_per_batch']:,.0f} | 1 | - |"
    )
    print(
        f"| fixed B={rows}, padded to the batch's longest | {dynamic['steps']:,} | {dynamic['padding']:.3f} | "
        f"{dynamic['real_per_batch']:,.0f} | {dynamic['padded_per_batch']:,.0f} | {dynamic['shapes']} | - |"
    )
    print(
        f"\nplan build: {b['seconds'] * 1e3:.0f} ms for {lengths.size:,} samples; real tokens per step "
        f"{b['real_per_batch'] / static['real_per_batch']:.1f}x the static fixed batch.\n"
    )
    plan = b["plan"]
    clipped = np.minimum(lengths, max_length)
    bucket_of = (clipped[clipped > 0] - 1) // config.bucket_width
    sample_share = np.bincount(bucket_of, minlength=config.num_buckets) / bucket_of.size
    step_share = np.bincount(np.asarray(plan.step_bucket), minlength=config.num_buckets) / len(plan)
    print("| bucket (tokens) | rows | share of samples | share of steps | steps per 1k samples |")
    print("|---|---:|---:|---:|---:|")
    counts = np.bincount(bucket_of, minlength=config.num_buckets)
    shown = [i for i in range(config.num_buckets) if sample_share[i] >= 0.02]
    for i in shown:
        lo, hi = i * config.bucket_width + 1, int(plan.bucket_lengths[i])
        per_k = 1000 * step_share[i] * len(plan) / counts[i]
        print(
            f"| {lo}-{hi} | {int(plan.bucket_rows[i])} | {sample_share[i]:.3f} | {step_share[i]:.3f} | {per_k:.2f} |"
        )
    rest = [i for i in range(config.num_buckets) if i not in shown]
    if rest:
        print(
            f"| other {len(rest)} buckets | - | {sample_share[rest].sum():.3f} | {step_share[rest].sum():.3f} | - |"
        )


def part2(samples: int) -> None:
    try:
        import torch.distributed as dist
        from megatron.core.datasets import bert_dataset, t5_dataset
        from megatron.core.datasets.indexed_dataset import IndexedDataset as MIndexedDataset
        from megatron.core.datasets.utils import Split
    except ImportError:
        print("\n(megatron-core not installed: masked throughput skipped)")
        return
    sys.path.insert(
        0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "sources")
    )
    from masked_testdata import SENTINELS, tokenizer_info, vocab, write_documents

    from jaxblend.sources import BERTMaskedConfig, BERTSource, T5MaskedConfig, T5Source

    class Tok:
        def __init__(self):
            names, info = vocab(), tokenizer_info()
            self.inv_vocab = dict(enumerate(names))
            self.vocab = {t: i for i, t in enumerate(names)}
            self.vocab_size = len(names)
            self.cls, self.sep, self.mask, self.pad, self.bos, self.eos = (
                info.cls,
                info.sep,
                info.mask,
                info.pad,
                info.bos,
                info.eos,
            )
            self.additional_special_tokens_ids = list(SENTINELS)
            self.unique_identifiers = collections.OrderedDict(cls="Tok")

    root = tempfile.mkdtemp(prefix="jaxblend_bench_masked_")
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"file://{root}/pg", rank=0, world_size=1)
    prefix = os.path.join(root, "docs")
    write_documents(prefix, max(3 * samples, 2000), seed=1)
    common = {
        "random_seed": 7,
        "sequence_length": 512,
        "split": "100,0,0",
        "masking_probability": 0.15,
        "short_sequence_probability": 0.1,
        "masking_max_ngram": 3,
        "masking_do_full_word": True,
        "masking_do_permutation": False,
        "masking_use_longer_ngrams": False,
        "masking_use_geometric_distribution": False,
    }
    mds = MIndexedDataset(prefix)
    docs = np.arange(mds.document_indices.shape[0] - 1, dtype=np.int32)
    theirs = {
        "BERT": bert_dataset.BERTMaskedWordPieceDataset(
            mds,
            prefix,
            docs,
            1,
            Split.train,
            bert_dataset.BERTMaskedWordPieceDatasetConfig(
                classification_head=True,
                tokenizer=Tok(),
                path_to_cache=os.path.join(root, "c"),
                **common,
            ),
        ),
        "T5": t5_dataset.T5MaskedWordPieceDataset(
            mds,
            prefix,
            docs,
            1,
            Split.train,
            t5_dataset.T5MaskedWordPieceDatasetConfig(
                sequence_length_decoder=128,
                tokenizer=Tok(),
                path_to_cache=os.path.join(root, "c"),
                **common,
            ),
        ),
    }
    ours = {
        "BERT": BERTSource(
            prefix, BERTMaskedConfig(classification_head=True, **common), tokenizer_info()
        ),
        "T5": T5Source(
            prefix, T5MaskedConfig(sequence_length_decoder=128, **common), tokenizer_info()
        ),
    }
    print(f"\n### Masked-LM samples/s (sequence length 512, {samples} samples, one process)\n")
    print("| source | jaxblend get_batch (batches of 64) | Megatron-Core __getitem__ | ratio |")
    print("|---|---:|---:|---:|")
    for name in ("BERT", "T5"):
        n = min(samples, len(ours[name]), len(theirs[name]))
        ours[name].get_batch(np.arange(8))
        began = time.perf_counter()
        for lo in range(0, n, 64):
            ours[name].get_batch(np.arange(lo, min(lo + 64, n)))
        mine = n / (time.perf_counter() - began)
        began = time.perf_counter()
        for i in range(n):
            theirs[name][i]
        ref = n / (time.perf_counter() - began)
        print(f"| {name} | {mine:,.0f} | {ref:,.0f} | {mine / ref:.2f}x |")


def main(argv):
    del argv
    rng = np.random.default_rng(0)
    lognormal = np.maximum(rng.lognormal(5.0, 0.9, _N.value).astype(np.int64), 1)
    part1("lognormal", lognormal, 1024, _BUDGET.value)
    part1("stdlib .py files, byte tokens", stdlib_lengths(), 8192, 2 * _BUDGET.value)
    if _MASKED.value:
        part2(_MASKED.value)


if __name__ == "__main__":
    app.run(main)
