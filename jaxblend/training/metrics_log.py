"""`--metrics_jsonl`: the training example's log lines as JSON, one object per line.

Process 0 appends one record per log line and per validation pass (`dataset_metrics` builds
them), each written whole and flushed. The file describes the run as it is resumed: opening it at
a start step keeps the records of steps up to that step (the checkpoint the run resumes from) and
drops later ones (steps an interrupted run logged after its last checkpoint, which the resumed run
trains and logs again) and a torn last line, so every step appears once.
"""

from __future__ import annotations

import json
import os

from jaxblend import atomic_write
from jaxblend.urls import is_url


class MetricsLog:
    """An append-only JSON-lines file of metrics records (open it on process 0 only).

    Args:
      path: a local file; its directory must exist.
      start_step: the step the run starts from (0, or the checkpoint it resumes).

    Raises:
      ValueError: if `path` is a bucket URL or its directory does not exist, or the file holds a
        line that is not a JSON record.
    """

    def __init__(self, path: str, start_step: int) -> None:
        check_path(path)
        self.path = path
        kept = _records_up_to(path, start_step) if os.path.exists(path) else []
        with atomic_write.atomic_file(path, "w") as f:
            f.writelines(kept)
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (open for the run)

    def write(self, record: dict) -> None:
        """Appends one record (a JSON object) as one line, flushed."""
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Closes the file."""
        self._file.close()


def check_path(path: str) -> None:
    """Refuses, before a run starts, a `--metrics_jsonl` that cannot be opened for appending.

    Raises:
      ValueError: if `path` is a bucket URL or its directory does not exist.
    """
    if is_url(path):
        raise ValueError(
            f"--metrics_jsonl={path}: give a local file (records are appended as the run goes)"
        )
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ValueError(f"--metrics_jsonl={path}: directory {directory} does not exist")


def _records_up_to(path: str, start_step: int) -> list[str]:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    lines = text.split("\n")
    lines.pop()  # after the last newline: empty, or a torn line of an interrupted write
    kept = []
    for number, line in enumerate(lines, 1):
        try:
            step = json.loads(line)["step"]
        except (ValueError, KeyError, TypeError):
            raise ValueError(
                f"--metrics_jsonl={path}: line {number} is not a metrics record; give another "
                "file or remove it"
            ) from None
        if step <= start_step:
            kept.append(line + "\n")
    return kept
