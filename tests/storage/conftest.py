"""Fixtures of the object-storage tests: a real S3 server (moto, server mode) on
loopback, a fault-injecting proxy in front of it, an isolated AWS environment, an
MSC config with profiles for both, and small real datasets uploaded to a bucket."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy
import pytest
from tests.storage.fault_proxy import FaultProxy
from tests.storage.storage_helpers import BUCKET, MSC_PROFILE, MSC_PROXY_PROFILE

_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "AWS_EC2_METADATA_DISABLED": "true",
}
_DROP = (
    "AWS_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ENDPOINT_URL_S3",
    "AWS_DEFAULT_PROFILE",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
)


@dataclass
class S3Env:
    """The running loopback endpoint and what was put there."""

    endpoint: str
    port: int
    proxy: FaultProxy
    tmp: Path
    local: dict[str, str]  # name -> local prefix
    remote: dict[str, str]  # name -> s3:// prefix

    def msc(self, name: str, proxy: bool = False) -> str:
        profile = MSC_PROXY_PROFILE if proxy else MSC_PROFILE
        return self.remote[name].replace(f"s3://{BUCKET}/", f"msc://{profile}/")

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint)


def _write(prefix: Path, documents: int, seed: int, dtype=numpy.uint16) -> str:
    from tokenloom.format import IndexedDatasetBuilder

    rng = numpy.random.default_rng(seed)
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
    for _ in range(documents):
        for _ in range(int(rng.integers(1, 3))):
            builder.add_item(rng.integers(0, 30000, int(rng.integers(0, 400))).astype(dtype))
        builder.end_document()
    builder.finalize(f"{prefix}.idx")
    return str(prefix)


def _msc_config(path: Path, endpoint: str, proxy_url: str) -> None:
    def profile(url: str) -> dict:
        return {
            "storage_provider": {
                "type": "s3",
                "options": {
                    "base_path": BUCKET,
                    "endpoint_url": url,
                    "region_name": "us-east-1",
                    # botocore's own retries off: the tests count tokenloom's
                    "retries": {"total_max_attempts": 1},
                    "read_timeout": 2,
                    "connect_timeout": 2,
                },
            },
            "retry": {"attempts": 1, "delay": 0.0},
        }

    path.write_text(
        json.dumps(
            {"profiles": {MSC_PROFILE: profile(endpoint), MSC_PROXY_PROFILE: profile(proxy_url)}}
        )
    )


@pytest.fixture(scope="session")
def s3env(tmp_path_factory) -> Iterator[S3Env]:
    pytest.importorskip("boto3")
    moto_server = pytest.importorskip("moto.server")
    saved = {k: os.environ.get(k) for k in (*_ENV, *_DROP, "AWS_ENDPOINT_URL", "MSC_CONFIG")}
    os.environ.update(_ENV)
    for name in _DROP:
        os.environ.pop(name, None)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    proxy = None
    try:
        port = server.get_host_and_port()[1]
        endpoint = f"http://127.0.0.1:{port}"
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        proxy = FaultProxy(port).start()
        tmp = tmp_path_factory.mktemp("s3env")
        _msc_config(tmp / "msc.json", endpoint, proxy.url)
        os.environ["MSC_CONFIG"] = str(tmp / "msc.json")
        env = S3Env(endpoint, port, proxy, tmp, {}, {})
        _populate(env)
        yield env
    finally:
        if proxy is not None:
            proxy.stop()
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _populate(env: S3Env) -> None:
    client = env.client()
    client.create_bucket(Bucket=BUCKET)
    (env.tmp / "local").mkdir()
    for name, documents, seed, dtype in (
        ("small", 120, 1, numpy.uint16),
        ("other", 80, 2, numpy.uint16),
        ("wide", 60, 3, numpy.int32),
    ):
        prefix = _write(env.tmp / "local" / name, documents, seed, dtype)
        key = f"corpora/{name}"
        for suffix in (".bin", ".idx"):
            client.upload_file(prefix + suffix, BUCKET, key + suffix)
        env.local[name] = prefix
        env.remote[name] = f"s3://{BUCKET}/{key}"


@pytest.fixture
def s3(s3env: S3Env) -> Iterator[S3Env]:
    """The session endpoint, with the proxy's plan and log cleared around each test."""
    s3env.proxy.clear()
    yield s3env
    s3env.proxy.clear()
