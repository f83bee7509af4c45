"""``tokenloom warmup``: compile every numba kernel into numba's on-disk cache.

The first process on a fresh install compiles each kernel it calls (seconds each);
every later process loads the cached machine code. Running this once, e.g. in a
container image build, lets the first training process start as fast as the later
ones. :func:`warm_up` is the same from Python.

Each kernel is called on tiny inputs typed exactly as tokenloom's own calls type
them (token dtypes as chosen by ``--token-dtypes``; index arrays freshly built, and
reopened read-only from an index cache), so that exactly those specialisations are
compiled and cached.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy

from tokenloom.attributes import read_attribute
from tokenloom.errors import ConfigError

__all__ = ["GROUPS", "register", "warm_up"]

_DESCRIPTION = """\
Compile tokenloom's numba kernels now, into numba's on-disk cache, so that the first
process that reads samples or builds indices does not spend seconds compiling them.

Run it once where the cache will be read from, typically while building a container
image, after `pip install`:

  RUN pip install ./tokenloom && tokenloom warmup

Where the compiled code goes (numba's rules):
  $NUMBA_CACHE_DIR                       if set (set it at build AND run time);
  <install dir>/tokenloom/kernels/__pycache__   if writable;
  $XDG_CACHE_HOME/numba (~/.cache/numba) otherwise (read-only installs).
The cache is keyed by the kernel's source, numba's version and the CPU: warm up on
the CPU model that will run, or with the same NUMBA_CPU_NAME (e.g. generic).
"""

_EPILOG = """\
examples:
  tokenloom warmup                          # every kernel, uint16 and int32 tokens
  tokenloom warmup --token-dtypes uint16    # only the dtype your corpora use
  tokenloom warmup --kernels blending,index # only the index kernels
  NUMBA_CACHE_DIR=/opt/numba-cache tokenloom warmup
"""

GROUPS = ("index", "blending", "shuffle", "samples", "permutation", "ranges")
"""Kernel groups: the GPT sample index, blending, the shuffles (MT19937, bijection), the
sample / batch kernels of ``dataset[i]`` and ``get_batch``, the ``randperm`` of the
training side's random samplers, and the bulk document ranges of ``tokenloom trace``."""

_TOKEN_DTYPES = ("uint8", "int8", "int16", "uint16", "int32", "int64", "float64", "float32")


def _index_kernels(token_dtypes: Sequence[str]) -> list[Any]:
    from tokenloom.kernels import KERNELS, read_only

    kernels = KERNELS.require("sample_index")
    sizes = read_only(numpy.array([3, 5, 4, 6], dtype=numpy.int32))
    documents = read_only(numpy.array([2, 0, 3, 1], dtype=numpy.int32))
    kernels.sample_index(sizes, documents, 4, 1, numpy.empty((4, 2), dtype=numpy.int32))
    return [kernels.sample_index]


def _blending_kernels(token_dtypes: Sequence[str]) -> list[Any]:
    from tokenloom.kernels import KERNELS

    scan, fast = KERNELS.require("blend_scan"), KERNELS.require("blend_fast")
    phased = KERNELS.require("blend_phases")
    weights = numpy.full(30, 1 / 30)
    sizes = numpy.full(30, 3, dtype=numpy.int64)
    out = (numpy.empty(90, dtype=numpy.int16), numpy.empty(90, dtype=numpy.int64))
    scan.blend_scan(weights, *out)
    scan.exhaustive_scan(sizes, weights, *out)
    fast.run(weights, sizes, *out)
    phases = numpy.stack([weights, weights])
    starts, linear = numpy.array([0, 45], dtype=numpy.int64), numpy.zeros(2, dtype=bool)
    scan.schedule_scan(starts, phases, linear, phases, *out)
    phased.run(starts, phases, linear, phases, *out)
    return [
        scan.blend_scan,
        scan.exhaustive_scan,
        scan.schedule_scan,
        fast.greedy,
        phased.schedule_fast,
    ]


def _shuffle_kernels(token_dtypes: Sequence[str]) -> list[Any]:
    from tokenloom.kernels import KERNELS

    kernels = KERNELS.require("shuffle")
    state = numpy.random.RandomState(0).get_state(legacy=False)["state"]
    for dtype in (numpy.uint32, numpy.uint64):  # int32 document / shuffle indices, int64
        key = numpy.array(state["key"], dtype=numpy.uint32)
        pos = numpy.array([state["pos"]], dtype=numpy.int64)
        kernels.shuffle(numpy.arange(100, dtype=dtype), key, pos, kernels.BLOCK)
    from tokenloom.index.bijection import BijectionShuffle, bijection_table

    bijection = KERNELS.require("bijection")  # shuffle_mode="bijection", typed as its calls
    table = BijectionShuffle(bijection_table(50, 100, 0, "")).table
    bijection.rows(table, numpy.arange(100, dtype=numpy.int64), numpy.empty(100, numpy.int64))
    bijection.fill_all(table, numpy.empty(100, dtype=numpy.int64))
    return [kernels.shuffle, bijection.rows, bijection.fill_all]


def _permutation_kernels(token_dtypes: Sequence[str]) -> list[Any]:
    """Both Fisher-Yates variants of ``randperm``, typed as its own calls type them."""
    from tokenloom.kernels import KERNELS

    kernels = KERNELS.require("permutation")
    draws = numpy.zeros(4, dtype=numpy.uint64)
    kernels.swap_block(numpy.arange(5, dtype=numpy.int64), draws, 0, 5)
    kernels.inside_out_block(numpy.empty(2, dtype=numpy.int64), draws, 0)
    return [kernels.swap_block, kernels.inside_out_block]


def _ranges_kernels(token_dtypes: Sequence[str]) -> list[Any]:
    """The bulk document ranges (``trace --manifest``), typed as ``sample_ranges`` calls
    them: read-only int32 document index and lengths, an int32 or int64 sample index."""
    from tokenloom.kernels import KERNELS, read_only

    kernels = KERNELS.require("ranges")
    documents = read_only(numpy.array([1, 0], dtype=numpy.int32))
    lengths = read_only(numpy.array([3, 4], dtype=numpy.int32))
    rows = read_only(numpy.array([0, -1], dtype=numpy.int64))
    for dtype in (numpy.int32, numpy.int64):
        sample_index = read_only(numpy.array([[0, 0], [1, 1]], dtype=dtype))
        counts = numpy.empty(2, dtype=numpy.int64)
        kernels.count_parts(documents, sample_index, lengths, rows, 1, counts)
        offsets = numpy.concatenate([[0], numpy.cumsum(counts)]).astype(numpy.int64)
        out = numpy.empty((int(offsets[-1]), 3), dtype=numpy.int64)
        kernels.fill_parts(documents, sample_index, lengths, rows, 1, offsets, out)
    return [kernels.count_parts, kernels.fill_parts]


def _sample_kernels(token_dtypes: Sequence[str]) -> list[Any]:
    """Real tiny datasets per token dtype: indices built (writable) and reopened from
    their cache (read-only mmaps), each serving ``dataset[0]`` and ``get_batch``."""
    from tokenloom.kernels import KERNELS

    KERNELS.stop()  # load synchronously, here
    try:
        with tempfile.TemporaryDirectory(prefix="tokenloom-warmup-") as folder:
            for dtype in token_dtypes:
                prefix = _tiny_corpus(os.path.join(folder, dtype), numpy.dtype(dtype))
                for _ in range(2):  # built, then loaded from the index cache
                    dataset = _tiny_dataset(prefix, os.path.join(folder, f"{dtype}-cache"))
                    dataset[0]
                    dataset.get_batch([0, None])
                cache = os.path.join(folder, f"{dtype}-cache")
                _tiny_dataset(prefix, cache, "bijection").get_batch([0, None])  # int64 rows
    finally:
        KERNELS.restart()
    batch = KERNELS.require("batch")
    return [batch.fill_sample, batch.gather_text, batch.fill_batch]


def _tiny_corpus(prefix: str, dtype: numpy.dtype) -> str:
    from tokenloom.format import IndexedDatasetBuilder

    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
    for length in (7, 12, 5, 20, 9, 14):
        builder.add_item(numpy.arange(3, 3 + length) % 90)
        builder.end_document()
    builder.finalize(f"{prefix}.idx")
    return prefix


def _tiny_dataset(prefix: str, cache: str, shuffle_mode: str = "exact") -> Any:
    from tokenloom.datasets import GPTDataset, GPTDatasetConfig, Split

    config = GPTDatasetConfig(
        random_seed=1,
        sequence_length=8,
        blend=([prefix], None),
        split="100,0,0",
        path_to_cache=cache,
        create_attention_mask=False,
        tokenizer={"vocab_size": 100, "eod": 2},
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        shuffle_mode=shuffle_mode,
    )
    low = GPTDataset.build_low_level_dataset(prefix, config)
    documents = numpy.arange(len(low.sequence_lengths), dtype=numpy.int32)
    return GPTDataset(low, prefix, documents, None, Split.train, config)


_WARMERS: dict[str, Callable[[Sequence[str]], list[Any]]] = {
    "index": _index_kernels,
    "blending": _blending_kernels,
    "shuffle": _shuffle_kernels,
    "samples": _sample_kernels,
    "permutation": _permutation_kernels,
    "ranges": _ranges_kernels,
}


def warm_up(
    groups: Iterable[str] = GROUPS,
    token_dtypes: Sequence[str] = ("uint16", "int32"),
    report: Callable[[str], None] = lambda line: None,
) -> list[tuple[str, float, str]]:
    """Compile (or load from numba's cache) every kernel of ``groups``.

    Returns ``(group, seconds, cache folder)`` per group; ``report`` receives a line
    per group as it finishes.

    Raises:
        ConfigError: an unknown group or dtype, or numba kernels that cannot run
            (numba missing, or ``TOKENLOOM_DISABLE_NUMBA`` set).
    """
    from tokenloom.kernels import DISABLE_ENV, KERNELS, stamp

    groups, token_dtypes = list(groups), list(token_dtypes)
    unknown = [g for g in groups if g not in GROUPS] + [
        d for d in token_dtypes if d not in _TOKEN_DTYPES
    ]
    if unknown:
        raise ConfigError(
            f"warmup: unknown kernel group or token dtype {unknown[0]!r}; "
            f"groups: {', '.join(GROUPS)}; dtypes: {', '.join(_TOKEN_DTYPES)}"
        )
    stamp.refresh()  # a changed kernel source: recompile every kernel (kernels/stamp.py)
    if not KERNELS.available() or KERNELS.get("sample_index") is None:
        raise ConfigError(
            f"warmup: the numba kernels cannot run here (numba missing, or "
            f"{DISABLE_ENV} set); nothing to compile"
        )
    results = []
    for group in groups:
        start = time.perf_counter()
        dispatchers = _WARMERS[group](token_dtypes)
        seconds = time.perf_counter() - start
        folder = str(
            read_attribute(read_attribute(dispatchers[0], "stats", None), "cache_path", "?")
        )
        results.append((group, seconds, folder))
        report(f"{group:<9} {seconds:6.1f} s   cached in {folder}")
    return results


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``warmup`` subcommand."""
    parser = subparsers.add_parser(
        "warmup",
        help="compile every numba kernel into numba's cache (container builds)",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--kernels",
        default=",".join(GROUPS),
        metavar="GROUPS",
        help=f"comma-separated kernel groups (default: all: {','.join(GROUPS)})",
    )
    parser.add_argument(
        "--token-dtypes",
        default="uint16,int32",
        metavar="DTYPES",
        help="token dtypes of the .bin files to compile the sample kernels "
        "for (default: uint16,int32, what preprocess writes for "
        "vocabularies below / above 65,500)",
    )
    parser.add_argument("--quiet", action="store_true", help="print nothing on success")
    parser.set_defaults(func=_run)
    return parser


def _run(args: argparse.Namespace) -> int:
    def split(text: str) -> list[str]:
        return [part.strip() for part in text.split(",") if part.strip()]

    def say(line: str) -> None:
        if not args.quiet:
            print(line, flush=True)

    start = time.perf_counter()
    warm_up(split(args.kernels), split(args.token_dtypes), report=say)
    say(
        f"done in {time.perf_counter() - start:.1f} s; later processes load these kernels "
        "from the cache"
    )
    return 0
