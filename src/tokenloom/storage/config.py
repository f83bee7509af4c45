"""``ObjectStorageConfig`` (Megatron's surface) and the explicit retry policy.

``ObjectStorageConfig(path_to_idx_cache, bin_chunk_nbytes=256 MiB)`` is accepted
wherever megatron-core accepts one; the other fields are tokenloom extensions with
defaults that keep Megatron's behaviour (one cached chunk, no read-ahead, the
endpoint from the environment).  ``S3Config`` is the deprecated alias.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from tokenloom.attributes import read_attribute
from tokenloom.errors import ConfigError

DEFAULT_CHUNK_NBYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class RetryPolicy:
    """How object-storage requests are retried (one policy for S3 and MSC).

    A failing request is tried at most ``max_attempts`` times; before attempt ``n + 1``
    it sleeps a random time in ``[0, min(max_backoff_s, initial_backoff_s * 2**n)]``
    ("full jitter"), or the same with ``throttle_backoff_s`` as the base when the server
    asked to slow down (503 SlowDown, 429).  With the timeouts below, a fault that
    never clears fails within roughly ``max_attempts * (connect + read timeout)`` plus
    the back-off sleeps.
    """

    max_attempts: int = 5
    """Total tries of one request, the first included (1 = no retry)."""

    initial_backoff_s: float = 0.1
    """Base of the exponential back-off, in seconds."""

    max_backoff_s: float = 5.0
    """Cap of one back-off sleep, in seconds."""

    throttle_backoff_s: float = 0.5
    """Base of the back-off after a throttling answer (SlowDown, 429), in seconds."""

    connect_timeout_s: float = 10.0
    """Timeout to open a connection, in seconds."""

    read_timeout_s: float = 60.0
    """Timeout waiting for bytes on an open connection, in seconds."""

    def __post_init__(self) -> None:
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ConfigError(
                f"RetryPolicy.max_attempts must be an integer >= 1, got {self.max_attempts!r}"
            )
        for name in (
            "initial_backoff_s",
            "max_backoff_s",
            "throttle_backoff_s",
            "connect_timeout_s",
            "read_timeout_s",
        ):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"RetryPolicy.{name} must be a number >= 0, got {value!r}")


@dataclass(frozen=True)
class ObjectStorageConfig:
    """Where the ``.idx`` cache lives and how the ``.bin`` is read from object storage."""

    path_to_idx_cache: str
    """Local folder for ``.idx`` copies: ``<path_to_idx_cache>/<bucket-or-profile>/<key>.idx``."""

    bin_chunk_nbytes: int = DEFAULT_CHUNK_NBYTES
    """Bytes fetched per cache miss: the aligned block ``[offset // n * n, ...)`` (Megatron's
    rule and default, 256 MiB). Smaller blocks suit random access."""

    read_ahead_chunks: int = 0
    """When reads move forward block by block, fetch this many next blocks in the
    background (0 = off, Megatron's behaviour)."""

    max_cached_chunks: int = 1
    """Blocks kept in memory per ``.bin`` (least recently used dropped; 1 = Megatron)."""

    endpoint_url: Optional[str] = None
    """S3 endpoint; None takes it from the environment (``AWS_ENDPOINT_URL``...)."""

    region_name: Optional[str] = None
    """S3 region; None takes it from the environment / profile."""

    profile_name: Optional[str] = None
    """AWS shared-config profile for S3 credentials; None uses the default chain."""

    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """Retry policy of every request (S3 and MSC)."""

    def __post_init__(self) -> None:
        if not isinstance(self.path_to_idx_cache, str) or not self.path_to_idx_cache:
            raise ConfigError(
                f"path_to_idx_cache must be a local folder, got {self.path_to_idx_cache!r}"
            )
        if self.path_to_idx_cache.startswith(("s3://", "msc://")):
            raise ConfigError(
                f"path_to_idx_cache={self.path_to_idx_cache!r} must be a local "
                "folder, not an object-storage URL"
            )
        _check_int("bin_chunk_nbytes", self.bin_chunk_nbytes, 1)
        _check_int("read_ahead_chunks", self.read_ahead_chunks, 0)
        _check_int("max_cached_chunks", self.max_cached_chunks, 1)
        if not isinstance(self.retry, RetryPolicy):
            raise ConfigError(f"retry must be a RetryPolicy, got {self.retry!r}")


def _check_int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"ObjectStorageConfig.{name} must be an integer >= {low}, got {value!r}")


class S3Config(ObjectStorageConfig):
    """Deprecated alias of :class:`ObjectStorageConfig` (as in megatron-core)."""

    def __post_init__(self) -> None:
        warnings.warn(
            "S3Config is deprecated, use ObjectStorageConfig", DeprecationWarning, stacklevel=3
        )
        super().__post_init__()


_FIELDS = tuple(f.name for f in dataclasses.fields(ObjectStorageConfig))


def coerce_config(value: Any) -> ObjectStorageConfig:
    """An :class:`ObjectStorageConfig` from itself, a mapping, or any object with the same
    attributes (megatron-core's config included)."""
    if isinstance(value, ObjectStorageConfig):
        return value
    if value is None:
        raise ConfigError(
            "object storage paths need an object_storage_config (or "
            "GPTDatasetConfig.object_storage_cache_path) naming a local folder "
            "for the .idx files"
        )
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - set(_FIELDS))
        if unknown:
            raise ConfigError(
                f"object_storage_config has unknown fields {unknown}; known: {list(_FIELDS)}"
            )
        given = {k: v for k, v in value.items() if v is not None or k == "path_to_idx_cache"}
    else:
        given = {
            k: getattr(value, k) for k in _FIELDS if read_attribute(value, k, None) is not None
        }
        given.setdefault("path_to_idx_cache", read_attribute(value, "path_to_idx_cache", None))
    return ObjectStorageConfig(**given)


__all__ = [
    "DEFAULT_CHUNK_NBYTES",
    "ObjectStorageConfig",
    "RetryPolicy",
    "S3Config",
    "coerce_config",
]
