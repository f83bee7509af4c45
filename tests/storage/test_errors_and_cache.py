"""Clear errors naming the URL, and the ``.idx`` cache: reused when fresh, replaced
when the object changed, written atomically."""

from __future__ import annotations

import json
import os

import pytest
from tests.storage.storage_helpers import BUCKET, storage_config

from tokenloom.errors import FormatError, ObjectNotFoundError, StorageAccessError
from tokenloom.storage import ObjectBinReader, fetch_index, index_cache_path, open_remote_dataset

pytestmark = pytest.mark.s3


@pytest.mark.parametrize("scheme", ["s3", "msc"])
def test_missing_idx_and_missing_bin(s3, tmp_path, scheme):
    client = s3.client()
    client.upload_file(s3.local["small"] + ".bin", BUCKET, "half/only-bin.bin")
    client.upload_file(s3.local["small"] + ".idx", BUCKET, "half/only-idx.idx")
    base = f"s3://{BUCKET}/half" if scheme == "s3" else "msc://loom/half"
    config = storage_config(tmp_path)
    with pytest.raises(ObjectNotFoundError, match=rf"{base}/only-bin\.idx: the index"):
        open_remote_dataset(f"{base}/only-bin", config)
    with pytest.raises(ObjectNotFoundError, match=rf"{base}/only-idx\.bin: the data file"):
        open_remote_dataset(f"{base}/only-idx", config)


def test_wrong_bucket_is_named(s3, tmp_path):
    with pytest.raises(
        ObjectNotFoundError,
        match=r"s3://no-such-bucket/x\.bin: bucket "
        r"'no-such-bucket' does not exist",
    ):
        ObjectBinReader("s3://no-such-bucket/x.bin", storage_config(tmp_path))


def test_missing_msc_profile_is_named(s3, tmp_path):
    with pytest.raises(ObjectNotFoundError, match="msc://nope/x.bin.*MSC_CONFIG"):
        ObjectBinReader("msc://nope/x.bin", storage_config(tmp_path))


def test_bad_credentials(s3, tmp_path):
    """moto's real authentication: keys that do not exist in its IAM are refused."""
    from moto import settings

    saved = settings.INITIAL_NO_AUTH_ACTION_COUNT
    settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
    try:
        with pytest.raises(
            StorageAccessError,
            match=r"s3://loom-data/corpora/small\.bin: HEAD "
            r"was refused .*credentials",
        ):
            ObjectBinReader(s3.remote["small"] + ".bin", storage_config(tmp_path))
    finally:
        settings.INITIAL_NO_AUTH_ACTION_COUNT = saved


def test_forbidden_answer_from_the_wire(s3, tmp_path):
    s3.proxy.inject(["403"])
    with pytest.raises(StorageAccessError, match="small.bin"):
        ObjectBinReader(
            s3.remote["small"] + ".bin", storage_config(tmp_path, endpoint_url=s3.proxy.url)
        )
    assert len(s3.proxy.requests()) == 1  # a refusal is not retried


def test_truncated_object_is_a_format_error_naming_the_url(s3, tmp_path):
    from tokenloom.format import IndexedDataset

    data = open(s3.local["small"] + ".bin", "rb").read()
    client = s3.client()
    client.put_object(Bucket=BUCKET, Key="cut/small.bin", Body=data[: len(data) // 2])
    client.upload_file(s3.local["small"] + ".idx", BUCKET, "cut/small.idx")
    with pytest.raises(
        FormatError,
        match=rf"s3://{BUCKET}/cut/small\.bin: data file is "
        r"\d+ bytes.*truncated",
    ):
        IndexedDataset(
            f"s3://{BUCKET}/cut/small", mmap=False, object_storage_config=storage_config(tmp_path)
        )


def test_idx_cache_reused_when_fresh_and_refreshed_when_replaced(s3, tmp_path):
    config = storage_config(tmp_path, endpoint_url=s3.proxy.url)
    client = s3.client()
    client.upload_file(s3.local["small"] + ".idx", BUCKET, "fresh/d.idx")
    url = f"s3://{BUCKET}/fresh/d.idx"
    local = fetch_index(url, config)
    assert local == index_cache_path(url, config.path_to_idx_cache)
    assert local == str(tmp_path / "idx-cache" / BUCKET / "fresh" / "d.idx")
    s3.proxy.clear()
    assert fetch_index(url, config) == local
    assert [r[0] for r in s3.proxy.requests()] == ["HEAD"]  # no second download
    client.upload_file(s3.local["other"] + ".idx", BUCKET, "fresh/d.idx")  # new ETag
    fetch_index(url, config)
    assert open(local, "rb").read() == open(s3.local["other"] + ".idx", "rb").read()
    record = json.loads(open(local + ".etag.json").read())
    assert record["size"] == os.path.getsize(local)


def test_damaged_cache_copy_is_downloaded_again(s3, tmp_path):
    config = storage_config(tmp_path)
    url = s3.remote["small"] + ".idx"
    local = fetch_index(url, config)
    with open(local, "r+b") as handle:
        handle.truncate(10)  # a copy whose size no longer matches its record
    fetch_index(url, config)
    assert open(local, "rb").read() == open(s3.local["small"] + ".idx", "rb").read()
    os.unlink(local + ".etag.json")  # a copy without a record is not trusted
    os.truncate(local, 5)
    fetch_index(url, config)
    assert os.path.getsize(local) == os.path.getsize(s3.local["small"] + ".idx")
