"""Where a conversation dataset's loss masks are: the per-token 0/1 dataset beside its tokens.

`python -m jaxblend.tools.preprocess --chat` writes, for each token dataset ``<dir>/<name>``, a
second Megatron-format dataset of ``uint8`` values with the same documents and sequence lengths,
``<dir>/.jaxblend/<name>_loss_mask.bin/.idx`` (`loss_mask_prefix`): 1 on the tokens of assistant
turns, 0 elsewhere. Token ``t`` of the ``.bin`` has its mask at item ``t`` of the mask's ``.bin``,
so a read of token ranges reads the same ranges of the masks. The masks live in the side
directory ``.jaxblend/`` (with the run record) so that ``<dir>`` holds only token datasets, which
Megatron-LM's ``tools/merge_datasets.py`` needs (it merges every pair of a directory and refuses
pairs of different dtypes); data without masks (made by Megatron-LM, or plain text) trains on
every token.

This module imports no storage or tokenizer library.
"""

from __future__ import annotations

from jaxblend.tokenizer_facts import side_path

LOSS_MASK_SUFFIX = "_loss_mask"


def loss_mask_prefix(prefix: str) -> str:
    """The loss-mask dataset prefix of token dataset ``prefix`` (a path or URL):
    ``<dir>/<name>`` -> ``<dir>/.jaxblend/<name>_loss_mask``."""
    return side_path(prefix, LOSS_MASK_SUFFIX)
