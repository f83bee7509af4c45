"""The provenance sidecar PREFIX.json: its content, that it leaves the pair's bytes alone,
that it is published with the pair, and that everything works without one."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy
import pytest
from tests.provenance.provenance_helpers import build, write_jsonl

from tokenloom.errors import FormatError, PreprocessError
from tokenloom.format import IndexedDataset, IndexedDatasetBuilder, read_index_header
from tokenloom.preprocess import preprocess
from tokenloom.provenance import (
    FORMAT,
    read_sidecar,
    read_sidecars,
    sidecar_path,
    stale_problems,
    tool_version,
)
from tokenloom.tokenizers import load_tokenizer
from tokenloom.tokenizers.base import file_sha256


def _sha256(path: str) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_sidecar_records_tokenizer_settings_inputs_counts(hf_prefix, hf_path):
    record = json.loads(open(sidecar_path(hf_prefix), encoding="utf-8").read())
    tokenizer = load_tokenizer(f"hf:{hf_path}")
    assert record["format"] == FORMAT
    assert record["tool"] == {"name": "tokenloom", "version": tool_version()}
    identity = record["tokenizer"]
    assert identity["kind"] == "HFTokenizer" and identity["files"] == [os.path.abspath(hf_path)]
    assert identity["sha256"] == file_sha256(hf_path)
    assert identity["vocab_size"] == tokenizer.vocab_size == 600
    assert identity["special_tokens"]["<|endoftext|>"] == tokenizer.eod
    settings = record["settings"]
    assert settings["append_eod"] is True and settings["eod_id"] == tokenizer.eod
    assert settings["add_special_tokens"] is True and settings["json_key"] == "text"
    assert settings["level"] == "document" and settings["dtype"] == "uint16"
    [source] = record["inputs"]
    assert source["kind"] == "file" and source["path"].endswith("out.jsonl")
    assert source["bytes"] == os.path.getsize(source["path"])
    assert source["sha256"] == _sha256(source["path"])
    header = read_index_header(hf_prefix + ".idx")
    counts = record["counts"]
    assert (
        counts["documents"] == header.num_documents and counts["sequences"] == header.sequence_count
    )
    with IndexedDataset(hf_prefix) as dataset:
        assert counts["tokens"] == int(dataset.sequence_lengths.sum())
    assert counts["bin_bytes"] == os.path.getsize(hf_prefix + ".bin") == 2 * counts["tokens"]
    assert stale_problems(hf_prefix, record) == []


def test_every_key_gets_its_own_sidecar(tmp_path, real_texts, sentencepiece_path):
    path = write_jsonl(tmp_path / "in.jsonl", real_texts[:6])
    summary = preprocess(
        str(path),
        str(tmp_path / "o"),
        f"sentencepiece:{sentencepiece_path}",
        json_keys=("text", "title"),
        partitions=2,
        show_progress=False,
    )
    for key in ("text", "title"):
        record = read_sidecar(str(tmp_path / f"o_{key}_document"))
        assert record["settings"]["json_key"] == key and record["settings"]["partitions"] == 2
        assert record["settings"]["append_eod"] is False and record["settings"]["eod_id"] is None
        assert record["tokenizer"]["kind"] == "SentencePieceTokenizer"
        assert record["tokenizer"]["add_bos"] is False
        assert record["settings"]["add_special_tokens"] is False
        assert record["counts"]["tokens"] == summary.outputs[key].tokens > 0
    assert not [name for name in os.listdir(tmp_path) if "partition" in name]


def test_records_from_python_have_no_path(tmp_path, real_texts, hf_path):
    preprocess(iter(real_texts[:3]), str(tmp_path / "py"), f"hf:{hf_path}", show_progress=False)
    record = read_sidecar(str(tmp_path / "py_text_document"))
    assert record["inputs"] == [{"kind": "iterable", "type": "list_iterator"}]
    assert record["counts"]["documents"] == 3


def test_failed_run_publishes_no_sidecar(tmp_path, hf_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "fine"}\n{"text": \n', encoding="utf-8")
    with pytest.raises(PreprocessError):
        preprocess(str(path), str(tmp_path / "bad"), f"hf:{hf_path}", show_progress=False)
    assert not [name for name in os.listdir(tmp_path) if name.startswith("bad_")]


def test_a_second_run_replaces_pair_and_sidecar_together(tmp_path, real_texts, hf_path):
    prefix = build(tmp_path, real_texts[:2], f"hf:{hf_path}")
    assert read_sidecar(prefix)["counts"]["documents"] == 2
    build(tmp_path, real_texts[:5], f"hf:{hf_path}")
    record = read_sidecar(prefix)
    assert record["counts"]["documents"] == 5 and stale_problems(prefix, record) == []


def test_pairs_without_sidecar_read_as_none(tmp_path):
    builder = IndexedDatasetBuilder(str(tmp_path / "m.bin"), dtype=numpy.uint16)
    builder.add_document(numpy.array([1, 2, 3]), [3])
    builder.finalize(str(tmp_path / "m.idx"))
    assert read_sidecar(str(tmp_path / "m")) is None
    assert read_sidecars([str(tmp_path / "m")]) == ([(str(tmp_path / "m"), None)], [])
    with IndexedDataset(str(tmp_path / "m")) as dataset:  # and the pair reads as always
        assert dataset[0].tolist() == [1, 2, 3]


def test_broken_or_foreign_sidecar_is_a_clear_error(tmp_path, hf_prefix):
    prefix = str(tmp_path / "copy")
    for suffix in (".bin", ".idx"):
        shutil.copy(hf_prefix + suffix, prefix + suffix)
    with open(sidecar_path(prefix), "w") as handle:
        handle.write("{not json")
    with pytest.raises(FormatError, match=r"copy\.json: provenance sidecar is not valid JSON"):
        read_sidecar(prefix)
    with open(sidecar_path(prefix), "w") as handle:
        json.dump({"name": "something else"}, handle)
    with pytest.raises(FormatError, match="not a tokenloom provenance sidecar"):
        read_sidecar(prefix)


def test_stale_sidecar_is_noticed(tmp_path, hf_prefix):
    prefix = str(tmp_path / "copy")
    for suffix in (".bin", ".idx", ".json"):
        shutil.copy(hf_prefix + suffix, prefix + suffix)
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=numpy.uint16)  # another tool's pair
    builder.add_document(numpy.array([1, 2, 3]), [3])
    builder.finalize(prefix + ".idx")
    problems = stale_problems(prefix, read_sidecar(prefix))
    assert any(
        "records documents" in problem and "the pair has 1" in problem for problem in problems
    )
    [(_, record)], notes = read_sidecars([prefix])
    assert record is None and notes and "stale sidecar ignored" in notes[0]


PREPROCESS_GOLDEN = (
    Path(__file__).resolve().parents[2] / ".." / "shared" / "golden" / "megatron-preprocess"
).resolve()


@pytest.mark.skipif(
    not (PREPROCESS_GOLDEN / "manifest.json").is_file(),
    reason=f"Megatron preprocess golden set not found at {PREPROCESS_GOLDEN}",
)
def test_pair_stays_megatrons_bytes_with_the_sidecar(tmp_path):
    """Megatron's case_01 (HF tokenizer whose post-processor adds <s>): the same bytes,
    and a sidecar whose counts agree with Megatron's output."""
    root = PREPROCESS_GOLDEN
    manifest = json.loads((root / "manifest.json").read_text())
    case = next(case for case in manifest["cases"] if case["id"] == "case_01")
    tokenizer = load_tokenizer(f"hf:{root / 'tokenizers' / 'hf_bos'}", add_special_tokens=True)
    preprocess(
        str(root / case["input"]),
        str(tmp_path / "case"),
        tokenizer,
        json_keys=case["json_keys"],
        append_eod=case["append_eod"],
        show_progress=False,
    )
    expected = case["outputs"]["text"]
    prefix = str(tmp_path / "case_text_document")
    assert _sha256(prefix + ".bin") == expected["bin_sha256"]
    assert _sha256(prefix + ".idx") == expected["idx_sha256"]
    record = read_sidecar(prefix)
    assert record["counts"]["documents"] == expected["documents"]
    assert record["counts"]["tokens"] == expected["tokens"]
    assert record["tokenizer"]["special_tokens"].get("<s>") == 1
    assert record["inputs"][0]["sha256"] == _sha256(str(root / case["input"]))


def test_inputs_of_other_containers(tmp_path, real_texts, hf_path):
    """A byte range of a file, a dataset saved to disk and an in-memory HF dataset."""
    from tokenloom.preprocess import FileRange, HFDiskDataset

    path = write_jsonl(tmp_path / "in.jsonl", real_texts[:4])
    size = os.path.getsize(path)
    preprocess(
        FileRange(str(path), 0, size // 2),
        str(tmp_path / "r"),
        f"hf:{hf_path}",
        show_progress=False,
    )
    [entry] = read_sidecar(str(tmp_path / "r_text_document"))["inputs"]
    assert entry["kind"] == "file_range" and (entry["start"], entry["stop"]) == (0, size // 2)
    assert entry["sha256"] == hashlib.sha256(path.read_bytes()[: size // 2]).hexdigest()
    datasets = pytest.importorskip("datasets")
    dataset = datasets.Dataset.from_dict({"text": real_texts[:4]})
    dataset.save_to_disk(str(tmp_path / "saved"))
    preprocess(
        HFDiskDataset(str(tmp_path / "saved")),
        str(tmp_path / "d"),
        f"hf:{hf_path}",
        show_progress=False,
    )
    [entry] = read_sidecar(str(tmp_path / "d_text_document"))["inputs"]
    assert entry["kind"] == "hf_disk_dataset" and entry["bytes"] > 0 and len(entry["sha256"]) == 64
    loaded = datasets.load_from_disk(str(tmp_path / "saved"))
    preprocess(loaded, str(tmp_path / "m"), f"hf:{hf_path}", show_progress=False)
    entries = read_sidecar(str(tmp_path / "m_text_document"))["inputs"]
    assert entries and all(
        e["kind"] == "hf_dataset_file" and e["path"].endswith(".arrow") for e in entries
    )
