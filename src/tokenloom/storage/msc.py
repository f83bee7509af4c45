"""Objects behind a Multi-Storage Client profile: ``msc://profile/path``.

Profiles come from ``MSC_CONFIG`` (or MSC's default config files).  Ranged reads use
``StorageClient.read(path, byte_range=Range(offset, size))``; a zero-length read is
answered locally (MSC would send ``Range: bytes=X-(X-1)``, which servers ignore and
answer with the whole object).  Requests are retried with tokenloom's policy, on top
of MSC's own, because MSC does not retry 500s or dropped connections.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Optional, TypeVar

from tokenloom.attributes import read_attribute
from tokenloom.errors import ObjectNotFoundError, StorageAccessError, StorageError
from tokenloom.storage.clients import import_msc
from tokenloom.storage.config import ObjectStorageConfig
from tokenloom.storage.objects import ObjectInfo, RemoteObject
from tokenloom.storage.retry import TruncatedBodyError, call_with_retries
from tokenloom.storage.urls import StorageURL

T = TypeVar("T")


class MSCObject(RemoteObject):
    """One ``msc://profile/path`` object."""

    def __init__(self, url: StorageURL, config: ObjectStorageConfig) -> None:
        self.url = url
        self.config = config
        self._resolved: Optional[tuple[int, Any, str]] = None

    def _client(self) -> tuple[Any, str]:
        resolved = self._resolved
        if resolved is None or resolved[0] != os.getpid():  # again in a forked child
            try:
                client, path = import_msc().resolve_storage_client(str(self.url))
            except (ValueError, KeyError) as error:
                raise ObjectNotFoundError(
                    f"{self.url}: MSC profile {self.url.bucket!r} cannot be used ({error}); "
                    "define it in the file named by MSC_CONFIG"
                ) from error
            resolved = self._resolved = (os.getpid(), client, path)
        return resolved[1], resolved[2]

    def _call(self, action: str, operation: Callable[[Any, str], T]) -> T:
        def attempt() -> T:
            client, path = self._client()
            return operation(client, path)

        try:
            return call_with_retries(
                attempt, url=str(self.url), action=action, policy=self.config.retry
            )
        except StorageError:
            raise
        except FileNotFoundError as error:
            raise ObjectNotFoundError(
                f"{self.url}: object does not exist in MSC profile {self.url.bucket!r} ({error})"
            ) from error
        except PermissionError as error:
            raise StorageAccessError(
                f"{self.url}: {action} was refused ({error}); check the "
                "credentials of the MSC profile"
            ) from error
        except Exception as error:
            raise StorageError(
                f"{self.url}: {action} failed: {type(error).__name__}: {error}"
            ) from error

    def head(self) -> ObjectInfo:
        """Size and ETag of the object."""
        meta = self._call("HEAD", lambda client, path: client.info(path))
        if read_attribute(meta, "type", "file") == "directory":
            raise ObjectNotFoundError(f"{self.url}: is a directory, not an object")
        return ObjectInfo(int(meta.content_length), str(read_attribute(meta, "etag", "") or ""))

    def read_range(self, start: int, end: int, etag: Optional[str] = None) -> bytes:
        """Bytes ``[start, end)`` through MSC's range read (none for an empty range)."""
        if end <= start:
            return b""  # MSC would fetch the whole object
        msc = import_msc()

        def get(client: Any, path: str) -> bytes:
            data = client.read(path, byte_range=msc.types.Range(offset=start, size=end - start))
            if len(data) != end - start:
                raise TruncatedBodyError(
                    f"{self.url}: bytes {start}-{end - 1}: got {len(data)} of {end - start} bytes"
                )
            return bytes(data)

        return self._call(f"GET bytes {start}-{end - 1}", get)

    def download(self, local_path: str) -> ObjectInfo:
        """Atomically copy the object to ``local_path``."""
        info = self.head()
        folder = os.path.dirname(os.path.abspath(local_path))
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, f".{os.path.basename(local_path)}.{os.getpid()}.part")
        try:
            self._call("download", lambda client, path: client.download_file(path, tmp))
            got = os.path.getsize(tmp)
            if got != info.size:
                raise TruncatedBodyError(f"{self.url}: download got {got} of {info.size} bytes")
            os.replace(tmp, local_path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return info

    def upload(self, local_path: str) -> None:
        """Upload ``local_path`` (MSC writes the object atomically)."""
        self._call("upload", lambda client, path: client.upload_file(path, local_path))


__all__ = ["MSCObject"]
