"""A small code corpus preprocessed with a byte-level BPE that has FIM sentinel tokens (trained in
the test, nothing downloaded), for the fill-in-the-middle tests."""

from __future__ import annotations

import os
import random

SPECIAL_TOKENS = [
    "<|endoftext|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>", "<file_sep>",
]


def code_documents(n: int, seed: int = 0) -> list[str]:
    """``n`` deterministic little Python files (ASCII), some holding several files joined by
    ``<file_sep>`` (a repository-level document)."""
    rng = random.Random(seed)
    names = ["alpha", "beta", "gamma", "delta", "x", "y", "total", "items"]
    docs = []
    for _ in range(n):
        files = []
        for _ in range(rng.choice([1, 1, 2, 3])):
            a, b = rng.sample(names, 2)
            body = [f"def {a}_{rng.randint(0, 99)}({b}):"]
            body += [f"    {b} = {b} + {rng.randint(1, 9)}" for _ in range(rng.randint(1, 4))]
            body.append(f"    return {b}\n")
            files.append("\n".join(body))
        docs.append("<file_sep>".join(files))
    return docs


def train_tokenizer(path: str, docs: list[str]) -> str:
    """A byte-level BPE ``tokenizer.json`` trained on ``docs`` with `SPECIAL_TOKENS`."""
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers, trainers

    bpe = tokenizers.Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(docs, trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    ))
    bpe.save(path)
    return path


def make_code_dataset(
    root, name: str = "code", n: int = 120, seed: int = 0, model: str | None = None
) -> tuple[str, str]:
    """Preprocesses `code_documents` into ``<root>/<name>_text_document`` (EOD appended, the
    tokenizer recorded) with tokenizer file ``model`` (default: one trained on them); returns
    (prefix, tokenizer file)."""
    from jaxblend.preprocess import pipeline
    from jaxblend.preprocess import tokenizer_spec as tok_spec
    from tests.preprocess.conftest import small_run_config, write_jsonl

    root = str(root)
    docs = code_documents(n, seed)
    os.makedirs(os.path.join(root, name), exist_ok=True)
    if model is None:
        model = train_tokenizer(os.path.join(root, name, "tokenizer.json"), docs)
    src = write_jsonl(os.path.join(root, f"{name}.jsonl"), docs)
    spec = tok_spec.TokenizerSpec(type="hf", model=model)
    pipeline.preprocess(small_run_config(os.path.join(root, name), [src], tokenizer=spec))
    return os.path.join(root, f"{name}_text_document"), model


def two_code_datasets(root, n: int, n_more: int) -> dict:
    """Two code datasets under `root` sharing one tokenizer (trained on the first): ``{"root",
    "prefix", "model", "other"}`` (``other``: the second dataset, for blends)."""
    prefix, model = make_code_dataset(root, "code", n=n, seed=0)
    other, _ = make_code_dataset(root, "more", n=n_more, seed=1, model=model)
    return {"root": root, "prefix": prefix, "model": model, "other": other}
