"""Fuzz worker: craft structurally valid, semantically wrong ``.idx`` files and use them.

``python _fuzz_idx_worker.py SEED SECONDS DIR``: until SECONDS pass, write a crafted
index next to a real ``.bin``, open it, read every sequence and build a GPTDataset over
it.  Each case logs ``start N MUTATION`` before it runs (so a crash names the case) and
then ``ok``, ``error TYPE`` (a tokenloom error: the wanted outcome for bad input) or
``bad TYPE MESSAGE`` (anything else, or data that differs from what the index says).
"""

from __future__ import annotations

import struct
import sys
import time
import warnings
from pathlib import Path

import numpy

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from tokenloom.errors import TokenloomError  # noqa: E402
from tokenloom.format import IndexedDataset  # noqa: E402

MAGIC, HEADER = b"MMIDIDX\x00\x00", struct.Struct("<9sQBQQ")
CODES = {
    1: numpy.uint8,
    2: numpy.int8,
    3: numpy.int16,
    4: numpy.int32,
    5: numpy.int64,
    6: numpy.float64,
    7: numpy.float32,
    8: numpy.uint16,
}


def _arrays(rng):
    lengths = rng.integers(1, 40, int(rng.integers(1, 30))).astype(numpy.int32)
    pointers = numpy.concatenate([[0], numpy.cumsum(lengths[:-1].astype(numpy.int64) * 2)])
    documents = numpy.arange(lengths.shape[0] + 1, dtype=numpy.int64)
    return {"code": 8, "lengths": lengths, "pointers": pointers, "documents": documents}


def _mutate(rng, a):
    """One semantic fault; the file stays structurally valid (sizes match the counts)."""
    n, kind = a["lengths"].shape[0], str(rng.choice(MUTATIONS))
    i = int(rng.integers(0, n))
    if kind == "length":
        a["lengths"][i] += int(rng.choice([-1, 1, 1000, -1000, 2**31 - 1 - int(a["lengths"][i])]))
    elif kind == "pointer":
        a["pointers"][i] += int(rng.choice([-2, 2, 1, 10**9, -(10**9), 2**62]))
    elif kind == "overlap" and n > 1:
        a["pointers"][max(i, 1)] = a["pointers"][max(i, 1) - 1]
    elif kind == "code":
        a["code"] = int(rng.choice(list(CODES)))
        size = numpy.dtype(CODES[a["code"]]).itemsize
        if rng.random() < 0.5:  # consistent pointers for the new item size
            a["pointers"] = numpy.concatenate(
                [[0], numpy.cumsum(a["lengths"][:-1].astype(numpy.int64) * size)]
            )
    elif kind == "documents":
        a["documents"][int(rng.integers(0, a["documents"].shape[0]))] = int(
            rng.choice([-1, n + 1, 2**40, 0])
        )
    elif kind == "reorder" and n > 2:
        a["documents"] = numpy.sort(rng.integers(0, n + 1, int(rng.integers(2, n + 2))))
        a["documents"][0], a["documents"][-1] = 0, n
    elif kind == "shuffle":
        rng.shuffle(a["pointers"])
    return kind


MUTATIONS = ["length", "pointer", "overlap", "code", "documents", "reorder", "shuffle"]


def _write_idx(path, a):
    with open(path, "wb") as handle:
        handle.write(
            HEADER.pack(MAGIC, 1, a["code"], a["lengths"].shape[0], a["documents"].shape[0])
        )
        for name in ("lengths", "pointers", "documents"):
            handle.write(a[name].tobytes())


def _check_reads(prefix, data: bytes):
    """Every sequence must be exactly the bytes the index points at."""
    with IndexedDataset(prefix) as dataset:
        dtype = numpy.dtype(dataset.dtype)
        for i in range(len(dataset)):
            pointer, length = int(dataset.sequence_pointers[i]), int(dataset.sequence_lengths[i])
            want = numpy.frombuffer(data[pointer : pointer + length * dtype.itemsize], dtype)
            if not numpy.array_equal(dataset[i], want) or want.shape[0] != length:
                return f"sequence {i} differs from the bytes its pointer names"
        if len(dataset) and len(dataset[0 : len(dataset)]) != len(dataset):
            return "slice of everything has the wrong length"
    return None


def _check_gpt(prefix, cache: Path):
    from tokenloom.datasets import GPTDataset, GPTDatasetConfig
    from tokenloom.datasets.split import Split

    def build():
        config = GPTDatasetConfig(
            random_seed=1,
            sequence_length=8,
            blend=([prefix], None),
            split="1",
            tokenizer={"vocab_size": 1 << 16, "eod": 0},
            path_to_cache=str(cache),
            reset_position_ids=False,
            reset_attention_mask=False,
            eod_mask_loss=False,
        )
        low = GPTDataset.build_low_level_dataset(prefix, config)
        documents = numpy.arange(low.document_indices.shape[0] - 1, dtype=numpy.int32)
        dataset = GPTDataset(low, prefix, documents, 20, Split.train, config)
        return [dataset[i]["tokens"].tolist() for i in range(len(dataset))]

    first = build()
    if build() != first:  # the second build loads the cache the first one wrote
        return "samples from the cache differ from a fresh build"
    return None


def main(seed: int, seconds: float, folder: Path) -> None:
    rng = numpy.random.default_rng(seed)
    log = open(folder / "log.txt", "w", buffering=1)
    deadline, case = time.monotonic() + seconds, 0
    warnings.simplefilter("ignore")
    while time.monotonic() < deadline:
        a = _arrays(rng)
        prefix = str(folder / f"c{case}")
        data = rng.integers(0, 1 << 16, int(a["lengths"].sum()), dtype=numpy.uint16).tobytes()
        Path(prefix + ".bin").write_bytes(data)
        kind = _mutate(rng, a)
        _write_idx(prefix + ".idx", a)
        log.write(f"start {case} {kind}\n")
        try:
            problem = _check_reads(prefix, data) or _check_gpt(prefix, folder / f"cache{case}")
            log.write("ok\n" if problem is None else f"bad data {problem}\n")
        except TokenloomError as error:
            log.write(f"error {type(error).__name__}\n")
        except Exception as error:  # noqa: BLE001 - reported to the test
            log.write(f"bad {type(error).__name__} {str(error)[:200]!r}\n")
        case += 1


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]), Path(sys.argv[3]))
