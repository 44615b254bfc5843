"""Tokenizer adapters for preprocessing: one small interface over several libraries.

Every adapter exposes ``vocab_size``, the special ids (``eod``, ``pad``, ``bos``, ``eos``, ``mask``,
``cls``, ``sep``; ``None`` where the vocabulary has no such token), ``tokenize(text)`` returning a
``np.ndarray`` of ids and ``tokenize_batch(texts)`` returning ``(flat_ids, lengths)`` — the ids of all
texts concatenated plus each text's token count — which is the hot path of the pipeline (the
Hugging Face adapter uses the library's batched encoder).

Tokenizers are described by a picklable :class:`TokenizerSpec`
(:mod:`jaxblend.preprocess.tokenizer_spec`, which also holds the type names and their aliases) so
worker processes can each load their own copy once (:func:`load_tokenizer`). Type names follow
Megatron-LM's ``--tokenizer_type`` where one exists; docs/preprocessing.md ("Tokenizers") lists
each type's files and ids.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import itertools
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import ClassVar

import numpy as np

from jaxblend.preprocess.tokenizer_spec import (
    BYTE,
    GPT2BPE,
    HUGGINGFACE,
    NULL,
    SENTENCEPIECE,
    SENTENCEPIECE_TYPES,
    TIKTOKEN,
    Tokenizer,
    TokenizerError,
    TokenizerSpec,
    named_tokens,
)

# Pre-tokenization regexes for tiktoken BPE files (the file holds only the merge ranks).
TIKTOKEN_PATTERNS = {
    "gpt2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
    "cl100k": (
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*"""
        r"""|\s*[\r\n]|\s+(?!\S)|\s+"""
    ),
}

# Candidate token strings for each special id, first match wins.
_SPECIAL_CANDIDATES = {
    "eos": ("<|endoftext|>", "</s>", "<eos>", "<|eos|>", "[EOS]", "<|end_of_text|>"),
    "bos": ("<s>", "<bos>", "<|bos|>", "[BOS]", "<|begin_of_text|>"),
    "pad": ("<pad>", "[PAD]", "<|pad|>"),
    "mask": ("<mask>", "[MASK]", "<|mask|>"),
    "cls": ("[CLS]", "<cls>"),
    "sep": ("[SEP]", "<sep>"),
}


def _flatten(pieces: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
    total = int(lengths.sum())
    flat = np.fromiter(itertools.chain.from_iterable(pieces), dtype=np.int64, count=total)
    return flat, lengths


@contextlib.contextmanager
def _loading(what: str) -> Iterator[None]:
    """Turns a tokenizer library's failure into `TokenizerError` ``"<what>: <error>"``."""
    try:
        yield
    except Exception as e:  # the libraries raise plain Exception subclasses
        raise TokenizerError(f"{what}: {e}") from e


class _Adapter:
    """What every adapter shares: no special token unless it sets one, and ``tokenize`` as a
    batch of one text."""

    eod: int | None = None
    pad: int | None = None
    bos: int | None = None
    eos: int | None = None
    mask: int | None = None
    cls: int | None = None
    sep: int | None = None

    def tokenize(self, text: str) -> np.ndarray:
        """Returns the ids of ``text`` (``tokenize_batch`` of the one text)."""
        return self.tokenize_batch([text])[0]  # type: ignore[attr-defined]


class ByteTokenizer(_Adapter):
    """UTF-8 bytes as token ids 0..255, special tokens after them; needs no files.

    Special ids: eod=256, pad=257, bos=258, eos=259, mask=260, cls=261, sep=262, then the
    fill-in-the-middle sentinels (`FIM_SENTINELS`) 263..266; vocab_size=267. Named tokens
    (`token_to_id`): ``<|endoftext|>`` (the EOD) and the four sentinels, Megatron's default FIM
    names, so `--fim_data` works on byte data with its default flags. Text is only ever bytes: a
    sentinel's name in the text is its bytes, never the sentinel.
    """

    name = BYTE
    eod = 256
    pad = 257
    bos = 258
    eos = 259
    mask = 260
    cls = 261
    sep = 262
    FIM_SENTINELS: ClassVar[Mapping[str, int]] = MappingProxyType(
        {"<fim_prefix>": 263, "<fim_middle>": 264, "<fim_suffix>": 265, "<fim_pad>": 266}
    )
    vocab_size = 267
    _NAMED: ClassVar[Mapping[str, int]] = MappingProxyType({"<|endoftext|>": eod, **FIM_SENTINELS})

    def tokenize_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Returns ``(flat_ids, lengths)``: the UTF-8 bytes of ``texts`` as uint16 ids (one join,
        one numpy conversion)."""
        encoded = [t.encode("utf-8") for t in texts]
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        flat = np.frombuffer(b"".join(encoded), dtype=np.uint8).astype(np.uint16)
        return flat, lengths

    def detokenize(self, ids: Sequence[int] | np.ndarray) -> str:
        """Decodes byte ids back to text (special ids are skipped)."""
        arr = np.asarray(ids)
        return arr[arr < 256].astype(np.uint8).tobytes().decode("utf-8", errors="replace")

    def token_to_id(self, token: str) -> int | None:
        """The id of a named token (``<|endoftext|>``, the FIM sentinels), else None (bytes have
        no names)."""
        return self._NAMED.get(token)


def _find_specials(tokenizer: _Adapter, lookup: Callable[[str], int | None]) -> None:
    """Sets each special id to the first of its `_SPECIAL_CANDIDATES` the vocabulary has
    (``lookup``: token -> id or None); eod = eos, or sep without one (BERT-style, as Megatron)."""
    for name, candidates in _SPECIAL_CANDIDATES.items():
        ids = (lookup(c) for c in candidates)
        setattr(tokenizer, name, next((int(i) for i in ids if i is not None), None))
    tokenizer.eod = tokenizer.eos if tokenizer.eos is not None else tokenizer.sep


class HuggingFaceTokenizer(_Adapter):
    """A Hugging Face ``tokenizers`` JSON file; batched encoding via ``encode_batch_fast``.

    Special ids are found by token string: eos ``<|endoftext|>``/``</s>``/``<eos>``..., bos ``<s>``...,
    pad ``<pad>``/``[PAD]``, mask ``<mask>``/``[MASK]``, cls ``[CLS]``, sep ``[SEP]``; eod = eos, or sep
    when there is no eos (BERT-style WordPiece, as Megatron does). When ``tokenizer_config.json`` or
    ``special_tokens_map.json`` sit next to the file (a Hugging Face model directory), their
    ``eos_token``, ``bos_token``, ``pad_token``... name the special tokens instead, as they do for
    Megatron's ``HuggingFaceTokenizer`` (eod = eos). Special tokens are not added by the
    post-processor (``add_special_tokens=False``).
    """

    name = HUGGINGFACE

    def __init__(self, path: str) -> None:
        import tokenizers

        with _loading(f"cannot load Hugging Face tokenizer {path!r}"):
            self._use(tokenizers.Tokenizer.from_file(path))
        named = named_tokens(os.path.dirname(os.path.abspath(path)))
        for name in _SPECIAL_CANDIDATES:  # the special tokens the directory's JSON names win
            tid = self._tok.token_to_id(named[f"{name}_token"]) if f"{name}_token" in named else None
            if tid is not None:
                setattr(self, name, int(tid))
                if name == "eos":
                    self.eod = self.eos

    def _use(self, tok) -> None:
        """Takes ``tok`` (a ``tokenizers.Tokenizer``): its vocabulary size and special ids."""
        self._tok = tok
        self.vocab_size = int(tok.get_vocab_size(with_added_tokens=True))
        _find_specials(self, tok.token_to_id)

    def tokenize_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Returns ``(flat_ids, lengths)`` using the library's batched encoder."""
        # encode_batch_fast (tokenizers >= 0.20) skips character offsets: same ids, less work.
        encode = getattr(self._tok, "encode_batch_fast", self._tok.encode_batch)
        encodings = encode(list(texts), add_special_tokens=False)
        return _flatten([e.ids for e in encodings])

    def tokenize_with_offsets(self, texts: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per text: its ids and each token's character ``[start, end)`` (int64 [n, 2]); the ids
        are those of `tokenize` (conversations: `jaxblend.preprocess.conversations`)."""
        encodings = self._tok.encode_batch(list(texts), add_special_tokens=False)
        return [
            (np.asarray(e.ids, np.int64), np.asarray(e.offsets, np.int64).reshape(-1, 2))
            for e in encodings
        ]

    def detokenize(self, ids: Sequence[int] | np.ndarray) -> str:
        """Decodes ids to text."""
        return self._tok.decode(np.asarray(ids, np.int64).tolist())

    def token_to_id(self, token: str) -> int | None:
        """The id of vocabulary entry ``token`` (added tokens included), or None."""
        tid = self._tok.token_to_id(token)
        return None if tid is None else int(tid)


class GPT2BPETokenizer(HuggingFaceTokenizer):
    """GPT-2 style byte-level BPE from ``vocab.json`` + ``merges.txt`` (Megatron's default type)."""

    name = GPT2BPE

    def __init__(self, vocab_file: str, merge_file: str) -> None:
        import tokenizers
        from tokenizers import decoders, models, pre_tokenizers

        with _loading(f"cannot load GPT-2 BPE from {vocab_file!r} + {merge_file!r}"):
            tok = tokenizers.Tokenizer(models.BPE.from_file(vocab_file, merge_file))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        self._use(tok)


class SentencePieceTokenizer(_Adapter):
    """A SentencePiece ``.model``; eod = eos; pad/bos/eos/unk from the model (``None`` if absent).

    mask/cls/sep are looked up as pieces ``<mask>``/``[MASK]``, ``[CLS]``, ``[SEP]`` if the model
    defines them.
    """

    name = SENTENCEPIECE

    def __init__(self, path: str) -> None:
        import sentencepiece as spm

        with _loading(f"cannot load SentencePiece model {path!r}"):
            self._sp = spm.SentencePieceProcessor(model_file=path)
        sp = self._sp
        self.vocab_size = int(sp.vocab_size())
        ids = (sp.bos_id(), sp.eos_id(), sp.pad_id())
        self.bos, self.eos, self.pad = (int(i) if i >= 0 else None for i in ids)
        self.eod = self.eos
        mask = self.token_to_id("<mask>")
        self.mask = mask if mask is not None else self.token_to_id("[MASK]")
        self.cls, self.sep = self.token_to_id("[CLS]"), self.token_to_id("[SEP]")

    def tokenize(self, text: str) -> np.ndarray:
        """Returns the ids of ``text``."""
        return np.asarray(self._sp.encode(text), dtype=np.int64)

    def tokenize_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Returns ``(flat_ids, lengths)``; one library call (single-threaded per worker)."""
        return _flatten(self._sp.encode(list(texts), num_threads=1))

    def detokenize(self, ids: Sequence[int] | np.ndarray) -> str:
        """Decodes ids to text."""
        return self._sp.decode([int(i) for i in ids])

    def token_to_id(self, token: str) -> int | None:
        """The id of piece ``token``, or None when the model lacks it."""
        tid = self._sp.piece_to_id(token)
        return None if tid == self._sp.unk_id() and token != self._sp.id_to_piece(tid) else int(tid)


def read_tiktoken_ranks(path: str) -> dict[bytes, int]:
    """Reads a tiktoken BPE ranks file: one ``base64(token_bytes) rank`` pair per line.

    Args:
      path: The ranks file.

    Returns:
      token bytes -> rank.

    Raises:
      TokenizerError: A line is malformed (names file and line).
    """
    ranks: dict[bytes, int] = {}
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                token, rank = line.split()
                ranks[base64.b64decode(token, validate=True)] = int(rank)
            except ValueError as e:
                raise TokenizerError(
                    f"{path}:{lineno}: not a tiktoken ranks line ('base64 rank'): {e}"
                ) from e
    if not ranks:
        raise TokenizerError(f"tiktoken ranks file {path!r} is empty")
    return ranks


class _Tiktoken(_Adapter):
    """A tokenizer over a tiktoken encoding (``self._enc``) encoding texts with ``self._encode``."""

    name = TIKTOKEN

    def _build(self, path: str, name: str, pattern: str, ranks: dict, specials: dict) -> None:
        """Builds ``self._enc`` from ``ranks`` and ``specials`` (token -> id)."""
        import tiktoken

        with _loading(f"cannot build tiktoken encoding from {path!r}"):
            self._enc = tiktoken.Encoding(
                name=name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials
            )

    def tokenize_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Returns ``(flat_ids, lengths)``."""
        return _flatten([self._encode(t) for t in texts])

    def detokenize(self, ids: Sequence[int] | np.ndarray) -> str:
        """Decodes ids to text."""
        return self._enc.decode([int(i) for i in ids])

    def token_to_id(self, token: str) -> int | None:
        """The id of ``token`` (a special token or one vocabulary entry), or None."""
        try:
            return int(self._enc.encode_single_token(token))
        except KeyError:
            return None


class TikTokenizer(_Tiktoken):
    """A tiktoken BPE ranks file; ``<|endoftext|>`` is added after the ranks as eod = eos.

    The pre-tokenization regex is ``pattern``: ``gpt2``, ``cl100k`` or a literal regex. Special-token
    text is encoded as ordinary text.
    """

    def __init__(self, path: str, pattern: str = "cl100k") -> None:
        ranks = read_tiktoken_ranks(path)
        n = max(ranks.values()) + 1
        pat_str = TIKTOKEN_PATTERNS.get(pattern, pattern)
        self._build(path, os.path.basename(path), pat_str, ranks, {"<|endoftext|>": n})
        self._encode = self._enc.encode_ordinary
        self.eod = self.eos = n
        self.vocab_size = n + 1


# Megatron's TikTokenizer: its pre-tokenizer patterns and the special tokens every vocabulary has.
MEGATRON_TIKTOKEN_PATTERNS = {
    "v1": r"[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
    "v2": (
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
        r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
        r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    ),
}
MEGATRON_TIKTOKEN_SPECIALS = ("<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>")


def read_tiktoken_json(path: str, limit: int, shift: int) -> dict[bytes, int]:
    """Reads Megatron's tiktoken vocabulary: a JSON list of ``{rank, token_bytes, token_str}``.

    Args:
      path: The ``.json`` file.
      limit: Keep the first ``limit`` entries.
      shift: Added to every rank (ids below it are the special tokens).

    Raises:
      TokenizerError: The file is not such a list (names the file and the entry).
    """
    import json

    try:
        with open(path, encoding="utf-8") as f:
            vocab = json.load(f)
    except ValueError as e:
        raise TokenizerError(f"tiktoken vocabulary {path!r} is not JSON: {e}") from e
    if not isinstance(vocab, list):
        raise TokenizerError(f"tiktoken vocabulary {path!r} must be a JSON list of entries")
    ranks: dict[bytes, int] = {}
    for i, entry in enumerate(vocab[:limit]):
        try:
            if entry["rank"] != i:
                raise ValueError(f"rank {entry['rank']} at position {i}")
            ranks[base64.b64decode(entry["token_bytes"], validate=True)] = i + shift
        except (KeyError, TypeError, ValueError) as e:
            raise TokenizerError(f"{path}: vocabulary entry {i} is malformed: {e}") from e
    return ranks


class MegatronTikTokenizer(_Tiktoken):
    """Megatron-Core's ``TikTokenizer``: JSON vocabulary, ids shifted by the special tokens.

    Ids ``0 .. num_special_tokens - 1`` are the special tokens (``special_tokens`` then
    ``<SPECIAL_i>`` fillers); vocabulary entry ``r`` has id ``r + num_special_tokens``; the
    vocabulary is cut to ``vocab_size - num_special_tokens`` entries. eod = eos = ``</s>``. Special
    token strings inside the text are encoded as their ids, as Megatron does.
    """

    def __init__(
        self,
        path: str,
        pattern: str | None = "v2",
        num_special_tokens: int = 1000,
        special_tokens: Sequence[str] = (),
        vocab_size: int | None = None,
    ) -> None:
        pattern = pattern or "v2"
        if pattern not in MEGATRON_TIKTOKEN_PATTERNS:
            raise TokenizerError(
                f"--tiktoken_pattern={pattern!r}: a tiktoken JSON vocabulary takes v1 or v2"
            )
        specials = list(special_tokens) or list(MEGATRON_TIKTOKEN_SPECIALS)
        missing = [t for t in MEGATRON_TIKTOKEN_SPECIALS if t not in specials]
        if missing or len(set(specials)) != len(specials):
            raise TokenizerError(
                f"--tiktoken_special_tokens must be unique and include {MEGATRON_TIKTOKEN_SPECIALS}"
            )
        vocab_size = vocab_size or 2**17
        if not len(specials) <= num_special_tokens < vocab_size:
            raise TokenizerError(
                f"need len(special tokens)={len(specials)} <= --tiktoken_num_special_tokens="
                f"{num_special_tokens} < --vocab_size={vocab_size}"
            )
        specials += [f"<SPECIAL_{i}>" for i in range(len(specials), num_special_tokens)]
        ranks = read_tiktoken_json(path, vocab_size - num_special_tokens, num_special_tokens)
        if len(ranks) != vocab_size - num_special_tokens:
            raise TokenizerError(
                f"tiktoken vocabulary {path!r} has {len(ranks)} distinct entries; --vocab_size="
                f"{vocab_size} with {num_special_tokens} special tokens needs "
                f"{vocab_size - num_special_tokens}"
            )
        index = {t: i for i, t in enumerate(specials)}
        name = os.path.basename(os.path.dirname(os.path.abspath(path)))
        self._build(path, name, MEGATRON_TIKTOKEN_PATTERNS[pattern], ranks, index)
        self._encode = functools.partial(self._enc.encode, allowed_special="all")
        self.vocab_size = vocab_size
        self.bos, self.eos, self.pad, self.mask, self.cls, self.sep = (
            index[t] for t in ("<s>", "</s>", "<pad>", "<mask>", "<cls>", "<sep>")
        )
        self.eod = self.eos


class NullTokenizer(_Adapter):
    """Megatron's ``NullTokenizer``: the text is space-separated integer ids; eod = vocab_size.

    ``vocab_size`` is the ``--vocab_size`` flag + 1 (the EOD id), as in Megatron. An empty text is
    not a list of integers: Megatron fails on it; here it is a tokenizer error for that record.
    """

    name = NULL

    def __init__(self, vocab_size: int) -> None:
        self.eod = int(vocab_size)
        self.vocab_size = int(vocab_size) + 1

    def tokenize_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Returns ``(flat_ids, lengths)``: ``int(x)`` for every space-separated field."""
        return _flatten([[int(x) for x in t.split(" ")] for t in texts])

    def detokenize(self, ids: Sequence[int] | np.ndarray) -> str:
        """Joins the ids with spaces."""
        return " ".join(str(int(i)) for i in ids)

    def token_to_id(self, token: str) -> int | None:
        """``int(token)`` when it is an id of the vocabulary, else None."""
        try:
            value = int(token)
        except ValueError:
            return None
        return value if 0 <= value < self.vocab_size else None


def load_tokenizer(spec: TokenizerSpec) -> Tokenizer:
    """Loads the tokenizer a spec describes.

    Args:
      spec: The tokenizer description.

    Returns:
      A ready tokenizer adapter.

    Raises:
      TokenizerError: A file is missing/unreadable or its content cannot be loaded.
    """
    spec.check_files()
    if spec.type == BYTE:
        return ByteTokenizer()
    if spec.type == NULL:
        return NullTokenizer(spec.vocab_size)  # type: ignore[arg-type]
    model = spec.model_file()
    if spec.type == HUGGINGFACE:
        return HuggingFaceTokenizer(model)  # type: ignore[arg-type]
    if spec.type == GPT2BPE:
        return GPT2BPETokenizer(spec.vocab_file, spec.merge_file)  # type: ignore[arg-type]
    if spec.type in SENTENCEPIECE_TYPES:
        tok = SentencePieceTokenizer(model)  # type: ignore[arg-type]
        tok.name = spec.type
        return tok
    if model.endswith(".json"):  # type: ignore[union-attr]
        return MegatronTikTokenizer(
            model,  # type: ignore[arg-type]
            spec.tiktoken_pattern,
            spec.tiktoken_num_special_tokens,
            spec.tiktoken_special_tokens,
            spec.vocab_size,
        )
    return TikTokenizer(model, spec.tiktoken_pattern or "cl100k")  # type: ignore[arg-type]
