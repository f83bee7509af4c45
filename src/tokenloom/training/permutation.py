"""torch's CPU ``randperm`` without torch: the permutation Megatron's random sampler draws.

``torch.randperm(n, generator=torch.Generator().manual_seed(seed))`` on the CPU is, read
from ATen's ``randperm_cpu`` (``aten/src/ATen/native/TensorFactories.cpp``) and checked
against torch 2.13 (``tests/training/test_randperm.py``):

* the generator is the standard 32-bit MT19937 seeded with ``seed mod 2**32``;
* for ``n < 2**32 // 20`` (= 214,748,364, :data:`SMALL_N_LIMIT`): ``r = [0..n-1]``, then
  for ``i = 0 .. n-2`` draw a 32-bit ``u`` and swap ``r[i]`` with ``r[i + u % (n-i)]``;
* from :data:`SMALL_N_LIMIT` on (torch's comment says it is to avoid modulo bias): the
  "inside-out" variant, for ``i = 0 .. n-1`` draw ``u = (hi << 32) | lo`` from two 32-bit
  outputs (``hi`` first), ``z = u % (i+1)``, then ``r[i] = r[z]; r[z] = i``.

:func:`reference_randperm` is the readable loop; :func:`randperm` runs the same steps in
numba (:mod:`tokenloom.kernels.permutation`) over blocks of draws from numpy's MT19937
(identical outputs), or the readable loop where the kernels cannot run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy

from tokenloom.errors import ConfigError
from tokenloom.kernels import KERNELS

__all__ = ["SMALL_N_LIMIT", "mt19937_outputs", "randperm", "reference_randperm"]

SMALL_N_LIMIT = 0xFFFFFFFF // 20
_BLOCK = 1 << 20


def _generator(seed: int) -> numpy.random.MT19937:
    """numpy's MT19937 in the state of C++ ``std::mt19937(seed mod 2**32)``."""
    if not isinstance(seed, (int, numpy.integer)) or isinstance(seed, bool):
        raise ConfigError(f"randperm seed must be an integer, got {seed!r}")
    legacy = numpy.random.RandomState(int(seed) % 2**32).get_state(legacy=False)
    generator = numpy.random.MT19937()
    generator.state = {"bit_generator": "MT19937", "state": legacy["state"]}
    return generator


def mt19937_outputs(seed: int, count: int) -> numpy.ndarray:
    """The first ``count`` 32-bit outputs of MT19937 seeded with ``seed`` (as uint64)."""
    return numpy.asarray(_generator(seed).random_raw(count), dtype=numpy.uint64)


def _blocks(generator: numpy.random.MT19937, total: int) -> Iterator[numpy.ndarray]:
    done = 0
    while done < total:
        size = min(_BLOCK, total - done)
        yield numpy.asarray(generator.random_raw(size), dtype=numpy.uint64)
        done += size


def _check(n: int, dtype: object) -> numpy.dtype[Any]:
    if not isinstance(n, (int, numpy.integer)) or isinstance(n, bool) or n < 0:
        raise ConfigError(f"randperm n must be a non-negative integer, got {n!r}")
    kind: numpy.dtype[Any] = numpy.dtype(dtype)  # type: ignore[call-overload]
    if kind.kind not in "iu" or (n > 0 and n - 1 > numpy.iinfo(kind).max):
        raise ConfigError(f"randperm dtype {kind} cannot hold values up to {n - 1}")
    return kind


def _allocate(n: int, kind: numpy.dtype, identity: bool) -> numpy.ndarray:
    """``arange(n)`` (or an empty array) of ``kind``; ConfigError naming the size when
    it cannot be allocated (a sample count far beyond memory)."""
    try:
        return numpy.arange(n, dtype=kind) if identity else numpy.empty(n, dtype=kind)
    except (MemoryError, ValueError) as error:
        raise ConfigError(
            f"randperm n={n}: the permutation needs {n * kind.itemsize / 2**30:.1f} GiB, "
            f"which cannot be allocated here ({error}); use fewer samples"
        ) from None


def randperm(n: int, seed: int, dtype: object = numpy.int64) -> numpy.ndarray:
    """``torch.randperm(n, generator=torch.Generator().manual_seed(seed)).numpy()``."""
    kind = _check(n, dtype)
    kernel = KERNELS.get("permutation")
    if kernel is None:
        return reference_randperm(n, seed, kind)
    generator = _generator(seed)
    if n < SMALL_N_LIMIT:
        result = _allocate(n, kind, identity=True)
        start = 0
        for draws in _blocks(generator, max(n - 1, 0)):
            kernel.swap_block(result, draws, start, n)
            start += draws.shape[0]
        return result
    result = _allocate(n, kind, identity=False)
    start = 0
    for draws in _blocks(generator, 2 * n):  # _BLOCK is even: pairs never straddle blocks
        kernel.inside_out_block(result, draws, start)
        start += draws.shape[0] // 2
    return result


def reference_randperm(n: int, seed: int, dtype: object = numpy.int64) -> numpy.ndarray:
    """The readable loop (both branches), one MT19937 draw at a time."""
    kind = _check(n, dtype)
    generator = _generator(seed)
    draw = iter(_blocks(generator, 2 * n if n >= SMALL_N_LIMIT else max(n - 1, 0)))
    values = (int(u) for block in draw for u in block.tolist())
    if n < SMALL_N_LIMIT:
        result = list(range(n))
        for i in range(n - 1):
            z = i + next(values) % (n - i)
            result[i], result[z] = result[z], result[i]
        return numpy.array(result, dtype=kind)
    out = [0] * n
    for i in range(n):
        z = ((next(values) << 32) | next(values)) % (i + 1)
        out[i] = out[z]
        out[z] = i
    return numpy.array(out, dtype=kind)
