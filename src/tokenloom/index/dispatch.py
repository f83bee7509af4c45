"""Which implementation runs, for which inputs: the one table.

Every public builder of :mod:`tokenloom.index`, and ``dataset[i]`` of a GPT dataset,
asks a ``*_route`` function below which implementation to run. The choice depends on
the inputs only (their sizes and kinds), never on what the process did before, with two
exceptions: the last ``dataset[i]`` row, below, and a blend in a process that has not
started numba yet (the second row: the first kernel call of a process sets up numba's
compiler, 0.3-0.7 s, more than the numpy scan costs up to
``BLEND_NUMPY_MAX_WORK_BEFORE_NUMBA``; a later kernel's first call costs ~20 ms, as
:meth:`tokenloom.kernels.KernelLoader.started` tells); every implementation gives bit-identical
output (property-tested against :mod:`tokenloom.index.reference` and the general sample
path). When the numba kernels are unavailable (``TOKENLOOM_DISABLE_NUMBA=1``, or numba
cannot be imported, see :mod:`tokenloom.kernels`) a route naming a kernel runs the
reference twin instead.

=================  =======================================================  ==================
index              inputs                                                   implementation
=================  =======================================================  ==================
blending           ``size * (datasets + 750) <= BLEND_NUMPY_MAX_WORK``       ``NUMPY``
blending           ``... <= BLEND_NUMPY_MAX_WORK_BEFORE_NUMBA``, no kernel   ``NUMPY``
                   has run in the process yet
blending           ``datasets < BLEND_SCAN_BELOW``                           ``SCAN`` kernel
blending           otherwise                                                ``FAST`` kernel
schedule blend     one phase, every weight > 0                              ``FIXED`` (blending)
schedule blend     ``size <= SCHEDULE_REFERENCE_MAX_SAMPLES``               ``REFERENCE``
schedule blend     ``datasets < BLEND_SCAN_BELOW``, or two datasets with     ``SCAN`` kernel
                   the same weight in every phase
schedule blend     otherwise                                                ``FAST`` kernel
exhaustive blend   ``sum(sizes) * (datasets + 750) <= BLEND_NUMPY_MAX_WORK`` ``REFERENCE``
exhaustive blend   ``datasets < BLEND_SCAN_BELOW``                           ``SCAN`` kernel
exhaustive blend   otherwise                                                ``FAST`` kernel
sample index       ``len(document_index) <= SAMPLE_SMALL_MAX_DOCUMENTS`` and   ``SMALL`` (Python)
                   at most ``SAMPLE_SMALL_MAX_SAMPLES`` samples
sample index       ``len(document_index) <= SAMPLE_VECTORIZED_MAX_DOCUMENTS`` ``VECTORIZED``
sample index       otherwise                                                ``KERNEL``
shuffle            a C-contiguous writeable 1-D array of 1/2/4/8-byte items  ``KERNEL``
                   with at least ``SHUFFLE_KERNEL_MIN_SIZE`` items, MT19937
shuffle            otherwise                                                ``NUMPY``
bijection rows     at least ``BIJECTION_KERNEL_MIN_POSITIONS`` positions      ``KERNEL``
bijection rows     fewer (``dataset[i]``: one)                              ``REFERENCE``
``dataset[i]``     ``fill_sample`` cannot make every field (tokens not      ``GENERAL``
                   memory-mapped, ``return_cu_seqlens``, per-sample
                   attention masks, an EOD or pad id outside int64)
``dataset[i]``     otherwise, once the kernel is loaded                     ``KERNEL``
``dataset[i]``     otherwise, while it loads: the first                     ``GENERAL``, then
                   ``GENERAL_SAMPLES_BEFORE_WAIT`` samples                  ``WAIT`` + ``KERNEL``
=================  =======================================================  ==================

The one exception: the sample kernel loads in the kernel loader's background thread
(:data:`tokenloom.kernels.KERNELS`; numba's import and its cached machine code take
0.3-0.5 s, a compile seconds), so that the first sample of a process never waits for
numba. Until it is loaded, samples come from the general path; which samples those are
depends on timing. The samples do not: both paths give the same bytes (property tests in
``tests/datasets/test_sample_paths.py``), so only the speed of those first samples
depends on timing. A reader that asks for more than ``GENERAL_SAMPLES_BEFORE_WAIT``
samples before the load ends waits for it rather than staying on the slower path.

A process's first kernel call loads numba and the cached machine code (about a second
of CPU on a loaded machine), so the thresholds keep small inputs off the kernels: below
them the implementation that loads nothing is the faster one in a process that has not
loaded numba yet, or (the sample index and shuffle thresholds) costs at most about a
millisecond more per array than the loaded kernel, so that a cold build of a small
dataset starts in milliseconds. Above them the kernel runs, faster there. The
measurements are in ``BENCHMARKS.md`` (``benchmarks/bench_dispatch.py``).
"""

from __future__ import annotations

import operator
from typing import Any

import numpy

from tokenloom.attributes import read_attribute

__all__ = [
    "BLEND_NUMPY_MAX_WORK",
    "BLEND_NUMPY_MAX_WORK_BEFORE_NUMBA",
    "BIJECTION_KERNEL_MIN_POSITIONS",
    "BLEND_SCAN_BELOW",
    "FAST",
    "FIXED",
    "GENERAL",
    "GENERAL_SAMPLES_BEFORE_WAIT",
    "KERNEL",
    "NUMPY",
    "REFERENCE",
    "SAMPLE_SMALL_MAX_DOCUMENTS",
    "SAMPLE_SMALL_MAX_SAMPLES",
    "SAMPLE_VECTORIZED_MAX_DOCUMENTS",
    "SCAN",
    "SCHEDULE_REFERENCE_MAX_SAMPLES",
    "SHUFFLE_KERNEL_MIN_SIZE",
    "SMALL",
    "VECTORIZED",
    "WAIT",
    "bijection_route",
    "blending_route",
    "exhaustive_route",
    "sample_index_route",
    "sample_route",
    "sample_kernel_applies",
    "schedule_route",
    "shuffle_route",
]

#: implementation names
NUMPY, REFERENCE, SMALL, VECTORIZED, SCAN, FAST, KERNEL, GENERAL, WAIT, FIXED = (
    "numpy",
    "reference",
    "small",
    "vectorized",
    "scan",
    "fast",
    "kernel",
    "general",
    "wait",
    "fixed",
)

BLEND_NUMPY_MAX_WORK = 25_000_000
"""Blends with ``size * (datasets + 750)`` up to this are built by the numpy scan
without numba (its cost is proportional to that product)."""

BLEND_NUMPY_MAX_WORK_BEFORE_NUMBA = 250_000_000
"""In a process where no kernel has run yet, blends up to this work are built by the
numpy scan too: the first kernel call of a process sets up numba's compiler (0.3-0.7 s
here), more than the scan costs at this work (about 0.9 ns a unit, 0.22 s). A cold start
over 3,000 small prefixes (30,000 samples: 112M) then loads no numba at all."""

BLEND_SCAN_BELOW = 24
"""Blends of fewer datasets take the plain O(datasets)-per-sample scan kernel; from
this many on, the sub-linear greedy (``kernels.blend_fast``) is faster."""

SAMPLE_SMALL_MAX_DOCUMENTS = 256
"""Document indices up to this length are cut into samples in Python integers
(``build_sample_index_small``): below it a numpy call's fixed cost (a microsecond or
more) outweighs a Python step's (tens of nanoseconds) over the few calls they need."""

SAMPLE_SMALL_MAX_SAMPLES = 1024
"""... and at most this many samples (a Python step each; more take ``VECTORIZED``)."""

SAMPLE_VECTORIZED_MAX_DOCUMENTS = 65_536
"""Document indices up to this length are cut into samples by cumulative sums (a few
numpy calls); longer ones by the one-pass kernel, a few times faster once loaded. Below
it a cold build of a small dataset loads no numba; at this length the cumulative sums
cost about a millisecond more than the loaded kernel."""

SHUFFLE_KERNEL_MIN_SIZE = 65_536
"""Arrays shorter than this are shuffled by numpy's own ``RandomState.shuffle``; from
this length on by the kernel (faster on long arrays, but it loads numba). Just below it
numpy's shuffle costs about a millisecond more than the loaded kernel."""

SCHEDULE_REFERENCE_MAX_SAMPLES = 2048
"""Schedule blends of up to this many samples run the reference (no numba load); longer
ones a schedule kernel (the scan, or from ``BLEND_SCAN_BELOW`` datasets on the
sub-linear ``kernels.blend_phases``)."""

BIJECTION_KERNEL_MIN_POSITIONS = 16
"""Rows of fewer positions of a bijection shuffle are computed in Python (one position
costs a few microseconds, about what calling a numba kernel costs from Python)."""

GENERAL_SAMPLES_BEFORE_WAIT = 256
"""Samples of a dataset that the general path serves while its kernel loads in the
background; the next one waits for the load. A reader of many samples is better off
waiting than serving them all by the slower general path, while the first samples still
come at once."""

_BLEND_NUMPY_OVERHEAD = 750  # per-sample cost of the numpy scan, in units of datasets


def blending_route(num_datasets: int, size: int, numba_started: bool = True) -> str:
    """``NUMPY``, ``SCAN`` or ``FAST`` for ``build_blending_indices``; ``numba_started``:
    whether a kernel has run in the process (else a first call pays numba's set-up)."""
    limit = BLEND_NUMPY_MAX_WORK if numba_started else BLEND_NUMPY_MAX_WORK_BEFORE_NUMBA
    if size * (num_datasets + _BLEND_NUMPY_OVERHEAD) <= limit:
        return NUMPY
    return SCAN if num_datasets < BLEND_SCAN_BELOW else FAST


def schedule_route(
    num_phases: int,
    all_positive: bool,
    size: int,
    num_datasets: int = 1,
    distinct: bool = True,
) -> str:
    """``FIXED`` (``build_blending_indices``, the same bytes) for a one-phase schedule of
    positive weights, else ``REFERENCE`` up to ``SCHEDULE_REFERENCE_MAX_SAMPLES`` samples;
    above, the ``SCAN`` kernel (``blend_scan.schedule_scan``) for fewer than
    ``BLEND_SCAN_BELOW`` datasets or when two datasets have the same weight in every
    phase (not ``distinct``: their errors tie often, which the sub-linear kernel pays
    for with full scans; the fixed blend's groups have no schedule twin yet), else the
    ``FAST`` kernel (``blend_phases.schedule_fast``), for
    ``build_scheduled_blending_indices``."""
    if num_phases == 1 and all_positive:
        return FIXED
    if size <= SCHEDULE_REFERENCE_MAX_SAMPLES:
        return REFERENCE
    return FAST if num_datasets >= BLEND_SCAN_BELOW and distinct else SCAN


def exhaustive_route(num_datasets: int, total: int) -> str:
    """``REFERENCE``, ``SCAN`` or ``FAST`` for ``build_exhaustive_blending_indices``."""
    if total * (num_datasets + _BLEND_NUMPY_OVERHEAD) <= BLEND_NUMPY_MAX_WORK:
        return REFERENCE
    return SCAN if num_datasets < BLEND_SCAN_BELOW else FAST


def bijection_route(num_positions: int) -> str:
    """``KERNEL`` or ``REFERENCE`` for the rows of ``num_positions`` positions of a
    ``shuffle_mode="bijection"`` shuffle."""
    return KERNEL if num_positions >= BIJECTION_KERNEL_MIN_POSITIONS else REFERENCE


def sample_index_route(document_index: Any) -> str:
    """``VECTORIZED`` or ``KERNEL`` for ``build_sample_index`` (odd inputs: ``KERNEL``,
    whose checked path reports them)."""
    shape = read_attribute(document_index, "shape", None)
    if shape is not None and len(shape) == 1 and shape[0] <= SAMPLE_VECTORIZED_MAX_DOCUMENTS:
        return SMALL if 0 < shape[0] <= SAMPLE_SMALL_MAX_DOCUMENTS else VECTORIZED
    return KERNEL


def shuffle_route(random_state: Any, x: Any) -> str:
    """``KERNEL`` or ``NUMPY`` for ``legacy_shuffle(random_state, x)``."""
    fits = (
        type(random_state) is numpy.random.RandomState
        and type(x) is numpy.ndarray
        and x.ndim == 1
        and x.shape[0] >= SHUFFLE_KERNEL_MIN_SIZE
        and x.flags.c_contiguous
        and x.flags.writeable
        and not x.dtype.hasobject
        and x.dtype.itemsize in (1, 2, 4, 8)
    )
    return KERNEL if fits else NUMPY


def sample_kernel_applies(
    tokens_mapped: bool,
    kernels_available: bool,
    return_cu_seqlens: bool,
    per_sample_attention_mask: bool,
    eod: Any,
    pad: Any,
) -> bool:
    """Whether ``dataset[i]`` may be served by ``fill_sample``: it makes every field the
    config asks for (not ``cu_seqlens``, nor a per-sample attention mask), from a
    memory-mapped ``.bin``, with integer EOD and pad ids that fit int64 (a tokenizer may
    lack an EOD)."""
    return (
        tokens_mapped
        and kernels_available
        and not return_cu_seqlens
        and not per_sample_attention_mask
        and _fits_int64(eod)
        and _fits_int64(pad)
    )


def sample_route(kernel_loaded: bool, served_while_loading: int) -> str:
    """``KERNEL``, ``GENERAL`` or ``WAIT`` (for the load, then ``KERNEL``) for the next
    ``dataset[i]`` of a dataset that :func:`sample_kernel_applies` to, after
    ``served_while_loading`` samples served by the general path while the kernel loads.
    The one route that depends on timing (see the module's docstring)."""
    if kernel_loaded:
        return KERNEL
    return GENERAL if served_while_loading < GENERAL_SAMPLES_BEFORE_WAIT else WAIT


def _fits_int64(value: Any) -> bool:
    try:
        return -(2**63) <= operator.index(value) < 2**63
    except TypeError:
        return False
