"""Every process-level cache is declared in ``tokenloom.process_caches``: bounded, and
emptied by ``clear_process_caches()``, which never changes a result."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

import numpy
import pytest

from tokenloom.process_caches import BoundedCache, clear_process_caches, process_caches

SOURCE = Path(__file__).resolve().parents[1] / "src" / "tokenloom"


def test_bounded_cache_drops_the_oldest_entries():
    cache: BoundedCache[int, str] = BoundedCache("test: bound", 3, "int -> str")
    for k in range(3):
        cache.put(k, str(k))
    assert cache.get(0) == "0"
    cache.put(3, "3")
    assert 0 not in cache and len(cache) == 3 and cache.get(1) == "1"
    assert cache.pop(1) == "1" and cache.get(1) is None
    cache.clear()
    assert len(cache) == 0
    with pytest.raises(ValueError):
        BoundedCache("test: empty", 0, "nothing")


def test_bounded_cache_is_thread_safe_and_stays_bounded():
    cache: BoundedCache[int, int] = BoundedCache("test: threads", 50, "int -> int")

    def fill(start: int) -> None:
        for k in range(start, start + 2000):
            cache.put(k % 300, k)
            cache.get((k * 7) % 300)

    threads = [threading.Thread(target=fill, args=(i * 1000,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(cache) == 50


def test_the_registry_lists_every_cache_with_a_bound_and_clears_them():
    caches = process_caches()
    names = [cache.name for cache in caches]
    assert len(set(names)) == len(names)
    assert {"format.identity: .idx digests", "cache.pack: pack directory listings"} <= set(names)
    for cache in caches:
        assert cache.bound >= 1 and cache.holds
        cache.put(("probe",), "x")  # type: ignore[arg-type]
    clear_process_caches()
    assert all(len(cache) == 0 for cache in caches)


def _module_level_mutables(path: Path) -> list[str]:
    """Names bound at module level to a new dict, list, set or OrderedDict."""
    found = []
    for node in ast.parse(path.read_text()).body:
        value = getattr(node, "value", None)
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        mutable = isinstance(value, (ast.Dict, ast.List, ast.Set)) or (
            isinstance(value, ast.Call)
            and getattr(value.func, "id", getattr(value.func, "attr", None))
            in ("dict", "list", "set", "OrderedDict")
        )
        if mutable and targets:
            found += [getattr(t, "id", "?") for t in targets]
    return found


def _memoising_decorators(path: Path) -> list[str]:
    """Functions decorated with ``functools.lru_cache`` / ``functools.cache`` (hidden,
    unclearable caches)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                name = getattr(target, "attr", getattr(target, "id", None))
                if name in ("lru_cache", "cache"):
                    found.append(node.name)
    return found


AREAS = [
    "cache",
    "builder",
    "kernels",
    "index",
    "format/identity.py",
    "format/lazy.py",
    "format/reader.py",
    "format/index_file.py",
    "format/dtypes.py",
    "format/integrity.py",
    "datasets/gpt.py",
    "datasets/blended.py",
    "datasets/_rng_memo.py",
    "datasets/_gpt_indices.py",
    "datasets/_sample.py",
    "datasets/megatron_dataset.py",
    "datasets/mock.py",
    "datasets/masks.py",
    "datasets/utils.py",
    "training/permutation.py",
    "training/samplers.py",
    "training/state.py",
    "progress.py",
    "megatron",
]


@pytest.mark.parametrize("area", AREAS)
def test_no_module_level_caches_outside_the_registry(area):
    paths = [SOURCE / area] if area.endswith(".py") else sorted((SOURCE / area).rglob("*.py"))
    assert paths and all(path.is_file() for path in paths), f"{area}: no such module"
    for path in paths:
        names = [n for n in _module_level_mutables(path) if n != "__all__"]
        assert names == [], f"{path}: module-level state {names}; declare it in process_caches"
        memoised = _memoising_decorators(path)
        assert memoised == [], f"{path}: lru_cache on {memoised}; use a BoundedCache instead"


def test_the_detectors_find_module_level_state(tmp_path):
    module = tmp_path / "stateful.py"
    module.write_text(
        "import functools\n_SEEN = {}\n_ORDER: list = list()\n"
        "@functools.lru_cache(maxsize=None)\ndef f(x):\n    return x\n"
    )
    assert _module_level_mutables(module) == ["_SEEN", "_ORDER"]
    assert _memoising_decorators(module) == ["f"]


def _gpt_build(seed: int) -> tuple:
    from tokenloom.datasets._gpt_indices import build_indices, plan_epochs

    lengths = numpy.array([5, 9, 3, 12, 7, 4, 8, 6], dtype=numpy.int32)
    documents = numpy.arange(lengths.shape[0], dtype=numpy.int32)
    plan = plan_epochs(lengths, documents, 20, 4, 1, False, "test")
    return build_indices(lengths, documents, plan, 4, 1, seed)


def test_the_gpt_index_caches_fill_and_clearing_them_changes_no_result():
    """``datasets._gpt_indices`` and ``datasets._rng_memo`` keep their memos in the
    registry: a build fills them, a cleared build recomputes the same arrays."""
    from tokenloom.process_caches import DOCUMENT_DRAWS, SEEDED_STATES, SHUFFLE_DRAWS

    clear_process_caches()
    cold = _gpt_build(seed=4321)
    assert 4321 in SEEDED_STATES and len(DOCUMENT_DRAWS) == 1 and len(SHUFFLE_DRAWS) == 1
    warm = _gpt_build(seed=4321)
    clear_process_caches()
    assert len(SEEDED_STATES) == len(DOCUMENT_DRAWS) == len(SHUFFLE_DRAWS) == 0
    again = _gpt_build(seed=4321)
    for first, second, third in zip(cold, warm, again):
        numpy.testing.assert_array_equal(first, second)
        numpy.testing.assert_array_equal(first, third)
    other = _gpt_build(seed=4322)
    assert not numpy.array_equal(cold[2], other[2]) or not numpy.array_equal(cold[0], other[0])
