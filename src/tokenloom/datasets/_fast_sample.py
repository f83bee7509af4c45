"""``dataset[i]`` by the numba kernel ``fill_sample``: four fresh arrays per call.

:func:`fast_fetch` returns the function that serves ``dataset[i]`` through
``tokenloom.kernels.batch.fill_sample``, which writes tokens, labels, loss mask and
position ids straight from the mmapped ``.bin``. The kernel loads in the kernel
loader's background thread (:func:`load_sample_kernels`, submitted to
:data:`tokenloom.kernels.KERNELS`); until it is loaded the general path serves, as
:func:`tokenloom.index.dispatch.sample_route` says (the one route that depends on
timing; the samples are the same bytes either way). Property tests
(``tests/datasets/test_sample_paths.py``) prove the two paths equal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional, Protocol

import numpy

from tokenloom.datasets._tokens import Array, TokenSource
from tokenloom.index import dispatch
from tokenloom.index.validate import sample_position
from tokenloom.kernels import KERNELS, compiled_entry

__all__ = [
    "Fetch",
    "SampleShape",
    "fast_fetch",
    "kernel_params",
    "load_sample_kernels",
    "sample_arguments",
]

Fetch = Callable[[Optional[int]], dict[str, Array]]
"""``fetch(idx) -> sample dict`` (``None``: the padding sample)."""

#: ``(source, document_index, sample_index, shuffle_index, params, seq)``
KernelArguments = tuple[TokenSource, Array, Array, Array, Array, int]


class SampleShape(Protocol):
    """What the kernel path needs of a :class:`~tokenloom.datasets._sample.SampleMaker`."""

    config: Any
    seq: int
    extra: int
    pad: int
    eod: Any
    pad_in_data: bool
    causal: Optional[Array]

    def general_fetch(
        self,
        source: TokenSource,
        document_index: Array,
        sample_index: Array,
        shuffle_index: Array,
        count: int,
    ) -> Fetch:
        """The general path over the same indices."""
        ...


def kernel_params(maker: SampleShape, source: TokenSource) -> Array:
    """``fill_sample``'s ``params`` array for this dataset."""
    config = maker.config
    return numpy.array(
        [
            source.itemsize,
            maker.extra,
            maker.pad,
            maker.eod,
            maker.pad_in_data,
            config.reset_position_ids,
            config.eod_mask_loss,
        ],
        dtype=numpy.int64,
    )


def sample_arguments(
    source: TokenSource,
    document_index: Array,
    sample_index: Array,
    shuffle_index: Array,
    params: Array,
    seq: int,
) -> tuple[Any, ...]:
    """``fill_sample``'s arguments for sample 0, typed exactly as ``fast_fetch``'s calls."""
    return (
        source.tokens,
        source.pointers,
        source.lengths,
        document_index,
        sample_index,
        shuffle_index,
        0,
        params,
        numpy.empty(seq, numpy.int64),
        numpy.empty(seq, numpy.int64),
        numpy.empty(seq, numpy.float32),
        numpy.empty(seq, numpy.int64),
    )


def load_sample_kernels(
    source: TokenSource,
    document_index: Array,
    sample_index: Array,
    shuffle_index: Array,
    params: Array,
    seq: int,
) -> None:
    """Import the kernels and call each once on sample 0 of these indices, into buffers
    shaped exactly as the real calls' (this loads the machine code for these dtypes),
    then publish them to ``source`` (:meth:`TokenSource.use_kernels`)."""
    module = KERNELS.get("batch")
    if module is None or source.tokens is None:
        return
    if sample_index.shape[0] >= 2 and shuffle_index.shape[0]:
        extra, pad = int(params[1]), int(params[2])
        text = numpy.empty(seq + extra, dtype=numpy.int64)
        module.gather_text(
            source.tokens,
            source.pointers,
            source.itemsize,
            source.lengths,
            document_index,
            sample_index,
            0,
            extra,
            pad,
            text,
        )
        module.fill_sample(
            *sample_arguments(source, document_index, sample_index, shuffle_index, params, seq)
        )
    source.use_kernels(module.gather_text, module.fill_sample)


def fast_fetch(
    maker: SampleShape,
    source: TokenSource,
    document_index: Array,
    sample_index: Array,
    shuffle_index: Array,
    count: int,
    background: bool = True,
) -> Fetch:
    """``fetch(idx)`` by the ``fill_sample`` kernel; everything per-dataset is looked up
    here, once. The kernel loads in :data:`~tokenloom.kernels.KERNELS`'s background
    thread (in this one when ``background`` is False); until then the general path
    serves, as :func:`tokenloom.index.dispatch.sample_route` says."""
    params = kernel_params(maker, source)
    arguments = (source, document_index, sample_index, shuffle_index, params, maker.seq)
    if source.sample_kernel is None:
        if background:
            KERNELS.submit(lambda: load_sample_kernels(*arguments))
        else:
            load_sample_kernels(*arguments)
    attention = maker.causal if maker.config.create_attention_mask else None
    slow = maker.general_fetch(source, document_index, sample_index, shuffle_index, count)
    return _kernel_fetch(arguments, count, attention, slow)


def _kernel_fetch(
    arguments: KernelArguments, count: int, attention: Optional[Array], slow: Fetch
) -> Fetch:
    """The hot closure: the kernel through its compiled entry point for exactly these
    argument types (:func:`tokenloom.kernels.compiled_entry`; every array passed is one
    bound here or a fresh ``numpy.empty`` made the same way)."""
    source, document_index, sample_index, shuffle_index, params, seq = arguments
    current = source.current  # the .bin now (the pool may evict it between calls)
    arrays: tuple[Any, ...] = (source.pointers, source.lengths)
    arrays += (document_index, sample_index, shuffle_index)  # fill_sample's 2nd to 6th
    empty, int64, float32 = numpy.empty, numpy.int64, numpy.float32
    kernel: Optional[Callable[..., Any]] = None
    served = 0

    def fetch(idx: Optional[int]) -> dict[str, Array]:
        nonlocal kernel, served
        if kernel is None:
            kernel = _ready_kernel(arguments, served)
            if kernel is None:
                served += 1
                return slow(idx)
        tokens = current()
        if tokens is None:  # the mapping was refused: read by pread
            return slow(idx)
        k = 0
        if idx is not None:  # the common case inline, the rest (and errors) validated
            k = idx if type(idx) is int and 0 <= idx < count else sample_position(idx, count)
        out_tokens, out_labels = empty(seq, int64), empty(seq, int64)
        loss_mask, position_ids = empty(seq, float32), empty(seq, int64)
        bad = kernel(tokens, *arrays, k, params, out_tokens, out_labels, loss_mask, position_ids)
        if bad:
            raise source.bad_document(-1 - bad)
        if idx is None:
            loss_mask.fill(0.0)
        if attention is None:
            return {
                "tokens": out_tokens,
                "labels": out_labels,
                "loss_mask": loss_mask,
                "position_ids": position_ids,
            }
        return {
            "tokens": out_tokens,
            "labels": out_labels,
            "attention_mask": attention,
            "loss_mask": loss_mask,
            "position_ids": position_ids,
        }

    return fetch


def _ready_kernel(arguments: KernelArguments, served: int) -> Optional[Callable[..., Any]]:
    """The kernel's entry point when :func:`~tokenloom.index.dispatch.sample_route`
    says to use it now (waiting for the background load first when it says ``WAIT``),
    else None: the general path serves this sample."""
    source = arguments[0]
    route = dispatch.sample_route(source.sample_kernel is not None, served)
    if route == dispatch.WAIT:
        KERNELS.join()
        route = dispatch.KERNEL if source.sample_kernel is not None else dispatch.GENERAL
    loaded = source.sample_kernel
    if route != dispatch.KERNEL or loaded is None:
        return None
    return _entry(loaded, arguments)


def _entry(kernel: Callable[..., Any], arguments: KernelArguments) -> Callable[..., Any]:
    """``kernel``'s compiled entry point for ``fast_fetch``'s argument types."""
    entry: Callable[..., Any] = compiled_entry(kernel, sample_arguments(*arguments))
    if entry is kernel:  # the dispatcher: ``k`` as a plain int (a bool would recompile)
        return lambda *args: kernel(*args[:6], int(args[6]), *args[7:])
    return entry
