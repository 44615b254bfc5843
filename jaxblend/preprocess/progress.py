"""The preprocessing progress display: a tqdm bar over input bytes plus periodic log lines."""

from __future__ import annotations

import time

import tqdm
from absl import logging


class ProgressBar:
    """tqdm over input bytes (MB/s, ETA) with docs/s and tokens/s, plus periodic log lines."""

    def __init__(
        self, total: int, initial: int, enabled: bool, log_interval: int, desc: str = "preprocess"
    ) -> None:
        self.bar = tqdm.tqdm(
            total=total,
            initial=initial,
            unit="B",
            unit_scale=True,
            unit_divisor=1000,
            desc=desc,
            disable=not enabled,
            smoothing=0.1,
        )
        self.start = time.perf_counter()
        self.docs = 0
        self.tokens = 0
        self.log_interval = log_interval
        self.next_log = log_interval

    def __call__(self, nbytes: int, docs: int, tokens: int) -> None:
        self.docs += docs
        self.tokens += tokens
        self.bar.update(nbytes)
        dt = max(time.perf_counter() - self.start, 1e-9)
        self.bar.set_postfix_str(
            f"{self.docs / dt:,.0f} docs/s, {self.tokens / dt:,.0f} tok/s", refresh=False
        )
        if self.log_interval and self.docs >= self.next_log:
            logging.info(
                "processed %d documents, %d tokens (%.0f docs/s, %.0f tokens/s, %.1f MB/s)",
                self.docs,
                self.tokens,
                self.docs / dt,
                self.tokens / dt,
                self.bar.n / dt / 1e6,
            )
            self.next_log = (self.docs // self.log_interval + 1) * self.log_interval

    def close(self) -> None:
        self.bar.close()
