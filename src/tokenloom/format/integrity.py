"""Statistics and a full integrity check of a ``.bin``/``.idx`` pair (``tokenloom inspect``).

Opening an :class:`IndexedDataset` checks only what is O(1) or O(documents); the
checks here also walk every sequence (pointers) and, with a vocabulary size, every
token, in bounded-memory chunks.
"""

from __future__ import annotations

import os
from typing import Optional

import numpy

from tokenloom.format import remote
from tokenloom.format.dtypes import DType
from tokenloom.format.reader import IndexedDataset, IndexFile
from tokenloom.format.spec import get_bin_path, get_idx_path, read_index_header, sequence_pointers

_TOKEN_CHUNK = 1 << 26


def describe_lengths(values: numpy.ndarray) -> dict[str, float]:
    """min/mean/p50/p99/max of ``values`` (zeros when empty)."""
    if values.size == 0:
        return {"min": 0, "mean": 0.0, "p50": 0.0, "p99": 0.0, "max": 0}
    p50, p99 = numpy.percentile(values, [50, 99])
    return {
        "min": int(values.min()),
        "mean": float(values.mean(dtype=numpy.float64)),
        "p50": float(p50),
        "p99": float(p99),
        "max": int(values.max()),
    }


def open_for_inspection(path_prefix: str) -> IndexedDataset:
    """Open a pair, detecting from the ``.idx`` size whether it is multimodal.

    The document index is checked here (the summary walks it), but the sequence-pointer
    check that every other open runs is skipped (``fast_cache_load=True``), so that
    :func:`check_integrity` can list every problem of a broken pair, which is what the
    reader's pointer error tells users to run."""
    idx_path = (
        remote.fetched_index(path_prefix)
        if remote.is_remote(path_prefix)
        else get_idx_path(path_prefix)
    )  # s3:// and msc://: the cached copy
    index = IndexFile(idx_path, multimodal=None, check_documents=True)
    multimodal = index.multimodal and index.header.sequence_count > 0
    index.close()
    return IndexedDataset(path_prefix, multimodal=multimodal, fast_cache_load=True)


def dataset_summary(dataset: IndexedDataset) -> dict[str, object]:
    """Header fields, counts and length statistics of an open dataset."""
    prefix = dataset.path_prefix
    idx_path, bin_bytes = remote.index_and_bin_size(dataset)
    header = read_index_header(idx_path)
    lengths = dataset.sequence_lengths.astype(numpy.int64)
    documents = dataset.document_indices
    bounds = numpy.concatenate([[0], numpy.cumsum(lengths)])
    doc_tokens = bounds[documents[1:]] - bounds[documents[:-1]]
    summary: dict[str, object] = {
        "prefix": prefix,
        "idx_path": idx_path,
        "idx_bytes": os.path.getsize(idx_path),
        "bin_path": get_bin_path(prefix),
        "bin_bytes": bin_bytes,
        "version": 1,
        "dtype": numpy.dtype(header.dtype).name,
        "dtype_code": DType.code_from_dtype(header.dtype),
        "multimodal": dataset.multimodal,
        "sequence_count": header.sequence_count,
        "document_count": header.num_documents,
        "token_count": int(bounds[-1]),
        "sequence_length": describe_lengths(lengths),
        "document_tokens": describe_lengths(doc_tokens),
        "sequences_per_document": describe_lengths(numpy.diff(documents)),
    }
    sequence_modes = dataset.sequence_modes
    if dataset.multimodal and sequence_modes is not None:
        modes, counts = numpy.unique(sequence_modes, return_counts=True)
        summary["modes"] = {str(int(m)): int(c) for m, c in zip(modes, counts)}
    return summary


def check_integrity(dataset: IndexedDataset, vocab_size: Optional[int] = None) -> list[str]:
    """Every problem found in an open dataset (empty list when the pair is sound)."""
    problems: list[str] = []
    prefix = dataset.path_prefix
    lengths = dataset.sequence_lengths
    itemsize = numpy.dtype(dataset.dtype).itemsize
    if lengths.size and lengths.min() < 0:
        problems.append(
            f"{prefix}.idx: negative sequence length at sequence {int(numpy.argmax(lengths < 0))}"
        )
    expected = sequence_pointers(lengths, itemsize)
    wrong = numpy.flatnonzero(expected != dataset.sequence_pointers)
    if wrong.size:
        at = int(wrong[0])
        problems.append(
            f"{prefix}.idx: {wrong.size} sequence pointer(s) disagree with the lengths "
            f"and the {itemsize}-byte dtype; first at sequence {at}: "
            f"{int(dataset.sequence_pointers[at])} instead of {int(expected[at])}"
        )
    total = int(lengths.sum(dtype=numpy.int64)) * itemsize
    size = remote.index_and_bin_size(dataset)[1]
    if size != total:
        problems.append(f"{prefix}.bin: {size} bytes, the index describes {total}")
    drops = numpy.flatnonzero(numpy.diff(dataset.document_indices) < 0)
    if drops.size:
        problems.append(f"{prefix}.idx: document index decreases at entry {int(drops[0]) + 1}")
    if vocab_size is not None and not problems:
        problems.extend(_check_vocab(dataset, int(vocab_size)))
    return problems


def _check_vocab(dataset: IndexedDataset, vocab_size: int) -> list[str]:
    tokens = dataset.tokens
    if tokens is None:  # non-mmap reader: one sequence range at a time is not needed here
        tokens = numpy.concatenate(dataset[:]) if len(dataset) else numpy.empty(0, dataset.dtype)
    for start in range(0, tokens.shape[0], _TOKEN_CHUNK):
        chunk = tokens[start : start + _TOKEN_CHUNK]
        bad = (chunk < 0) | (chunk >= vocab_size)
        if bad.any():
            at = int(numpy.argmax(bad))
            count = int(bad.sum())
            return [
                f"{dataset.path_prefix}.bin: token {chunk[at].item()} at token position "
                f"{start + at} is outside the vocabulary 0..{vocab_size - 1} "
                f"({count} such tokens in that {chunk.shape[0]}-token chunk)"
            ]
    return []


__all__ = ["describe_lengths", "open_for_inspection", "dataset_summary", "check_integrity"]
