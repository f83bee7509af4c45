"""Outputs written to s3://: finalized locally, then uploaded .bin before .idx; a failed
run uploads nothing and leaves no staging folder behind."""

from __future__ import annotations

import os

import numpy
import pytest
from tests.storage.storage_helpers import BUCKET, storage_config

from tokenloom.format import IndexedDataset, IndexedDatasetBuilder
from tokenloom.storage import dataset_exists
from tokenloom.storage.staging import staged_output

pytestmark = pytest.mark.s3


def _write_pair(prefix: str, seed: int) -> None:
    rng = numpy.random.default_rng(seed)
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=numpy.uint16)
    for _ in range(30):
        builder.add_item(rng.integers(0, 1000, int(rng.integers(1, 50))))
        builder.end_document()
    builder.finalize(prefix + ".idx")


def test_staged_output_uploads_every_pair_bin_first(s3, tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENLOOM_STAGING_DIR", str(tmp_path / "staging"))
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.proxy.url)
    target = f"s3://{BUCKET}/out/run1/web"
    with staged_output(target) as local:
        assert not local.startswith("s3://")
        for key in ("text", "title"):
            _write_pair(f"{local}_{key}_document", seed=len(key))
            kept = f"{local}_{key}_document"
        copies = {k: open(f"{local}_{k}_document.bin", "rb").read() for k in ("text", "title")}
    assert os.listdir(tmp_path / "staging") == []  # staging folder removed
    for key in ("text", "title"):
        assert dataset_exists(f"{target}_{key}_document")
        body = s3.client().get_object(Bucket=BUCKET, Key=f"out/run1/web_{key}_document.bin")
        assert body["Body"].read() == copies[key]
    puts = [r[1] for r in s3.proxy.requests("PUT") if "/out/run1/" in r[1]]
    for key in ("text", "title"):
        names = [p.rsplit("/", 1)[-1] for p in puts if f"_{key}_" in p]
        assert names == [f"web_{key}_document.bin", f"web_{key}_document.idx"]
    assert not os.path.exists(kept + ".bin")


def test_failed_run_uploads_nothing(s3, tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENLOOM_STAGING_DIR", str(tmp_path / "staging"))
    target = f"s3://{BUCKET}/out/failed/web"
    with pytest.raises(RuntimeError, match="tokenizer crashed"):
        with staged_output(target) as local:
            _write_pair(f"{local}_text_document", seed=1)
            raise RuntimeError("tokenizer crashed")
    listed = s3.client().list_objects_v2(Bucket=BUCKET, Prefix="out/failed/")
    assert listed.get("KeyCount", 0) == 0
    assert os.listdir(tmp_path / "staging") == []


def test_local_output_prefix_is_untouched(tmp_path):
    with staged_output(str(tmp_path / "local")) as local:
        assert local == str(tmp_path / "local")


def test_uploaded_pair_reads_back_through_indexed_dataset(s3, tmp_path):
    target = f"s3://{BUCKET}/out/roundtrip/c"
    with staged_output(target) as local:
        _write_pair(local, seed=9)
        expected = [IndexedDataset(local)[i].copy() for i in range(30)]
    remote = IndexedDataset(target, mmap=False, object_storage_config=storage_config(tmp_path))
    for i, tokens in enumerate(expected):
        numpy.testing.assert_array_equal(remote[i], tokens)


@pytest.mark.parametrize("scheme", ["s3", "msc"])
def test_preprocess_to_a_bucket_leaves_only_the_pair_and_its_sidecar(s3, tmp_path, scheme):
    from tests.storage.storage_helpers import MSC_PROFILE

    from tokenloom.preprocess import preprocess

    (tmp_path / "in.jsonl").write_text("".join(f'{{"text": "doc {i}"}}\n' for i in range(9)))
    root = f"s3://{BUCKET}" if scheme == "s3" else f"msc://{MSC_PROFILE}"
    with staged_output(f"{root}/out/only-{scheme}/web") as local:
        preprocess(str(tmp_path / "in.jsonl"), local, "bytes", show_progress=False)
        staged = sorted(os.listdir(os.path.dirname(local)))
    listed = s3.client().list_objects_v2(Bucket=BUCKET, Prefix=f"out/only-{scheme}/")
    names = sorted(item["Key"].rsplit("/", 1)[-1] for item in listed.get("Contents", []))
    published = [f"web_text_document{ext}" for ext in (".bin", ".idx", ".json")]
    assert staged == published  # the local publish left no lock file or journal
    assert names == published  # and no lock object reached the bucket
