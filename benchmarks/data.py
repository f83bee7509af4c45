"""The one synthetic-data generator every benchmark reads from.

Corpora are uint16 token files in the MMIDIDX format (``.bin`` + ``.idx``) with
lognormal document lengths, seeded, one sequence per document, each document ending
with the EOD token. They are written with tokenloom's ``IndexedDatasetBuilder`` when
it imports, else with megatron-core's: both write the same bytes, and both sides of
every benchmark read the very same files.

Generated data is reused across runs: next to each corpus a ``.stamp.json`` records
the parameters that shaped it, and a corpus whose stamp matches is not rewritten.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy

VOCAB_SIZE = 32000
EOD = 2
DTYPE = numpy.uint16


def doc_lengths(n_docs: int, seed: int, median: float, sigma: float = 1.0) -> numpy.ndarray:
    """Lognormal document lengths (tokens, EOD included), int32, at least 2 tokens."""
    rng = numpy.random.default_rng(seed)
    lengths = rng.lognormal(mean=numpy.log(median), sigma=sigma, size=n_docs)
    return numpy.clip(numpy.rint(lengths), 2, 1 << 20).astype(numpy.int32)


def _builder_class():
    """tokenloom's builder if present, else megatron-core's (identical bytes)."""
    try:
        from tokenloom.format import IndexedDatasetBuilder

        return IndexedDatasetBuilder, "tokenloom"
    except ImportError:
        from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

        return IndexedDatasetBuilder, "megatron-core"


def _stamp_ok(stamp: Path, params: dict) -> bool:
    try:
        return json.loads(stamp.read_text()) == params
    except (OSError, ValueError):
        return False


def _write_stamp(stamp: Path, params: dict) -> None:
    tmp = stamp.with_suffix(".tmp")
    tmp.write_text(json.dumps(params, sort_keys=True))
    os.replace(tmp, stamp)


def _write_one(prefix: str, lengths: numpy.ndarray, rng: numpy.random.Generator, cls) -> None:
    """Write one corpus: random tokens in [EOD + 1, VOCAB_SIZE), EOD closing each doc."""
    tokens = rng.integers(EOD + 1, VOCAB_SIZE, size=int(lengths.sum()), dtype=DTYPE)
    ends = numpy.cumsum(lengths, dtype=numpy.int64)
    tokens[ends - 1] = EOD
    starts = ends - lengths
    builder = cls(prefix + ".bin", dtype=DTYPE)
    for begin, length in zip(starts.tolist(), lengths.tolist()):
        builder.add_document(tokens[begin : begin + length], [length])
    builder.finalize(prefix + ".idx")


def write_corpus(prefix: str, n_docs: int, seed: int, median: float, sigma: float = 1.0) -> dict:
    """Write (or reuse) one corpus at ``prefix``; returns its description."""
    params = dict(
        kind="corpus",
        n_docs=n_docs,
        seed=seed,
        median=median,
        sigma=sigma,
        vocab=VOCAB_SIZE,
        eod=EOD,
        dtype="uint16",
    )
    stamp = Path(prefix + ".stamp.json")
    lengths = doc_lengths(n_docs, seed, median, sigma)
    if not _stamp_ok(stamp, params):
        Path(prefix).parent.mkdir(parents=True, exist_ok=True)
        cls, _ = _builder_class()
        _write_one(prefix, lengths, numpy.random.default_rng(seed + 1), cls)
        _write_stamp(stamp, params)
    return dict(params, prefix=prefix, tokens=int(lengths.sum()))


def write_many(
    directory: str,
    n_prefixes: int,
    docs_per_prefix: int,
    seed: int,
    median: float,
    sigma: float = 1.0,
) -> list[str]:
    """Write (or reuse) ``n_prefixes`` small corpora ``directory/p00000`` ... for blends.

    Prefix i has ``docs_per_prefix`` documents drawn with seed ``seed + i``; asking for
    more prefixes later only writes the missing ones.
    """
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    params = dict(
        kind="many",
        docs_per_prefix=docs_per_prefix,
        seed=seed,
        median=median,
        sigma=sigma,
        vocab=VOCAB_SIZE,
        eod=EOD,
        dtype="uint16",
    )
    stamp = root / "stamp.json"
    done = 0
    if _stamp_ok(stamp, {**params, "n_prefixes": _read_count(stamp)}):
        done = _read_count(stamp)
    else:
        _write_stamp(stamp, {**params, "n_prefixes": 0})
    prefixes = [str(root / f"p{i:05d}") for i in range(n_prefixes)]
    if done < n_prefixes:
        cls, _ = _builder_class()
        for i in range(done, n_prefixes):
            lengths = doc_lengths(docs_per_prefix, seed + i, median, sigma)
            _write_one(prefixes[i], lengths, numpy.random.default_rng(seed + i + 10**6), cls)
        _write_stamp(stamp, {**params, "n_prefixes": n_prefixes})
    return prefixes


def _read_count(stamp: Path) -> int:
    try:
        return int(json.loads(stamp.read_text()).get("n_prefixes", 0))
    except (OSError, ValueError):
        return 0


def blend_weights(n: int, seed: int) -> list[float]:
    """Lognormal (skewed) blend weights, normalised to sum to 1."""
    w = numpy.random.default_rng(seed).lognormal(0.0, 1.0, size=n)
    return (w / w.sum()).tolist()


def builder_name() -> str:
    """Which library writes the benchmark corpora in this environment."""
    return _builder_class()[1]
