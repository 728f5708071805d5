"""``s3://bucket/key`` inputs: images every worker host can read, whatever host it is.

The same rules as local paths, with object storage in place of the filesystem: a key must lie under one of the
job's tenant's prefixes (``vlbatch.db.tenants.roots_of``: its own, inside ``VLBATCH_ALLOWED_S3_PREFIXES``, or those;
``s3://bucket`` or ``s3://bucket/prefix``, matched whole path segment by whole segment, as input roots are); a
refusal names no prefix and a store's failure only its error code, never its message. One read is capped at the
same ``max_bytes`` (a ranged GET asks for one byte more than the cap, so an oversized object is refused without
being downloaded), and a folder is listed page by page (``list_objects_v2``, 1,000 keys a request) so a bucket of
millions of keys is never held in one response.

The client is boto3's, built once per process on first use (boto3 is the optional ``s3`` extra and imported
only when a job names an ``s3://`` input): credentials, region and endpoint come from boto3's own chain
(``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, an instance or pod role, ``AWS_ENDPOINT_URL``
for an S3-compatible store), never from vlbatch's settings.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from preprocessing.input_errors import InputError
from vlbatch.errors import EMPTY_FILE, FETCH_ERROR, NOT_FOUND, OUTSIDE_ROOTS, TOO_LARGE, UNSUPPORTED_SOURCE

__all__ = ["ObjectRef", "is_object_uri", "iter_objects", "parse_object_uri", "read_object"]

SCHEME = "s3://"
PAGE_SIZE = 1000  # S3's own maximum keys a listing page
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_NOT_FOUND_CODES = {"NoSuchKey", "NoSuchBucket", "404", "NotFound"}
_STORE_CODE = re.compile(r"[A-Za-z][A-Za-z0-9.]{1,63}|[1-5][0-9][0-9]")  # S3's error codes, or an HTTP status
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ObjectRef:
    bucket: str
    key: str

    @property
    def uri(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.key}"


def is_object_uri(source: str) -> bool:
    return source[:5].lower() == SCHEME


def parse_object_uri(uri: str) -> ObjectRef:
    """``s3://bucket/key`` split; ``InputError(unsupported_source)`` for anything else. A key with ``.`` or ``..``
    segments is refused: S3 keeps them literally, but a proxy or an S3-compatible server may resolve them."""
    if not is_object_uri(uri):
        raise InputError(UNSUPPORTED_SOURCE, f"{uri[:80]!r} is not an s3://bucket/key address")
    bucket, _, key = uri[len(SCHEME) :].partition("/")
    if not _BUCKET.fullmatch(bucket):
        raise InputError(UNSUPPORTED_SOURCE, f"{uri[:80]!r}: {bucket!r} is not an S3 bucket name")
    if any(part in {".", ".."} for part in key.split("/")):
        raise InputError(UNSUPPORTED_SOURCE, f"{uri[:200]!r}: '.' and '..' segments are not allowed in a key")
    return ObjectRef(bucket, key)


def _under(ref: ObjectRef, prefix: str) -> bool:
    allowed = parse_object_uri(prefix)
    if ref.bucket != allowed.bucket:
        return False
    root = allowed.key.strip("/")
    return not root or ref.key == root or ref.key.startswith(root + "/")


def confine_object(uri: str, allowed: Sequence[str]) -> ObjectRef:
    """``uri`` parsed, when it lies under one of the ``allowed`` prefixes (the job's tenant's); ``InputError
    (outside_roots)`` if not. The message names no prefix: they are other tenants' buckets as often as not."""
    ref = parse_object_uri(uri)
    if not any(_under(ref, prefix) for prefix in allowed):
        raise InputError(
            OUTSIDE_ROOTS,
            f"{uri[:200]} is outside the object storage prefixes this tenant may read (an admin sets them: "
            "`vlbatch keys roots TENANT --s3 s3://bucket/prefix`)",
        )
    return ref


@lru_cache(maxsize=1)
def _client() -> Any:
    """One S3 client per process (boto3 clients are thread-safe): built on the first s3:// input."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError:  # the s3 extra is not installed
        raise InputError(FETCH_ERROR, "s3:// inputs need boto3: install vlbatch with the 's3' extra") from None
    config = Config(connect_timeout=5, read_timeout=30, retries={"max_attempts": 4, "mode": "standard"})
    return boto3.client("s3", config=config)


def _failure(exc: Exception, ref: ObjectRef) -> InputError:
    """A boto3/botocore error as the item's (or the listing's) error: missing is ``not_found``, anything else
    ``fetch_error``. The client sees the store's error code (``AccessDenied``, ``SlowDown``: a fixed vocabulary)
    and never the store's own message, which names IAM principals (ARNs), internal endpoint URLs and policies;
    those go to this process's log."""
    response = getattr(exc, "response", None) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    if code in _NOT_FOUND_CODES:
        return InputError(NOT_FOUND, f"{ref.uri[:200]}: no such object ({code})")
    log.warning("object store request for %s failed: %s: %s", ref.uri[:200], type(exc).__name__, exc)
    if _STORE_CODE.fullmatch(code):
        return InputError(FETCH_ERROR, f"{ref.uri[:200]}: the object store refused the request ({code})")
    return InputError(FETCH_ERROR, f"{ref.uri[:200]}: the object store could not be reached or did not answer")


def read_object(uri: str, *, allowed: Sequence[str], max_bytes: int) -> bytes:
    """The bytes of the object ``uri``, at most ``max_bytes`` (``InputError(too_large)`` beyond)."""
    ref = confine_object(uri, allowed)
    client = _client()
    try:
        response = client.get_object(Bucket=ref.bucket, Key=ref.key, Range=f"bytes=0-{max_bytes}")
        body = response["Body"]
        try:
            data: bytes = body.read(max_bytes + 1)
        finally:
            body.close()
    except Exception as exc:  # botocore's ClientError and BotoCoreError (endpoint, credentials, timeouts)
        if getattr(exc, "response", {}).get("Error", {}).get("Code") == "InvalidRange":  # a zero-byte object
            raise InputError(EMPTY_FILE, f"{ref.uri[:200]} is empty") from None
        raise _failure(exc, ref) from None
    total = _total_size(response.get("ContentRange"))
    if (total is not None and total > max_bytes) or len(data) > max_bytes:
        raise InputError(TOO_LARGE, f"{ref.uri[:200]} is {total or 'over'} bytes, limit {max_bytes}")
    return data


def _total_size(content_range: str | None) -> int | None:
    """The whole object's size from ``bytes 0-N/TOTAL`` (None when the server sent the object whole)."""
    if not content_range or "/" not in content_range:
        return None
    total = content_range.rsplit("/", 1)[1]
    return int(total) if total.isdigit() else None


def iter_objects(
    uri: str, *, allowed: Sequence[str], suffixes: Collection[str], recursive: bool, page_size: int = PAGE_SIZE
) -> Iterator[str]:
    """``s3://`` addresses of the objects with one of ``suffixes`` below the folder ``uri``, in key order (S3 lists
    keys in UTF-8 byte order), one listing page at a time; without ``recursive`` only the folder's own keys.
    Keys ending in ``/`` (folder markers some tools write) are not objects to read."""
    ref = confine_object(uri, allowed)
    prefix = ref.key.strip("/") + "/" if ref.key.strip("/") else ""
    client = _client()
    options: dict[str, Any] = {"Bucket": ref.bucket, "Prefix": prefix}
    if not recursive:
        options["Delimiter"] = "/"
    pages = client.get_paginator("list_objects_v2").paginate(**options, PaginationConfig={"PageSize": page_size})
    try:
        for page in pages:
            for entry in page.get("Contents", ()):
                key = entry["Key"]
                dot = key.rfind(".")
                if not key.endswith("/") and dot > key.rfind("/") and key[dot:].lower() in suffixes:
                    yield f"{SCHEME}{ref.bucket}/{key}"
    except InputError:
        raise
    except Exception as exc:  # botocore's ClientError and BotoCoreError
        raise _failure(exc, ref) from None
