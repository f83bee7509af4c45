"""S3 objects through boto3: HEAD, ranged GET, download, upload, with clear errors.

Every call goes through :func:`~tokenloom.storage.retry.call_with_retries`; a final
failure becomes a :mod:`tokenloom.errors` error naming the ``s3://`` URL: missing
object or bucket (:class:`ObjectNotFoundError`), refused credentials
(:class:`StorageAccessError`), an object replaced while being read, an exhausted
retry budget (:class:`StorageError`).

Only megatron-core's four calls are needed of a client: ``head_object(Bucket, Key)``,
``get_object(Bucket, Key, Range)``, ``download_file(Bucket, Key, Filename)`` and
``close()`` (plus ``upload_file`` to upload).  A HEAD answered without
``ContentLength`` leaves the size unknown (the ``.bin`` is then read with its end
showing as a short answer), one without ``ETag`` leaves the ETag unknown (the ``.idx``
is then fetched with ``download_file`` and the digest of its content stands in for
it); a ranged GET answered without ``ContentLength`` is checked against the range
asked.  A real S3 answers both, and gets the full checks.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any, Optional, TypeVar

from tokenloom.atomic import atomic_open, temporary_sibling
from tokenloom.attributes import read_attribute
from tokenloom.errors import ObjectNotFoundError, StorageAccessError, StorageError
from tokenloom.storage.clients import DEFAULT_POOL
from tokenloom.storage.config import ObjectStorageConfig
from tokenloom.storage.objects import ObjectInfo, RemoteObject, file_content_info
from tokenloom.storage.retry import TruncatedBodyError, call_with_retries
from tokenloom.storage.urls import StorageURL, check_writable

T = TypeVar("T")

_DENIED = frozenset(
    {
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "TokenRefreshRequired",
        "AllAccessDisabled",
    }
)
_PIECE = 8 * 1024 * 1024


def _error_fields(error: BaseException) -> tuple[str, int]:
    response = read_attribute(error, "response", None)
    if not isinstance(response, dict):
        return "", 0
    code = str(response.get("Error", {}).get("Code", ""))
    return code, int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


class S3Object(RemoteObject):
    """One ``s3://bucket/key`` object."""

    def __init__(self, url: StorageURL, config: ObjectStorageConfig) -> None:
        self.url = url
        self.config = config

    @property
    def _client(self) -> Any:
        return DEFAULT_POOL.s3(self.config)  # per process, made again after fork

    def _call(self, action: str, operation: Callable[[], T]) -> T:
        try:
            return call_with_retries(
                operation, url=str(self.url), action=action, policy=self.config.retry
            )
        except StorageError:
            raise
        except Exception as error:
            raise self._translate(error, action) from error

    def _translate(self, error: Exception, action: str) -> Exception:
        url, endpoint = str(self.url), self._endpoint()
        code, status = _error_fields(error)
        if type(error).__name__ in ("NoCredentialsError", "PartialCredentialsError"):
            return StorageAccessError(
                f"{url}: no AWS credentials found for {action}; set "
                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile"
            )
        if code in _DENIED or status == 403:
            return StorageAccessError(
                f"{url}: {action} was refused by {endpoint} ({code or status}); check the "
                "credentials (AWS_ACCESS_KEY_ID, AWS_PROFILE or ObjectStorageConfig."
                "profile_name), the endpoint and the bucket policy"
            )
        if code == "NoSuchBucket":
            return self._no_bucket(endpoint)
        if code in ("NoSuchKey", "404", "NotFound") or status == 404:
            if not self._bucket_exists():
                return self._no_bucket(endpoint)
            return ObjectNotFoundError(
                f"{url}: object does not exist (bucket {self.url.bucket!r} at {endpoint})"
            )
        if code == "PreconditionFailed" or status == 412:
            return StorageError(
                f"{url}: the object was replaced while it was being read; reopen the dataset"
            )
        return StorageError(f"{url}: {action} failed: {type(error).__name__}: {error}")

    def _no_bucket(self, endpoint: str) -> ObjectNotFoundError:
        return ObjectNotFoundError(
            f"{self.url}: bucket {self.url.bucket!r} does not exist at "
            f"{endpoint}; check the URL and the endpoint "
            "(AWS_ENDPOINT_URL or ObjectStorageConfig.endpoint_url)"
        )

    def _bucket_exists(self) -> bool:
        try:
            self._client.head_bucket(Bucket=self.url.bucket)
        except Exception as error:  # noqa: BLE001 - only a 404 means "no bucket"
            code, status = _error_fields(error)
            return not (status == 404 or code in ("NoSuchBucket", "404"))
        return True

    def _endpoint(self) -> str:
        try:
            return str(self._client.meta.endpoint_url)
        except Exception:  # noqa: BLE001 - only used in messages
            return "the S3 endpoint"

    def describe(self) -> Optional[ObjectInfo]:
        """What one HEAD tells: size and ETag (``""`` when the answer has none); None
        when it has no ``ContentLength`` (a client that implements only megatron-core's
        calls may answer ``{}``)."""
        answer = self._call(
            "HEAD", lambda: self._client.head_object(Bucket=self.url.bucket, Key=self.url.key)
        )
        if not isinstance(answer, dict) or answer.get("ContentLength") is None:
            return None
        return ObjectInfo(int(answer["ContentLength"]), str(answer.get("ETag") or ""))

    def head(self) -> ObjectInfo:
        """Size and ETag of the object.  Where the HEAD tells neither, the object is
        downloaded to a temporary folder and the digest of its content is the ETag."""
        info = self.describe()
        if info is not None and info.etag:
            return info
        with tempfile.TemporaryDirectory(prefix="tokenloom-head-") as folder:
            return self._download(os.path.join(folder, "object"), info)

    def read_range(
        self, start: int, end: int, etag: Optional[str] = None, allow_short: bool = False
    ) -> bytes:
        """Bytes ``[start, end)`` in one ranged GET (``If-Match: etag`` when given).

        The body is checked against the answer's ``Content-Length``; an answer without
        one against the range asked: fewer bytes are a truncated body (retried) unless
        ``allow_short`` (the size is unknown, so the object ends there)."""
        if end <= start:
            return b""

        def get() -> bytes:
            extra = {"IfMatch": etag} if etag else {}
            answer = self._client.get_object(
                Bucket=self.url.bucket, Key=self.url.key, Range=f"bytes={start}-{end - 1}", **extra
            )
            data = answer["Body"].read()
            told = answer.get("ContentLength")
            short = len(data) < end - start and not allow_short
            if len(data) > end - start or (len(data) != int(told) if told is not None else short):
                raise TruncatedBodyError(
                    f"{self.url}: bytes {start}-{end - 1}: got {len(data)} of "
                    f"{end - start if told is None else told} bytes"
                )
            return bytes(data)

        return self._call(f"GET bytes {start}-{end - 1}", get)

    def download(self, local_path: str) -> ObjectInfo:
        """Copy the object to ``local_path`` atomically; returns what was downloaded
        (where the HEAD tells no ETag, the ETag returned is the content's digest)."""
        return self._download(local_path, self.describe())

    def _download(self, local_path: str, info: Optional[ObjectInfo]) -> ObjectInfo:
        if info is not None and info.etag:  # one streamed GET, checked as it arrives
            return self._call("download", lambda: self._download_once(local_path))
        return self._call("download", lambda: self._download_file(local_path, info))

    def _download_once(self, local_path: str) -> ObjectInfo:
        answer = self._client.get_object(Bucket=self.url.bucket, Key=self.url.key)
        expected = int(answer["ContentLength"])
        body, done = answer["Body"], 0
        with atomic_open(local_path, "wb", durable=False) as handle:
            while True:
                piece = body.read(_PIECE)
                if not piece:
                    break
                handle.write(piece)
                done += len(piece)
            if done != expected:
                raise TruncatedBodyError(f"{self.url}: download got {done} of {expected} bytes")
        return ObjectInfo(expected, str(answer.get("ETag", "")))

    def _download_file(self, local_path: str, info: Optional[ObjectInfo]) -> ObjectInfo:
        """megatron-core's call, ``download_file(Bucket, Key, Filename)``, into a
        temporary sibling: checked against the size where the HEAD told it, digested,
        then renamed into place."""
        tmp = temporary_sibling(local_path)
        try:
            self._client.download_file(Bucket=self.url.bucket, Key=self.url.key, Filename=tmp)
            got = file_content_info(tmp)
            if info is not None and got.size != info.size:
                raise TruncatedBodyError(
                    f"{self.url}: download got {got.size} of {info.size} bytes"
                )
            os.replace(tmp, local_path)
        finally:
            if os.path.lexists(tmp):
                os.unlink(tmp)
        return got

    def upload(self, local_path: str) -> None:
        """Upload ``local_path``; S3 shows the object only once it is complete (its size
        is checked after, where the HEAD tells it).  An empty bucket is refused."""
        check_writable(self.url)
        size = os.path.getsize(local_path)
        self._call(
            "upload", lambda: self._client.upload_file(local_path, self.url.bucket, self.url.key)
        )
        info = self.describe()
        if info is not None and info.size != size:
            raise StorageError(f"{self.url}: uploaded {size} bytes but the object has {info.size}")


__all__ = ["S3Object"]
