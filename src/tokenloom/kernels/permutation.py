"""numba kernels of torch's CPU ``randperm``: the two Fisher-Yates variants, a block of
MT19937 draws at a time.

Readable twin: :func:`tokenloom.training.permutation.reference_randperm` (one draw at a
time); :func:`tokenloom.training.permutation.randperm` calls these through
``KERNELS.get("permutation")`` and gives the same permutation.
"""

from __future__ import annotations

import numba
import numpy


@numba.njit(cache=True, nogil=True)
def swap_block(result: numpy.ndarray, draws: numpy.ndarray, start: int, n: int) -> None:
    """Fisher-Yates steps ``i = start .. start+len(draws)-1``: swap r[i], r[i + u % (n-i)]."""
    for k in range(draws.shape[0]):
        i = start + k
        z = i + numpy.int64(draws[k] % numpy.uint64(n - i))
        saved = result[i]
        result[i] = result[z]
        result[z] = saved


@numba.njit(cache=True, nogil=True)
def inside_out_block(result: numpy.ndarray, draws: numpy.ndarray, start: int) -> None:
    """Inside-out steps ``i = start ..``; ``draws`` holds (hi, lo) 32-bit pairs."""
    for k in range(draws.shape[0] // 2):
        i = start + k
        value = (draws[2 * k] << numpy.uint64(32)) | draws[2 * k + 1]
        z = numpy.int64(value % numpy.uint64(i + 1))
        result[i] = result[z]
        result[z] = i
