"""Conversation records of one partition (``--chat``): checked, rendered, tokenized and written
with their loss masks.

With ``PreprocessConfig.chat`` every ``json_keys`` field of a record is a conversation (a list of
``{"role", "content"}`` messages, `jaxblend.preprocess.conversations`). Each becomes one document
of one sequence in the key's token dataset (with ``append_eod``, the EOD id after it) and the same
document, as 0/1 ``uint8`` values, in the key's loss-mask dataset: 1 on the tokens of assistant
turns, 0 elsewhere (the EOD included). A record is kept or dropped for every key together, as
text records are; a field that is missing is ``missing_key``, one that is not a conversation or
that the template cannot render and mask is ``bad_conversation``, each with its ``file:line``.

The writer of a partition (`jaxblend.preprocess.worker`) checks each field with `render` and
writes its kept records here when ``chat`` is set; the loss-mask datasets are its extra outputs
(`mask_key`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from jaxblend.loss_masks import LOSS_MASK_SUFFIX
from jaxblend.preprocess import chat_template, conversations, records
from jaxblend.preprocess import tokenizer_spec as tok_spec

MASK_DTYPE = np.dtype(np.uint8)


def mask_key(key: str) -> str:
    """The partial-dataset key of ``key``'s loss masks (``messages`` -> ``messages_loss_mask``)."""
    return key + LOSS_MASK_SUFFIX


class ConversationRecords:
    """Renders and writes the conversation records of one partition.

    Args:
      check: the partition's record checker (it drops what cannot be rendered).
      spec: the tokenizer's description (its directory holds the chat template).
      tokenizer: the loaded tokenizer (a Hugging Face one).
      keys: the conversation fields.
      eod: the id appended after each conversation, or None.
      dtype: the token dtype of the datasets.
    """

    def __init__(
        self,
        check: records.RecordChecker,
        spec: tok_spec.TokenizerSpec,
        tokenizer: tok_spec.Tokenizer,
        keys: Sequence[str],
        eod: int | None,
        dtype: np.dtype,
    ) -> None:
        template = chat_template.load_chat_template(spec.model_file())  # type: ignore[arg-type]
        self.encoder = conversations.ConversationEncoder(template, tokenizer)  # type: ignore[arg-type]
        self.check = check
        self.keys = tuple(keys)
        self.eod = eod
        self.dtype = np.dtype(dtype)

    def render(self, ordinal: int, key: str, value: object) -> tuple[str, list] | None:
        """Field ``key`` of record ``ordinal`` rendered (text, assistant character spans), or None
        when it is not a conversation the template can render and mask (dropped)."""
        try:
            return self.encoder.render(conversations.validate_messages(value, key))
        except conversations.ConversationError as e:
            return self.check.drop(records.BAD_CONVERSATION, ordinal, key, str(e))

    def write(
        self,
        pieces: Mapping[str, Sequence[Sequence[tuple[str, list]]]],
        builders: Mapping,
        counts: Mapping[str, dict[str, int]],
    ) -> None:
        """Writes each kept record's conversation of every key (``pieces[key]``: per record, its
        one rendered conversation): tokens to ``builders[key]``, the mask to
        ``builders[mask_key(key)]``; adds to ``counts[key]``."""
        for key in self.keys:
            texts = [text for ((text, _),) in pieces[key]]
            spans = [spans for ((_, spans),) in pieces[key]]
            encoded = self.encoder.encode_texts(texts, spans)
            tokens, masks = builders[key], builders[mask_key(key)]
            c = counts[key]
            for ids, mask in encoded:
                if self.eod is not None:
                    ids = np.append(ids, self.eod)
                    mask = np.append(mask, np.uint8(0))
                lengths = [ids.shape[0]] if ids.shape[0] else []
                tokens.add_document(ids.astype(self.dtype), lengths)
                masks.add_document(mask.astype(MASK_DTYPE), lengths)
                c["documents"] += 1
                c["empty_documents"] += int(not lengths)
                c["sequences"] += len(lengths)
                c["tokens"] += int(ids.shape[0])
                c["trained_tokens"] = c.get("trained_tokens", 0) + int(mask.sum())
