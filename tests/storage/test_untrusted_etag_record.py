"""A crafted ``.etag.json`` record of the ``.idx`` cache (issue 18, classes 5 and 6):
nested 100,000 levels deep, a FIFO, a sparse 1 TiB file or a symlink to /dev/zero, it is
no record, and the ``.idx`` is downloaded again (over the real loopback S3 server);
never a RecursionError, a hang or an unbounded read."""

from __future__ import annotations

import json
import os

import pytest
from tests.storage.storage_helpers import storage_config
from tests.support.untrusted_files import plant, run_bounded

from tokenloom.storage import fetch_index

pytestmark = [pytest.mark.s3, pytest.mark.timeout(120)]


def _requests(s3) -> list[str]:
    return [request[0] for request in s3.proxy.requests()]


@pytest.mark.parametrize("kind", ["deep", "deep_closed", "fifo", "huge"])
def test_crafted_record_means_download_again(s3, tmp_path, kind):
    config = storage_config(tmp_path, endpoint_url=s3.proxy.url)
    url = s3.remote["small"] + ".idx"
    local = fetch_index(url, config)
    record = local + ".etag.json"
    if kind == "fifo":
        os.unlink(record)
        os.mkfifo(record)
    else:
        plant(record, kind)
    s3.proxy.clear()
    assert fetch_index(url, config) == local
    assert "GET" in _requests(s3)  # downloaded again, not trusted
    assert open(local, "rb").read() == open(s3.local["small"] + ".idx", "rb").read()
    assert json.loads(open(record).read())["size"] == os.path.getsize(local)  # rewritten


def test_record_symlinked_to_dev_zero_is_not_read(s3, tmp_path):
    url = s3.remote["small"] + ".idx"
    local = fetch_index(url, storage_config(tmp_path))
    plant(local + ".etag.json", "zero")
    code = (
        "import sys; from pathlib import Path; "
        "from tests.storage.storage_helpers import storage_config; "
        "from tokenloom.storage import fetch_index; "
        "print(fetch_index(sys.argv[1], storage_config(Path(sys.argv[2]))))"
    )
    done = run_bounded(["-c", code, url, str(tmp_path)], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == local
    assert not os.path.islink(local + ".etag.json")  # replaced by a real record
