"""``tokenloom preprocess`` and ``inspect`` with object storage, as a new user tries them.

Inputs read from ``s3://`` / ``msc://`` (JSONL plain and compressed, Parquet) give the
bytes Megatron-LM wrote for the same corpus from a local file (golden ``case_05``); the
summary names the published ``s3://`` prefixes, not the local staging folder; and
``inspect s3://...`` shows the provenance sidecar that preprocess uploaded, read
bounded (a sidecar too large or too deep is reported, never read whole).
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
from pathlib import Path

import pytest
from tests.storage.storage_helpers import BUCKET, MSC_PROFILE

from tokenloom.cli.main import main

pytestmark = pytest.mark.s3

GOLDEN = (
    Path(__file__).resolve().parents[2] / ".." / "shared" / "golden" / "megatron-preprocess"
).resolve()
requires_golden = pytest.mark.skipif(
    not (GOLDEN / "manifest.json").is_file(), reason=f"golden preprocess set not at {GOLDEN}"
)
CORPUS = GOLDEN / "inputs" / "corpus.jsonl"
HF_BOS = GOLDEN / "tokenizers" / "hf_bos"
# case_05: HuggingFaceTokenizer hf_bos, --json-keys text, --append-eod, --workers 1
MEGATRON_FLAGS = ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(HF_BOS)]


def _compressed(data: bytes, kind: str) -> bytes:
    if kind == "gz":
        return gzip.compress(data)
    if kind == "zst":
        zstandard = pytest.importorskip("zstandard")
        return zstandard.ZstdCompressor().compress(data)
    if kind == "bz2":
        return bz2.compress(data)
    if kind == "xz":
        return lzma.compress(data)
    return data


def _parquet(tmp_path: Path) -> bytes:
    pa = pytest.importorskip("pyarrow")
    parquet = pytest.importorskip("pyarrow.parquet")
    rows = [json.loads(line) for line in CORPUS.read_text("utf-8").splitlines()]
    path = tmp_path / "corpus.parquet"
    parquet.write_table(
        pa.table({"text": [row["text"] for row in rows]}), str(path), row_group_size=50
    )
    return path.read_bytes()


def _preprocess(capsys, *flags: str) -> tuple[int, list[str], str]:
    capsys.readouterr()
    code = main(["preprocess", *flags, "--no-progress"])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def _same_as_golden(local: Path) -> None:
    for ext in ("bin", "idx"):
        ours = local.with_name(local.name + f".{ext}").read_bytes()
        theirs = (GOLDEN / "outputs" / f"case_05_text_document.{ext}").read_bytes()
        assert ours == theirs, f".{ext} differs from Megatron's case_05"


@requires_golden
@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["jsonl", "gz", "zst", "bz2", "xz", "parquet", "msc"])
def test_inputs_in_object_storage_give_megatrons_bytes(s3, tmp_path, capsys, kind):
    if kind == "parquet":
        data, name = _parquet(tmp_path), "corpus.parquet"
    else:
        suffix = "" if kind in ("jsonl", "msc") else f".{kind}"
        data, name = _compressed(CORPUS.read_bytes(), kind), f"corpus.jsonl{suffix}"
    key = f"inputs/{kind}/{name}"
    s3.client().put_object(Bucket=BUCKET, Key=key, Body=data)
    url = f"msc://{MSC_PROFILE}/{key}" if kind == "msc" else f"s3://{BUCKET}/{key}"
    out = tmp_path / "out" / "c"
    flags = ["--input", url, "--output-prefix", str(out), *MEGATRON_FLAGS, "--append-eod"]
    code, lines, err = _preprocess(capsys, *flags)
    assert code == 0, err
    _same_as_golden(tmp_path / "out" / "c_text_document")
    assert lines[-1].startswith("done: 206 documents, 21,310 tokens from 206 ")
    sidecar = json.loads((tmp_path / "out" / "c_text_document.json").read_text())
    (record,) = sidecar["inputs"]
    assert record["kind"] == "object" and record["path"] == url
    assert record["bytes"] == len(data) and record["etag"]


@pytest.mark.timeout(60)
def test_a_missing_input_object_names_the_flag_and_the_url(s3, tmp_path, capsys):
    url = f"s3://{BUCKET}/inputs/nothing-here.jsonl"
    code, _, err = _preprocess(
        capsys, "--input", url, "--output-prefix", str(tmp_path / "o"), "--tokenizer", "bytes"
    )
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert f"--input '{url}': no such object" in err
    assert not list(tmp_path.iterdir())


@pytest.mark.timeout(60)
def test_a_glob_in_object_storage_is_refused_with_how_to_name_objects(s3, tmp_path, capsys):
    url = f"s3://{BUCKET}/inputs/*.jsonl"
    code, _, err = _preprocess(
        capsys, "--input", url, "--output-prefix", str(tmp_path / "o"), "--tokenizer", "bytes"
    )
    assert code == 1
    assert "globs are not expanded in object storage" in err and url in err


@requires_golden
@pytest.mark.timeout(120)
def test_remote_output_prints_the_published_prefixes(s3, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TOKENLOOM_STAGING_DIR", str(tmp_path / "staging"))
    prefix = f"s3://{BUCKET}/published/c"
    code, lines, err = _preprocess(
        capsys, "--input", str(CORPUS), "--output-prefix", prefix, *MEGATRON_FLAGS
    )
    assert code == 0, err
    rows = [line.split()[0] for line in lines[1:-2]]
    assert rows == [f"{prefix}_text_document"], lines
    assert not any("tokenloom-staging" in line for line in lines)
    listed = s3.client().list_objects_v2(Bucket=BUCKET, Prefix="published/")
    keys = sorted(item["Key"] for item in listed["Contents"])
    assert keys == [f"published/c_text_document.{ext}" for ext in ("bin", "idx", "json")]


def _uploaded(s3, tmp_path, capsys, name: str) -> str:
    prefix = f"s3://{BUCKET}/inspected/{name}"
    code, _, err = _preprocess(
        capsys, "--input", str(CORPUS), "--output-prefix", prefix, *MEGATRON_FLAGS
    )
    assert code == 0, err
    return f"{prefix}_text_document"


@requires_golden
@pytest.mark.timeout(120)
def test_inspect_shows_the_sidecar_that_preprocess_uploaded(s3, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TOKENLOOM_STAGING_DIR", str(tmp_path / "staging"))
    monkeypatch.setenv("TOKENLOOM_IDX_CACHE", str(tmp_path / "idx"))
    remote = _uploaded(s3, tmp_path, capsys, "c")
    for prefix in (remote, remote.replace(f"s3://{BUCKET}/", f"msc://{MSC_PROFILE}/")):
        assert main(["inspect", prefix]) == 0
        out = capsys.readouterr().out
        assert f"provenance: {prefix}.json (tokenloom " in out, out
        assert "none (" not in out and "warning" not in out
        assert "counts:     206 documents, 206 sequences, 21,104 tokens" in out
        assert main(["inspect", prefix, "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["provenance"]["counts"]["documents"] == 206
        assert report["provenance_notes"] == [] and report["provenance_error"] is None


@requires_golden
@pytest.mark.timeout(120)
def test_inspect_reports_a_remote_sidecar_that_is_stale_or_hostile(
    s3, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("TOKENLOOM_STAGING_DIR", str(tmp_path / "staging"))
    monkeypatch.setenv("TOKENLOOM_IDX_CACHE", str(tmp_path / "idx"))
    remote = _uploaded(s3, tmp_path, capsys, "h")
    key = remote.removeprefix(f"s3://{BUCKET}/") + ".json"
    record = json.loads(s3.client().get_object(Bucket=BUCKET, Key=key)["Body"].read())
    record["counts"]["documents"] = 7
    s3.client().put_object(Bucket=BUCKET, Key=key, Body=json.dumps(record).encode())
    assert main(["inspect", remote]) == 0
    out = capsys.readouterr().out
    assert f"warning: stale sidecar: {remote}.json records documents 7 but the pair has 206" in out
    s3.client().put_object(Bucket=BUCKET, Key=key, Body=b"[" * 5000)
    assert main(["inspect", remote]) == 0
    out = capsys.readouterr().out
    assert (
        f"provenance: {remote}.json present but unreadable (provenance sidecar nests 5000 levels deep"
        in out
    )


@pytest.mark.timeout(60)
def test_a_small_object_over_the_cap_is_refused_from_its_head(s3, tmp_path):
    from tokenloom.errors import UntrustedFileError
    from tokenloom.storage.object_file import read_object_at_most

    s3.client().put_object(Bucket=BUCKET, Key="caps/big.json", Body=b"x" * 5000)
    url = f"s3://{BUCKET}/caps/big.json"
    assert read_object_at_most(url, 5000, what="provenance sidecar") == b"x" * 5000
    with pytest.raises(UntrustedFileError, match="larger than the limit of 4999 bytes") as caught:
        read_object_at_most(url, 4999, what="provenance sidecar")
    assert url in str(caught.value) and "provenance sidecar" in str(caught.value)


@pytest.mark.timeout(60)
def test_ray_refuses_object_inputs_before_starting_a_cluster(s3, tmp_path, capsys):
    url = f"s3://{BUCKET}/inputs/anything.jsonl"
    code, _, err = _preprocess(
        capsys,
        "--engine",
        "ray",
        "--input",
        url,
        "--output-prefix",
        str(tmp_path / "o"),
        "--tokenizer",
        "bytes",
    )
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert f"--input {url}: --engine ray reads files" in err
    assert "drop --engine ray" in err and "aws s3 cp" in err


@pytest.mark.timeout(60)
def test_ray_no_merge_to_object_storage_is_refused(s3, tmp_path, capsys):
    code, _, err = _preprocess(
        capsys,
        "--engine",
        "ray",
        "--no-merge",
        "--input",
        str(tmp_path / "x.jsonl"),
        "--output-prefix",
        f"s3://{BUCKET}/nomerge/c",
        "--tokenizer",
        "bytes",
    )
    assert code == 1 and "--no-merge keeps the shards" in err


@pytest.mark.timeout(60)
def test_an_object_replaced_while_it_is_read_stops_the_read(s3):
    from tokenloom.errors import StorageError
    from tokenloom.storage.object_file import open_object_file

    s3.client().put_object(Bucket=BUCKET, Key="inputs/moving.jsonl", Body=b'{"text": "a"}\n' * 64)
    handle = open_object_file(f"s3://{BUCKET}/inputs/moving.jsonl", buffered=False)
    assert handle.read(14) == b'{"text": "a"}\n' and handle.tell() == 14
    s3.client().put_object(Bucket=BUCKET, Key="inputs/moving.jsonl", Body=b'{"text": "b"}\n' * 64)
    with pytest.raises(StorageError) as caught:
        handle.read(14)
    assert "inputs/moving.jsonl: the object was replaced while it was being read" in str(
        caught.value
    )
    handle.seek(-14, 2)
    assert handle.tell() == 14 * 63
