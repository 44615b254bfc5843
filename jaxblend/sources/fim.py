"""Fill-in-the-middle (FIM) samples: Megatron-LM's `GPTFIMDataset` rearrangement of GPT windows.

A FIM run reads the same windows as a plain GPT run (`GPTSource.read_batch`) and rewrites each
one as Megatron-LM's `--fim-data` does: cut at every EOD into segments (with `split_sample`, into
fragments), each chosen fragment decoded, cut at two character positions into prefix, middle and
suffix, encoded again and rearranged as PSM or SPM around the sentinels, then the window cut or
padded back to its length. docs/samples.md ("Fill-in-the-middle") states every rule, the padding
conventions and the packed-row rewrite (`fit_document`).

The draws per fragment are Megatron's, in its order: one Bernoulli(rate) (or `fragment_rate`),
two integer cut points, one Bernoulli(`spm_rate`); with `split_sample`, one Bernoulli(rate) per
segment holding the split token first. The one departure: Megatron draws from one `RandomState`
shared by every sample a dataset object serves (so a sample depends on the access order, the
worker count, the resume point); here each sample draws from its own stream,
`numpy.random.default_rng([seed, FIM_STREAM, split, sample_id])` (`sample_draws`; a packed row's
document appends its number), so a sample is the same whoever reads it, in any order.

A batch is planned sample by sample (draws and decodes), then the pieces of every rewritten
fragment are encoded in one `tokenize_batch` call (`RewritePlan`), each piece on its own. The
tokenizer is the one recorded with the data, else `FIMOptions.tokenizer`; a `FIMTransform` is
picklable (a Grain worker loads the tokenizer again on first use).
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from jaxblend.fim_options import FIMOptions  # the settings (light: the flag layer's too)
from jaxblend.sources.base import PerProcess
from jaxblend.validation import require_choice

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
        a, b = self.rng.integers(0, n + 1, size=2).tolist()
        return (a, b) if a <= b else (b, a)


def sample_draws(
    seed: int, split: str, sample_id: int, document: int | None = None
) -> StreamDraws:
    """The draws of sample `sample_id` of `split`: a stream of its own, whoever reads it, when.

    With `document` (a packed row's documents, in row order from 0): the stream of that document
    of the row, `[seed, FIM_STREAM, split, sample_id, document]`.
    """
    require_choice("FIM split", split, tuple(SPLIT_CODES))
    key = [int(seed), FIM_STREAM, SPLIT_CODES[split], int(sample_id)]
    if document is not None:
        key.append(int(document))
    return StreamDraws(np.random.default_rng(key))


class RewritePlan:
    """The rewritten fragments of a batch, planned one sample at a time and encoded together.

    Planning a fragment draws its random choices (in Megatron's order) and decodes it; its three
    pieces of text wait here, so that `encode` makes one `tokenize_batch` call for every piece of
    every sample of the batch (the tokenizer's per-call cost paid once, its batched encoder used).
    Each piece is encoded on its own, so the ids are those of three separate encodings.

    A planned sample is a list of parts: token arrays kept as they are, and the indices (ints)
    of its rewritten fragments in the plan (`build` joins them once the plan is encoded).
    """

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.spm: list[bool] = []

    def add(self, prefix: str, middle: str, suffix: str, spm: bool) -> int:
        """Plans one rewritten fragment; returns its index (its part in a planned sample)."""
        self.texts += (prefix, middle, suffix)
        self.spm.append(spm)
        return len(self.spm) - 1

    def encode(self, tokenizer: FIMTokenizer, tokens: FIMTokens) -> list[np.ndarray]:
        """Every planned fragment's tokens, PSM or SPM with `tokens`' sentinels, in plan order."""
        if not self.spm:
            return []
        flat, lengths = tokenizer.tokenize_batch(self.texts)
        flat = np.asarray(flat, np.int64)
        bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
        pre, mid, suf = (np.array([t], np.int64) for t in (tokens.prefix, tokens.middle, tokens.suffix))
        pre_suf = np.array([tokens.prefix, tokens.suffix], np.int64)
        out = []
        for j, spm in enumerate(self.spm):
            a, b, c, d = bounds[3 * j : 3 * j + 4]
            prefix, middle, suffix = flat[a:b], flat[b:c], flat[c:d]
            if spm:
                parts = (pre_suf, suffix, mid, prefix, middle)
            else:
                parts = (pre, prefix, suf, suffix, mid, middle)
            out.append(np.concatenate(parts))
        return out


def build(parts: Sequence[Any], rewritten: Sequence[np.ndarray]) -> np.ndarray:
    """The tokens of planned `parts` (see `RewritePlan`), given the plan's encoded fragments."""
    if not parts:
        return np.zeros(0, np.int64)
    return np.concatenate(
        [rewritten[p] if isinstance(p, int) else p for p in parts]
    ).astype(np.int64, copy=False)


@dataclasses.dataclass(frozen=True)
class FIMRewriter:
    """Megatron's FIM rewrite of one sample, given its tokenizer, sentinel ids and draws.

    The `plan_*` methods draw and decode, leaving the encoding to a `RewritePlan` shared by a
    batch; `fragment`, `sample` and `document` plan and encode one at a time (the same tokens).

    Attributes:
      options: the FIM settings.
      tokens: their sentinel ids.
      tokenizer: decodes and encodes the fragments.
    """

    options: FIMOptions
    tokens: FIMTokens
    tokenizer: FIMTokenizer

    def plan_fragment(self, tokens: np.ndarray, rate: float, draws: Draws, plan: RewritePlan):
        """One fragment: with probability `rate` planned as PSM or SPM (its index in `plan`),
        else `tokens` unchanged."""
        if not draws.coin(rate):
            return tokens
        text = self.tokenizer.detokenize(tokens)
        if self.options.no_prefix is not None and text.startswith(self.options.no_prefix):
            return tokens
        lo, hi = draws.cuts(len(text))
        return plan.add(text[:lo], text[lo:hi], text[hi:], draws.coin(self.options.spm_rate))

    def plan_segment(self, tokens: np.ndarray, draws: Draws, plan: RewritePlan) -> list:
        """One EOD-delimited segment: one fragment at `rate`, or (with `split_sample` present
        in it) with probability `rate` each of its fragments at `fragment_rate`."""
        split = self.tokens.split_sample
        if split is None or not (tokens == split).any():
            return [self.plan_fragment(tokens, self.options.rate, draws, plan)]
        if not draws.coin(self.options.rate):
            return [tokens]
        rate = self.options.fragment_rate
        return _rejoin(tokens, split, lambda f: [self.plan_fragment(f, rate, draws, plan)])

    def plan_sample(self, tokens: np.ndarray, draws: Draws, plan: RewritePlan) -> list:
        """A sample's parts, before it is cut or padded back to its length."""
        tokens = np.asarray(tokens, np.int64)
        return _rejoin(tokens, self.tokens.eod, lambda s: self.plan_segment(s, draws, plan))

    def plan_document(self, tokens: np.ndarray, draws: Draws, plan: RewritePlan) -> list:
        """A packed document's parts (`fit_document` puts them back in its place): the tokens
        before its final EOD planned as a sample (left alone when there are none); a document
        without a final EOD (a piece of a longer one) is a sample as a whole."""
        tokens = np.asarray(tokens, np.int64)
        body = tokens[:-1] if tokens.size and tokens[-1] == self.tokens.eod else tokens
        if body.size == 0:
            return []
        return self.plan_sample(body, draws, plan)

    def encode(self, plan: RewritePlan) -> list[np.ndarray]:
        """The planned fragments of `plan`, encoded (`RewritePlan.encode`)."""
        return plan.encode(self.tokenizer, self.tokens)

    def _at_once(self, plan_parts: Callable[[RewritePlan], list]) -> np.ndarray:
        """The tokens of the parts `plan_parts(plan)` plans, encoded at once."""
        plan = RewritePlan()
        parts = plan_parts(plan)
        return build(parts, self.encode(plan))

    def fragment(self, tokens: np.ndarray, rate: float, draws: Draws) -> np.ndarray:
        """One fragment, rewritten as PSM or SPM with probability `rate` (else unchanged)."""
        tokens = np.asarray(tokens, np.int64)
        return self._at_once(lambda plan: [self.plan_fragment(tokens, rate, draws, plan)])

    def sample(self, tokens: np.ndarray, draws: Draws) -> np.ndarray:
        """The rewritten sample, before it is cut or padded back to its length."""
        return self._at_once(functools.partial(self.plan_sample, tokens, draws))

    def document(self, tokens: np.ndarray, draws: Draws) -> np.ndarray:
        """A packed document rewritten and put back in its place (`fit_document`)."""
        rewritten = self._at_once(functools.partial(self.plan_document, tokens, draws))
        return fit_document(tokens, rewritten, self.tokens)[0]


def _rejoin(tokens: np.ndarray, sep: int, rewrite) -> list:
    """The parts of `tokens` cut at every `sep`: each non-empty piece's parts (`rewrite`)
    followed by `sep` (empty pieces are dropped with their `sep`), then the parts of the piece
    after the last `sep`, even when empty."""
    parts: list = []
    sep_part = np.array([sep], np.int64)
    start = 0
    for loc in np.flatnonzero(tokens == sep).tolist():
        if loc > start:
            parts += rewrite(tokens[start:loc])
            parts.append(sep_part)
        start = loc + 1
    parts += rewrite(tokens[start:])
    return parts


def fit(tokens: np.ndarray, length: int, pad: int | None) -> np.ndarray:
    """`tokens` cut to `length`, or padded to it with `pad` (None: left short)."""
    if tokens.size >= length:
        return tokens[:length]
    if pad is None:
        return tokens
    return np.concatenate([tokens, np.full(length - tokens.size, pad, np.int64)])


def fit_document(
    tokens: np.ndarray, rewritten: np.ndarray, sentinels: FIMTokens
) -> tuple[np.ndarray, int]:
    """A packed document's rewrite (`FIMRewriter.plan_document`) put back in its `len(tokens)`
    places: the rewritten body cut to the places before the document's final EOD (all of them
    without one), the EOD, then the FIM pad token up to the length.

    Returns:
      (the document's new tokens, how many of them are not padding).
    """
    tokens = np.asarray(tokens, np.int64)
    if rewritten.size == 0:  # nothing rewritten: the document as it is
        return tokens, tokens.size
    length = tokens.size
    ends_with_eod = bool(tokens[-1] == sentinels.eod)
    body = rewritten[: length - ends_with_eod]
    real = body.size + ends_with_eod
    out = np.full(length, sentinels.pad, np.int64)
    out[: body.size] = body
    if ends_with_eod:
        out[body.size] = sentinels.eod
    return out, real


class FIMTransform(PerProcess):
    """FIM for a GPT source: rewrites the windows of a batch's raw form (`schema.raw_windows`).

    Args:
      options: the FIM settings.
      spec: the tokenizer (a `TokenizerSpec`) that decodes and encodes the fragments.
      seed: the data seed (`GPTDataConfig.seed`); each sample draws from `sample_draws`.
      tokenizer: the loaded tokenizer of `spec`, when the caller has it (else loaded here).
      packed: the rows are packed documents (`--packing=best_fit`): each document is rewritten
        on its own, in its own places (`apply`).

    Raises:
      ValueError: a sentinel name is not a token of the tokenizer.
    """

    def __init__(
        self,
        options: FIMOptions,
        spec: TokenizerSpec,
        seed: int,
        tokenizer: Any = None,
        *,
        packed: bool = False,
    ) -> None:
        from jaxblend.preprocess import tokenizer_spec, tokenizers

        self.options = options
        self.spec = spec
        self.seed = int(seed)
        self.packed = bool(packed)
        self._tokenizer = tokenizers.load_tokenizer(spec) if tokenizer is None else tokenizer
        self.tokenizer_identity = tokenizer_spec.facts_of(spec, self._tokenizer).identity
        self.tokens = FIMTokens.resolve(options, self._tokenizer, self.tokenizer_identity)
        self._lock = threading.Lock()

    PER_PROCESS = ("_tokenizer",)  # a worker loads its own

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

    def rewrite_document(
        self, tokens: np.ndarray, split: str, sample_id: int, document: int
    ) -> np.ndarray:
        """Document `document` (from 0, in row order) of packed row `sample_id` of `split`
        rewritten in its own places (`fit_document`)."""
        draws = sample_draws(self.seed, split, sample_id, document)
        return self.rewriter().document(tokens, draws)

    def apply(self, raw: dict[str, np.ndarray], split: str, megatron_compat: bool) -> dict:
        """Rewrites every window of `raw` (`schema.raw_windows`) in place and returns it; every
        fragment of the batch is encoded in one call (`RewritePlan`).

        Concatenated windows: document pieces (`piece_row`/`piece_length`) no longer match the
        rewritten tokens: under `megatron_compat` each row becomes one piece of its valid length
        (Megatron's FIM sample is one document), otherwise they are dropped (documents then end
        at each EOD).

        Packed rows (`packed`): each document keeps its places (`fit_document`), so the pieces,
        positions and segment ids stay; `raw["loss_weights"]` (0 on the FIM padding inside a
        document, else 1) keeps the padding out of the loss.
        """
        if self.packed:
            return self._apply_packed(raw, split)
        text, n_valid, ids = raw["text"], raw["n_valid"], raw["sample_ids"]
        rewriter, plan = self.rewriter(), RewritePlan()
        parts = [
            rewriter.plan_sample(
                text[r, : int(n_valid[r])], sample_draws(self.seed, split, ids[r]), plan
            )
            for r in range(text.shape[0])
        ]
        encoded = rewriter.encode(plan)
        pad = self.tokens.pad if megatron_compat else None
        for r in range(text.shape[0]):
            n = int(n_valid[r])
            out = fit(build(parts[r], encoded), n, pad)
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

    def _apply_packed(self, raw: dict[str, np.ndarray], split: str) -> dict:
        text, ids = raw["text"], raw["sample_ids"]
        rows = np.asarray(raw["piece_row"], np.int64)
        lengths = np.asarray(raw["piece_length"], np.int64)
        rewriter, plan = self.rewriter(), RewritePlan()
        documents = []  # (row, start, length, parts)
        row, start, index = -1, 0, 0
        for r, size in zip(rows.tolist(), lengths.tolist()):
            if r != row:
                row, start, index = r, 0, 0
            if size > 0:  # the row's documents are numbered from 0, as `segment_ids` count them
                draws = sample_draws(self.seed, split, ids[r], index)
                parts = rewriter.plan_document(text[r, start : start + size], draws, plan)
                documents.append((r, start, size, parts))
                index += 1
            start += size
        encoded = rewriter.encode(plan)
        weights = np.ones(text.shape, np.uint8)
        for r, start, size, parts in documents:
            if not parts:
                continue
            doc = text[r, start : start + size]
            out, real = fit_document(doc, build(parts, encoded), self.tokens)
            doc[:] = out
            weights[r, start + real : start + size] = 0
        raw["loss_weights"] = weights
        return raw


def _find_spec(
    options: FIMOptions, prefixes: Sequence[str], access: DataAccess | None
) -> tuple[TokenizerSpec, str | None]:
    """The tokenizer FIM uses for datasets `prefixes`: the one recorded with the first dataset
    that has a record (and that dataset), else `options.tokenizer` (and None).

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
            return spec, prefix
    if options.tokenizer is not None:
        return options.tokenizer, None
    where = prefixes[0] if prefixes else "the data"
    raise ValueError(
        f"--fim_data: {where} has no preprocessing record naming its tokenizer; pass "
        "--tokenizer_type and --tokenizer_model (or --vocab_file, --merge_file)"
    )


def _check_recorded_vocabulary(
    transform: FIMTransform, prefix: str, access: DataAccess | None
) -> None:
    """Refuses sentinels beyond the vocabulary recorded with `prefix` (a model sized from that
    record could not embed them: data made before its tokenizer had them, e.g. the byte
    tokenizer before its FIM sentinels)."""
    from jaxblend.tokenizer_facts import read_facts

    facts = read_facts(prefix, access)
    t = transform.tokens
    top = max(t.prefix, t.middle, t.suffix, t.pad)
    if facts is not None and top >= facts.vocab_size:
        raise ValueError(
            f"--fim_data: {prefix} was recorded with a vocabulary of {facts.vocab_size} ids, "
            f"which does not hold its tokenizer's FIM sentinel id {top} (the data was made "
            "before the tokenizer had it): preprocess it again"
        )


def open_fim_transform(
    options: FIMOptions,
    prefixes: Sequence[str],
    seed: int,
    access: DataAccess | None = None,
    *,
    packed: bool = False,
) -> FIMTransform:
    """The `FIMTransform` of datasets `prefixes` (the tokenizer of `_find_spec`) and data seed
    `seed`, for packed rows when `packed`.

    Raises:
      ValueError: as `_find_spec`, a sentinel name is not a token of the tokenizer, or a
        sentinel id lies beyond the vocabulary recorded with the data.
    """
    spec, prefix = _find_spec(options, prefixes, access)
    transform = FIMTransform(options, spec, seed, packed=packed)
    if prefix is not None:
        _check_recorded_vocabulary(transform, prefix, access)
    return transform
