"""Describing a tokenizer: its type names, the picklable `TokenizerSpec`, the `Tokenizer` protocol.

A `TokenizerSpec` is cheap and imports no tokenizer library: it validates the type and files,
and `identity()` describes them for run manifests. The adapters that load a spec are in
:mod:`jaxblend.preprocess.tokenizers`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from jaxblend.tokenizer_facts import TokenizerFacts

BYTE = "ByteTokenizer"
HUGGINGFACE = "HuggingFaceTokenizer"
GPT2BPE = "GPT2BPETokenizer"
SENTENCEPIECE = "SentencePieceTokenizer"
TIKTOKEN = "TikTokenizer"
GPT_SENTENCEPIECE = "GPTSentencePieceTokenizer"
LLAMA2 = "Llama2Tokenizer"
NULL = "NullTokenizer"

TOKENIZER_TYPES = (
    BYTE,
    HUGGINGFACE,
    GPT2BPE,
    SENTENCEPIECE,
    GPT_SENTENCEPIECE,
    LLAMA2,
    TIKTOKEN,
    NULL,
)
_ALIASES = {t.lower(): t for t in TOKENIZER_TYPES} | {
    "byte": BYTE,
    "hf": HUGGINGFACE,
    "huggingface": HUGGINGFACE,
    "gpt2": GPT2BPE,
    "sentencepiece": SENTENCEPIECE,
    "spm": SENTENCEPIECE,
    "tiktoken": TIKTOKEN,
    "null": NULL,
}
SENTENCEPIECE_TYPES = (SENTENCEPIECE, GPT_SENTENCEPIECE, LLAMA2)

# What a directory given as --tokenizer_model is searched for, per type, first found wins.
_MODEL_FILES_IN_DIR = dict.fromkeys(SENTENCEPIECE_TYPES, ("tokenizer.model",)) | {
    HUGGINGFACE: ("tokenizer.json",),
    TIKTOKEN: ("tokenizer.json", "tokenizer.tiktoken"),
}

HF_CONFIG_FILES = ("tokenizer_config.json", "special_tokens_map.json")


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


class TokenizerError(ValueError):
    """A tokenizer cannot be loaded: unknown type, missing or unreadable file, bad content."""


def read_json_object(path: str) -> dict:
    """The JSON object of a tokenizer directory's file (`{}` for other JSON values).

    Raises:
      TokenizerError: the file is not valid JSON.
    """
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except ValueError as e:
        raise TokenizerError(f"{path}: not valid JSON ({e})") from None
    return data if isinstance(data, dict) else {}


def named_tokens(directory: str) -> dict[str, str]:
    """The ``<name>_token`` strings of a Hugging Face model directory's JSON configuration:
    ``tokenizer_config.json`` then ``special_tokens_map.json`` (later wins); values are strings
    or ``{"content": ...}`` objects.

    Raises:
      TokenizerError: a present file is not valid JSON.
    """
    out: dict[str, str] = {}
    for name in HF_CONFIG_FILES:
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            continue
        for key, value in read_json_object(path).items():
            if isinstance(value, dict):
                value = value.get("content")
            if key.endswith("_token") and isinstance(value, str):
                out[key] = value
    return out


def canonical_type(name: str) -> str:
    """Maps a ``--tokenizer_type`` name or alias to its canonical name.

    Args:
      name: A canonical name (e.g. ``HuggingFaceTokenizer``) or alias (``hf``), any case.

    Returns:
      The canonical type name.

    Raises:
      TokenizerError: The name is unknown.
    """
    canonical = _ALIASES.get(name.strip().lower())
    if canonical is None:
        raise TokenizerError(
            f"tokenizer_type={name!r} is not supported; use one of {', '.join(TOKENIZER_TYPES)} "
            f"(aliases: {', '.join(sorted(_ALIASES))})"
        )
    return canonical


@dataclasses.dataclass(frozen=True)
class TokenizerSpec:
    """Everything needed to load a tokenizer; picklable, cheap, compared in run manifests.

    Attributes:
      type: ``--tokenizer_type`` (canonical name or alias).
      model: The model file (HF ``tokenizer.json``, SentencePiece ``.model``, tiktoken ranks).
      vocab_file: HF ``tokenizer.json`` (alternative to ``model``) or GPT-2 ``vocab.json``.
      merge_file: GPT-2 ``merges.txt``.
      tiktoken_pattern: for ``TikTokenizer``: ``v1``/``v2`` (Megatron's patterns, JSON vocabulary;
        default ``v2``) or ``gpt2``/``cl100k``/a literal regex (base64 ranks file; default
        ``cl100k``).
      tiktoken_num_special_tokens: ids reserved before the vocabulary (Megatron's TikTokenizer).
      tiktoken_special_tokens: the first special tokens (default Megatron's seven).
      vocab_size: vocabulary size of ``NullTokenizer``.
    """

    type: str = BYTE
    model: str | None = None
    vocab_file: str | None = None
    merge_file: str | None = None
    tiktoken_pattern: str | None = None
    tiktoken_num_special_tokens: int = 1000
    tiktoken_special_tokens: tuple[str, ...] = ()
    vocab_size: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "type", canonical_type(self.type))
        if self.type == HUGGINGFACE and not (self.model or self.vocab_file):
            raise TokenizerError(
                f"tokenizer_type={self.type} needs --tokenizer_model (or --vocab_file): "
                "the path of a Hugging Face tokenizer.json"
            )
        if self.type == GPT2BPE and not (self.vocab_file and self.merge_file):
            raise TokenizerError(
                f"tokenizer_type={self.type} needs --vocab_file (vocab.json) and --merge_file "
                "(merges.txt)"
            )
        if self.type in (*SENTENCEPIECE_TYPES, TIKTOKEN) and not self.model:
            raise TokenizerError(f"tokenizer_type={self.type} needs --tokenizer_model")
        if self.type == NULL and (self.vocab_size is None or self.vocab_size <= 0):
            raise TokenizerError(f"tokenizer_type={self.type} needs --vocab_size > 0")

    def model_file(self) -> str | None:
        """The model file; a directory ``--tokenizer_model`` resolves to the file it holds.

        Raises:
          TokenizerError: a directory holds none of the files this type reads.
        """
        path = self.model or (self.vocab_file if self.type == HUGGINGFACE else None)
        if path is None or not os.path.isdir(path):
            return path
        names = _MODEL_FILES_IN_DIR.get(self.type, ())
        for name in names:
            if os.path.isfile(os.path.join(path, name)):
                return os.path.join(path, name)
        raise TokenizerError(
            f"--tokenizer_model {path!r} is a directory without "
            f"{' or '.join(names) or 'a model file'} ({self.type}); pass the file itself"
        )

    def files(self) -> list[str]:
        """Returns the files this tokenizer is loaded from (possibly empty)."""
        if self.type in (BYTE, NULL):
            return []
        if self.type == GPT2BPE:
            return [self.vocab_file, self.merge_file]  # type: ignore[list-item]
        return [self.model_file()]  # type: ignore[list-item]

    def check_files(self) -> None:
        """Checks that every tokenizer file exists and is readable.

        Raises:
          TokenizerError: A file is missing, a directory, or unreadable; names the file.
        """
        for path in self.files():
            if not os.path.exists(path):
                raise TokenizerError(f"tokenizer file {path!r} ({self.type}) does not exist")
            if not os.path.isfile(path):
                raise TokenizerError(f"tokenizer file {path!r} ({self.type}) is not a file")
            try:
                with open(path, "rb") as f:
                    f.read(1)
            except OSError as e:
                raise TokenizerError(f"tokenizer file {path!r} ({self.type}) is unreadable: {e}")

    def identity(self) -> dict[str, object]:
        """Returns a JSON-able description including a SHA-256 of every file (for manifests)."""
        out: dict[str, object] = {"type": self.type}
        if self.type == TIKTOKEN:
            out["tiktoken_pattern"] = self.tiktoken_pattern
            out["tiktoken_num_special_tokens"] = self.tiktoken_num_special_tokens
            out["tiktoken_special_tokens"] = list(self.tiktoken_special_tokens)
        if self.type in (TIKTOKEN, NULL):
            out["vocab_size"] = self.vocab_size
        paths = [os.path.abspath(path) for path in self.files()]
        if self.type == HUGGINGFACE:  # the model directory's JSON names the special tokens
            directory = os.path.dirname(paths[0])
            configs = (os.path.join(directory, name) for name in HF_CONFIG_FILES)
            paths += [path for path in configs if os.path.isfile(path)]
        out["files"] = [{"path": path, "sha256": _sha256(path)} for path in paths]
        return out


class Tokenizer(Protocol):
    """What the pipeline needs from a tokenizer."""

    name: str
    vocab_size: int
    eod: int | None
    pad: int | None
    bos: int | None
    eos: int | None
    mask: int | None
    cls: int | None
    sep: int | None

    def tokenize(self, text: str) -> np.ndarray: ...

    def tokenize_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]: ...

    def detokenize(self, ids: Sequence[int] | np.ndarray) -> str: ...


def facts_of(spec: TokenizerSpec, tokenizer: Tokenizer) -> TokenizerFacts:
    """The facts a dataset records about its tokenizer: its type and a digest of its identity
    without file paths (the same files elsewhere are the same tokenizer), vocabulary size, EOD and
    pad ids."""
    ident = spec.identity()
    files = ident.pop("files", [])
    if not files and set(ident) == {"type"}:
        identity = spec.type
    else:
        ident["files"] = [f["sha256"] for f in files]  # type: ignore[index]
        digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()
        identity = f"{spec.type} sha256:{digest[:12]}"
    return TokenizerFacts(identity, tokenizer.vocab_size, tokenizer.eod, tokenizer.pad)
