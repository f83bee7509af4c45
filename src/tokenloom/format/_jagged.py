"""Turn jagged document collections into (flat tokens, per-document counts) chunks."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy

from tokenloom.errors import FormatError
from tokenloom.format._buffers import as_numpy


def _is_awkward(documents: object) -> bool:
    return type(documents).__module__.split(".")[0] == "awkward"


def _awkward_chunks(
    documents: Any, chunk_size: int
) -> Iterator[tuple[numpy.ndarray, numpy.ndarray]]:
    import awkward  # imported only when an awkward Array is handed in

    if documents.ndim != 2:
        raise FormatError(
            f"add_documents: awkward Array must be 2-D (documents x tokens), "
            f"got {documents.ndim} dimensions"
        )
    counts = numpy.asarray(awkward.to_numpy(awkward.num(documents, axis=1)), dtype=numpy.int64)
    flat = awkward.to_numpy(awkward.flatten(documents, axis=1))
    ends = numpy.cumsum(counts)
    start_doc, start_tok = 0, 0
    while start_doc < counts.shape[0]:
        # take documents until the chunk holds at least chunk_size tokens (at least one)
        stop_doc = int(numpy.searchsorted(ends, start_tok + chunk_size, side="left")) + 1
        stop_doc = min(max(stop_doc, start_doc + 1), counts.shape[0])
        stop_tok = int(ends[stop_doc - 1])
        yield flat[start_tok:stop_tok], counts[start_doc:stop_doc]
        start_doc, start_tok = stop_doc, stop_tok


def _iterable_chunks(
    documents: Iterable[Any], chunk_size: int
) -> Iterator[tuple[numpy.ndarray, numpy.ndarray]]:
    pending: list[numpy.ndarray] = []
    counts: list[int] = []
    total = 0
    for position, document in enumerate(documents):
        array = as_numpy(document)
        if array.ndim != 1:
            raise FormatError(f"add_documents: document {position} is not 1-D")
        pending.append(array)
        counts.append(array.shape[0])
        total += array.shape[0]
        if total >= chunk_size:
            yield _concatenate(pending), numpy.asarray(counts, dtype=numpy.int64)
            pending, counts, total = [], [], 0
    if pending:
        yield _concatenate(pending), numpy.asarray(counts, dtype=numpy.int64)


def _concatenate(arrays: Sequence[numpy.ndarray]) -> numpy.ndarray:
    nonempty = [a for a in arrays if a.shape[0]] or arrays[:1]
    return numpy.concatenate(nonempty)


def iter_flat_chunks(
    documents: Any, chunk_size: int
) -> Iterator[tuple[numpy.ndarray, numpy.ndarray]]:
    """Yield ``(flat_tokens, counts)``: consecutive documents concatenated, about
    ``chunk_size`` tokens per chunk (at least one document)."""
    if _is_awkward(documents):
        return _awkward_chunks(documents, chunk_size)
    if isinstance(documents, numpy.ndarray) and documents.ndim == 2:
        documents = list(documents)
    return _iterable_chunks(documents, chunk_size)
