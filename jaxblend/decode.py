"""Turning a dataset's token ids back into text with the tokenizer it was made with (``--decode``).

`python -m jaxblend.tools.preprocess` records its tokenizer in the run record
(``<dir>/.jaxblend/<name>.preprocess.json``, or ``<dir>/<name>.preprocess.json`` when written
before; `jaxblend.tokenizer_facts.record_paths`), entry ``settings.tokenizer``: the type, its
options and every file with its SHA-256.
`recorded_spec(prefix, access, fallback)` rebuilds the `TokenizerSpec` from that record, checking
that each recorded file still exists and has the recorded SHA-256 (or that the files of
``fallback``, from ``--tokenizer_type`` & co., have it: a copy elsewhere);
`load_decoder(prefixes, access, fallback)` loads one tokenizer for a run's datasets (offline, from
local files), with ``fallback`` for data without a record (made by Megatron-LM), as a
`DocumentDecoder`: every end-of-document token shows as `EOD_MARK`, so a row of three documents
reads as three texts; given a conversation's loss mask, the tokens it does not train show inside
`NOT_TRAINED` (``⟦system and user turns⟧assistant turn``). The tools mark them alike: from the
stored masks (`open_loss_masks`) for raw samples (`inspect explain`, `dump_samples`), from a
batch's ``loss_mask`` (`input_weights`) for batches (`dump_batches`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from jaxblend.access import DataAccess
from jaxblend.tokenizer_facts import dataset_record, where_records_were_sought

if TYPE_CHECKING:
    from jaxblend.preprocess.tokenizer_spec import Tokenizer

EOD_MARK = "[EOD]"
"""What decoded text shows where a document ends (tokenizers drop their own EOD token)."""

NOT_TRAINED = ("⟦", "⟧")
"""What encloses the text of tokens a conversation's loss mask leaves out (the prompt, the system
and user turns: `jaxblend.loss_masks`); the text outside them is trained."""

_HOW = "pass --tokenizer_type and --tokenizer_model (or --vocab_file, --merge_file)"


class DecodeError(ValueError):
    """The tokenizer of a dataset cannot be found, verified or loaded for ``--decode``."""


def _spec_of(entry: dict):
    """The `TokenizerSpec` of a record's ``settings.tokenizer`` entry (files as recorded)."""
    from jaxblend.preprocess import tokenizer_spec as tok_spec

    kind = tok_spec.canonical_type(str(entry["type"]))
    paths = [str(f["path"]) for f in entry.get("files") or []]
    kwargs: dict = {"type": kind}
    if kind == tok_spec.GPT2BPE:
        kwargs.update(vocab_file=paths[0], merge_file=paths[1])
    elif paths:
        kwargs["model"] = paths[0]
    if kind == tok_spec.TIKTOKEN:
        kwargs.update(
            tiktoken_pattern=entry.get("tiktoken_pattern"),
            tiktoken_num_special_tokens=int(entry.get("tiktoken_num_special_tokens", 1000)),
            tiktoken_special_tokens=tuple(entry.get("tiktoken_special_tokens") or ()),
        )
    if kind in (tok_spec.TIKTOKEN, tok_spec.NULL):
        kwargs["vocab_size"] = entry.get("vocab_size")
    return tok_spec.TokenizerSpec(**kwargs)


def _check_recorded_files(entry: dict, record_path: str) -> None:
    """Raises `DecodeError` when a recorded file is missing or has another SHA-256."""
    for f in entry.get("files") or []:
        path, digest = str(f["path"]), str(f["sha256"])
        if not os.path.isfile(path):
            raise DecodeError(
                f"--decode: tokenizer file {path} recorded in {record_path} does not exist here; "
                f"copy it there or {_HOW} naming a copy"
            )
        with open(path, "rb") as file:
            actual = hashlib.file_digest(file, "sha256").hexdigest()
        if actual != digest:
            raise DecodeError(
                f"--decode: tokenizer file {path} has SHA-256 {actual[:12]}, not the "
                f"{digest[:12]} recorded in {record_path}; restore the original or {_HOW} naming "
                "a copy"
            )


def recorded_spec(prefix: str, access: DataAccess | None = None, fallback=None):
    """The `TokenizerSpec` that decodes dataset ``prefix`` as its record says; None without a
    record.

    The recorded files are used when they still have the recorded SHA-256; otherwise
    ``fallback`` (``--tokenizer_type`` & co.) when its files have the recorded SHA-256 (a copy of
    the same tokenizer elsewhere).

    Raises:
      DecodeError: neither the recorded files nor ``fallback`` are the recorded tokenizer (one
        line naming the file, the record and how to supply a copy).
    """
    access = DataAccess.from_env() if access is None else access
    try:
        found = dataset_record(prefix, access)
    except ValueError as err:
        raise DecodeError(str(err)) from None
    entry = None if found is None else (found[1].get("settings") or {}).get("tokenizer")
    if not isinstance(entry, dict):
        return None
    record_path = found[0]
    try:
        _check_recorded_files(entry, record_path)
    except DecodeError:
        if fallback is None:
            raise
        recorded = [str(f["sha256"]) for f in entry.get("files") or []]
        fallback.check_files()
        given = [str(f["sha256"]) for f in fallback.identity().get("files") or []]
        if given != recorded or fallback.type != _spec_of(entry).type:
            raise DecodeError(
                f"--decode: --tokenizer_type={fallback.type} with files "
                f"{', '.join(fallback.files())} is not the tokenizer recorded in {record_path} "
                f"({entry['type']}, SHA-256 {', '.join(d[:12] for d in recorded)})"
            ) from None
        return fallback
    return _spec_of(entry)


class DocumentDecoder:
    """A tokenizer's ``detokenize`` that marks where each document ends.

    The text between two end-of-document tokens is decoded on its own and the token itself shows
    as `EOD_MARK` (tokenizers skip it as a special token, which runs documents together). Other
    ids given in ``marks`` (e.g. fill-in-the-middle sentinels, `jaxblend.sources.fim.MARKS`) show
    as their mark the same way.
    """

    def __init__(self, tokenizer: Tokenizer, marks: Mapping[int, str] | None = None) -> None:
        self.tokenizer = tokenizer
        self.eod = tokenizer.eod
        self.marks = dict(marks or {})
        if self.eod is not None:
            self.marks.setdefault(int(self.eod), EOD_MARK)

    def with_marks(self, marks: Mapping[int, str]) -> DocumentDecoder:
        """This decoder, also showing each id of ``marks`` as its mark."""
        return DocumentDecoder(self.tokenizer, {**self.marks, **marks})

    def detokenize(self, ids, mask=None) -> str:
        """The text of ``ids``, with `EOD_MARK` at each end-of-document token (and each id of
        ``marks`` as its mark); with a loss ``mask`` (0/1 per token), each run of untrained
        tokens (0) inside `NOT_TRAINED`."""
        arr = np.asarray(ids)
        if mask is not None:
            mask = np.asarray(mask)
            edges = np.flatnonzero(np.diff(mask)) + 1
            parts = []
            for run, weights in zip(np.split(arr, edges), np.split(mask, edges), strict=True):
                if run.size:
                    text = self.detokenize(run)
                    parts.append(text if weights[0] else f"{NOT_TRAINED[0]}{text}{NOT_TRAINED[1]}")
            return "".join(parts)
        # Every piece but the first starts with a marked id.
        pieces = np.split(arr, np.flatnonzero(np.isin(arr, list(self.marks))))
        texts = [self.tokenizer.detokenize(pieces[0])]
        texts += [self.marks[int(p[0])] + self.tokenizer.detokenize(p[1:]) for p in pieces[1:]]
        return "".join(texts)


def open_loss_masks(names, access: DataAccess) -> dict:
    """The stored loss-mask datasets (`jaxblend.loss_masks`) of the datasets ``names`` that have
    one (conversations), by name: what ``DocumentDecoder.detokenize``'s ``mask`` of their pieces
    is read from."""
    from jaxblend.loss_masks import loss_mask_prefix
    from jaxblend.storage import IndexedDataset, exists

    return {
        n: IndexedDataset(loss_mask_prefix(n), access=access)
        for n in names if exists(loss_mask_prefix(n), access.object_store)
    }


def input_weights(loss_mask: np.ndarray) -> np.ndarray:
    """Per token of a batch row's ``inputs``, whether the row trains on it (1) or not (0): token
    p is the target of position p - 1, so its weight is ``loss_mask[p - 1]``. A row's first token
    is the target of no position of any row (the context a row starts from): it counts as
    trained, so that only what a loss mask leaves out is marked (padding, each packed document's
    first token, EOD with ``--eod_mask_loss``, a conversation's prompt).

    Args:
      loss_mask: ``[..., S]`` the batch's ``loss_mask``.
    """
    loss_mask = np.asarray(loss_mask)
    weights = np.ones(loss_mask.shape, np.uint8)
    weights[..., 1:] = loss_mask[..., :-1] != 0
    return weights


def load_decoder(
    prefixes: list[str], access: DataAccess | None = None, fallback=None
) -> DocumentDecoder:
    """The decoder of the datasets ``prefixes``: the tokenizer of their first record, else of
    ``fallback``, with each end-of-document token shown as `EOD_MARK`.

    Args:
      prefixes: the datasets to decode.
      access: how bucket objects (the records) are reached.
      fallback: the `TokenizerSpec` of ``--tokenizer_type`` & co., or None.

    Raises:
      DecodeError: no dataset has a record and no fallback is given, or the recorded tokenizer
        cannot be verified (one line saying how to supply the tokenizer).
      IndexFormatError: no dataset has a record, no fallback is given, and a dataset does not
        exist (that is said first).
    """
    from jaxblend.preprocess import tokenizers

    access = DataAccess.from_env() if access is None else access
    recorded = (recorded_spec(p, access, fallback) for p in dict.fromkeys(prefixes))
    spec = next((s for s in recorded if s is not None), fallback)
    if spec is None and not prefixes:
        raise DecodeError(f"--decode: mock data has no recorded tokenizer; {_HOW} to decode it")
    if spec is None:
        from jaxblend.opening import check_datasets_exist

        check_datasets_exist(prefixes, access)  # a dataset that does not exist is the real error
        raise DecodeError(
            f"--decode: {prefixes[0]} has no preprocessing record naming its tokenizer "
            f"({where_records_were_sought(prefixes[0])}); {_HOW} to decode it"
        )
    return DocumentDecoder(tokenizers.load_tokenizer(spec))


def shorten(text: str, limit: int) -> str:
    """``text`` on one line (newlines shown as ``\\n``), cut to ``limit`` characters with ``…``
    (0: no limit)."""
    text = text.replace("\\", "\\\\").replace("\n", "\\n")
    if limit and len(text) > limit:
        return text[:limit] + "…"
    return text
