"""The MD5 an object store already keeps for an object version, so a dataset's identity can be
taken without reading its `.bin`.

* GCS keeps `md5Hash` (base64) for every object written in one piece; a composite object (made by
  `compose`) has only `crc32c`. TensorStore's `gcs` driver does not expose either, so the object's
  metadata is read with one request to the GCS JSON API (`GET <base>/storage/v1/b/<bucket>/o/
  <object>?fields=generation,size,md5Hash,crc32c`). The answer is bound to the version TensorStore
  read: its `generation` must be the one in the read's stamp, else the object was rewritten in
  between and the open is refused.
* S3 reports the object's ETag as TensorStore's generation. The ETag of an object uploaded in one
  request is the MD5 of its content (32 hex digits, quoted); a multipart ETag (`"<hex>-<parts>"`)
  is an MD5 of the part MD5s, not of the content, so it gives nothing here. No extra request.
  (AWS objects encrypted with SSE-C or SSE-KMS have ETags that are not MD5s; `inspect verify`
  reports such a dataset as a mismatch, docs/robustness.md.)
* Anything else (local files, `memory://`, S3 multipart, GCS composite) has no reported MD5: the
  caller reads the object once per version (`content_digest`) and `memo` remembers it.

GCS endpoint and credentials: the base URL is `$TENSORSTORE_GCS_HTTP_URL` when set (read at the
request, exactly as TensorStore reads it, so both talk to the same server), else
https://storage.googleapis.com. The bearer token is `$GOOGLE_AUTH_TOKEN_FOR_TESTING` when set (as
for TensorStore), else google-auth's application default credentials.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import os
import random
import re
import threading
import time
from typing import Any

from jaxblend.access import ObjectStoreOptions
from jaxblend.storage.idx_format import IndexFormatError
from jaxblend.storage.object_store.errors import ObjectStoreError, credentials_hint

GCS_DEFAULT_BASE = "https://storage.googleapis.com"
_GCS_FIELDS = "generation,size,md5Hash,crc32c,componentCount"
_SINGLE_PART_ETAG = re.compile(r'^"?([0-9a-fA-F]{32})"?$')
_RETRYABLE = {408, 429, 500, 502, 503, 504}
_READ_SCOPE = "https://www.googleapis.com/auth/devstorage.read_only"

# google-auth credentials, found once per process and refreshed when they expire (a token, not a
# setting: where data lives and how it is reached still travel in `DataAccess`).
_credentials_lock = threading.Lock()
_credentials: Any = None


@dataclasses.dataclass(frozen=True)
class StoreChecksum:
    """What a store reports about one object version.

    Attributes:
      md5: the MD5 of the content (16 bytes), or None when the store keeps none for it.
      crc32c: GCS's CRC32C of the content (big-endian unsigned), or None.
      source: where the MD5 came from ("gcs md5Hash", "s3 etag"), or why there is none.
    """

    md5: bytes | None
    crc32c: int | None
    source: str


def decode_generation(stamp: bytes) -> bytes:
    """The store's own version text/number inside a TensorStore generation stamp.

    TensorStore 0.1.x stamps are one flag byte (0 for a plain stored version) followed by the
    store's value (GCS: the generation as 8 little-endian bytes; S3: the quoted ETag).
    """
    return stamp[1:] if stamp[:1] == b"\x00" else stamp


def _gcs_generation_number(stamp: bytes) -> int | None:
    value = decode_generation(stamp)
    return int.from_bytes(value, "little") if len(value) == 8 else None


def s3_etag_md5(stamp: bytes) -> bytes | None:
    """The content MD5 in an S3 generation stamp (a single-part ETag), or None (multipart...)."""
    try:
        text = decode_generation(stamp).decode("ascii")
    except UnicodeDecodeError:
        return None
    m = _SINGLE_PART_ETAG.match(text)
    return bytes.fromhex(m.group(1)) if m else None


def reported(
    kvstore_spec: dict[str, Any], key: str, stamp: bytes, name: str, store: ObjectStoreOptions
) -> StoreChecksum:
    """The store's checksum of the object version `stamp` at `key` of `kvstore_spec`.

    Args:
      kvstore_spec: the (completed) kvstore spec of the directory holding the object.
      key: the object's key inside it.
      stamp: the TensorStore generation stamp the caller read (`ReadResult.stamp.generation`).
      name: the object's display name for messages.
      store: timeouts and retries.

    Raises:
      IndexFormatError: the metadata is of another generation (the object was rewritten).
      ObjectStoreError: the metadata request failed, or GCS credentials cannot be found.
    """
    driver = kvstore_spec.get("driver")
    if driver == "s3":
        md5 = s3_etag_md5(stamp)
        return StoreChecksum(md5, None, "s3 etag" if md5 else "s3 multipart etag (no MD5)")
    if driver == "gcs":
        return _gcs(kvstore_spec["bucket"], kvstore_spec.get("path", "") + key, stamp, name, store)
    return StoreChecksum(None, None, f"{driver} keeps no checksum")


def parse_gcs_metadata(meta: dict[str, Any], stamp: bytes, name: str) -> StoreChecksum:
    """Reads `md5Hash`/`crc32c` from a GCS object resource bound to the generation in `stamp`.

    Raises:
      IndexFormatError: the resource's generation is not the stamp's.
    """
    expected = _gcs_generation_number(stamp)
    try:
        generation = int(meta["generation"])
    except (KeyError, ValueError, TypeError):
        raise ObjectStoreError(
            f"{name}: the store's metadata has no generation: {meta!r}"
        ) from None
    if expected is None or generation != expected:
        raise IndexFormatError(
            f"{name}: the object was rewritten while it was being opened (generation {generation} "
            f"now, {expected} read); open it again"
        )
    md5 = crc = None
    try:
        if meta.get("md5Hash"):
            md5 = base64.b64decode(meta["md5Hash"], validate=True)
            md5 = md5 if len(md5) == 16 else None
        if meta.get("crc32c"):
            crc = int.from_bytes(base64.b64decode(meta["crc32c"], validate=True), "big")
    except (binascii.Error, ValueError):
        md5 = None
    source = "gcs md5Hash" if md5 else "gcs object without md5Hash (composite)"
    return StoreChecksum(md5, crc, source)


def _gcs(
    bucket: str, obj: str, stamp: bytes, name: str, store: ObjectStoreOptions
) -> StoreChecksum:
    import urllib.error  # (here: http.client and email are not needed by a local start)
    import urllib.parse
    import urllib.request

    base = os.environ.get("TENSORSTORE_GCS_HTTP_URL") or GCS_DEFAULT_BASE
    url = (
        f"{base.rstrip('/')}/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o/"
        f"{urllib.parse.quote(obj, safe='')}?fields={_GCS_FIELDS}"
    )
    request = urllib.request.Request(url, headers={"Authorization": "Bearer " + _gcs_token(name)})
    delay = store.initial_retry_delay
    for attempt in range(store.max_retries + 1):
        try:
            with urllib.request.urlopen(request, timeout=store.request_timeout) as answer:
                meta = json.loads(answer.read())
            break
        except urllib.error.HTTPError as e:
            if e.code in (401, 403):
                raise ObjectStoreError(
                    f"{name}: access denied while reading the object's metadata (HTTP {e.code}); "
                    f"{credentials_hint(name)}"
                ) from None
            if e.code not in _RETRYABLE or attempt == store.max_retries:
                raise ObjectStoreError(
                    f"{name}: reading the object's metadata failed with HTTP {e.code} ({url}); "
                    "check the credentials (storage.objects.get) and the path"
                ) from None
        except (OSError, ValueError) as e:
            if attempt == store.max_retries:
                raise ObjectStoreError(
                    f"{name}: reading the object's metadata failed: {e} ({url}); check the network "
                    "or raise --storage_timeout"
                ) from None
        time.sleep(delay * (0.5 + random.random() / 2))
        delay = min(delay * 2, store.max_retry_delay)
    if not isinstance(meta, dict):
        raise ObjectStoreError(f"{name}: the store's metadata is not an object: {meta!r} ({url})")
    return parse_gcs_metadata(meta, stamp, name)


def _gcs_token(name: str) -> str:
    token = os.environ.get("GOOGLE_AUTH_TOKEN_FOR_TESTING")
    if token:
        return token
    try:
        import google.auth
        import google.auth.exceptions
        import google.auth.transport.requests
    except ImportError:
        raise ObjectStoreError(
            f"{name}: reading the object's checksum needs GCS credentials: install google-auth "
            "(pip install google-auth) or set GOOGLE_AUTH_TOKEN_FOR_TESTING"
        ) from None
    global _credentials
    with _credentials_lock:
        try:
            if _credentials is None:
                _credentials, _ = google.auth.default(scopes=[_READ_SCOPE])
            if not _credentials.valid:
                _credentials.refresh(google.auth.transport.requests.Request())
        except (google.auth.exceptions.GoogleAuthError, OSError) as e:
            raise ObjectStoreError(
                f"{name}: no GCS credentials for reading the object's checksum ({e}); run "
                "`gcloud auth application-default login` or use a service account"
            ) from None
        return str(_credentials.token)
