"""Conversation test data: chat templates, a tokenizer directory trained in the test, and
conversations (nothing downloads)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.preprocess.conftest import make_documents

# ChatML, assistant turns inside {% generation %} so transformers can give its own assistant mask.
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}"
    "{{ message['content'] + '<|im_end|>' + '\\n' }}{% endgeneration %}"
    "{% else %}{{ message['content'] + '<|im_end|>' + '\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Llama-3 style: BOS from the config, roles must alternate (raise_exception), content trimmed.
HEADERS = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'user' and loop.index0 > 0 and "
    "messages[loop.index0 - 1]['role'] == 'user' %}"
    "{{ raise_exception('Conversation roles must alternate') }}{% endif %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
    "message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>",
            "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]


def make_conversations(n: int, seed: int = 0) -> list[list[dict]]:
    """``n`` conversations of 1..4 exchanges, some with a system or tool message."""
    rng = np.random.default_rng(seed)
    texts = make_documents(4 * n + 8, seed=seed) + ["café 東京 naïve", "  spaced  ", "a\nb\n\n"]
    out = []
    for i in range(n):
        conv = [{"role": "system", "content": texts[-(i % 3) - 1]}] if i % 3 == 0 else []
        for j in range(1 + int(rng.integers(0, 4))):
            conv.append({"role": "user", "content": texts[(4 * i + 2 * j) % len(texts)]})
            if i % 5 == 2 and j == 0:
                conv.append({"role": "tool", "content": "42"})
                conv.append({"role": "user", "content": "and so?"})
            conv.append({"role": "assistant", "content": texts[(4 * i + 2 * j + 1) % len(texts)]})
        out.append(conv)
    return out


def chat_tokenizer(directory, template: str, eos: str = "<|endoftext|>", bos=None) -> str:
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    directory.mkdir(exist_ok=True)
    corpus = make_documents(200, seed=3) + [m["content"] for c in make_conversations(20) for m in c]
    bpe = tokenizers.Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        corpus,
        trainers.BpeTrainer(vocab_size=500, special_tokens=SPECIALS,
                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
    )
    bpe.save(str(directory / "tokenizer.json"))
    config = {"chat_template": template, "eos_token": eos, "bos_token": bos,
              "tokenizer_class": "PreTrainedTokenizerFast"}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return str(directory)



def write_chat(path, convs, extra_lines=()) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"messages": c, "id": i}, ensure_ascii=False) + "\n"
                     for i, c in enumerate(convs))
        f.writelines(line + "\n" for line in extra_lines)
    return str(path)


def chat_dataset(root, n: int):
    """`make_conversations(n)` preprocessed as conversations (loss masks beside) with a ChatML
    `chat_tokenizer` trained under ``root``: (the dataset prefix, the tokenizer's spec)."""
    from jaxblend.preprocess import pipeline
    from jaxblend.preprocess import tokenizer_spec as tok_spec
    from tests.preprocess.conftest import small_run_config

    spec = tok_spec.TokenizerSpec("hf", model=chat_tokenizer(root / "tok", CHATML))
    prefix = pipeline.preprocess(small_run_config(
        str(root / "sft"), [write_chat(root / "chat.jsonl", make_conversations(n))],
        json_keys=("messages",), chat=True, tokenizer=spec,
    )).outputs["messages"]
    return prefix, spec
