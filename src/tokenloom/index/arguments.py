"""Argument checks shared by the fast and the reference index builders.

Every check raises :class:`tokenloom.errors.ConfigError` naming the argument, the
offending value and how to fix it, so a bad call never reaches a kernel that could
read out of bounds, loop forever or silently build a wrong index.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy

from tokenloom.errors import ConfigError

#: dataset ids are stored as int16, so at most this many datasets can be blended
MAX_DATASETS = int(numpy.iinfo(numpy.int16).max)

#: how far the blending weights may sum from 1 (megatron-core normalises them first)
WEIGHT_SUM_TOLERANCE = 1e-6


def as_int(value: Any, name: str, minimum: int | None = None) -> int:
    """``value`` as a Python int (bools and non-integral numbers are refused)."""
    if type(value) is int:  # the common case, without the ABC check (~1 us)
        if minimum is not None and value < minimum:
            raise ConfigError(f"{name} must be >= {minimum}, got {value}")
        return value
    if isinstance(value, (bool, numpy.bool_)) or not isinstance(value, numbers.Integral):
        raise ConfigError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    result = int(value)
    if minimum is not None and result < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {result}")
    return result


def as_flag(value: Any, name: str) -> int:
    """A 0/1 switch given as bool or int (megatron passes both forms)."""
    if value is True or value is False or (type(value) is int and value in (0, 1)):
        return int(value)
    if isinstance(value, (bool, numpy.bool_)):
        return int(value)
    if isinstance(value, numbers.Integral) and int(value) in (0, 1):
        return int(value)
    raise ConfigError(f"{name} must be True/False or 0/1, got {value!r}")


def int_array(values: Any, name: str) -> numpy.ndarray:
    """A 1-D integer ndarray view/copy of ``values`` (integral floats are accepted)."""
    array = numpy.asarray(values)
    if array.ndim != 1:
        raise ConfigError(f"{name} must be a 1-D array, got shape {array.shape}")
    if array.dtype.kind in "iu":
        return array
    if array.size == 0:
        return array.astype(numpy.int64)
    if (
        array.dtype.kind == "f"
        and numpy.all(numpy.isfinite(array))
        and numpy.all(array == numpy.floor(array))
    ):
        return array.astype(numpy.int64)
    raise ConfigError(f"{name} must hold integers, got dtype {array.dtype}")


def blending_weights(weights: Any) -> numpy.ndarray:
    """Validated float64 weights for :func:`build_blending_indices`."""
    try:
        array = numpy.asarray(weights, dtype=numpy.float64)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"weights must be a 1-D sequence of numbers: {exc}") from None
    if array.ndim != 1 or array.size == 0:
        raise ConfigError(f"weights must be a non-empty 1-D sequence, got shape {array.shape}")
    if array.size > MAX_DATASETS:
        raise ConfigError(
            f"weights has {array.size} entries but dataset ids are int16: "
            f"blend at most {MAX_DATASETS} datasets (e.g. merge small datasets first)"
        )
    bad = numpy.flatnonzero(~(numpy.isfinite(array) & (array > 0)))
    if bad.size:
        raise ConfigError(
            f"weights must be finite and > 0; weights[{bad[0]}] = {float(array[bad[0]])!r} "
            "(drop datasets that should not be sampled)"
        )
    total = float(array.sum())
    if abs(total - 1.0) > WEIGHT_SUM_TOLERANCE:
        raise ConfigError(
            f"weights must sum to 1 (they sum to {total!r}); normalise them first, "
            "e.g. weights / weights.sum(), as megatron-core's BlendedDataset does"
        )
    return numpy.ascontiguousarray(array)


def exhaustive_sizes(sizes: Any) -> numpy.ndarray:
    """Validated int64 per-dataset sample counts for the exhaustive blend."""
    array = int_array(sizes, "sizes")
    if array.size == 0:
        raise ConfigError("sizes must name at least one dataset, got an empty array")
    if array.size > MAX_DATASETS:
        raise ConfigError(
            f"sizes has {array.size} entries but dataset ids are int16: "
            f"blend at most {MAX_DATASETS} datasets"
        )
    if array.dtype == numpy.uint64 and int(array.max()) > numpy.iinfo(numpy.int64).max:
        raise ConfigError(f"sizes holds a value above int64: {int(array.max())}")
    array = array.astype(numpy.int64)
    bad = numpy.flatnonzero(array <= 0)
    if bad.size:
        raise ConfigError(
            f"sizes must all be > 0; sizes[{bad[0]}] = {int(array[bad[0]])} "
            "(leave empty datasets out of the blend)"
        )
    if int(array.sum(dtype=numpy.float64)) >= 2**62:
        raise ConfigError(f"sizes sum to {int(array.sum(dtype=numpy.float64))}, too many samples")
    return numpy.ascontiguousarray(array)


def sample_index_inputs(
    sequence_lengths: Any, document_index: Any, check_values: bool = True
) -> tuple[numpy.ndarray, numpy.ndarray]:
    """Validated document lengths and document order for :func:`build_sample_index`.

    ``check_values=False`` skips the O(n) range checks (the fast kernel does them
    during its single pass, see :func:`bad_document`)."""
    sizes = int_array(sequence_lengths, "sequence_lengths")
    documents = int_array(document_index, "document_index")
    if documents.size == 0:
        raise ConfigError(
            "document_index is empty: the split holds no document, so no sample can be "
            "built; give the split a non-empty document range or ask it for 0 samples"
        )
    if sizes.size == 0:
        raise ConfigError("sequence_lengths is empty but document_index refers to documents")
    if not check_values:
        return sizes, documents
    low, high = int(documents.min()), int(documents.max())
    if low < 0 or high >= sizes.size:
        raise documents_out_of_range(low, high, sizes.size)
    used = sizes[documents]
    if int(used.min()) < 0:
        position = int(numpy.argmin(used))
        raise bad_document(sizes, documents, position)
    return sizes, documents


def documents_out_of_range(low: int, high: int, count: int) -> ConfigError:
    """The error for a ``document_index`` whose ids run ``low..high`` with ``count``
    documents (``low < 0`` or ``high >= count``)."""
    return ConfigError(
        f"document_index holds {low if low < 0 else high}, outside the "
        f"{count} documents of sequence_lengths"
    )


def bad_document(sizes: numpy.ndarray, documents: numpy.ndarray, position: int) -> ConfigError:
    """The error for ``documents[position]``: an id out of range or a negative length."""
    document = int(documents[position])
    if document < 0 or document >= sizes.size:
        return ConfigError(
            f"document_index[{position}] = {document} is outside the {sizes.size} "
            "documents of sequence_lengths"
        )
    return ConfigError(
        f"sequence_lengths holds a negative length {int(sizes[document])} (document {document})"
    )
