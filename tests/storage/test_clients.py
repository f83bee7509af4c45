"""S3 clients come from the module-level ``boto3.client`` (megatron-core's call), so code
that patches it, as megatron-core's tests do, is what tokenloom's readers use: in this
process, in a forked child (its own client), with tokenloom's retry settings."""

from __future__ import annotations

import os

import numpy
import pytest
from tests.storage.storage_helpers import storage_config

from tokenloom.format import IndexedDataset
from tokenloom.storage import clear_clients
from tokenloom.storage.clients import ClientPool

pytestmark = pytest.mark.s3


@pytest.fixture
def recorded(monkeypatch):
    """Every call of ``boto3.client`` (a wrapper that records it and makes the real one)."""
    import boto3

    real, calls = boto3.client, []

    def client(*args, **kwargs):
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(boto3, "client", client)
    clear_clients()  # clients made before the patch are not reused
    yield calls
    clear_clients()  # nor are those made through it, afterwards


@pytest.mark.timeout(60)
def test_a_patched_boto3_client_is_what_the_reader_uses(s3, tmp_path, recorded):
    remote = IndexedDataset(
        s3.remote["small"], mmap=False, object_storage_config=storage_config(tmp_path)
    )
    local = IndexedDataset(s3.local["small"])
    for i in (0, 7, len(local) - 1):
        numpy.testing.assert_array_equal(remote[i], local[i])
    assert len(recorded) == 1  # one client per process, shared by the .idx and .bin reads
    args, kwargs = recorded[0]
    assert args == ("s3",)
    settings = kwargs["config"]  # botocore's own retries off (tokenloom retries itself)
    assert settings.retries == {"total_max_attempts": 1, "mode": "standard"}
    assert (settings.connect_timeout, settings.read_timeout) == (2, 2)

    pid = os.fork()
    if pid == 0:  # a child process reads through a client of its own, from the patch
        code = 1
        try:
            before = len(recorded)
            numpy.testing.assert_array_equal(remote[3], local[3])
            code = 0 if len(recorded) == before + 1 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(recorded) == 1  # the parent's client is untouched


def test_the_default_session_follows_changed_credentials(s3, tmp_path, monkeypatch, recorded):
    import boto3

    pool, config = ClientPool(), storage_config(tmp_path)
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "first-key")
    pool.s3(config)
    assert boto3.DEFAULT_SESSION.get_credentials().access_key == "first-key"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "second-key")
    pool.s3(config)  # a new client, and boto3's default session no longer has the old key
    assert boto3.DEFAULT_SESSION.get_credentials().access_key == "second-key"
    assert len(recorded) == 2 and len(pool) == 2
    mine = boto3.session.Session()
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", mine)  # the user's own session
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "third-key")
    pool.s3(config)
    assert boto3.DEFAULT_SESSION is mine  # left alone
