"""``ObjectStorageConfig`` (Megatron's surface) and the explicit retry policy.

``ObjectStorageConfig(path_to_idx_cache, bin_chunk_nbytes=256 MiB)`` is accepted
wherever megatron-core accepts one; the other fields are tokenloom extensions with
defaults that keep Megatron's behaviour (one cached chunk, no read-ahead, the
endpoint from the environment).  ``S3Config`` is the deprecated alias.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from tokenloom.attributes import read_attribute
from tokenloom.errors import ConfigError

DEFAULT_CHUNK_NBYTES = 256 * 1024 * 1024
MAX_ATTEMPTS = 100
"""The most tries of one request (``RetryPolicy.max_attempts``)."""
MAX_BACKOFF_S = 3600.0
"""The longest back-off base or cap, in seconds."""
MAX_TIMEOUT_S = 86400.0
"""The longest connect or read timeout, in seconds (one day)."""
MAX_READ_AHEAD = 1024
"""The most blocks read ahead (``ObjectStorageConfig.read_ahead_chunks``)."""


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
    """Total tries of one request, the first included: an integer in ``[1, 100]``
    (1 = no retry; a fault that 100 tries did not clear will not clear, and more would
    only delay the error)."""

    initial_backoff_s: float = 0.1
    """Base of the exponential back-off, in seconds: ``[0, 3600]`` (0: retry at once)."""

    max_backoff_s: float = 5.0
    """Cap of one back-off sleep, in seconds: ``[0, 3600]``."""

    throttle_backoff_s: float = 0.5
    """Base of the back-off after a throttling answer (SlowDown, 429), in seconds:
    ``[0, 3600]``."""

    connect_timeout_s: float = 10.0
    """Timeout to open a connection, in seconds: ``(0, 86400]`` (no "wait forever": a
    dead endpoint must end in an error, never a hang)."""

    read_timeout_s: float = 60.0
    """Timeout waiting for bytes on an open connection, in seconds: ``(0, 86400]``."""

    def __post_init__(self) -> None:
        _check_int("RetryPolicy", "max_attempts", self.max_attempts, 1, MAX_ATTEMPTS)
        for name in ("initial_backoff_s", "max_backoff_s", "throttle_backoff_s"):
            _check_seconds(name, getattr(self, name), MAX_BACKOFF_S, zero_ok=True)
        for name in ("connect_timeout_s", "read_timeout_s"):
            _check_seconds(name, getattr(self, name), MAX_TIMEOUT_S, zero_ok=False)


def _check_seconds(name: str, value: Any, high: float, zero_ok: bool) -> None:
    """A finite number of seconds in ``[0, high]`` (``(0, high]`` unless ``zero_ok``)."""
    number = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or not (0 <= value <= high):
        ok = False
    else:
        ok = zero_ok or value > 0
    if not ok:
        low = "[0" if zero_ok else "(0"
        raise ConfigError(
            f"RetryPolicy.{name}={value!r}: must be a finite number of seconds in {low}, {high:g}]"
        )


@dataclass(frozen=True)
class ObjectStorageConfig:
    """Where the ``.idx`` cache lives and how the ``.bin`` is read from object storage."""

    path_to_idx_cache: str
    """Local folder for ``.idx`` copies: ``<path_to_idx_cache>/<bucket-or-profile>/<key>.idx``."""

    bin_chunk_nbytes: int = DEFAULT_CHUNK_NBYTES
    """Bytes fetched per cache miss: the aligned block ``[offset // n * n, ...)`` (Megatron's
    rule and default, 256 MiB). An integer >= 1; smaller blocks suit random access, and
    a value above the object's size fetches the whole object at once (blocks are clipped
    to the object's end)."""

    read_ahead_chunks: int = 0
    """When reads move forward block by block, fetch this many next blocks in the
    background: an integer in ``[0, 1024]`` (0 = off, Megatron's behaviour). Each is
    held in memory, ``bin_chunk_nbytes`` bytes."""

    max_cached_chunks: int = 1
    """Blocks kept in memory per ``.bin`` (least recently used dropped; 1 = Megatron):
    an integer >= 1; a value above the object's block count keeps it all."""

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
        _check_int("ObjectStorageConfig", "bin_chunk_nbytes", self.bin_chunk_nbytes, 1)
        _check_int(
            "ObjectStorageConfig", "read_ahead_chunks", self.read_ahead_chunks, 0, MAX_READ_AHEAD
        )
        _check_int("ObjectStorageConfig", "max_cached_chunks", self.max_cached_chunks, 1)
        if not isinstance(self.retry, RetryPolicy):
            raise ConfigError(f"retry must be a RetryPolicy, got {self.retry!r}")


def _check_int(owner: str, name: str, value: Any, low: int, high: Optional[int] = None) -> None:
    integer = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if not integer or value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ConfigError(f"{owner}.{name} must be an integer {bound}, got {value!r}")


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
