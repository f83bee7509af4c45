"""CachedIndices' checks given as a callable: computed only when an entry is first read,
stored or built, compared as given ones are, and resolved before pickling."""

from __future__ import annotations

import pickle

import numpy

from tokenloom.cache import CacheKey, IndexCache
from tokenloom.cache.indices import CachedIndices

NAMES = ("a", "b")


def _arrays():
    return {"a": numpy.arange(10, dtype=numpy.int32), "b": numpy.arange(4, dtype=numpy.int64)}


class Counting:
    """Checks that count their calls."""

    def __init__(self, value: str) -> None:
        self.value, self.calls = value, 0

    def __call__(self):
        self.calls += 1
        return {"indices": self.value}


def _held(cache, key, checks, builds):
    def build():
        builds.append(1)
        return _arrays()

    return CachedIndices(NAMES, cache, key, build, lambda: "test", checks=checks)


def test_callable_checks_wait_for_the_first_read(tmp_path):
    cache, key = IndexCache(str(tmp_path)), CacheKey("T", "train", {"x": 1})
    builds: list[int] = []
    first = Counting("same")
    _held(cache, key, first, builds).load_or_build()  # built and stored with the checks
    assert first.calls == 1 and builds == [1]
    checks = Counting("same")
    held = _held(cache, key, checks, builds)
    held.defer(verify="checksum", rebuild=True)
    assert checks.calls == 0  # deferred and unread: never computed
    assert numpy.array_equal(held.arrays()["a"], _arrays()["a"])
    assert checks.calls == 1 and builds == [1]  # read from the cache, not rebuilt
    held.arrays()
    assert checks.calls == 1


def test_callable_checks_that_differ_rebuild(tmp_path):
    cache, key = IndexCache(str(tmp_path)), CacheKey("T", "train", {"x": 2})
    builds: list[int] = []
    _held(cache, key, Counting("old"), builds).load_or_build()
    held = _held(cache, key, Counting("new"), builds)
    held.defer(verify="checksum", rebuild=True)
    held.arrays()
    assert builds == [1, 1]  # the stored checks differ: rebuilt, not served
    again = _held(cache, key, Counting("new"), builds)
    again.load_or_build()
    assert builds == [1, 1]  # the rebuilt entry carries the new checks


def test_pickled_before_the_first_read(tmp_path):
    cache, key = IndexCache(str(tmp_path)), CacheKey("T", "train", {"x": 3})
    builds: list[int] = []
    _held(cache, key, Counting("same"), builds).load_or_build()
    held = CachedIndices(NAMES, cache, key, _arrays, str, checks=lambda: {"indices": "same"})
    held.defer(verify="checksum")
    copy = pickle.loads(pickle.dumps(held))  # the lambda is resolved, not pickled
    assert copy.checks == {"indices": "same"}
    assert numpy.array_equal(copy.arrays()["b"], _arrays()["b"])
