"""Completion markers, merging and prefix lists (no Ray needed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy
import pytest

from tokenloom.errors import PreprocessError
from tokenloom.format import IndexedDataset, IndexedDatasetBuilder
from tokenloom.preprocess.ray_engine.markers import (
    file_checksum,
    marker_path,
    reusable_marker,
    settings_fingerprint,
    write_marker,
)
from tokenloom.preprocess.ray_engine.merge import merge_shards, read_prefix_list, write_prefix_list
from tokenloom.preprocess.ray_engine.plan import plan_shards
from tokenloom.preprocess.records import Policy


def _pair(prefix: Path, docs: list, dtype=numpy.uint16) -> str:
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
    for doc in docs:
        if doc:
            builder.add_item(numpy.array(doc, dtype=dtype))
        builder.end_document()
    builder.finalize(f"{prefix}.idx")
    return str(prefix)


def test_merge_equals_one_builder_with_empty_documents_and_empty_shards(tmp_path: Path) -> None:
    shards = [[[1, 2], [], [3]], [], [[4, 5, 6]], [[], []], [[7]]]
    prefixes = [_pair(tmp_path / f"s{i}", docs) for i, docs in enumerate(shards)]
    stats = merge_shards(prefixes, str(tmp_path / "merged"))
    _pair(tmp_path / "whole", [doc for docs in shards for doc in docs])
    for ext in (".bin", ".idx"):
        assert (tmp_path / f"merged{ext}").read_bytes() == (tmp_path / f"whole{ext}").read_bytes()
    assert stats.nbytes == 7 * 2


def test_merge_refuses_mixed_dtypes(tmp_path: Path) -> None:
    a = _pair(tmp_path / "a", [[1]])
    b = _pair(tmp_path / "b", [[1]], dtype=numpy.int32)
    with pytest.raises(ValueError, match="cannot merge"):
        merge_shards([a, b], str(tmp_path / "m"))
    assert not (tmp_path / "m.bin").exists() and not (tmp_path / "m.idx").exists()


def test_prefix_list_round_trip_and_errors(tmp_path: Path) -> None:
    prefixes = [_pair(tmp_path / f"s{i}", [[i] * (i + 1)]) for i in range(3)]
    path = write_prefix_list(str(tmp_path / "out_text_document"), prefixes, [1, 2, 3])
    assert path.endswith("out_text_document.prefixes")
    blend = read_prefix_list(path)
    assert blend == ([os.path.abspath(p) for p in prefixes], [1.0, 2.0, 3.0])
    assert [IndexedDataset(p)[0].tolist() for p in blend[0]] == [[0], [1, 1], [2, 2, 2]]
    bad = tmp_path / "bad.prefixes"
    bad.write_text("1 a\nheavy b\n")
    with pytest.raises(PreprocessError, match=r"bad.prefixes:2: expected 'WEIGHT PREFIX'"):
        read_prefix_list(str(bad))
    bad.write_text("\n")
    with pytest.raises(PreprocessError, match="empty"):
        read_prefix_list(str(bad))


class _Tok:
    def __init__(self, vocab: int) -> None:
        self.vocab_size, self.eod, self.unique_identifiers = vocab, 1, {"class": "T", "v": vocab}


def test_settings_fingerprint_sees_every_option_and_the_tokenizer() -> None:
    base = settings_fingerprint(_Tok(100), {"json_keys": ("text",), "policy": Policy()})
    assert base == settings_fingerprint(_Tok(100), {"policy": Policy(), "json_keys": ("text",)})
    assert base != settings_fingerprint(_Tok(101), {"json_keys": ("text",), "policy": Policy()})
    assert base != settings_fingerprint(
        _Tok(100), {"json_keys": ("text",), "policy": Policy(on_bad_json="skip")}
    )
    assert base != settings_fingerprint(
        _Tok(100), {"json_keys": ("text",), "policy": Policy(), "append_eod": True}
    )
    assert base == settings_fingerprint(
        _Tok(100),
        {"json_keys": ("text",), "policy": Policy(), "workers": 4, "chunk_bytes": 1 << 16},
    )


def _marked_shard(tmp_path: Path):
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"text": "x" * i}) + "\n" for i in range(50)))
    shard = plan_shards([str(source)], 1)[0]
    workdir = tmp_path / "work"
    workdir.mkdir()
    prefix = _pair(workdir / f"{shard.name}_text_document", [[1, 2, 3]])
    counts = {"outputs": {"text": {"documents": 1, "tokens": 3}}}
    write_marker(str(workdir), shard, "S", {"text": prefix}, counts)
    return source, shard, workdir, prefix


def test_marker_is_reused_only_when_everything_matches(tmp_path: Path) -> None:
    source, shard, workdir, prefix = _marked_shard(tmp_path)
    assert reusable_marker(str(workdir), shard, "S", ["text"])["counts"]["outputs"]["text"] == {
        "documents": 1,
        "tokens": 3,
    }
    assert reusable_marker(str(workdir), shard, "other settings", ["text"]) is None
    assert reusable_marker(str(workdir), shard, "S", ["text", "title"]) is None
    with open(source, "a") as handle:  # the input grew: the plan's identity differs
        handle.write(json.dumps({"text": "new"}) + "\n")
    assert reusable_marker(str(workdir), plan_shards([str(source)], 1)[0], "S", ["text"]) is None


def test_marker_rejects_damaged_outputs_and_markers(tmp_path: Path) -> None:
    _, shard, workdir, prefix = _marked_shard(tmp_path)
    data = bytearray(Path(f"{prefix}.bin").read_bytes())
    data[0] ^= 1  # same size, other bytes
    Path(f"{prefix}.bin").write_bytes(bytes(data))
    assert reusable_marker(str(workdir), shard, "S", ["text"]) is None
    Path(marker_path(str(workdir), shard)).write_text("{not json")
    assert reusable_marker(str(workdir), shard, "S", ["text"]) is None


def test_file_checksum_names_its_algorithm(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    assert file_checksum(str(path), "blake2b").startswith("blake2b:")
    assert file_checksum(str(path)) == file_checksum(
        str(path), file_checksum(str(path)).split(":")[0]
    )
    with pytest.raises(ValueError, match="not available"):
        file_checksum(str(path), "md4")
