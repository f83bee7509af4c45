"""``GPTDataset.get_batch``: many samples into preallocated ``[B, seq]`` arrays.

The numba kernel (``_batch_kernel``) is used when numba is importable, the dataset's
tokens are mmapped, and ``TOKENLOOM_DISABLE_NUMBA`` is unset; otherwise
:func:`reference_get_batch` stacks ``dataset[i]`` row by row (the specification).
"""

from __future__ import annotations

import operator
import os
from typing import Dict, Mapping, Optional, Sequence

import numpy

from tokenloom.errors import ConfigError

__all__ = ["BATCH_FIELDS", "allocate_batch", "compiled_entry", "get_batch", "kernels",
           "kernels_available", "reference_get_batch"]

BATCH_FIELDS = {
    "tokens": numpy.int64,
    "labels": numpy.int64,
    "loss_mask": numpy.float32,
    "position_ids": numpy.int64,
}

_KERNELS = []


def kernels_available() -> bool:
    """Whether the numba kernels can be used (numba installed, not disabled), without
    importing numba."""
    if os.environ.get("TOKENLOOM_DISABLE_NUMBA", "").strip() not in ("", "0"):
        return False
    if _KERNELS:
        return _KERNELS[0] is not None
    import importlib.util

    return importlib.util.find_spec("numba") is not None


def kernels():
    """The compiled ``_batch_kernel`` module, or None (no numba, or disabled by the
    ``TOKENLOOM_DISABLE_NUMBA`` environment variable)."""
    if os.environ.get("TOKENLOOM_DISABLE_NUMBA", "").strip() not in ("", "0"):
        return None
    if not _KERNELS:
        try:
            from tokenloom.datasets import _batch_kernel as module
        except ModuleNotFoundError as error:
            if error.name != "numba":
                raise
            module = None
        _KERNELS.append(module)
    return _KERNELS[0]


def compiled_entry(kernel, args: tuple):
    """The machine code ``kernel`` runs for arguments typed exactly like ``args`` (numba's
    ``get_overload``), callable without the dispatcher's per-call type resolution (a
    third of a microsecond per call with a dozen arguments); ``kernel`` itself when no
    such specialisation is loaded or numba's API differs.

    The entry point converts its arguments to the types of that specialisation without
    checking array dtypes, so the caller must pass arrays of exactly ``args``' types:
    the same array objects, or fresh ones made the same way."""
    try:
        from numba import typeof

        return kernel.get_overload(tuple(typeof(value) for value in args))
    except Exception:  # noqa: BLE001 - any failure: the dispatcher is always correct
        return kernel


def allocate_batch(batch_size: int, sequence_length: int) -> Dict[str, numpy.ndarray]:
    """Empty ``[batch_size, sequence_length]`` arrays for every batch field."""
    return {name: numpy.empty((batch_size, sequence_length), dtype=dtype)
            for name, dtype in BATCH_FIELDS.items()}


def _check_out(out: Mapping[str, numpy.ndarray], shape: tuple) -> Dict[str, numpy.ndarray]:
    checked = {}
    for name, dtype in BATCH_FIELDS.items():
        array = out.get(name) if isinstance(out, Mapping) else None
        if not isinstance(array, numpy.ndarray) or array.shape != shape \
                or array.dtype != dtype or not array.flags.writeable:
            got = None if array is None else f"{getattr(array, 'dtype', '?')} {getattr(array, 'shape', '?')}"
            raise ConfigError(f"get_batch out[{name!r}] must be a writable {numpy.dtype(dtype)} "
                              f"array of shape {shape}, got {got}")
        checked[name] = array
    return checked


def _integer(index) -> int:
    try:
        value = operator.index(index)  # int() would turn 1.7 or "1" into a sample silently
    except TypeError:
        raise TypeError(f"sample index must be an integer or None, got {index!r}") from None
    if not -2**63 <= value < 2**63:
        raise IndexError(f"sample index {value} out of range")
    return value


def _rows(indices: Sequence[Optional[int]], length: int) -> numpy.ndarray:
    """Sample positions as int64, -1 for ``None`` (padding sample); range checked."""
    rows = numpy.fromiter((-1 if i is None else _integer(i) for i in indices),
                          dtype=numpy.int64, count=len(indices))
    padding = numpy.array([i is None for i in indices], dtype=bool)
    rows = numpy.where(~padding & (rows < 0), rows + length, rows)
    bad = ~padding & ((rows < 0) | (rows >= length))
    if bad.any():
        raise IndexError(f"sample index {list(indices)[int(numpy.flatnonzero(bad)[0])]} out of "
                         f"range for {length} samples")
    return rows


def reference_get_batch(dataset, indices: Sequence[Optional[int]],
                        out: Dict[str, numpy.ndarray]) -> Dict[str, numpy.ndarray]:
    """Fill ``out`` row by row from ``dataset[i]`` (readable, slow)."""
    for b, index in enumerate(indices):
        sample = dataset[index]
        for name in BATCH_FIELDS:
            out[name][b] = sample[name]
    return out


def get_batch(dataset, indices: Sequence[Optional[int]],
              out: Optional[Mapping[str, numpy.ndarray]] = None) -> Dict[str, numpy.ndarray]:
    """See ``GPTDataset.get_batch``."""
    indices = list(indices)
    shape = (len(indices), dataset.config.sequence_length)
    out = allocate_batch(*shape) if out is None else _check_out(out, shape)
    rows = _rows(indices, len(dataset))
    source, maker = dataset._sampler()
    module = kernels()
    if module is None or source.tokens is None or not len(indices):
        return reference_get_batch(dataset, [None if r < 0 else int(r) for r in rows], out)
    bad = module.fill_batch(source.tokens, source.pointers, source.itemsize, source.lengths,
           dataset.document_index, dataset.sample_index, dataset.shuffle_index, rows,
           maker.extra, maker.pad, maker.eod, maker.pad_in_data, bool(dataset.config.reset_position_ids),
           bool(dataset.config.eod_mask_loss), out["tokens"], out["labels"], out["loss_mask"],
           out["position_ids"])
    if bad < 0:
        raise source.bad_document(-1 - int(bad))
    return out
