"""URL parsing, configs, retry classification and back-off: no server needed."""

from __future__ import annotations

import random
import warnings

import pytest

from tokenloom.errors import ConfigError, StorageError
from tokenloom.storage import (
    ObjectStorageConfig,
    RetryPolicy,
    S3Config,
    coerce_config,
    index_cache_path,
    is_remote,
    parse_url,
)
from tokenloom.storage.retry import (
    THROTTLE,
    TRANSIENT,
    TruncatedBodyError,
    backoff_delay,
    call_with_retries,
    classify,
)


def test_parse_url_and_is_remote():
    url = parse_url("s3://bucket/a/b/c")
    assert (url.scheme, url.bucket, url.key) == ("s3", "bucket", "a/b/c")
    assert str(parse_url("msc://prof/x")) == "msc://prof/x"
    assert is_remote("s3://b/k") and is_remote("msc://p/k")
    assert not is_remote("/data/s3://x") and not is_remote("gs://b/k")
    for bad in ("s3://", "s3:///", "s3://bucket", "s3://bucket/", "msc:///x", "/local/path"):
        with pytest.raises(ConfigError, match="s3|msc|object-storage"):
            parse_url(bad)


def test_an_empty_bucket_is_read_as_megatron_core_reads_it(tmp_path):
    from tokenloom.storage.datasets import upload_dataset
    from tokenloom.storage.staging import staged_output

    url = parse_url("s3:///tmp/data/name.idx")  # megatron-core's parse_s3_path: "", key
    assert (url.bucket, url.key, str(url)) == ("", "tmp/data/name.idx", "s3:///tmp/data/name.idx")
    assert index_cache_path(str(url), str(tmp_path)) == str(tmp_path / "tmp" / "data" / "name.idx")
    with pytest.raises(ConfigError, match=r"\.\."):
        index_cache_path("s3:///tmp/../../etc/x.idx", str(tmp_path))
    for write in (
        lambda: parse_url("s3:///tmp/out", for_writing=True),
        lambda: staged_output("s3:///tmp/out").__enter__(),
        lambda: upload_dataset(str(tmp_path / "pair"), "s3:///tmp/out"),
    ):
        with pytest.raises(ConfigError, match=r"s3:///tmp/out.*no bucket.*s3://BUCKET/key"):
            write()


def test_index_cache_layout_is_megatrons(tmp_path):
    assert index_cache_path("s3://bkt/dir/name.idx", str(tmp_path)) == str(
        tmp_path / "bkt" / "dir" / "name.idx"
    )
    assert index_cache_path("msc://prof/dir/name.idx", str(tmp_path)) == str(
        tmp_path / "prof" / "dir" / "name.idx"
    )
    with pytest.raises(ConfigError, match=r"\.\."):
        index_cache_path("s3://bkt/../../etc/x.idx", str(tmp_path))


def test_config_defaults_validation_and_alias():
    config = ObjectStorageConfig("/tmp/cache")
    assert config.bin_chunk_nbytes == 256 * 1024 * 1024 and config.max_cached_chunks == 1
    assert config.read_ahead_chunks == 0
    with pytest.raises(ConfigError, match="bin_chunk_nbytes"):
        ObjectStorageConfig("/tmp/cache", bin_chunk_nbytes=0)
    with pytest.raises(ConfigError, match="local folder"):
        ObjectStorageConfig("s3://bucket/cache")
    with pytest.raises(ConfigError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        alias = S3Config("/tmp/cache", bin_chunk_nbytes=10)
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    assert isinstance(alias, ObjectStorageConfig) and alias.bin_chunk_nbytes == 10


def test_coerce_config_from_dict_and_foreign_object():
    assert coerce_config({"path_to_idx_cache": "/c", "bin_chunk_nbytes": 5}).bin_chunk_nbytes == 5

    class MegatronLike:
        path_to_idx_cache = "/c"
        bin_chunk_nbytes = 7

    assert coerce_config(MegatronLike()) == ObjectStorageConfig("/c", bin_chunk_nbytes=7)
    with pytest.raises(ConfigError, match="unknown fields"):
        coerce_config({"path_to_idx_cache": "/c", "chunk": 1})
    with pytest.raises(ConfigError, match="object_storage_cache_path"):
        coerce_config(None)


def _client_error(status: int, code: str) -> Exception:
    from botocore.exceptions import ClientError

    return ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "GetObject",
    )


def test_classify_real_botocore_errors():
    pytest.importorskip("botocore")
    from botocore.exceptions import (
        ConnectionClosedError,
        EndpointConnectionError,
        ReadTimeoutError,
        ResponseStreamingError,
    )

    assert classify(_client_error(503, "SlowDown")) == THROTTLE
    assert classify(_client_error(429, "TooManyRequests")) == THROTTLE
    assert classify(_client_error(500, "InternalError")) == TRANSIENT
    assert classify(_client_error(404, "NoSuchKey")) is None
    assert classify(_client_error(403, "AccessDenied")) is None
    assert classify(EndpointConnectionError(endpoint_url="http://x")) == TRANSIENT
    assert classify(ConnectionClosedError(endpoint_url="http://x")) == TRANSIENT
    assert classify(ReadTimeoutError(endpoint_url="http://x")) == TRANSIENT
    assert classify(ResponseStreamingError(error="cut")) == TRANSIENT
    assert classify(ConnectionResetError()) == TRANSIENT
    assert classify(TruncatedBodyError("x")) == TRANSIENT
    wrapped = RuntimeError("msc wrapper")
    wrapped.__cause__ = _client_error(500, "InternalError")
    assert classify(wrapped) == TRANSIENT  # MSC wraps 500s in RuntimeError
    assert classify(ValueError("bad")) is None


def test_backoff_is_bounded_exponential_with_jitter():
    policy = RetryPolicy(initial_backoff_s=0.1, max_backoff_s=1.0, throttle_backoff_s=0.5)
    rng = random.Random(0)
    for attempt, cap in ((1, 0.1), (2, 0.2), (3, 0.4), (5, 1.0), (30, 1.0)):
        delays = [backoff_delay(policy, attempt, TRANSIENT, rng) for _ in range(200)]
        assert 0 <= min(delays) and max(delays) <= cap and len(set(delays)) > 100
    assert max(backoff_delay(policy, 2, THROTTLE, rng) for _ in range(200)) > 0.2


def test_call_with_retries_bounded_logged_and_names_url(caplog):
    policy = RetryPolicy(max_attempts=3, initial_backoff_s=0, max_backoff_s=0)
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionResetError("reset")
        return "ok"

    with caplog.at_level("INFO", logger="tokenloom"):
        assert call_with_retries(flaky, url="s3://b/k", action="GET", policy=policy) == "ok"
    retries = [r for r in caplog.records if "s3://b/k" in r.getMessage()]
    assert len(retries) == 2 and all(r.levelname == "WARNING" for r in retries)

    def always():
        calls.append(1)
        raise ConnectionResetError("reset")

    calls.clear()
    with pytest.raises(StorageError, match=r"s3://b/k: GET failed 3 time\(s\)"):
        call_with_retries(always, url="s3://b/k", action="GET", policy=policy)
    assert len(calls) == 3
    calls.clear()
    with pytest.raises(ValueError):
        call_with_retries(lambda: calls.append(1) or int("x"), url="u", action="a", policy=policy)
    assert len(calls) == 1  # not retried
