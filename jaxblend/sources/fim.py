"""Fill-in-the-middle (FIM) samples: Megatron-LM's `GPTFIMDataset` rearrangement of GPT windows.

A FIM run reads the same windows as a plain GPT run (`GPTSource.read_batch`) and then rewrites
each one, as Megatron-LM's `--fim-data` does:

* the window is cut at every `eod_token` into segments (an empty segment between two EODs, or
  before a leading one, is dropped together with its EOD, as in Megatron; the segment after the
  last EOD is always visited, even when empty);
* with `split_sample`, a segment holding that token is first, with probability `rate`, cut at it
  into fragments, each rewritten with probability `fragment_rate` (empty fragments dropped with
  their split token, as EOD segments are); a segment without it is one fragment at `rate`;
* a fragment chosen for FIM is decoded to text (the tokenizer's `detokenize`, which drops special
  tokens), left alone when the text starts with `no_prefix`, otherwise cut at two character
  positions drawn uniformly in `[0, len(text)]` (sorted; either may be 0 or the length, and they
  may be equal) into prefix, middle and suffix, each encoded again; with probability `spm_rate`
  it becomes SPM, ``<PRE> <SUF> suffix <MID> prefix middle``, else PSM,
  ``<PRE> prefix <SUF> suffix <MID> middle``;
* the rewritten window is cut back to its length, or padded to it (see below).

The one departure from Megatron: its draws come from one `RandomState` shared by every sample the
dataset object serves, so a sample's FIM depends on which samples were read before it (the access
order, the number of data-loader workers, the resume point). Here every sample draws from its own
stream, `numpy.random.default_rng([seed, FIM_STREAM, split, sample_id])` (`sample_draws`), so a
sample is the same whichever process reads it, in any order, after any resume. The draws per
fragment are Megatron's, in its order: one Bernoulli(rate) (or `fragment_rate`), then two integer
cut points, then one Bernoulli(`spm_rate`); with `split_sample`, one Bernoulli(rate) per segment
holding the split token before its fragments' draws.

Padding: under `GPTSchemaOptions.megatron_compat` the window is padded with `pad_token`'s id, as
Megatron's is (its loss then counts unless that id is the schema's `pad_id`, also as in Megatron).
In jaxblend's own convention the shortfall is batch padding: the row's valid length shrinks, so
those positions have input 0, loss 0, position 0 and segment 0. With `inter_document_masking`,
Megatron's FIM sample is one document (`cu_seqlens` = `[0, S]`); jaxblend's own convention takes
the documents from the EOD tokens of the rewritten window.

The tokenizer is the one recorded with the data (`jaxblend.decode.recorded_spec`), else the one
`FIMOptions.tokenizer` names (`--tokenizer_type` & co.); the sentinel tokens are looked up in it
by name. A `FIMTransform` is picklable: a Grain worker loads the tokenizer again on first use.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from jaxblend.access import DataAccess
    from jaxblend.preprocess.tokenizer_spec import TokenizerSpec

FIM_STREAM = 0x46494D
"""Second word of every FIM stream's seed ("FIM"), so FIM draws never coincide with another
per-sample stream of the same seed (masked-LM samples draw from `[seed, sample]`)."""

SPLIT_CODES = {"train": 0, "valid": 1, "test": 2}

MARKS = {
    "prefix": "[FIM_PREFIX]",
    "middle": "[FIM_MIDDLE]",
    "suffix": "[FIM_SUFFIX]",
    "pad": "[FIM_PAD]",
}
"""How decoded text (`--decode`) shows each sentinel token."""


def _rate(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number in [0, 1], got {value!r}")
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ValueError(f"{name} must be in [0, 1], got {value}")
    return float(value)


@dataclasses.dataclass(frozen=True)
class FIMOptions:
    """Megatron-LM's FIM settings (`--fim-rate`, `--fim-spm-rate`, ...).

    Attributes:
      rate: probability that a segment (or, with `split_sample`, a segment's fragments) is
        rewritten (`--fim_rate`).
      spm_rate: probability that a rewritten fragment is SPM rather than PSM (`--fim_spm_rate`).
      split_sample: a token (by name) at which segments are cut into fragments
        (`--fim_split_sample`), or None.
      fragment_rate: probability that each fragment is rewritten (`--fim_fragment_rate`); required
        with `split_sample`, refused without it.
      no_prefix: fragments whose text starts with this string are never rewritten
        (`--fim_no_prefix`), or None.
      prefix_token, middle_token, suffix_token, pad_token, eod_token: the sentinel tokens by name
        (Megatron's defaults); `eod_token` delimits the segments.
      tokenizer: the tokenizer for data without a preprocessing record (a
        `jaxblend.preprocess.tokenizer_spec.TokenizerSpec`, from `--tokenizer_type` & co.), or
        None. Not part of the identity: the loaded tokenizer's own identity is (`FIMTransform`).
    """

    rate: float = 0.5
    spm_rate: float = 0.5
    split_sample: str | None = None
    fragment_rate: float | None = None
    no_prefix: str | None = None
    prefix_token: str = "<fim_prefix>"
    middle_token: str = "<fim_middle>"
    suffix_token: str = "<fim_suffix>"
    pad_token: str = "<fim_pad>"
    eod_token: str = "<|endoftext|>"
    tokenizer: TokenizerSpec | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", _rate("fim rate (--fim_rate)", self.rate))
        object.__setattr__(self, "spm_rate", _rate("fim spm_rate (--fim_spm_rate)", self.spm_rate))
        if self.split_sample is not None and self.fragment_rate is None:
            raise ValueError(
                f"--fim_split_sample={self.split_sample} needs --fim_fragment_rate (the FIM "
                "probability of each fragment)"
            )
        if self.fragment_rate is not None:
            if self.split_sample is None:
                raise ValueError(
                    "--fim_fragment_rate applies only with --fim_split_sample (the token that "
                    "cuts segments into fragments)"
                )
            object.__setattr__(
                self, "fragment_rate",
                _rate("fim fragment_rate (--fim_fragment_rate)", self.fragment_rate),
            )
        for name in ("prefix_token", "middle_token", "suffix_token", "pad_token", "eod_token"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"--fim_{name} must be a token name, got {value!r}")
        if self.split_sample is not None and not self.split_sample:
            raise ValueError("--fim_split_sample must be a token name, not empty")

    def identity_fields(self) -> dict[str, object]:
        """The settings that change a FIM batch, as named fingerprint fields."""
        return {
            "rate": self.rate,
            "spm_rate": self.spm_rate,
            "split_sample": self.split_sample,
            "fragment_rate": self.fragment_rate,
            "no_prefix": self.no_prefix,
            "tokens": [
                self.prefix_token, self.middle_token, self.suffix_token, self.pad_token,
                self.eod_token,
            ],
        }


class FIMTokenizer(Protocol):
    """What FIM needs of a tokenizer (every `jaxblend.preprocess.tokenizers` adapter)."""

    def tokenize_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(the ids of every text concatenated, each text's number of ids)."""
        ...

    def detokenize(self, ids: Sequence[int] | np.ndarray) -> str: ...

    def token_to_id(self, token: str) -> int | None: ...


@dataclasses.dataclass(frozen=True)
class FIMTokens:
    """The sentinel ids of `FIMOptions`' token names in one tokenizer."""

    prefix: int
    middle: int
    suffix: int
    pad: int
    eod: int
    split_sample: int | None = None

    @classmethod
    def resolve(cls, options: FIMOptions, tokenizer: FIMTokenizer, where: str) -> FIMTokens:
        """Looks each token name of `options` up in `tokenizer`.

        Raises:
          ValueError: a name is not one token of the vocabulary (names the flag and `where`, the
            tokenizer's description).
        """

        def lookup(flag: str, name: str) -> int:
            tid = tokenizer.token_to_id(name)
            if tid is None:
                raise ValueError(
                    f"--fim_{flag}={name} is not a token of the tokenizer ({where}); name one of "
                    "its vocabulary entries (e.g. the tokenizer's own FIM sentinels)"
                )
            return int(tid)

        split = options.split_sample
        return cls(
            prefix=lookup("prefix_token", options.prefix_token),
            middle=lookup("middle_token", options.middle_token),
            suffix=lookup("suffix_token", options.suffix_token),
            pad=lookup("pad_token", options.pad_token),
            eod=lookup("eod_token", options.eod_token),
            split_sample=None if split is None else lookup("split_sample", split),
        )

    def marks(self) -> dict[int, str]:
        """Sentinel id -> how decoded text shows it (`MARKS`)."""
        return {getattr(self, name): mark for name, mark in MARKS.items()}


class Draws(Protocol):
    """The random choices of one sample, in the order the transform asks for them."""

    def coin(self, p: float) -> bool:
        """A Bernoulli(p) draw."""
        ...

    def cuts(self, n: int) -> tuple[int, int]:
        """Two character positions in `[0, n]`, sorted."""
        ...


class StreamDraws:
    """`Draws` from a numpy `Generator`: Bernoulli draws as `binomial(1, p)`, cut points as two
    independent uniform integers in `[0, n]`, sorted (the distributions Megatron draws from)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def coin(self, p: float) -> bool:
        return bool(self.rng.binomial(1, p))

    def cuts(self, n: int) -> tuple[int, int]:
        a, b = (int(x) for x in self.rng.integers(0, n + 1, size=2))
        return (a, b) if a <= b else (b, a)


def sample_draws(seed: int, split: str, sample_id: int) -> StreamDraws:
    """The draws of sample `sample_id` of `split`: a stream of its own, whoever reads it, when."""
    code = SPLIT_CODES.get(split)
    if code is None:
        raise ValueError(f"FIM split {split!r}: expected one of {sorted(SPLIT_CODES)}")
    return StreamDraws(np.random.default_rng([int(seed), FIM_STREAM, code, int(sample_id)]))


@dataclasses.dataclass(frozen=True)
class FIMRewriter:
    """Megatron's FIM rewrite of one sample, given its tokenizer, sentinel ids and draws.

    Attributes:
      options: the FIM settings.
      tokens: their sentinel ids.
      tokenizer: decodes and encodes the fragments.
    """

    options: FIMOptions
    tokens: FIMTokens
    tokenizer: FIMTokenizer

    def fragment(self, tokens: np.ndarray, rate: float, draws: Draws) -> np.ndarray:
        """One fragment, rewritten as PSM or SPM with probability `rate` (else unchanged)."""
        if not draws.coin(rate):
            return tokens
        text = self.tokenizer.detokenize(tokens)
        if self.options.no_prefix is not None and text.startswith(self.options.no_prefix):
            return tokens
        lo, hi = draws.cuts(len(text))
        flat, lengths = self.tokenizer.tokenize_batch([text[:lo], text[lo:hi], text[hi:]])
        ends = np.cumsum(lengths)
        prefix, middle, suffix = flat[: ends[0]], flat[ends[0] : ends[1]], flat[ends[1] : ends[2]]
        t = self.tokens
        if draws.coin(self.options.spm_rate):
            parts = [[t.prefix, t.suffix], suffix, [t.middle], prefix, middle]
        else:
            parts = [[t.prefix], prefix, [t.suffix], suffix, [t.middle], middle]
        return np.concatenate([np.asarray(p, np.int64) for p in parts])

    def segment(self, tokens: np.ndarray, draws: Draws) -> np.ndarray:
        """One EOD-delimited segment: one fragment at `rate`, or (with `split_sample` present
        in it) with probability `rate` each of its fragments at `fragment_rate`."""
        split = self.tokens.split_sample
        if split is None or not (tokens == split).any():
            return self.fragment(tokens, self.options.rate, draws)
        if not draws.coin(self.options.rate):
            return tokens
        return _rejoin(tokens, split, lambda f: self.fragment(f, self.options.fragment_rate, draws))

    def sample(self, tokens: np.ndarray, draws: Draws) -> np.ndarray:
        """The rewritten sample, before it is cut or padded back to its length."""
        tokens = np.asarray(tokens, np.int64)
        if not (tokens == self.tokens.eod).any():
            return self.segment(tokens, draws)
        return _rejoin(tokens, self.tokens.eod, lambda s: self.segment(s, draws))


def _rejoin(tokens: np.ndarray, sep: int, rewrite) -> np.ndarray:
    """`tokens` cut at every `sep`, each non-empty piece rewritten and followed by `sep` (empty
    pieces are dropped with their `sep`), then the piece after the last `sep` rewritten, even
    when empty."""
    parts = []
    start = 0
    for loc in np.flatnonzero(tokens == sep).tolist():
        if loc > start:
            parts += [rewrite(tokens[start:loc]), np.array([sep], np.int64)]
        start = loc + 1
    parts.append(rewrite(tokens[start:]))
    return np.concatenate([np.asarray(p, np.int64) for p in parts])


def fit(tokens: np.ndarray, length: int, pad: int | None) -> np.ndarray:
    """`tokens` cut to `length`, or padded to it with `pad` (None: left short)."""
    if tokens.size >= length:
        return tokens[:length]
    if pad is None:
        return tokens
    return np.concatenate([tokens, np.full(length - tokens.size, pad, np.int64)])


class FIMTransform:
    """FIM for a GPT source: rewrites the windows of a batch's raw form (`schema.raw_windows`).

    Args:
      options: the FIM settings.
      spec: the tokenizer (a `TokenizerSpec`) that decodes and encodes the fragments.
      seed: the data seed (`GPTDataConfig.seed`); each sample draws from `sample_draws`.
      tokenizer: the loaded tokenizer of `spec`, when the caller has it (else loaded here).

    Raises:
      ValueError: a sentinel name is not a token of the tokenizer.
    """

    def __init__(
        self, options: FIMOptions, spec: TokenizerSpec, seed: int, tokenizer: Any = None
    ) -> None:
        from jaxblend.preprocess import tokenizer_spec, tokenizers

        self.options = options
        self.spec = spec
        self.seed = int(seed)
        self._tokenizer = tokenizers.load_tokenizer(spec) if tokenizer is None else tokenizer
        self.tokenizer_identity = tokenizer_spec.facts_of(spec, self._tokenizer).identity
        self.tokens = FIMTokens.resolve(options, self._tokenizer, self.tokenizer_identity)
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_lock")
        state["_tokenizer"] = None  # a worker loads its own
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"FIMTransform({self.options!r}, tokenizer={self.tokenizer_identity!r})"

    @property
    def tokenizer(self) -> FIMTokenizer:
        """The tokenizer (loaded on first use in this process)."""
        if self._tokenizer is None:
            with self._lock:
                if self._tokenizer is None:
                    from jaxblend.preprocess import tokenizers

                    self._tokenizer = tokenizers.load_tokenizer(self.spec)
        return self._tokenizer

    def identity_fields(self) -> dict[str, object]:
        """What the rewrite depends on besides `FIMOptions` (in the schema's identity): the
        tokenizer's identity and the sentinel ids."""
        return {
            "tokenizer": self.tokenizer_identity,
            "tokens": dataclasses.asdict(self.tokens),
        }

    def marks(self) -> dict[int, str]:
        """Sentinel id -> how decoded text shows it (`--decode`)."""
        return self.tokens.marks()

    def rewriter(self) -> FIMRewriter:
        """The rewrite of one sample with this process's tokenizer."""
        return FIMRewriter(self.options, self.tokens, self.tokenizer)

    def rewrite(
        self, tokens: np.ndarray, split: str, sample_id: int, megatron_compat: bool = True
    ) -> np.ndarray:
        """Sample `sample_id` of `split` (its window `tokens`) rewritten: as long as `tokens`
        (padded with the pad token), or, with `megatron_compat=False`, possibly shorter (the rest
        is batch padding)."""
        out = self.rewriter().sample(tokens, sample_draws(self.seed, split, sample_id))
        return fit(out, len(tokens), self.tokens.pad if megatron_compat else None)

    def apply(self, raw: dict[str, np.ndarray], split: str, megatron_compat: bool) -> dict:
        """Rewrites every window of `raw` (`schema.raw_windows`) in place and returns it.

        Document pieces (`piece_row`/`piece_length`) no longer match the rewritten tokens: under
        `megatron_compat` each row becomes one piece of its valid length (Megatron's FIM sample
        is one document), otherwise they are dropped (documents then end at each EOD).
        """
        text, n_valid, ids = raw["text"], raw["n_valid"], raw["sample_ids"]
        rewriter = self.rewriter()
        pad = self.tokens.pad if megatron_compat else None
        for r in range(text.shape[0]):
            n = int(n_valid[r])
            out = fit(rewriter.sample(text[r, :n], sample_draws(self.seed, split, ids[r])), n, pad)
            text[r, : out.size] = out
            text[r, out.size : n] = -1
            n_valid[r] = out.size
        if "piece_row" in raw:
            if megatron_compat:
                raw["piece_row"] = np.arange(text.shape[0], dtype=np.int64)
                raw["piece_length"] = np.asarray(n_valid, np.int64).copy()
            else:
                del raw["piece_row"], raw["piece_length"]
        return raw


def resolve_spec(
    options: FIMOptions, prefixes: Sequence[str], access: DataAccess | None = None
) -> TokenizerSpec:
    """The tokenizer FIM uses for datasets `prefixes`: the one recorded with the first dataset
    that has a record, else `options.tokenizer`.

    Raises:
      ValueError: neither exists (one line saying how to name the tokenizer), or the recorded
        tokenizer's files cannot be verified.
    """
    from jaxblend.decode import DecodeError, recorded_spec

    for prefix in dict.fromkeys(prefixes):
        try:
            spec = recorded_spec(prefix, access, options.tokenizer)
        except DecodeError as err:  # the same check as --decode's, named for this flag
            raise ValueError(str(err).replace("--decode:", "--fim_data:", 1)) from None
        if spec is not None:
            return spec
    if options.tokenizer is not None:
        return options.tokenizer
    where = prefixes[0] if prefixes else "the data"
    raise ValueError(
        f"--fim_data: {where} has no preprocessing record naming its tokenizer; pass "
        "--tokenizer_type and --tokenizer_model (or --vocab_file, --merge_file)"
    )


def open_fim_transform(
    options: FIMOptions, prefixes: Sequence[str], seed: int, access: DataAccess | None = None
) -> FIMTransform:
    """The `FIMTransform` of datasets `prefixes` (the tokenizer of `resolve_spec`) and data seed
    `seed`.

    Raises:
      ValueError: as `resolve_spec`, or a sentinel name is not a token of the tokenizer.
    """
    return FIMTransform(options, resolve_spec(options, prefixes, access), seed)
