"""Shard planning (no Ray needed): coverage, order, line boundaries, counts."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenloom.errors import PreprocessError
from tokenloom.preprocess.ray_engine.plan import plan_shards, splittable


def _lines_file(path: Path, lengths: list) -> Path:
    path.write_bytes(b"".join(b"x" * n + b"\n" for n in lengths))
    return path


def _check_cover(shards: list, paths: list) -> None:
    """Pieces tile every file in order, each starting at a line start."""
    pieces = [piece for shard in shards for piece in shard.pieces]
    assert [shard.index for shard in shards] == list(range(len(shards)))
    assert all(shard.count == len(shards) for shard in shards)
    position = {str(Path(p).resolve()): 0 for p in paths}
    order = [str(Path(p).resolve()) for p in paths]
    seen = []
    for piece in pieces:
        assert piece.start == position[piece.path], "pieces must be contiguous and in order"
        data = Path(piece.path).read_bytes()
        assert piece.start == 0 or data[piece.start - 1 : piece.start] == b"\n"
        position[piece.path] = piece.end
        if not seen or seen[-1] != piece.path:
            seen.append(piece.path)
    assert seen == order
    assert all(position[p] == Path(p).stat().st_size for p in order)


@pytest.mark.parametrize("count", [1, 2, 7, 64])
def test_one_large_file_gives_exactly_the_count(tmp_path: Path, count: int) -> None:
    path = _lines_file(tmp_path / "a.jsonl", [i % 37 for i in range(2000)])
    shards = plan_shards([str(path)], count)
    assert len(shards) == count
    _check_cover(shards, [str(path)])
    assert all(shard.is_range or count == 1 for shard in shards)


def test_small_files_are_grouped_and_compressed_files_stay_whole(tmp_path: Path) -> None:
    small = [_lines_file(tmp_path / f"s{i}.jsonl", [5] * 10) for i in range(6)]
    big = _lines_file(tmp_path / "big.jsonl", [50] * 400)
    packed = tmp_path / "packed.jsonl.gz"
    packed.write_bytes(gzip.compress(b"x\n" * 10000))
    paths = [str(p) for p in small] + [str(big), str(packed)]
    shards = plan_shards(paths, 4)
    _check_cover(shards, paths)
    assert len(shards[0].pieces) == 6 and all(p.whole for p in shards[0].pieces)
    assert not splittable(str(packed))
    assert [p.whole for p in shards[-1].pieces] == [True]
    assert shards[-1].pieces[0].path == str(packed.resolve())


def test_plan_is_deterministic_and_fails_clearly(tmp_path: Path) -> None:
    path = _lines_file(tmp_path / "a.jsonl", [3, 80, 1, 0, 200] * 50)
    assert plan_shards([str(path)], 5) == plan_shards([str(path)], 5)
    with pytest.raises(PreprocessError, match="--num-shards 0"):
        plan_shards([str(path)], 0)


def test_a_line_longer_than_a_shard_is_never_cut(tmp_path: Path) -> None:
    path = _lines_file(tmp_path / "a.jsonl", [10, 5000, 10])
    shards = plan_shards([str(path)], 8)
    _check_cover(shards, [str(path)])
    starts = [shard.pieces[0].start for shard in shards]
    assert starts == [0, 11 + 5001]  # every cut target inside the long line moves past it


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 300), min_size=0, max_size=60),
    files=st.integers(1, 3),
    count=st.integers(1, 20),
    final_newline=st.booleans(),
)
def test_any_input_is_tiled_in_order(
    tmp_path_factory, lengths, files, count, final_newline
) -> None:
    folder = tmp_path_factory.mktemp("plan")
    paths = []
    for n in range(files):
        data = b"\n".join(json.dumps("y" * k).encode() for k in lengths[n::files])
        path = folder / f"f{n}.jsonl"
        path.write_bytes(data + (b"\n" if final_newline and data else b""))
        paths.append(str(path))
    shards = plan_shards(paths, count)
    _check_cover(shards, paths)
    assert 1 <= len(shards)
