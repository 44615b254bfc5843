"""Pure masked-LM n-gram masking (no I/O), shared by `BERTSource` and `T5Source`.

`mask_ngrams` chooses the positions to mask: word candidates (WordPiece `##` pieces joined to
their word when `masking_do_full_word`), n-grams of up to `masking_max_ngram` words drawn with
probability ∝ 1/n (or reversed to favour longer n-grams, or geometric p = 0.2 as in SpanBERT),
shrunk until they fit the budget `min(p · target, max(1, round(p · len)))`, overlapping n-grams
skipped; optionally a second pass permutes extra n-grams. Randomness comes from the caller's
`np.random.Generator` (one per `(seed, sample index)`), so any sample is reproducible alone.

Which sentences make a sample, and its target length, come from the sample index built in
`jaxblend.index.masked_maps` (docs/format.md, 'BERT/T5 sample index').
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from jaxblend.sources.masked_config import MaskedConfig

GEOMETRIC_P = 0.2  # SpanBERT's span-length distribution parameter


@dataclasses.dataclass
class MaskedPredictions:
    """Result of `mask_ngrams`.

    Attributes:
      tokens: the corrupted token ids (same length as the input).
      positions: sorted int64 positions the loss is taken at (masked and permuted).
      labels: the original tokens at `positions`.
      spans: the masked n-grams as int64 position arrays, sorted by their first position
        (permuted n-grams are not spans).
    """

    tokens: np.ndarray
    positions: np.ndarray
    labels: np.ndarray
    spans: list[np.ndarray]


def word_candidates(
    tokens: np.ndarray, special: np.ndarray, is_continuation: np.ndarray | None, full_word: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Groups maskable positions into candidates (words or single pieces).

    Args:
      tokens: int token ids of one sample.
      special: bool per position, True for [CLS]/[SEP]-like positions that are never masked.
      is_continuation: bool per vocabulary id, True for WordPiece `##` pieces (None: none are).
      full_word: join each continuation piece to the candidate before it.

    Returns:
      `(positions, offsets)`: candidate c covers `positions[offsets[c]:offsets[c + 1]]`.
    """
    positions = np.flatnonzero(~special).astype(np.int64)
    if positions.size == 0:
        return positions, np.zeros(1, np.int64)
    if full_word and is_continuation is not None:
        cont = is_continuation[tokens[positions]]
        starts = ~cont
        starts[0] = True  # a leading "##" piece starts a candidate (nothing to join it to)
    else:
        starts = np.ones(positions.size, dtype=bool)
    offsets = np.append(np.flatnonzero(starts), positions.size).astype(np.int64)
    return positions, offsets


def mask_ngrams(
    tokens: np.ndarray,
    special: np.ndarray,
    target_length: int,
    options: MaskedConfig,
    is_continuation: np.ndarray | None,
    rng: np.random.Generator,
    replace: Callable[[np.ndarray, np.random.Generator], np.ndarray],
    decoder_limit: int | None = None,
) -> MaskedPredictions:
    """Chooses and corrupts masked n-grams (and permuted ones) of one sample.

    Args:
      tokens: int64 token ids of the sample (special tokens included).
      special: bool per position; True positions are never candidates.
      target_length: the sample's target length (caps the number of masked positions).
      options: the masking knobs (its `masking_*` fields).
      is_continuation: bool per vocabulary id (WordPiece `##` pieces) or None.
      rng: the sample's generator.
      replace: `replace(original: int64[k], rng) -> int64[k]` new tokens for masked positions
        (BERT: 80% mask / 10% random / 10% unchanged; T5: always the mask token).
      decoder_limit: T5 only: the masked n-grams must fit a decoder of this length (one sentinel per
        span plus its tokens plus one BOS/EOS), so an n-gram that would overflow it is skipped.

    Returns:
      A `MaskedPredictions`.
    """
    tokens = np.asarray(tokens, dtype=np.int64)
    p = options.masking_probability
    positions, offsets = word_candidates(
        tokens, special, is_continuation, options.masking_do_full_word
    )
    num_cand = offsets.size - 1
    budget = min(p * target_length, max(1, round(tokens.size * p)))
    nvals = np.arange(1, options.masking_max_ngram + 1)
    probs = 1.0 / nvals
    probs /= probs.sum()
    if options.masking_use_longer_ngrams:
        probs = probs[::-1]
    cum = np.concatenate([[0], np.cumsum(np.diff(offsets))])  # tokens before each candidate
    taken = np.zeros(tokens.size, dtype=bool)

    def choose(order: np.ndarray, draws: np.ndarray, room: float) -> list[np.ndarray]:
        """N-grams of the candidates in `order` (`draws` words each), cut to fit the budget and
        skipped when they touch a `taken` position (then taken) or exceed `room` decoder places
        (one sentinel per span plus its tokens plus one BOS/EOS)."""
        chosen: list[np.ndarray] = []
        count = 0
        for c, n in zip(order.tolist(), draws.tolist()):
            if count >= budget:
                break
            n = min(n, num_cand - c)  # near the end the n-gram is cut (as Megatron's slices)
            while n > 0 and count + cum[c + n] - cum[c] > budget:
                n -= 1
            if n == 0:
                continue
            pos = positions[offsets[c] : offsets[c + n]]
            if taken[pos].any() or 2 + len(chosen) + count + pos.size > room:
                continue
            taken[pos] = True
            count += pos.size
            chosen.append(pos)
        return chosen

    order = rng.permutation(num_cand)
    if options.masking_use_geometric_distribution:
        draws = np.minimum(rng.geometric(GEOMETRIC_P, num_cand), options.masking_max_ngram)
    else:
        draws = rng.choice(nvals, size=num_cand, p=probs)
    spans = choose(order, draws, np.inf if decoder_limit is None else decoder_limit)
    out = tokens.copy()
    masked_pos = np.sort(np.concatenate(spans)) if spans else np.zeros(0, np.int64)
    if masked_pos.size:
        out[masked_pos] = replace(tokens[masked_pos], rng)
    all_pos = masked_pos

    if options.masking_do_permutation:
        order = rng.permutation(num_cand)
        permuted = choose(order, rng.choice(nvals, size=num_cand, p=probs), np.inf)
        if permuted:
            perm_pos = np.sort(np.concatenate(permuted))
            out[perm_pos] = tokens[rng.permutation(perm_pos)]
            all_pos = np.sort(np.concatenate([masked_pos, perm_pos]))

    spans.sort(key=lambda s: int(s[0]))
    return MaskedPredictions(tokens=out, positions=all_pos, labels=tokens[all_pos], spans=spans)
