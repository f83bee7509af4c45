"""Every piece of process state is registered in ``tokenloom.process_caches``: caches
bounded and emptied by ``clear_process_caches()`` (which never changes a result), other
state registered with its reset and its fork and exit hooks. The scan
(``tests/support/state_scan.py``) reads the whole ``src/tokenloom`` tree, so a new piece
of state fails here, naming file:line. What is no state at all is named in ``EXEMPT``,
with the reason (calls known to make immutable values are listed in the scan)."""

from __future__ import annotations

import ast
import importlib
import multiprocessing
import random
import threading
from pathlib import Path

import numpy
import pytest
from tests.support.state_scan import Finding, rel, scan_tree, violations, writes

from tokenloom.process_caches import (
    BoundedCache,
    ProcessState,
    clear_process_caches,
    process_caches,
    process_state,
)

SOURCE = Path(__file__).resolve().parents[1] / "src" / "tokenloom"

CONSTANT_TABLE = "a constant table: read, never written (checked below)"
EXEMPT = {
    # module-level objects that are not state
    "plugins.py:GROUPS": "the documented table of plugin groups, never written; discovery "
    "reads the installed metadata at each call",
    "atomic.py:_UMASK": "the umask, read once at import on purpose: reading it means "
    "setting it, which races with threads creating files",
    "cache/keys.py:_ENCODER": "a json.JSONEncoder: its settings only, no state",
    "cache/entry.py:_COMPACT": "a json.JSONEncoder: its settings only, no state",
    "builder/warm_keys.py:_DIGEST_JSON": "the digest's name as JSON text (a str), made "
    "once at import",
    "format/identity.py:(DIGEST_NAME, _new_hash)": "the digest's name and constructor, "
    "chosen once at import",
    "format/_mapping.py:_MAP_FAILED": "MAP_FAILED, an int",
    "format/publish_locks.py:_CLOEXEC": "an os flag (an int)",
    "format/publish_locks.py:_NONBLOCK": "an os flag (an int)",
    "format/publish_locks.py:_NOFOLLOW": "an os flag (an int)",
    "format/sigaction.py:SigAction._fields_": "a ctypes structure's layout",
    "kernels/stamp.py:_HERE": "the package's folder (a Path), found once at import",
    "kernels/prefetch.py:prefetch_read": "a numba intrinsic (a function)",
    "kernels/prefetch.py:prefetch_write": "a numba intrinsic (a function)",
    "megatron/errors.py:FLAVOURED": "error classes made once at import, never written",
    "training/state_schema.py:_IDENTITY": "a schema table, never written",
    "training/state_schema.py:_DATASET": CONSTANT_TABLE,
    "training/state_schema.py:_ORDER": "a schema check (a function), never written",
    "training/state_schema.py:_SOURCE": "a schema check (a function), never written",
    "training/state_schema.py:_MIXTURE": "a schema check (a function), never written",
    "training/state_schema.py:_V3": CONSTANT_TABLE,
    "training/megatron_resume.py:_OLD_ALIASES": CONSTANT_TABLE,
    # the registry itself
    "process_caches.py:_REGISTRY": "the registry of caches: the one home",
    "process_caches.py:_STATES": "the registry of other state: the one home",
    # entry points
    "__main__.py:sys.exit": "the entry point's exit status",
    "cli/main.py:sys.exit": "the entry point's exit status",
    "megatron/__main__.py:sys.exit": "the entry point's exit status",
    # constant tables
    "cli/_look.py:_SPEC_KINDS": CONSTANT_TABLE,
    "cli/_plan_rates.py:DEFAULT_RATES": CONSTANT_TABLE,
    "cli/_preprocess_flags.py:_TOKENIZER_DEFAULTS": CONSTANT_TABLE,
    "cli/_run_settings.py:MEGATRON_POLICY": CONSTANT_TABLE,
    "cli/_tokenizer_settings.py:TOKENIZER_ALIASES": CONSTANT_TABLE,
    "cli/prepare_cache.py:_OPTIONS": CONSTANT_TABLE,
    "cli/prepare_cache.py:_ALIASES": CONSTANT_TABLE,
    "cli/prepare_cache.py:_KINDS": CONSTANT_TABLE,
    "cli/warmup.py:_WARMERS": CONSTANT_TABLE,
    "datasets/__init__.py:_LAZY": CONSTANT_TABLE,
    "format/dtypes.py:_CODES": CONSTANT_TABLE,
    "datasets/_batch.py:BATCH_FIELDS": CONSTANT_TABLE,
    "packing/_pipeline.py:DTYPES": CONSTANT_TABLE,
    "packing/batch.py:EXPECTED": CONSTANT_TABLE,
    "packing/thd.py:PAD_VALUES": CONSTANT_TABLE,
    "packing/wrap.py:SCHEDULERS": CONSTANT_TABLE,
    "preprocess/ray_engine/cluster.py:_QUIET_ENV": CONSTANT_TABLE,
    "preprocess/records.py:REASONS": CONSTANT_TABLE,
    "preprocess/stdlib_corpus.py:_SKIPPED_DIRS": CONSTANT_TABLE,
    "tokenizers/megatron_tiktoken.py:PATTERNS": CONSTANT_TABLE,
    "tokenizers/spec.py:_ALIASES": CONSTANT_TABLE,
    "training/__init__.py:_LAZY": CONSTANT_TABLE,
    "training/collate.py:BATCH_DTYPES": CONSTANT_TABLE,
    "training/collate.py:NUMPY_DTYPES": CONSTANT_TABLE,
    "training/state_schema.py:_DATASET_V1": CONSTANT_TABLE,
    "training/state_schema.py:_DATASET_V3": CONSTANT_TABLE,
    "training/state_schema.py:_COMMON": CONSTANT_TABLE,
    "training/state_schema.py:_SCHEMAS": CONSTANT_TABLE,
}


def _is_registered(finding: Finding) -> bool:
    """Whether the module-level object of ``finding`` is a registered cache or state."""
    module = "tokenloom." + finding.path.removesuffix(".py").replace("/", ".")
    module = module.removesuffix(".__init__")
    value = vars(importlib.import_module(module)).get(finding.name, object())
    owners = [s.owner for s in process_state() if isinstance(s, ProcessState)]
    return any(value is cache for cache in process_caches()) or any(value is o for o in owners)


def test_no_process_state_outside_the_registry():
    problems = violations(scan_tree(SOURCE), EXEMPT, _is_registered)
    assert problems == [], "\n".join(problems)


def test_every_exemption_names_something_that_exists():
    keys = {f.key for f in scan_tree(SOURCE)}
    stale = sorted(set(EXEMPT) - keys)
    assert stale == [], f"EXEMPT names what the tree no longer has: {stale}; remove them"


def test_exempt_tables_are_never_written():
    tables = {k.split(":", 1)[1]: k for k, reason in EXEMPT.items() if reason == CONSTANT_TABLE}
    written = []
    for path in sorted(SOURCE.rglob("*.py")):
        for name, lines in writes(ast.parse(path.read_text())).items():
            if name in tables:
                written += [f"{rel(SOURCE, path)}:{line} writes {tables[name]}" for line in lines]
    assert written == [], "\n".join(written) + "\n(a table that is written is state)"


def test_the_scan_finds_every_kind_of_state_and_names_its_line(tmp_path):
    (tmp_path / "stateful.py").write_text(
        "import atexit, functools, logging, os, threading\n"
        "from typing import TypeVar\n"
        "_SEEN = {}\n"
        "_ORDER: list = list()\n"
        "_LOCAL = threading.local()\n"
        "_POOL = Pool()\n"
        "logger = logging.getLogger(__name__)\n"
        "T = TypeVar('T')\n"
        "NAMES = frozenset({'a'})\n"
        "__all__ = ['f']\n"
        "if True:\n"
        "    os.register_at_fork(after_in_child=print)\n"
        "atexit.register(print)\n"
        "class Holder:\n"
        "    seen = set()\n"
        "@functools.lru_cache(maxsize=None)\n"
        "def f(x):\n"
        "    global _COUNT\n"
        "    return x\n"
        "@functools.cache\n"
        "def g(x):\n"
        "    return x\n"
        "def h():\n"
        "    atexit.register(print)\n"
    )
    found = {(f.line, f.kind, f.name) for f in scan_tree(tmp_path)}
    assert found == {
        (3, "mutable", "_SEEN"),
        (4, "mutable", "_ORDER"),
        (5, "instance", "_LOCAL"),
        (6, "instance", "_POOL"),
        (12, "fork/exit hook", "os.register_at_fork"),
        (13, "fork/exit hook", "atexit.register"),
        (15, "mutable", "Holder.seen"),
        (17, "memoised or hooked", "f"),
        (18, "global", "_COUNT"),
        (21, "memoised or hooked", "g"),
        (24, "fork/exit hook", "atexit.register"),
    }
    problems = violations(scan_tree(tmp_path), {"stateful.py:_SEEN": "why"}, lambda f: False)
    assert len(problems) == len(found) - 1
    assert any(p.startswith("stateful.py:5: instance _LOCAL: process state") for p in problems)


def test_the_write_detector_sees_item_writes_and_mutators():
    tree = ast.parse(
        "TABLE = {}\nTABLE['a'] = 1\nmodule.TABLE.update(x)\ndel TABLE['a']\n"
        "TABLE += [1]\nprint(TABLE['a'])\nOTHER['a'] = 1\n"
    )
    assert writes(tree)["TABLE"] == [2, 3, 4, 5]


# -- the registry --------------------------------------------------------------------
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


def test_the_registry_lists_the_other_state_and_resets_it_safely():
    """Every stateful object of the tree is listed; clearing resets what can be reset
    and leaves each one working."""
    import tokenloom.format._mapping  # noqa: F401 - registers the live mappings
    import tokenloom.storage.integration  # noqa: F401 - registers the notice
    from tokenloom.kernels import KERNELS
    from tokenloom.preprocess.encode import WORKER_JOB
    from tokenloom.storage.clients import DEFAULT_POOL

    states = [s for s in process_state() if isinstance(s, ProcessState)]
    names = {s.name for s in states}
    assert {
        "kernels: the kernel loader",
        "kernels.shutdown: the exit guard",
        "storage.clients: object-storage clients",
        "format._mapping: live memory-mapped readers",
        "format.sigbus: the SIGBUS reporter",
        "preprocess.encode: the pool worker's job",
        "storage.integration: the remote-mmap notice",
        "storage.retry: the backoff jitter",
    } <= names
    assert all(s.holds and (s.reset is None or callable(s.reset)) for s in states)
    WORKER_JOB.set("tokenizer", "spec")  # type: ignore[arg-type]
    loaded = KERNELS.get("batch")
    clear_process_caches()
    clear_process_caches()  # twice: a reset of a reset state is fine
    with pytest.raises(RuntimeError, match="outside a preprocess worker"):
        WORKER_JOB.get()
    assert len(DEFAULT_POOL) == 0
    assert KERNELS.get("batch") is loaded  # loaded again: the same module


def _jitter() -> random.Random:
    """storage.retry's generator, as the registry lists it."""
    import tokenloom.storage.retry  # noqa: F401 - registers it

    (state,) = [s for s in process_state() if s.name == "storage.retry: the backoff jitter"]
    assert isinstance(state, ProcessState) and isinstance(state.owner, random.Random)
    return state.owner


def _jitter_in_child(queue) -> None:
    from tokenloom.storage import retry

    queue.put(retry.backoff_delay(retry.RetryPolicy(), 1, "error", _jitter()))


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_the_one_fork_hook_runs_the_registered_hooks_in_the_child():
    """process_caches' fork hook runs storage.retry's: a child draws other jitter than
    the parent's generator would have drawn (workers do not retry in step)."""
    from tokenloom.storage import retry

    state = _jitter().getstate()
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_jitter_in_child, args=(queue,))
    child.start()
    drawn = queue.get(timeout=60)
    child.join(60)
    assert child.exitcode == 0
    inherited = random.Random()
    inherited.setstate(state)
    assert drawn != retry.backoff_delay(retry.RetryPolicy(), 1, "error", inherited)


def _gpt_build(seed: int) -> tuple:
    from tokenloom.datasets._gpt_indices import build_indices, plan_epochs

    lengths = numpy.array([5, 9, 3, 12, 7, 4, 8, 6], dtype=numpy.int32)
    documents = numpy.arange(lengths.shape[0], dtype=numpy.int32)
    plan = plan_epochs(lengths, documents, 20, 4, 1, False, "test")
    return build_indices(lengths, documents, plan, 4, 1, seed)


def test_the_gpt_index_caches_fill_and_clearing_them_changes_no_result():
    """``datasets._gpt_indices`` and ``datasets._rng_memo`` keep their memos in the
    registry: a build fills them, a cleared build recomputes the same arrays."""
    from tokenloom.process_caches import (
        DOCUMENT_DRAWS,
        SEEDED_GENERATORS,
        SEEDED_STATES,
        SHUFFLE_DRAWS,
    )

    clear_process_caches()
    cold = _gpt_build(seed=4321)
    assert 4321 in SEEDED_STATES and len(DOCUMENT_DRAWS) == 1 and len(SHUFFLE_DRAWS) == 1
    warm = _gpt_build(seed=4321)
    assert threading.get_ident() in SEEDED_GENERATORS  # the restored generator
    clear_process_caches()
    assert len(SEEDED_STATES) == len(DOCUMENT_DRAWS) == len(SHUFFLE_DRAWS) == 0
    assert len(SEEDED_GENERATORS) == 0
    again = _gpt_build(seed=4321)
    for first, second, third in zip(cold, warm, again):
        numpy.testing.assert_array_equal(first, second)
        numpy.testing.assert_array_equal(first, third)
    other = _gpt_build(seed=4322)
    assert not numpy.array_equal(cold[2], other[2]) or not numpy.array_equal(cold[0], other[0])


def test_the_cast_rules_cache_fills_and_clearing_it_changes_no_result():
    from tokenloom.errors import FormatError
    from tokenloom.format._buffers import check_fits
    from tokenloom.process_caches import CAST_RULES

    clear_process_caches()
    check_fits(numpy.array([1, 2], dtype=numpy.int64), numpy.uint16, "here")
    assert len(CAST_RULES) == 1
    with pytest.raises(FormatError, match="does not fit uint16"):
        check_fits(numpy.array([70000], dtype=numpy.int64), numpy.uint16, "here")
    clear_process_caches()
    with pytest.raises(FormatError, match="does not fit uint16"):
        check_fits(numpy.array([70000], dtype=numpy.int64), numpy.uint16, "here")
    check_fits(numpy.array([1], dtype=numpy.uint8), numpy.uint16, "here")  # safe: no bounds
    with pytest.raises(FormatError, match="tokens must be numbers"):
        check_fits(numpy.array(["a"]), numpy.uint16, "here")
