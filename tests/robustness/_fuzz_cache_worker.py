"""Fuzz worker: crafted, structurally valid but semantically wrong index cache entries.

``python _fuzz_cache_worker.py SEED SECONDS DIR``: build a GPTDataset once (its cache
entry is the pristine one), then until SECONDS pass, write an entry with valid CRCs
whose arrays (or header) lie: ids out of range, non-monotonic sample rows, wrong
shapes or dtypes, counts that disagree. Each case loads it through a GPTDataset and
reads every sample by ``__getitem__`` and by ``get_batch``. Log lines: ``start N
MUTATION`` before the case (a crash names it), then ``ok`` (samples equal a fresh
build, or, for a mutation that leaves the indices valid, equal to what the crafted
indices name), ``error TYPE`` (a tokenloom error), or ``bad ...``.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import warnings
from pathlib import Path

import numpy

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from tests.support.cache_files import header, rewrite_header  # noqa: E402

from tokenloom.cache import entry  # noqa: E402
from tokenloom.datasets import GPTDataset, GPTDatasetConfig  # noqa: E402
from tokenloom.datasets.split import Split  # noqa: E402
from tokenloom.errors import TokenloomError  # noqa: E402
from tokenloom.format import IndexedDatasetBuilder  # noqa: E402

NAMES = ("document_index", "sample_index", "shuffle_index")
SEQ = 8


def _corpus(folder: Path) -> str:
    prefix = str(folder / "corpus")
    rng = numpy.random.default_rng(7)
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=numpy.uint16)
    for length in rng.integers(1, 40, 40):
        builder.add_item(rng.integers(1, 60000, int(length)))
        builder.end_document()
    builder.finalize(prefix + ".idx")
    return prefix


def _dataset(prefix: str, cache: Path) -> GPTDataset:
    config = GPTDatasetConfig(
        random_seed=1,
        sequence_length=SEQ,
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
    return GPTDataset(low, prefix, documents, 60, Split.train, config)


def _samples(dataset: GPTDataset) -> list:
    one = [dataset[i]["tokens"].tolist() for i in range(len(dataset))]
    batch = dataset.get_batch(list(range(len(dataset))))["tokens"]
    if numpy.asarray(batch).tolist() != one:
        raise ValueError("get_batch and __getitem__ disagree")
    return one


def _named_by(dataset: GPTDataset, arrays: dict) -> list:
    """Samples the (valid) crafted indices name, computed here from the raw tokens."""
    low, rows = dataset.dataset, arrays["sample_index"]
    out = []
    for k in arrays["shuffle_index"]:
        (d0, o0), (d1, o1) = rows[int(k)], rows[int(k) + 1]
        docs = [int(d) for d in arrays["document_index"][int(d0) : int(d1) + 1]]
        parts = [low[d] for d in docs]
        parts[-1] = parts[-1][: int(o1) + 1]
        parts[0] = parts[0][int(o0) :]
        out.append(numpy.concatenate(parts)[:SEQ].tolist())
    return out


def _mutate(rng, kind: str, arrays: dict) -> tuple[str, bool]:
    """Change the arrays; returns (kind, whether the result may still be valid)."""
    doc, rows, shuffle = arrays["document_index"], arrays["sample_index"], arrays["shuffle_index"]
    i = int(rng.integers(0, doc.shape[0]))
    j = int(rng.integers(0, rows.shape[0]))
    if kind == "doc-id":
        doc[i] = int(rng.choice([-1, 40, 41, 2**31 - 1, -(2**31)]))
    elif kind == "doc-valid":
        doc[i] = int(rng.integers(0, 40))
        return kind, True
    elif kind == "row-position":
        rows[j, 0] = int(rng.choice([-1, doc.shape[0], doc.shape[0] + 5, 2**31 - 1]))
    elif kind == "row-offset":
        rows[j, 1] = int(rng.choice([-1, 1000, 2**31 - 1, -(2**31)]))
    elif kind == "row-order" and rows.shape[0] > 2:
        rows[[j, (j + 1) % rows.shape[0]]] = rows[[(j + 1) % rows.shape[0], j]]
    elif kind == "shuffle-id":
        shuffle[int(rng.integers(0, shuffle.shape[0]))] = int(
            rng.choice([rows.shape[0] - 1, rows.shape[0], 2**32 - 1])
        )
    elif kind == "shuffle-valid":
        rng.shuffle(shuffle)
        return kind, True
    elif kind == "dtype":
        name = str(rng.choice(NAMES))
        wrong = [numpy.float64, numpy.int8, numpy.uint64, numpy.int16]
        arrays[name] = arrays[name].astype(wrong[int(rng.integers(0, len(wrong)))])
    elif kind == "shape":
        name = str(rng.choice(NAMES))
        array = arrays[name]
        options = [array[:-1], array[:0], array.reshape(-1), numpy.concatenate([array, array[-1:]])]
        arrays[name] = options[int(rng.integers(0, len(options)))]
    return kind, False


MUTATIONS = [
    "doc-id",
    "doc-valid",
    "row-position",
    "row-offset",
    "row-order",
    "shuffle-id",
    "shuffle-valid",
    "dtype",
    "shape",
    "header-shape",
    "header-count",
]


def _craft(rng, pristine: Path, target: Path, key) -> tuple[str, bool, dict]:
    record, _ = header(pristine)
    with open(pristine, "rb") as handle:
        arrays = {
            name: numpy.array(a)
            for name, a in entry.read_entry(
                handle, str(pristine), key, NAMES, False, "checksum", record.get("checks")
            ).items()
        }
    kind = str(rng.choice(MUTATIONS))
    if kind.startswith("header"):  # the header lies; data and array CRCs untouched
        shutil.copy(pristine, target)
        record = json.loads(json.dumps(record))
        meta = record["arrays"][str(rng.choice(NAMES))]
        if kind == "header-shape":
            meta["shape"] = [int(meta["shape"][0]) + int(rng.choice([-1, 1]))] + meta["shape"][1:]
        else:
            meta["nbytes"] = int(meta["nbytes"]) + int(rng.choice([-8, 8]))
        rewrite_header(target, record)
        return kind, False, arrays
    kind, may_be_valid = _mutate(rng, kind, arrays)
    entry.write_entry(str(target), entry.entry_record(key, record.get("checks")), arrays)
    return kind, may_be_valid, arrays


def main(seed: int, seconds: float, folder: Path) -> None:
    rng = numpy.random.default_rng(seed)
    warnings.simplefilter("ignore")
    prefix = _corpus(folder)
    fresh = _dataset(prefix, folder / "fresh")
    want, key = _samples(fresh), fresh.cache_key
    pristine = next((folder / "fresh").glob("*indices.cache"))
    log = open(folder / "log.txt", "w", buffering=1)
    deadline, case = time.monotonic() + seconds, 0
    while time.monotonic() < deadline:
        cache = folder / f"cache{case}"
        cache.mkdir()
        kind, may_be_valid, arrays = _craft(rng, pristine, cache / pristine.name, key)
        log.write(f"start {case} {kind}\n")
        try:
            got = _samples(_dataset(prefix, cache))
            if got == want or (may_be_valid and got == _named_by(fresh, arrays)):
                log.write("ok\n")
            else:
                log.write("bad data: samples differ from a fresh build\n")
        except TokenloomError as error:
            log.write(f"error {type(error).__name__}\n")
        except Exception as error:  # noqa: BLE001 - reported to the test
            log.write(f"bad {type(error).__name__} {str(error)[:200]!r}\n")
        shutil.rmtree(cache)
        case += 1


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]), Path(sys.argv[3]))
