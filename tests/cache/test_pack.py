"""Pack files: a blend build writes its small index caches as one file; they are found
again by a new process, validated like entry files, and never served when damaged."""

from __future__ import annotations

import logging
import os

import numpy
import pytest
from tests.support.random_corpora import EOD, write_corpus

from tokenloom.builder import BlendedMegatronDatasetBuilder
from tokenloom.cache import CacheKey, EntryPacker, IndexCache
from tokenloom.cache import pack as cache_pack
from tokenloom.datasets import GPTDataset, GPTDatasetConfig, SimpleTokenizer
from tokenloom.errors import CacheError
from tokenloom.process_caches import clear_process_caches

NAMES = ("a", "b")


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("pack-corpora")
    return [write_corpus(str(root / f"p{i}"), 12 + 3 * i, seed=40 + i) for i in range(6)]


def build(corpora, cache):
    config = GPTDatasetConfig(
        random_seed=5,
        sequence_length=16,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        split="100,0,0",
        tokenizer=SimpleTokenizer(32000, EOD),
        path_to_cache=str(cache),
        blend=(list(corpora), [6, 5, 4, 3, 2, 1]),
        mid_level_dataset_surplus=0.05,
    )
    return BlendedMegatronDatasetBuilder(GPTDataset, [120, 0, 0], lambda: True, config).build()[0]


def samples(blend):
    return [blend[k]["tokens"].tolist() for k in range(len(blend))]


def forget_packs():
    """What a new process knows of pack directories: nothing."""
    clear_process_caches()


def pack_files(cache):
    folder = os.path.join(cache, cache_pack.PACK_DIR)
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def test_blend_build_writes_one_pack_and_a_new_process_reads_it(corpora, tmp_path):
    cache = tmp_path / "cache"
    cold = build(corpora, cache)
    assert len(pack_files(cache)) == 1
    entry_files = [n for n in os.listdir(cache) if n.endswith("-indices.cache")]
    assert entry_files and all("BlendedDataset" in n for n in entry_files)  # no GPT files
    assert len(IndexCache(str(cache)).stems()) == len(corpora) + 1
    before = sorted(os.listdir(cache))
    forget_packs()
    warm = build(corpora, cache)
    assert samples(warm) == samples(cold)
    assert all(d.indices_loaded for d in warm.datasets)  # every entry came from the pack
    assert sorted(os.listdir(cache)) == before and len(pack_files(cache)) == 1
    assert samples(warm) == samples(build(corpora, tmp_path / "without-packs-dir"))


@pytest.mark.parametrize("keep_memo", [False, True])
@pytest.mark.parametrize("damage", ["flip", "truncate", "table"])
def test_damaged_pack_entries_are_rebuilt_never_served(
    corpora, tmp_path, damage, keep_memo, caplog
):
    cache = tmp_path / "cache"
    cold = samples(build(corpora, cache))
    pack = os.path.join(cache, cache_pack.PACK_DIR, pack_files(cache)[0])
    data = bytearray(open(pack, "rb").read())
    if damage == "flip":
        data[-3] ^= 0xFF  # inside the last entry's last array: only its CRC32 can tell
    elif damage == "truncate":
        data = data[: len(data) - 100]
    else:
        data[30] ^= 0xFF  # inside the table (its CRC32 fails)
    open(pack, "wb").write(bytes(data))
    forget_packs()
    for name in os.listdir(cache):  # with the memo, the damage is met at first use
        if name.endswith("-startup-memo.json") and not keep_memo:
            os.unlink(os.path.join(cache, name))
    with caplog.at_level(logging.WARNING):
        warm = build(corpora, cache)
        assert samples(warm) == cold
    assert "damaged" in caplog.text  # rebuilt, with a warning
    if not keep_memo:  # rebuilt entries go into a new pack
        assert len(pack_files(cache)) == 2


def test_nothing_is_written_when_the_block_fails(tmp_path):
    key = CacheKey("X", "train", {"n": 1})
    with pytest.raises(RuntimeError):
        with EntryPacker(str(tmp_path)) as packer:
            cache = IndexCache(str(tmp_path), packer=packer)
            cache.store(key, {"a": numpy.arange(3)})
            raise RuntimeError("build failed")
    assert os.listdir(tmp_path) == [] and cache.lookup(key, ["a"]) is None


def test_queued_entries_are_visible_before_the_pack_is_written(tmp_path):
    key = CacheKey("X", "train", {"n": 2})
    arrays = {"a": numpy.arange(5, dtype=numpy.int32), "b": numpy.ones((2, 2))}
    with EntryPacker(str(tmp_path)) as packer:
        cache = IndexCache(str(tmp_path), packer=packer)
        paths = cache.store(key, arrays)
        assert os.listdir(tmp_path) == []
        assert cache.exists(key) and paths["description"] == cache.description_path(key)
        got = cache.load(key, NAMES)
        numpy.testing.assert_array_equal(got["a"], arrays["a"])
    assert paths["description"].endswith(cache_pack.PACK_SUFFIX)
    assert (
        os.path.isfile(paths["description"]) and cache.description_path(key) == paths["description"]
    )
    forget_packs()
    numpy.testing.assert_array_equal(cache.load(key, NAMES)["b"], arrays["b"])


def test_large_entries_are_written_alone(tmp_path):
    small, large = CacheKey("X", "train", {"n": 3}), CacheKey("X", "train", {"n": 4})
    with EntryPacker(str(tmp_path), small_entry_bytes=100) as packer:
        cache = IndexCache(str(tmp_path), packer=packer)
        cache.store(small, {"a": numpy.arange(1)})  # the header alone is over 100 bytes
        cache.store(large, {"a": numpy.arange(1000)})
    assert os.path.isfile(cache.entry_path(large)) and os.path.isfile(cache.entry_path(small))
    assert pack_files(tmp_path) == []


def test_large_entries_are_streamed_never_assembled_in_memory(tmp_path, monkeypatch):
    """An entry whose arrays alone exceed the pack's limit goes straight to its file
    (its bytes in memory would double the build's peak), with the same bytes as an
    entry stored without a packer; a small one is still assembled and packed."""
    from tokenloom.cache import entry as cache_entry

    assembled = []
    real = cache_entry.entry_bytes
    monkeypatch.setattr(
        cache_entry, "entry_bytes", lambda r, a: assembled.append(sorted(a)) or real(r, a)
    )
    key = CacheKey("X", "train", {"n": 6})
    arrays = {"a": numpy.arange(5000, dtype=numpy.int32), "b": numpy.arange(7)}
    plain = IndexCache(str(tmp_path / "plain"))
    plain.store(key, arrays)
    with EntryPacker(str(tmp_path / "packed"), small_entry_bytes=4096) as packer:
        packed = IndexCache(str(tmp_path / "packed"), packer=packer)
        packed.store(key, arrays)
        packed.store(CacheKey("X", "train", {"n": 7}), {"a": numpy.arange(3)})
    assert assembled == [["a"]]  # only the small entry was assembled
    with open(plain.entry_path(key), "rb") as a, open(packed.entry_path(key), "rb") as b:
        assert a.read() == b.read()


def test_newest_pack_wins_and_an_entry_file_beats_both(tmp_path):
    cache = IndexCache(str(tmp_path))
    key = CacheKey("X", "train", {"n": 5})
    for value in (1, 2):
        with EntryPacker(str(tmp_path)) as packer:
            IndexCache(str(tmp_path), packer=packer).store(key, {"a": numpy.full(4, value)})
        newest = os.path.join(
            tmp_path,
            cache_pack.PACK_DIR,
            sorted(
                pack_files(tmp_path),
                key=lambda n: os.stat(os.path.join(tmp_path, cache_pack.PACK_DIR, n)).st_mtime_ns,
            )[-1],
        )
        os.utime(newest, ns=(value * 10**18, value * 10**18))  # distinct mtimes
    forget_packs()
    assert cache.load(key, ["a"])["a"].tolist() == [2] * 4
    cache.store(key, {"a": numpy.full(4, 3)})  # no packer: an entry file
    assert cache.load(key, ["a"])["a"].tolist() == [3] * 4


def test_unwritable_cache_dir_is_a_cache_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(CacheError, match="path_to_cache"):
        with EntryPacker(str(blocker / "cache")) as packer:
            cache = IndexCache(str(blocker / "cache"), packer=packer)
            cache.store(CacheKey("X", "train", {"n": 6}), {"a": numpy.arange(2)})


def test_pack_layout_round_trip():
    entries = {f"s{i}": bytes([i]) * (i * 37 + 1) for i in range(5)}
    data = cache_pack.pack_entries(entries)
    assert data[:8] == b"TLIDXP02"
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "x" + cache_pack.PACK_SUFFIX)
        open(path, "wb").write(data)
        with open(path, "rb") as handle:
            table, why = cache_pack.read_table(handle, len(data))
        assert why == ""
        for stem, payload in entries.items():
            offset, length = table[stem]
            assert offset % 64 == 0
            assert cache_pack.read_entry((path, offset, length)) == payload
        open(path, "ab").write(b"\0")  # one byte too many: the size check fails
        with open(path, "rb") as handle:
            assert cache_pack.read_table(handle, len(data) + 1)[0] is None


@pytest.mark.parametrize("damage", ["flip", "table"])
def test_pack_damaged_under_a_long_lived_process_is_forgotten_once(
    corpora, tmp_path, damage, caplog
):
    """A damaged entry (flip: the process knew the pack before) or table (the process
    reads the damaged pack afresh) is rebuilt once, into one new pack, which later builds
    reuse: no new pack on every build, and one warning."""
    cache = tmp_path / "cache"
    cold = samples(build(corpora, cache))
    assert len(IndexCache(str(cache)).stems()) == len(corpora) + 1  # the process lists it
    pack = os.path.join(cache, cache_pack.PACK_DIR, pack_files(cache)[0])
    data = bytearray(open(pack, "rb").read())
    data[-3 if damage == "flip" else 30] ^= 0xFF
    open(pack, "wb").write(bytes(data))
    if damage == "table":
        forget_packs()  # else its entries, still intact, are served by the known table
    for name in os.listdir(cache):
        if name.endswith("-startup-memo.json"):
            os.unlink(os.path.join(cache, name))  # look every entry up now
    counts = []
    with caplog.at_level(logging.WARNING):
        for _ in range(4):
            assert samples(build(corpora, cache)) == cold
            counts.append(len(pack_files(cache)))
    assert counts == [2, 2, 2, 2]
    assert caplog.text.count("is damaged") == 1
