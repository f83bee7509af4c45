"""``get_batch``: many samples into preallocated ``[B, seq]`` arrays, one pass.

:func:`fill_rows` writes sample ``positions[i]`` of one dataset into row ``dest[i]`` of
the output: ``GPTDataset.get_batch`` calls it once with ``dest = 0 .. B-1``, and
``BlendedDataset.get_batch`` once per contributing dataset with that dataset's rows, so
no sub-batch is allocated or scattered. The numba kernel
(``tokenloom.kernels.batch.fill_batch``) runs when the kernels are available
(:mod:`tokenloom.kernels`) and the dataset's tokens are mmapped; otherwise
:func:`reference_rows` copies ``dataset[i]`` row by row (the readable specification,
which the property tests compare the kernel against).

Everything the kernel needs from a ``GPTDataset`` (read-only index views, the token
arrays, the int64 ``params``) is gathered once per set of index arrays into a
:class:`BatchInputs` (``GPTDataset.batch_inputs()``), so a call costs one validation of
the indices, one kernel call per dataset and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

import numpy

from tokenloom.attributes import read_attribute
from tokenloom.datasets._fast_sample import kernel_params
from tokenloom.datasets._ranges import (
    NO_ATTRIBUTION,
    Attribution,
    AttributionPool,
    fill_reference,
    range_width,
    wants_ranges,
)
from tokenloom.datasets._sample import SampleMaker
from tokenloom.datasets._tokens import TokenSource
from tokenloom.errors import ConfigError, SampleIndexError
from tokenloom.index.bijection import BijectionShuffle
from tokenloom.index.validate import sample_rows
from tokenloom.kernels import KERNELS, read_only

__all__ = [
    "BATCH_FIELDS",
    "BatchInputs",
    "allocate_batch",
    "check_out",
    "fill_rows",
    "get_batch",
    "reference_get_batch",
    "reference_rows",
]

BATCH_FIELDS = {
    "tokens": numpy.int64,
    "labels": numpy.int64,
    "loss_mask": numpy.float32,
    "position_ids": numpy.int64,
}


def allocate_batch(batch_size: int, sequence_length: int) -> dict[str, numpy.ndarray]:
    """Empty ``[batch_size, sequence_length]`` arrays for every batch field."""
    return {
        name: numpy.empty((batch_size, sequence_length), dtype=dtype)
        for name, dtype in BATCH_FIELDS.items()
    }


def check_out(out: Mapping[str, numpy.ndarray], shape: tuple[int, int]) -> dict[str, numpy.ndarray]:
    """The four arrays of ``out`` after checking their dtype, shape and writability
    (ConfigError naming the field otherwise)."""
    checked = {}
    for name, dtype in BATCH_FIELDS.items():
        array = out.get(name) if isinstance(out, Mapping) else None
        if (
            not isinstance(array, numpy.ndarray)
            or array.shape != shape
            or array.dtype != dtype
            or not array.flags.writeable
        ):
            got = (
                None
                if array is None
                else f"{read_attribute(array, 'dtype', '?')} {read_attribute(array, 'shape', '?')}"
            )
            raise ConfigError(
                f"get_batch out[{name!r}] must be a writable {numpy.dtype(dtype)} "
                f"array of shape {shape}, got {got}"
            )
        checked[name] = array
    return checked


class BatchInputs:
    """The kernel arguments of one GPTDataset over one set of index arrays (checked
    against the documents on construction).

    ``kernel_args`` is ``(tokens, pointers, lengths, document_index, sample_index,
    shuffle_index)`` (read-only views), or None when the kernel cannot serve this
    dataset (tokens not mmapped, or an EOD/pad id that is no int64); ``params`` is the
    kernel's int64 parameter array; ``bound`` the index container they were made from.
    """

    def __init__(
        self,
        source: TokenSource,
        maker: SampleMaker,
        arrays: Mapping[str, numpy.ndarray],
        count: int,
    ) -> None:
        document_index, sample_index, shuffle_index = (
            arrays["document_index"],
            arrays["sample_index"],
            arrays["shuffle_index"],
        )
        maker.check_indices(source, document_index, sample_index, shuffle_index, count)
        self.source = source
        self.sample_index = sample_index
        self.width: Optional[int] = None
        self.bound: object = arrays
        self.count = count
        self._rest: Optional[tuple[numpy.ndarray, ...]] = None
        self.bijection = shuffle_index if isinstance(shuffle_index, BijectionShuffle) else None
        self.params = numpy.zeros(7, dtype=numpy.int64)
        if source.tokens is None:
            return
        try:
            self.params = kernel_params(maker, source)
        except (TypeError, OverflowError, ValueError):  # e.g. a tokenizer without EOD
            return
        self._rest = (
            source.pointers,
            source.lengths,
            read_only(document_index),
            read_only(sample_index),
            # a bijection's rows: made per call (kernel_call)
            numpy.zeros(0, numpy.int64) if self.bijection is not None else read_only(shuffle_index),
        )

    def kernel_call(
        self, args: tuple[Any, ...], positions: numpy.ndarray
    ) -> tuple[tuple[Any, ...], numpy.ndarray]:
        """``(args, positions)`` for ``fill_batch`` (``args``: :attr:`kernel_args`). A
        bijection shuffle has no array: the rows of these positions are computed now
        (vectorised) into a small shuffle index ``[row of 0, row of positions[0], ...]`` that the returned positions
        ``1 .. n`` address (``-1`` kept: padding, sample 0; ``-2`` for a position outside
        the dataset, which the kernel then reports as it does for an exact shuffle)."""
        shuffle = self.bijection
        if shuffle is None or not self.count:
            return args, positions
        inside = (positions >= 0) & (positions < self.count)
        wanted = numpy.concatenate(([0], numpy.where(inside, positions, 0)))
        local = numpy.where(inside, numpy.arange(1, positions.size + 1), -2)
        local[positions == -1] = -1
        return (*args[:5], read_only(shuffle[wanted])), local

    def range_width(self) -> int:
        """:func:`tokenloom.datasets._ranges.range_width` of these indices (once)."""
        if self.width is None:
            self.width = range_width(self.sample_index)
        return self.width

    @property
    def kernel_args(self) -> Optional[tuple[numpy.ndarray, ...]]:
        """The kernel's first six arguments now (the ``.bin`` looked up at each call:
        the pool may evict it between calls), or None."""
        rest = self._rest
        tokens = None if rest is None else self.source.current()
        return None if tokens is None or rest is None else (tokens, *rest)

    @kernel_args.setter
    def kernel_args(self, value: Optional[tuple[numpy.ndarray, ...]]) -> None:
        self._rest = None if value is None else value[1:]


def reference_rows(
    dataset: Any, positions: numpy.ndarray, dest: numpy.ndarray, out: Mapping[str, numpy.ndarray]
) -> None:
    """Row ``dest[i]`` of ``out`` <- ``dataset[positions[i]]`` (``-1``: ``dataset[None]``,
    a padding sample): the readable specification of :func:`fill_rows`."""
    count, batch = len(dataset), out["tokens"].shape[0]
    for position, row in zip(positions.tolist(), dest.tolist()):
        if not -1 <= position < count or not 0 <= row < batch:
            raise _out_of_range(dataset, position, row, batch, count)
        sample = dataset[None if position < 0 else position]
        for name in BATCH_FIELDS:
            out[name][row] = sample[name]


def fill_rows(
    dataset: Any,
    positions: numpy.ndarray,
    dest: numpy.ndarray,
    out: Mapping[str, numpy.ndarray],
    attribution: Optional[Attribution] = None,
    source: int = 0,
) -> None:
    """Row ``dest[i]`` of ``out`` <- sample ``positions[i]`` of ``dataset`` (int64, in
    ``[0, len(dataset))``, or ``-1`` for a padding sample), by the kernel when it can
    serve ``dataset`` (one that has ``batch_inputs()``), else by :func:`reference_rows`.
    With ``attribution``, also the rows' document ranges, and their loss-bearing tokens
    added to dataset id ``source``'s count.

    Raises SampleIndexError for a position past the dataset, FormatError for a document
    outside its ``.bin``."""
    make_inputs: Optional[Callable[[], BatchInputs]] = read_attribute(dataset, "batch_inputs", None)
    module = KERNELS.get("batch") if make_inputs is not None and len(positions) else None
    inputs = make_inputs() if module is not None and make_inputs is not None else None
    args = None if inputs is None else inputs.kernel_args  # held for this call only
    if module is None or inputs is None or args is None:
        reference_rows(dataset, positions, dest, out)
        if attribution is not None:
            fill_reference(attribution, dataset, positions, dest, out["loss_mask"], source)
        return
    extras = NO_ATTRIBUTION if attribution is None else (*attribution, source)
    arguments, kernel_positions = inputs.kernel_call(args, positions)
    status = int(
        module.fill_batch(
            *arguments,
            kernel_positions,
            dest,
            inputs.params,
            out["tokens"],
            out["labels"],
            out["loss_mask"],
            out["position_ids"],
            *extras,
        )
    )
    if status < 0:
        raise inputs.source.bad_document(-1 - status)
    if status > 0:
        i = status - 1
        raise _out_of_range(
            dataset, int(positions[i]), int(dest[i]), out["tokens"].shape[0], inputs.count
        )


def _out_of_range(
    dataset: Any, position: int, row: int, batch: int, count: int
) -> SampleIndexError:
    return SampleIndexError(
        f"sample index {position} out of range for {count} samples of this "
        f"{type(dataset).__name__} (get_batch output row {row} of {batch}; -1 is a padding "
        f"sample); the blend's indices do not belong to this dataset"
    )


def reference_get_batch(
    dataset: Any, indices: Sequence[Optional[int]], out: dict[str, numpy.ndarray]
) -> dict[str, numpy.ndarray]:
    """Fill ``out`` row by row from ``dataset[i]`` (readable, slow)."""
    for b, index in enumerate(indices):
        sample = dataset[index]
        for name in BATCH_FIELDS:
            out[name][b] = sample[name]
    return out


def get_batch(
    dataset: Any,
    indices: Sequence[Optional[int]],
    out: Optional[Mapping[str, numpy.ndarray]] = None,
) -> dict[str, numpy.ndarray]:
    """See ``GPTDataset.get_batch``."""
    indices = list(indices)
    shape = (len(indices), dataset.config.sequence_length)
    arrays = allocate_batch(*shape) if out is None else check_out(out, shape)
    rows = sample_rows(indices, len(dataset))
    dest = numpy.arange(len(rows), dtype=numpy.int64)
    if not wants_ranges(dataset.config):
        fill_rows(dataset, rows, dest, arrays)
        return arrays
    pool: Optional[AttributionPool] = read_attribute(dataset, "attribution_pool", None)
    attribution = (pool or AttributionPool()).take(len(rows), dataset.document_range_width(), 1)
    fill_rows(dataset, rows, dest, arrays, attribution)
    ranges, counts, tokens = attribution
    return {
        **arrays,
        "document_ranges": ranges,
        "document_range_counts": counts,
        "tokens_per_source": tokens,
    }
