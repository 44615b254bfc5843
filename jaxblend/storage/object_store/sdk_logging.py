"""The AWS SDK's credential-chain chatter, hidden unless asked for.

An S3 store opened without credentials in the environment (`location.with_credentials` hands an
environment key pair to TensorStore directly) makes TensorStore's AWS SDK search the default
chain: profile files, web identity, instance metadata. It logs an error line (through the C++
absl logger, straight to file descriptor 2, past Python) for every place it finds nothing:
`Failed to open file. path:'~/.aws/config'`, `IMDS client failed ...`, `Default chain
credentials provider failed ...`, 5-9 lines, whatever the outcome. TensorStore offers no switch
for it (its AWS log level is fixed unless `TENSORSTORE_VERBOSE_LOGGING` raises it).

`quietly` runs the opening of such a store, and one empty request that makes the chain run, with
file descriptor 2 captured; afterwards the lines in absl's C++ format are dropped and everything
else written meanwhile is passed on. What the chain found out still shows: a request without
credentials fails with an `ObjectStoreError` naming the URL and how credentials are found.

The chatter is shown (nothing captured) after `show_sdk_logging(True)`, which command-line tools
call for `--verbose`, or when `TENSORSTORE_VERBOSE_LOGGING` is set. Like a logging level, this is
a setting of the process.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator

_SDK_LINE = re.compile(rb"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ [^\s:]+:\d+\] ")
_LOCK = threading.Lock()
_SHOW = threading.Event()


def show_sdk_logging(show: bool = True) -> None:
    """Whether the AWS SDK's credential-chain lines reach stderr in this process (`--verbose`)."""
    (_SHOW.set if show else _SHOW.clear)()


def shown() -> bool:
    """Whether SDK lines are shown: `show_sdk_logging(True)` or `TENSORSTORE_VERBOSE_LOGGING`."""
    return _SHOW.is_set() or bool(os.environ.get("TENSORSTORE_VERBOSE_LOGGING"))


@contextlib.contextmanager
def quietly() -> Iterator[None]:
    """Runs the block with file descriptor 2 captured, then passes on all but the SDK's lines
    (nothing is captured when they are `shown`)."""
    if shown():
        yield
        return
    with _LOCK, tempfile.TemporaryFile() as captured:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            kept = [line for line in captured.read().splitlines(True) if not _SDK_LINE.match(line)]
            if kept:
                os.write(2, b"".join(kept))
