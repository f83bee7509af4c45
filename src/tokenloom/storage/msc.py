"""Objects behind a Multi-Storage Client profile: ``msc://profile/path``.

Profiles come from ``MSC_CONFIG`` (or MSC's default config files).  Ranged reads use
megatron-core's call, ``client.read(path=, byte_range=Range(offset, size))``; a
zero-length read is answered locally (MSC would send ``Range: bytes=X-(X-1)``, which
servers ignore and answer with the whole object).  Requests are retried with
tokenloom's policy, on top of MSC's own, because MSC does not retry 500s or dropped
connections.

``read`` is the one method required of the storage client, as in megatron-core (whose
tests hand it a client with nothing else).  The others are used where present:
``info`` (size and ETag: without it the ``.bin``'s size is unknown, so reads are not
clipped to it and read-ahead is off, and the ``.idx`` is read through by ranges, its
digest standing in for the ETag), ``is_file`` (existence; else a one-byte read),
``download_file`` (else ranged reads) and ``upload_file`` (else a StorageError naming
the missing method).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import IO, Any, Optional, TypeVar

from tokenloom.attributes import read_attribute
from tokenloom.errors import ObjectNotFoundError, StorageAccessError, StorageError
from tokenloom.storage.clients import import_msc
from tokenloom.storage.config import ObjectStorageConfig
from tokenloom.storage.objects import ObjectInfo, RemoteObject, content_digest, content_etag
from tokenloom.storage.retry import TruncatedBodyError, call_with_retries
from tokenloom.storage.urls import StorageURL

T = TypeVar("T")
_BLOCK = 8 << 20  # bytes per ranged read when a client without info() is read through


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

    def _method(self, client: Any, name: str) -> Optional[Callable[..., Any]]:
        method = read_attribute(client, name, None)
        return method if callable(method) else None

    def _info(self) -> Optional[ObjectInfo]:
        """``info(path)``'s size and ETag; None when the client has no ``info``."""

        def info(client: Any, path: str) -> Any:
            method = self._method(client, "info")
            return None if method is None else method(path)

        meta = self._call("HEAD", info)
        if meta is None:
            return None
        if read_attribute(meta, "type", "file") == "directory":
            raise ObjectNotFoundError(f"{self.url}: is a directory, not an object")
        return ObjectInfo(int(meta.content_length), str(read_attribute(meta, "etag", "") or ""))

    def describe(self) -> Optional[ObjectInfo]:
        """Size and ETag from ``info()``; None, once the object is known to exist, for a
        client without it (megatron-core needs only ``read``)."""
        info = self._info()
        if info is None and not self.exists():
            raise ObjectNotFoundError(
                f"{self.url}: object does not exist in MSC profile {self.url.bucket!r}"
            )
        return info

    def exists(self) -> bool:
        """Whether the object exists: ``info()``, else ``is_file()``, else a one-byte read."""
        try:
            if self._info() is not None:
                return True

            def probe(client: Any, path: str) -> bool:
                is_file = self._method(client, "is_file")
                if is_file is not None:
                    return bool(is_file(path))
                self._read(client, path, 0, 1, True)  # FileNotFoundError when missing
                return True

            return self._call("HEAD", probe)
        except ObjectNotFoundError:
            return False

    def head(self) -> ObjectInfo:
        """Size and ETag of the object.  A client without ``info()`` gives neither: the
        object is then read through (bounded memory) and the ETag is its digest."""
        info = self._info()
        return info if info is not None else self._scan(None)

    def _read(self, client: Any, path: str, start: int, size: int, allow_short: bool) -> bytes:
        """Megatron's call: ``client.read(path=, byte_range=Range(offset, size))``."""
        read = self._method(client, "read")
        if read is None:
            raise StorageError(
                f"{self.url}: the MSC storage client {type(client).__name__} has no "
                "read(path, byte_range); tokenloom reads ranges through it, as megatron-core does"
            )
        data = read(path=path, byte_range=import_msc().types.Range(offset=start, size=size))
        if len(data) > size or (len(data) < size and not allow_short):
            raise TruncatedBodyError(
                f"{self.url}: bytes {start}-{start + size - 1}: got {len(data)} of {size} bytes"
            )
        return bytes(data)

    def read_range(
        self, start: int, end: int, etag: Optional[str] = None, allow_short: bool = False
    ) -> bytes:
        """Bytes ``[start, end)`` through MSC's range read (none for an empty range)."""
        if end <= start:
            return b""  # MSC would fetch the whole object
        return self._call(
            f"GET bytes {start}-{end - 1}",
            lambda client, path: self._read(client, path, start, end - start, allow_short),
        )

    def _scan(self, handle: Optional[IO[bytes]]) -> ObjectInfo:
        """Read the whole object by ranges (into ``handle`` when given): its size, and its
        digest as the ETag.  Each block asks for one byte more than it keeps, so no
        request starts at the end of the object (servers refuse such ranges)."""
        digest, offset = content_digest(), 0
        while True:
            data = self.read_range(offset, offset + _BLOCK + 1, allow_short=True)
            kept = data[:_BLOCK]
            digest.update(kept)
            if handle is not None:
                handle.write(kept)
            offset += len(kept)
            if len(data) <= _BLOCK:
                return ObjectInfo(offset, content_etag(digest))

    def download(self, local_path: str) -> ObjectInfo:
        """Atomically copy the object to ``local_path`` (``download_file`` where the
        client has ``info`` and it, else by ranged reads)."""
        folder = os.path.dirname(os.path.abspath(local_path))
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, f".{os.path.basename(local_path)}.{os.getpid()}.part")
        try:
            info = self._info()
            client, _ = self._client()
            if info is None or self._method(client, "download_file") is None:
                with open(tmp, "wb") as handle:
                    info = self._scan(handle)
            else:
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

        def upload(client: Any, path: str) -> None:
            method = self._method(client, "upload_file")
            if method is None:
                raise StorageError(
                    f"{self.url}: the MSC storage client {type(client).__name__} has no "
                    "upload_file(remote_path, local_path); upload with another client"
                )
            method(path, local_path)

        self._call("upload", upload)


__all__ = ["MSCObject"]
