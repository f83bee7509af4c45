"""Every numeric field of ObjectStorageConfig and RetryPolicy (issue 18, class 8): 0,
negative, NaN, infinite and huge values are either meaningful (documented in the field's
docstring) or a ConfigError naming the field, the value and the valid range."""

from __future__ import annotations

import math

import numpy
import pytest

from tokenloom.errors import ConfigError
from tokenloom.storage import ObjectStorageConfig, RetryPolicy

NAN, INF, HUGE = math.nan, math.inf, 10**30

REFUSED = [
    ("bin_chunk_nbytes", 0, r"bin_chunk_nbytes must be an integer >= 1, got 0"),
    ("bin_chunk_nbytes", -1, "bin_chunk_nbytes"),
    ("bin_chunk_nbytes", 1.5, "bin_chunk_nbytes"),
    ("bin_chunk_nbytes", True, "bin_chunk_nbytes"),
    ("read_ahead_chunks", -1, r"read_ahead_chunks must be an integer in \[0, 1024\], got -1"),
    ("read_ahead_chunks", HUGE, "read_ahead_chunks"),
    ("max_cached_chunks", 0, "max_cached_chunks must be an integer >= 1, got 0"),
    ("max_cached_chunks", NAN, "max_cached_chunks"),
    ("max_attempts", 0, r"RetryPolicy.max_attempts must be an integer in \[1, 100\], got 0"),
    ("max_attempts", HUGE, "max_attempts"),
    ("max_attempts", True, "max_attempts"),
    (
        "initial_backoff_s",
        -0.1,
        r"initial_backoff_s=-0.1: must be a finite number of seconds in \[0, 3600\]",
    ),
    ("initial_backoff_s", NAN, "initial_backoff_s=nan"),
    ("max_backoff_s", INF, "max_backoff_s=inf"),
    ("throttle_backoff_s", 1e9, "throttle_backoff_s=1000000000.0"),
    (
        "connect_timeout_s",
        0,
        r"connect_timeout_s=0: must be a finite number of seconds in \(0, 86400\]",
    ),
    ("connect_timeout_s", INF, "connect_timeout_s=inf"),
    ("read_timeout_s", NAN, "read_timeout_s=nan"),
    ("read_timeout_s", -1, "read_timeout_s=-1"),
    ("read_timeout_s", HUGE, "read_timeout_s"),
    ("read_timeout_s", True, "read_timeout_s=True"),
]
_RETRY = {f.name for f in RetryPolicy.__dataclass_fields__.values()}


def _make(field, value):
    if field in _RETRY:
        return ObjectStorageConfig("/tmp/idx", retry=RetryPolicy(**{field: value}))
    return ObjectStorageConfig("/tmp/idx", **{field: value})


@pytest.mark.parametrize(
    "field, value, message", REFUSED, ids=[f"{f}={v!r}"[:40] for f, v, _ in REFUSED]
)
def test_refused_with_field_value_and_range(field, value, message):
    with pytest.raises(ConfigError, match=message):
        _make(field, value)


MEANINGFUL = [
    ("bin_chunk_nbytes", HUGE),  # clipped to the object's end: the whole object at once
    ("bin_chunk_nbytes", numpy.int64(4096)),
    ("read_ahead_chunks", 0),  # off, Megatron's behaviour
    ("read_ahead_chunks", 1024),
    ("max_cached_chunks", HUGE),  # keep every block
    ("max_attempts", 1),  # no retry
    ("max_attempts", 100),
    ("initial_backoff_s", 0),  # retry at once
    ("max_backoff_s", 0),
    ("throttle_backoff_s", 3600),
    ("connect_timeout_s", 0.001),
    ("read_timeout_s", 86400),
]


@pytest.mark.parametrize("field, value", MEANINGFUL, ids=[f"{f}={v!r}"[:40] for f, v in MEANINGFUL])
def test_meaningful_extremes_are_kept(field, value):
    config = _make(field, value)
    holder = config.retry if field in _RETRY else config
    assert getattr(holder, field) == value
