"""Where data lives: prefix forms -> local path or TensorStore kvstore + keys, and opening stores.

Accepted `prefix` forms (the dataset is the pair `<prefix>.bin` + `<prefix>.idx`):

* a local path, `str` or `os.PathLike` (`"data/corpus"`, `Path("/data/corpus")`);
* a `file://` URL (`"file:///data/corpus"`), treated exactly like the local path;
* any kvstore URL TensorStore understands: `"gs://bucket/dir/corpus"`, `"s3://bucket/dir/corpus"`,
  `"memory://dir/corpus"`, ...;
* a TensorStore kvstore spec dict whose `"path"` ends with the prefix, e.g.
  `{"driver": "gcs", "bucket": "b", "path": "dir/corpus"}` or
  `{"driver": "memory", "path": "dir/corpus"}`. A `{"driver": "file", ...}` spec counts as local.

All kvstores are opened on one process-wide `ts.Context` (see `shared_context`), so a `memory://`
store written through `open_kvstore` is visible to every reader in the same process. Memory stores
are per process: they do not survive pickling into another process.

`open_store` is how the package opens a store: the URL or spec completed with the
`ObjectStoreOptions` (S3 endpoint and region) on the context of its retries and concurrency, so
every request is bounded by the retry budget the flags give. An S3 store given no credential
source takes `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` directly when both are set (the first
link of the AWS chain, without the chain's search of profile files and instance metadata, which
logs a line for each place it finds nothing). Otherwise the chain runs, once per store settings and
context, under `sdk_logging.quietly` (one empty request of a probe key makes it run there).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import threading
import urllib.parse
from typing import Any

import tensorstore as ts

from jaxblend.access import ObjectStoreOptions
from jaxblend.storage.object_store import sdk_logging
from jaxblend.storage.object_store.errors import ObjectStoreError, describe
from jaxblend.urls import is_url

Prefix = str | os.PathLike | dict

_CONTEXT_LOCK = threading.Lock()
_SHARED_CONTEXT: ts.Context | None = None


@dataclasses.dataclass(frozen=True)
class Location:
    """A resolved dataset prefix.

    Attributes:
        kvstore: kvstore spec (JSON dict) of the directory holding the files, path ending in "/"
            (or empty).
        name: the file-name prefix inside that directory; keys are `name + ".bin"`/`".idx"`.
        local_prefix: absolute local path prefix when the data is on the local filesystem.
        display: human-readable prefix used in messages and `repr`.
    """

    kvstore: dict[str, Any]
    name: str
    local_prefix: str | None
    display: str

    @property
    def bin_key(self) -> str:
        return self.name + ".bin"

    @property
    def idx_key(self) -> str:
        return self.name + ".idx"

    def file_name(self, suffix: str) -> str:
        """Full display name of one of the two files (`suffix` is ".bin" or ".idx")."""
        return self.display + suffix


def shared_context() -> ts.Context:
    """Returns the process-wide TensorStore context every jaxblend kvstore is opened on.

    Sharing one context makes `memory://` stores written by `open_kvstore` visible to readers, and
    lets concurrency limits be shared. It is created on first use in each process.
    """
    global _SHARED_CONTEXT
    with _CONTEXT_LOCK:
        if _SHARED_CONTEXT is None:
            _SHARED_CONTEXT = ts.Context()
        return _SHARED_CONTEXT


_CHILD_CONTEXTS: dict[str, ts.Context] = {}
_CHAIN_SEARCHED: set[str] = set()  # S3 stores whose credential chain has run (per context)
_CHAIN_PROBE = ".jaxblend-credentials-probe"
_CHAIN_PROBE_SECONDS = 2.0


def context_for(spec: dict[str, Any]) -> ts.Context:
    """The child of `shared_context()` with these resources, one per distinct spec per process.

    Datasets opened with the same settings share it, so a request-concurrency limit bounds the
    whole process (not each dataset) and connections are reused across datasets. The GCS endpoint
    (`TENSORSTORE_GCS_HTTP_URL`, read when a driver opens) is part of the key, so pointing it
    elsewhere opens new connections instead of reusing drivers bound to the old server.
    """
    key = json.dumps([spec, os.environ.get("TENSORSTORE_GCS_HTTP_URL")], sort_keys=True)
    parent = shared_context()
    with _CONTEXT_LOCK:
        if key not in _CHILD_CONTEXTS:
            _CHILD_CONTEXTS[key] = ts.Context(ts.Context.Spec(spec), parent)
        return _CHILD_CONTEXTS[key]


def open_kvstore(spec: str | dict[str, Any], context: ts.Context | None = None) -> ts.KvStore:
    """Opens a kvstore (URL or spec dict) on `context` (default: the shared jaxblend context).

    Useful to put test data into a `memory://` store that `IndexedDataset("memory://...")` then
    reads: `open_kvstore("memory://d/").write("corpus.idx", idx_bytes).result()`.
    """
    if isinstance(spec, str):
        spec = ts.KvStore.Spec(spec).to_json()
    spec = with_credentials(spec)
    context = context or shared_context()
    if spec.get("driver") != "s3" or "aws_credentials" in spec:
        return ts.KvStore.open(spec, context=context).result()
    key = json.dumps([{k: v for k, v in spec.items() if k != "path"}, id(context)], sort_keys=True)
    with _CONTEXT_LOCK:
        searched = key in _CHAIN_SEARCHED
        _CHAIN_SEARCHED.add(key)
    if searched:
        return ts.KvStore.open(spec, context=context).result()
    with sdk_logging.quietly():  # the AWS SDK's default credential chain runs now, and logs
        kv = ts.KvStore.open(spec, context=context).result()
        probe = kv.read(_CHAIN_PROBE, byte_range=slice(0, 0))
        try:
            probe.result(timeout=_CHAIN_PROBE_SECONDS)
        except (ValueError, TimeoutError):
            probe.cancel()  # the real requests report what is wrong
    return kv


def with_credentials(spec: dict[str, Any]) -> dict[str, Any]:
    """An S3 spec naming no credential source gets the environment's key pair when both
    `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` are set (copy; other specs as they are)."""
    if spec.get("driver") != "s3" or "aws_credentials" in spec:
        return spec
    if not (os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY")):
        return spec
    return {**spec, "aws_credentials": {"type": "environment"}}


def open_store(url: str | dict[str, Any], options: ObjectStoreOptions) -> ts.KvStore:
    """Opens the store at `url` (a directory URL ending in "/", or a kvstore spec) with
    `options`: endpoint and region filled in, on the context of its retries and concurrency.

    Raises:
      ObjectStoreError: the store cannot be opened (one line naming the URL and the fix).
      ValueError: `url` is not a kvstore URL TensorStore understands.
    """
    spec = ts.KvStore.Spec(url).to_json() if isinstance(url, str) else copy.deepcopy(url)
    display = url if isinstance(url, str) else spec_url(spec)
    try:
        return open_kvstore(options.complete_spec(spec), context_for(options.context_spec()))
    except ValueError as e:
        raise ObjectStoreError(
            describe(str(e), display, "opening the store", options.s3_endpoint)
        ) from None


def resolve(prefix: Prefix, options: ObjectStoreOptions | None = None) -> Location:
    """Resolves any accepted prefix form (see module docstring) to a `Location`.

    `options`, when given, fill in an s3 store's endpoint and region
    (`ObjectStoreOptions.complete_spec`).

    Raises:
        ValueError: if the prefix is empty or not one of the accepted forms.
    """
    if isinstance(prefix, dict):
        spec = copy.deepcopy(prefix)
        if "driver" not in spec:
            raise ValueError(f"kvstore spec prefix {prefix!r} has no 'driver' member")
        display = spec_url(spec)
    elif isinstance(prefix, (str, os.PathLike)):
        text = os.fspath(prefix)
        if not isinstance(text, str):
            raise TypeError(f"prefix must be a str path, got bytes {text!r}")
        if not text:
            raise ValueError("prefix is empty")
        if not is_url(text):
            if text.lower().startswith("file://"):
                return _local(_file_url_path(text), display=text)
            return _local(text)
        try:
            spec = ts.KvStore.Spec(text).to_json()
        except ValueError as e:
            raise ValueError(
                f"prefix {text!r} is not a kvstore URL TensorStore understands: {e}"
            ) from e
        display = text
    else:
        raise TypeError(
            f"prefix must be a path, URL or kvstore spec dict, got {type(prefix).__name__}"
        )
    if spec.get("driver") == "file":
        return _local(spec.get("path", ""))
    path = spec.get("path", "")
    if not path or path.endswith("/"):
        raise ValueError(
            f"prefix {display!r} names a directory; it must end with the dataset file prefix"
        )
    head, _, name = path.rpartition("/")
    spec["path"] = head + "/" if head else ""
    if options is not None:
        spec = options.complete_spec(spec)
    return Location(kvstore=spec, name=name, local_prefix=None, display=display)


def local_path(prefix: str | os.PathLike) -> str:
    """Returns the absolute local path of a local prefix (path or `file://` URL).

    Raises:
        ValueError: if the prefix is not local.
    """
    loc = resolve(prefix)
    if loc.local_prefix is None:
        raise ValueError(
            f"prefix {loc.display!r} is not on the local filesystem (expected a path or file:// URL)"
        )
    return loc.local_prefix


def _local(path: str, display: str | None = None) -> Location:
    if not path or path.endswith(("/", os.sep)):
        raise ValueError(
            f"prefix {path!r} names a directory; it must end with the dataset file prefix"
        )
    absolute = os.path.abspath(path)
    head, name = os.path.split(absolute)
    return Location(
        kvstore={"driver": "file", "path": head.rstrip("/") + "/"},
        name=name,
        local_prefix=absolute,
        display=path if display is None else display,
    )


def _file_url_path(url: str) -> str:
    parsed = urllib.parse.urlparse(url)
    if parsed.netloc not in ("", "localhost"):
        raise ValueError(f"file URL {url!r} names a remote host {parsed.netloc!r}")
    return urllib.parse.unquote(parsed.path)


def spec_url(spec: dict[str, Any]) -> str:
    """The URL of a kvstore spec, for messages (its `repr` when it has none)."""
    try:
        return ts.KvStore.Spec(spec).url
    except (ValueError, TypeError, AttributeError):
        return repr(spec)
