"""Faults injected by the proxy in front of the loopback S3 server: reads still return
the right bytes, retries are bounded and logged naming the object, and a fault that
never clears ends in a clear error within a bounded time."""

from __future__ import annotations

import numpy
import pytest
from tests.storage.storage_helpers import storage_config

from tokenloom.errors import StorageError
from tokenloom.storage import ObjectBinReader, RetryPolicy, fetch_index

pytestmark = pytest.mark.s3


def _is_get(method: str, path: str) -> bool:
    return method == "GET"


def _retry_logs(caplog, url: str):
    return [
        r
        for r in caplog.records
        if r.name.startswith("tokenloom")
        and url in r.getMessage()
        and "retry" in r.getMessage()
        and r.levelno >= 20
    ]


@pytest.mark.parametrize("scheme", ["s3", "msc"])
@pytest.mark.parametrize(
    "faults",
    [["500"], ["503", "503"], ["reset"], ["truncate"], ["500", "reset", "truncate"], ["slow:3"]],
)
def test_faults_for_first_k_requests_are_retried(s3, tmp_path, caplog, scheme, faults):
    config = storage_config(tmp_path, bin_chunk_nbytes=4096, endpoint_url=s3.proxy.url)
    url = (s3.remote["small"] if scheme == "s3" else s3.msc("small", proxy=True)) + ".bin"
    reader = ObjectBinReader(url, config)
    expected = numpy.fromfile(s3.local["small"] + ".bin", numpy.uint16, 300, offset=10000)
    s3.proxy.inject(faults, match=_is_get)
    with caplog.at_level("INFO", logger="tokenloom"):
        got = reader.read(numpy.uint16, 300, 10000)
    numpy.testing.assert_array_equal(got, expected)
    assert s3.proxy.faults_left() == 0
    assert len(_retry_logs(caplog, url)) == len(faults)  # one logged retry per fault
    assert len(s3.proxy.requests("GET")) == len(faults) + 1


@pytest.mark.timeout(60)  # the bound: 3 attempts of at most 1 s each, plus back-off
@pytest.mark.parametrize("scheme", ["s3", "msc"])
def test_fault_that_never_clears_fails_in_bounded_time(s3, tmp_path, caplog, scheme):
    policy = RetryPolicy(
        max_attempts=3,
        initial_backoff_s=0.01,
        max_backoff_s=0.02,
        throttle_backoff_s=0.01,
        connect_timeout_s=1,
        read_timeout_s=1,
    )
    config = storage_config(tmp_path, endpoint_url=s3.proxy.url, retry=policy)
    url = (s3.remote["small"] if scheme == "s3" else s3.msc("small", proxy=True)) + ".bin"
    reader = ObjectBinReader(url, config)
    s3.proxy.inject(["503"] * 100, match=_is_get)
    with caplog.at_level("INFO", logger="tokenloom"):
        with pytest.raises(StorageError, match=rf"{url}: GET bytes .* failed 3 time"):
            reader.read(numpy.uint16, 10, 0)
    assert len(s3.proxy.requests("GET")) == 3
    assert len(_retry_logs(caplog, url)) == 2


@pytest.mark.timeout(60)
def test_slow_answer_beyond_read_timeout_fails_in_bounded_time(s3, tmp_path):
    """Both answers are held far beyond the read timeout (until the test's end), so only
    the read timeout can end the read."""
    policy = RetryPolicy(
        max_attempts=2,
        initial_backoff_s=0.01,
        max_backoff_s=0.01,
        connect_timeout_s=1,
        read_timeout_s=0.5,
    )
    config = storage_config(tmp_path, endpoint_url=s3.proxy.url, retry=policy)
    reader = ObjectBinReader(s3.remote["small"] + ".bin", config)
    s3.proxy.inject(["slow:600", "slow:600"], match=_is_get)
    with pytest.raises(StorageError, match="small.bin.*ReadTimeoutError"):
        reader.read(numpy.uint16, 10, 0)
    assert len(s3.proxy.requests("GET")) == 2  # both attempts timed out


def test_index_download_survives_faults(s3, tmp_path, caplog):
    config = storage_config(tmp_path, endpoint_url=s3.proxy.url)
    s3.proxy.inject(["reset", "truncate", "500"], match=_is_get)
    with caplog.at_level("INFO", logger="tokenloom"):
        local = fetch_index(s3.remote["small"] + ".idx", config)
    with open(local, "rb") as got, open(s3.local["small"] + ".idx", "rb") as want:
        assert got.read() == want.read()
    assert len(_retry_logs(caplog, s3.remote["small"] + ".idx")) == 3
    leftovers = [p for p in (tmp_path / "idx-cache").rglob("*") if ".tmp" in p.name]
    assert leftovers == []
