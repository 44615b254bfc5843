"""Preprocessing into a bucket: build in a local work directory, then publish, commit point last.

Object stores have no rename, so an output prefix at a URL (``gs://b/tokens/web``, ``s3://...``) is
built locally and uploaded afterwards:

* The run (partitions, done markers, manifest, merge) happens under a local work directory,
  ``<work_dir>/<basename of the URL>``; ``work_dir`` defaults to
  ``<tmp>/jaxblend-preprocess/<hash of the URL>`` (`local_prefix`), never a local path named after
  the URL. A rerun with the same settings resumes there exactly as a local run does.
* `BucketOutput.publish` uploads in this order: delete the old run record
  (``<dir>/.jaxblend/<name>.preprocess.json``, and ``<prefix>.preprocess.json`` where records were
  written before) and each old ``.idx``; upload every ``.bin``; then every ``.idx``; then the
  cleaning report if any (``<dir>/.jaxblend/<name>.cleaning.json``/``.png``); then the run record,
  last. The side files sit where a local run puts them (`jaxblend.tokenizer_facts.side_path`).
  The record is the commit point: a prefix whose record is missing, or differs from the run's, is
  unfinished; a rerun then publishes again.
  Mid-upload a reader sees no ``.idx`` (the dataset cannot be opened) or a ``.bin`` whose ``.idx``
  is not uploaded yet; it never sees an ``.idx`` beside a ``.bin`` it does not describe, and
  ``IndexedDataset`` checks the ``.bin`` size against the ``.idx`` besides.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from typing import Any

from jaxblend.access import ObjectStoreOptions
from jaxblend.storage.object_store.directory import ObjectDirectory
from jaxblend.storage.object_store.publishing import publish
from jaxblend.tokenizer_facts import SIDE_DIR, legacy_record_path, record_path


def local_prefix(url_prefix: str, work_dir: str | None = None) -> str:
    """The local output prefix the run builds before publishing to ``url_prefix``:
    ``<work_dir>/<last name of the URL>``; ``work_dir`` defaults to
    ``<tmp>/jaxblend-preprocess/<16 hex digits of the URL's SHA-256>``."""
    if not work_dir:
        digest = hashlib.sha256(url_prefix.encode()).hexdigest()[:16]
        work_dir = os.path.join(tempfile.gettempdir(), "jaxblend-preprocess", digest)
    return os.path.join(work_dir, url_prefix.rstrip("/").rsplit("/", 1)[-1])


def published_record(manifest: dict[str, Any], url_names: dict[str, str]) -> dict[str, Any]:
    """The run record published beside the datasets: the local (complete) manifest with the
    outputs named by their URLs."""
    record = dict(manifest, outputs=dict(url_names))
    if isinstance(record.get("result"), dict):
        record["result"] = dict(record["result"], outputs=dict(url_names))
    return record


class BucketOutput:
    """The preprocessing outputs at URL prefix ``url_prefix``, reached with ``object_store``."""

    def __init__(self, url_prefix: str, object_store: ObjectStoreOptions) -> None:
        self.url_prefix = url_prefix
        self.object_store = object_store
        root, _, self._name = url_prefix.rstrip("/").rpartition("/")
        if not self._name or not root.partition("://")[2]:
            raise ValueError(
                f"--output_prefix {url_prefix}: a bucket prefix needs a name after the bucket, "
                "e.g. gs://bucket/tokens/web"
            )
        self._root = root + "/"
        self._dir = ObjectDirectory(self._root, object_store)

    def read_record(self) -> dict[str, Any] | None:
        """The published run record (`record_path`, else `legacy_record_path`), or None if
        absent/unparsable."""
        for key in (record_path(self._name), legacy_record_path(self._name)):
            data = self._dir.read(key, "reading the run record")
            if data is not None:
                with contextlib.suppress(ValueError):
                    record = json.loads(data)
                    return record if isinstance(record, dict) else None
                return None
        return None

    def publish(
        self, local_names: dict[str, str], record: dict[str, Any], extras: tuple[str, ...] = ()
    ) -> dict[str, tuple[bytes, bytes]]:
        """Uploads the local run's datasets, then the ``extras`` files (the cleaning report, side
        files of the local run: uploaded to `SIDE_DIR` beside the datasets), then its record, the
        commit point (`object_store.publish`; see the module docstring).

        Returns:
          key -> the generations of the uploaded (``.idx``, ``.bin``).
        """
        record_key = record_path(self._name)
        names = {key: os.path.basename(name) for key, name in local_names.items()}
        stages = [
            [(f"{names[key]}.{ext}", f"{name}.{ext}") for key, name in local_names.items()]
            for ext in ("bin", "idx")
        ]
        stages.append([(f"{SIDE_DIR}/{os.path.basename(path)}", path) for path in extras])
        data = (json.dumps(record, indent=1, sort_keys=True) + "\n").encode()
        written = publish(
            self._dir,
            stages,
            (record_key, data),
            retract=[
                record_key, legacy_record_path(self._name),
                *(f"{n}.idx" for n in names.values()),
            ],
            what="publishing the preprocessing outputs",
            in_flight=1,
        )
        return {key: (written[f"{n}.idx"], written[f"{n}.bin"]) for key, n in names.items()}
