"""The cleaning stage before tokenization: PII scrubbing, quality, language, decontamination, dedup.

Enabled through :class:`CleaningConfig` (``PreprocessConfig(cleaning=...)``, or the ``--clean_*``
flags of ``python -m jaxblend.tools.preprocess``). Per-record steps run inside each partition's
worker; deduplication adds a first pass writing per-partition signatures
(:mod:`.signatures`), a join over them read from disk (:mod:`.join`), then the tokenizing pass skips
the chosen records. :mod:`.report` writes what was removed. docs/cleaning.md describes it all.
"""

from __future__ import annotations

from jaxblend.preprocess.cleaning.config import CleaningConfig
from jaxblend.preprocess.cleaning.quality import FILTER_NAMES

__all__ = ["FILTER_NAMES", "CleaningConfig"]
