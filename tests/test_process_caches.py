"""Every process-level cache is declared in ``tokenloom.process_caches``: bounded, and
emptied by ``clear_process_caches()``, which never changes a result."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

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
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        mutable = isinstance(value, (ast.Dict, ast.List, ast.Set)) or (
            isinstance(value, ast.Call) and getattr(value.func, "id", getattr(
                value.func, "attr", None)) in ("dict", "list", "set", "OrderedDict"))
        if mutable and targets:
            found += [getattr(t, "id", "?") for t in targets]
    return found


@pytest.mark.parametrize("area", ["cache", "builder", "format/identity.py", "format/lazy.py",
                                  "format/reader.py", "format/index_file.py",
                                  "datasets/gpt.py", "datasets/blended.py"])
def test_no_module_level_caches_outside_the_registry(area):
    paths = [SOURCE / area] if area.endswith(".py") else sorted((SOURCE / area).rglob("*.py"))
    for path in paths:
        names = [n for n in _module_level_mutables(path) if n != "__all__"]
        assert names == [], f"{path}: module-level state {names}; declare it in process_caches"
