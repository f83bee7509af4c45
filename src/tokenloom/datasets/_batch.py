"""``GPTDataset.get_batch``: many samples into preallocated ``[B, seq]`` arrays.

The numba kernel (``tokenloom.kernels.batch.fill_batch``) runs when the kernels are
available (:mod:`tokenloom.kernels`) and the dataset's tokens are mmapped; otherwise
:func:`reference_get_batch` stacks ``dataset[i]`` row by row (the specification).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Optional

import numpy

from tokenloom.errors import ConfigError
from tokenloom.index.validate import sample_rows
from tokenloom.kernels import KERNELS, read_only

__all__ = ["BATCH_FIELDS", "allocate_batch", "get_batch", "reference_get_batch"]

BATCH_FIELDS = {
    "tokens": numpy.int64,
    "labels": numpy.int64,
    "loss_mask": numpy.float32,
    "position_ids": numpy.int64,
}

def allocate_batch(batch_size: int, sequence_length: int) -> dict[str, numpy.ndarray]:
    """Empty ``[batch_size, sequence_length]`` arrays for every batch field."""
    return {name: numpy.empty((batch_size, sequence_length), dtype=dtype)
            for name, dtype in BATCH_FIELDS.items()}


def _check_out(out: Mapping[str, numpy.ndarray], shape: tuple) -> dict[str, numpy.ndarray]:
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


def reference_get_batch(dataset, indices: Sequence[Optional[int]],
                        out: dict[str, numpy.ndarray]) -> dict[str, numpy.ndarray]:
    """Fill ``out`` row by row from ``dataset[i]`` (readable, slow)."""
    for b, index in enumerate(indices):
        sample = dataset[index]
        for name in BATCH_FIELDS:
            out[name][b] = sample[name]
    return out


def get_batch(dataset, indices: Sequence[Optional[int]],
              out: Optional[Mapping[str, numpy.ndarray]] = None) -> dict[str, numpy.ndarray]:
    """See ``GPTDataset.get_batch``."""
    indices = list(indices)
    shape = (len(indices), dataset.config.sequence_length)
    out = allocate_batch(*shape) if out is None else _check_out(out, shape)
    rows = sample_rows(indices, len(dataset))
    source, maker = dataset._sampler()
    maker.check_indices(source, dataset.document_index, dataset.sample_index,
                        dataset.shuffle_index, len(dataset))
    module = KERNELS.get("batch")
    if module is None or source.tokens is None or not len(indices):
        return reference_get_batch(dataset, [None if r < 0 else int(r) for r in rows], out)
    bad = module.fill_batch(source.tokens, source.pointers, source.itemsize, source.lengths,
           read_only(dataset.document_index), read_only(dataset.sample_index),
           read_only(dataset.shuffle_index), rows,
           maker.extra, maker.pad, maker.eod, maker.pad_in_data, bool(dataset.config.reset_position_ids),
           bool(dataset.config.eod_mask_loss), out["tokens"], out["labels"], out["loss_mask"],
           out["position_ids"])
    if bad < 0:
        raise source.bad_document(-1 - int(bad))
    return out
