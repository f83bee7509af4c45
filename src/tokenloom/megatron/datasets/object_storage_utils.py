"""``megatron.core.datasets.object_storage_utils``: s3:// and msc:// helpers, Megatron's API.

The paths, config and client protocol are megatron-core's; the work is done by
:mod:`tokenloom.storage` (ETag-validated ``.idx`` cache, ranged reads with retries).
``MultiStorageClientFeature`` is megatron-core's own flag where megatron-core is
installed (so ``--disable-msc`` still applies), else an equivalent flag of this module.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

from tokenloom import storage
from tokenloom.errors import ConfigError
from tokenloom.storage import MSC_PREFIX, S3_PREFIX, ObjectStorageConfig, S3Config

__all__ = [
    "MSC_PREFIX",
    "S3_PREFIX",
    "MultiStorageClientFeature",  # noqa: F822 - module __getattr__
    "ObjectStorageConfig",
    "S3Client",
    "S3Config",
    "cache_index_file",
    "dataset_exists",
    "get_index_cache_path",
    "get_object_storage_access",
    "is_object_storage_path",
    "parse_s3_path",
]


class S3Client(Protocol):
    """What an S3 client offers (boto3's ``client("s3")`` does)."""

    def download_file(self, Bucket: str, Key: str, Filename: str) -> None:  # noqa: N803
        """Copy object ``Bucket/Key`` to the local file ``Filename``."""

    def upload_file(self, Filename: str, Bucket: str, Key: str) -> None:  # noqa: N803
        """Copy the local file ``Filename`` to object ``Bucket/Key``."""

    def head_object(self, Bucket: str, Key: str) -> dict[str, Any]:  # noqa: N803
        """The object's metadata."""

    def get_object(self, Bucket: str, Key: str, Range: str) -> dict[str, Any]:  # noqa: N803
        """The object's bytes in ``Range`` (``"bytes=BEGIN-END"``), under ``"Body"``."""

    def close(self) -> None:
        """Release the client."""


class _FeatureFlag:
    """Whether msc:// paths go through the Multi-Storage Client (megatron-core's flag)."""

    def __init__(self, default: bool) -> None:
        self.enabled = default

    def enable(self) -> None:
        """Use the Multi-Storage Client for msc:// paths."""
        self.enabled = True

    def disable(self) -> None:
        """Do not use it (``--disable-msc``)."""
        self.enabled = False

    def is_enabled(self) -> bool:
        """Whether it is enabled and importable."""
        return self.enabled and _msc_importable()

    def import_package(self) -> Any:
        """The ``multistorageclient`` module (a clear error when absent or disabled)."""
        if not _msc_importable():
            raise ConfigError(
                "msc:// paths need the Multi-Storage Client: pip install 'tokenloom[msc]'"
            )
        if not self.enabled:
            raise ConfigError("the Multi-Storage Client is disabled (--disable-msc)")
        import multistorageclient

        return multistorageclient


def _msc_importable() -> bool:
    import importlib.util

    return importlib.util.find_spec("multistorageclient") is not None


def _feature_flag() -> Any:
    try:
        from megatron.core.msc_utils import MultiStorageClientFeature as flag
    except Exception:  # noqa: BLE001 - no megatron-core here (or it fails to import)
        return _FeatureFlag(_msc_importable())
    return flag


def __getattr__(name: str) -> Any:
    """``MultiStorageClientFeature``, resolved on first use (megatron-core's import is
    slow, and absent without megatron-core)."""
    if name == "MultiStorageClientFeature":
        flag = _feature_flag()
        globals()[name] = flag
        return flag
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def is_object_storage_path(path: str) -> bool:
    """Whether ``path`` is in object storage (``s3://`` or ``msc://``)."""
    return storage.is_remote(path)


def get_object_storage_access(path: str) -> str:
    """``"s3"`` for an s3:// path, else ``"msc"``."""
    return "s3" if str(path).startswith(S3_PREFIX) else "msc"


def parse_s3_path(path: str) -> tuple[str, str]:
    """``(bucket, key)`` of an s3:// path."""
    if not str(path).startswith(S3_PREFIX):
        raise ConfigError(f"{path!r} is not an s3:// path")
    bucket, _, key = path[len(S3_PREFIX) :].partition("/")
    return bucket, key


def get_index_cache_path(idx_path: str, object_storage_config: Any) -> str:
    """Where the ``.idx`` at ``idx_path`` is cached: ``path_to_idx_cache`` + the path
    without its scheme (megatron-core's layout)."""
    if not is_object_storage_path(idx_path):
        raise ConfigError(f"{idx_path!r} is not an s3:// or msc:// path")
    scheme = S3_PREFIX if idx_path.startswith(S3_PREFIX) else MSC_PREFIX
    return os.path.join(object_storage_config.path_to_idx_cache, idx_path[len(scheme) :])


def dataset_exists(path_prefix: str, idx_path: str, bin_path: str) -> bool:
    """Whether both objects of the pair exist in object storage."""
    if not is_object_storage_path(path_prefix):
        raise ConfigError(f"{path_prefix!r} is not an s3:// or msc:// path")
    return storage.dataset_exists(path_prefix)


def cache_index_file(remote_path: str, local_path: str) -> None:
    """Download ``remote_path`` (an ``.idx``) to ``local_path``, atomically (the caller
    synchronises the ranks, as with megatron-core)."""
    folder = os.path.dirname(local_path) or "."
    os.makedirs(folder, exist_ok=True)
    config = ObjectStorageConfig(path_to_idx_cache=folder)
    storage.open_object(storage.parse_url(remote_path), config).download(local_path)
