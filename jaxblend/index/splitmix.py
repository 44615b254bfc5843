"""SplitMix64, the one 64-bit mixing function of jaxblend's counter-based randomness.

A bijective finalizer of 64-bit integers (Steele, Lea and Flood's SplitMix64 step: add the
golden-ratio increment, then two xor-shift-multiply rounds and a final xor-shift). Callers hash
`(seed, counter)` tuples with it instead of running a sequential generator, so any value can be
recomputed alone: the masked-LM target lengths (`jaxblend.index.masked_sample_index`,
docs/format.md, 'BERT/T5 sample index') and `MockSource` tokens.

It lives in the index package so that the index cache key's code digest (docs/format.md,
'Fingerprint') covers it.
"""

from __future__ import annotations

import numba
import numpy as np

MASK64 = 0xFFFFFFFFFFFFFFFF


@numba.njit(cache=True, nogil=True)
def splitmix64(x):  # pragma: no cover - compiled
    """Mixes a uint64 into a uint64 (wrapping arithmetic modulo 2**64)."""
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & np.uint64(MASK64)
    x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & np.uint64(MASK64)
    x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & np.uint64(MASK64)
    return x ^ (x >> np.uint64(31))
