"""Conversations to tokens and a loss mask: the tokenizer's chat template, assistant turns found.

A conversation is a JSON list of messages ``[{"role": "system"|"developer"|"user"|"assistant"|
"tool", "content": "<text>"}, ...]`` (other fields of a message are passed to the template as
they are). `ConversationEncoder.encode_batch` renders each conversation with the model's own chat
template (:mod:`jaxblend.preprocess.chat_template`), tokenizes the text as one string without
added special tokens (what ``transformers``' ``apply_chat_template(..., tokenize=True)`` does) and
marks the tokens of the assistant turns:

* assistant turn i spans the characters from the end of the conversation before it rendered with
  the generation prompt (``messages[:i]``, ``add_generation_prompt=True``) to the end of the
  conversation up to and including it (``messages[:i + 1]``): its content and whatever the
  template writes after it (the end-of-turn token), not the prompt that opens it;
* a token is an assistant token when its characters overlap such a span (the rule
  ``transformers`` applies to ``{% generation %}`` spans).

A template that does not render a conversation's beginnings as beginnings of its text (one that
rewrites earlier turns) cannot be masked this way; such a conversation is refused with the
reason. `validate_messages` states what a conversation must be.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxblend.preprocess.chat_template import ChatTemplate, ChatTemplateError
from jaxblend.preprocess.tokenizers import HuggingFaceTokenizer

ROLES = ("system", "developer", "user", "assistant", "tool")
TRAINED_ROLE = "assistant"


class ConversationError(ValueError):
    """A conversation is malformed or cannot be rendered and masked (the message says why)."""


def validate_messages(value: object, key: str) -> list[Mapping[str, Any]]:
    """Checks one record's conversation and returns its messages.

    Args:
      value: the record's field ``key``.
      key: the field's name (for messages).

    Raises:
      ConversationError: ``value`` is not a non-empty list of ``{"role", "content"}`` objects with
        a known role and string content (names the message and what is wrong).
    """
    if not isinstance(value, list):
        raise ConversationError(
            f"field {key!r} is {type(value).__name__}; a conversation is a list of "
            '{"role", "content"} messages'
        )
    if not value:
        raise ConversationError(f"field {key!r} is an empty conversation")
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            raise ConversationError(f"message {i} is {type(message).__name__}, not an object")
        role = message.get("role")
        if role not in ROLES:
            raise ConversationError(
                f"message {i} has role {role!r}; roles are {', '.join(ROLES)}"
            )
        if not isinstance(message.get("content"), str):
            raise ConversationError(
                f"message {i} ({role}) has content of type {type(message.get('content')).__name__}"
                "; it must be a string"
            )
    return value


class ConversationEncoder:
    """Renders and tokenizes conversations, with a 0/1 mask on the assistant tokens.

    Args:
      template: the model's chat template.
      tokenizer: the Hugging Face adapter (its ``tokenize_with_offsets``; the configuration refuses
        ``chat`` with other tokenizers).
    """

    def __init__(self, template: ChatTemplate, tokenizer: HuggingFaceTokenizer) -> None:
        self.template = template
        self.tokenizer = tokenizer

    def render(self, messages: Sequence[Mapping[str, Any]]) -> tuple[str, list[tuple[int, int]]]:
        """The conversation's text and the character spans of its assistant turns.

        Raises:
          ConversationError: the template refused the conversation, or does not render its
            beginnings as beginnings of the whole text.
        """
        render = self.template.render
        try:
            text = render(messages, add_generation_prompt=False)
            spans = []
            for i, message in enumerate(messages):
                if message["role"] != TRAINED_ROLE:
                    continue
                opened = render(messages[:i], add_generation_prompt=True)
                closed = render(messages[: i + 1], add_generation_prompt=False)
                if not (closed.startswith(opened) and text.startswith(closed)):
                    raise ConversationError(
                        f"the chat template does not write message {i} (assistant) after the "
                        "messages before it as they are rendered alone, so its tokens cannot be "
                        "told apart"
                    )
                if len(closed) > len(opened):
                    spans.append((len(opened), len(closed)))
        except ChatTemplateError as e:
            raise ConversationError(str(e)) from None
        return text, spans

    def encode_texts(
        self, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]]
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Tokenizes rendered conversations; per conversation (ids int64, mask uint8)."""
        encoded = self.tokenizer.tokenize_with_offsets(list(texts))
        return [(ids, span_mask(offsets, s)) for (ids, offsets), s in zip(encoded, spans, strict=True)]

    def encode(self, messages: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
        """One conversation's (ids, mask); see the module docstring."""
        text, spans = self.render(messages)
        return self.encode_texts([text], [spans])[0]


def span_mask(offsets: np.ndarray, spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """uint8 [n]: 1 where token j's characters ``[offsets[j, 0], offsets[j, 1])`` overlap a span.

    Args:
      offsets: int [n, 2] character start and end of each token, in text order.
      spans: ``(start, end)`` character spans, in order and disjoint.
    """
    mask = np.zeros(offsets.shape[0], np.uint8)
    starts, ends = offsets[:, 0], offsets[:, 1]
    for lo, hi in spans:
        mask[(ends > lo) & (starts < hi)] = 1
    return mask
