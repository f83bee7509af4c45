"""S3 objects through boto3: HEAD, ranged GET, download, upload, with clear errors.

Every call goes through :func:`~tokenloom.storage.retry.call_with_retries`; a final
failure becomes a :mod:`tokenloom.errors` error naming the ``s3://`` URL: missing
object or bucket (:class:`ObjectNotFoundError`), refused credentials
(:class:`StorageAccessError`), an object replaced while being read, an exhausted
retry budget (:class:`StorageError`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Optional, TypeVar

from tokenloom.atomic import atomic_open
from tokenloom.attributes import read_attribute
from tokenloom.errors import ObjectNotFoundError, StorageAccessError, StorageError
from tokenloom.storage.clients import DEFAULT_POOL
from tokenloom.storage.config import ObjectStorageConfig
from tokenloom.storage.objects import ObjectInfo, RemoteObject
from tokenloom.storage.retry import TruncatedBodyError, call_with_retries
from tokenloom.storage.urls import StorageURL

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

    def head(self) -> ObjectInfo:
        """Size and ETag of the object."""
        answer = self._call(
            "HEAD", lambda: self._client.head_object(Bucket=self.url.bucket, Key=self.url.key)
        )
        return ObjectInfo(int(answer["ContentLength"]), str(answer.get("ETag", "")))

    def read_range(
        self, start: int, end: int, etag: Optional[str] = None, allow_short: bool = False
    ) -> bytes:
        """Bytes ``[start, end)`` in one ranged GET (``If-Match: etag`` when given); the
        answer is checked against its ``Content-Length``, so ``allow_short`` changes nothing."""
        if end <= start:
            return b""

        def get() -> bytes:
            extra = {"IfMatch": etag} if etag else {}
            answer = self._client.get_object(
                Bucket=self.url.bucket, Key=self.url.key, Range=f"bytes={start}-{end - 1}", **extra
            )
            data = answer["Body"].read()
            expected = int(answer.get("ContentLength", end - start))
            if len(data) != expected or len(data) > end - start:
                raise TruncatedBodyError(
                    f"{self.url}: bytes {start}-{end - 1}: got {len(data)} of {expected} bytes"
                )
            return data

        return self._call(f"GET bytes {start}-{end - 1}", get)

    def download(self, local_path: str) -> ObjectInfo:
        """Copy the object to ``local_path`` atomically; returns what was downloaded."""
        return self._call("download", lambda: self._download_once(local_path))

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

    def upload(self, local_path: str) -> None:
        """Upload ``local_path``; S3 shows the object only once it is complete."""
        size = os.path.getsize(local_path)
        self._call(
            "upload", lambda: self._client.upload_file(local_path, self.url.bucket, self.url.key)
        )
        info = self.head()
        if info.size != size:
            raise StorageError(f"{self.url}: uploaded {size} bytes but the object has {info.size}")


__all__ = ["S3Object"]
