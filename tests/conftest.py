"""Shared fixtures, and the test tiers (tests/support/tiers.py says what each holds).

The megatron-core golden vectors live in ../shared (never copied).

Under pytest-xdist (``--dist loadgroup``, as scripts/test.sh runs it), each test module
is one xdist group, so that its module- and session-scoped fixtures (gloo ranks launched
once for the module's tests, a Ray cluster, corpora) are built on one worker only.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.golden import GOLDEN_DIR, golden_available
from tests.support.tiers import HEAVY_MARKERS, ChildProcesses


def pytest_sessionstart(session: pytest.Session) -> None:
    """Before any kernel compiles (in the xdist controller, or a plain run): drop numba's
    cached machine code if a kernel source changed, so that no test runs stale code
    (src/tokenloom/kernels/stamp.py says why numba alone misses it)."""
    if not hasattr(session.config, "workerinput"):
        from tokenloom.kernels import stamp

        stamp.refresh()


@pytest.hookimpl(tryfirst=True)  # before -m selects by the marks added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        names = {mark.name for mark in item.iter_markers()}
        if not names & HEAVY_MARKERS:
            item.add_marker(pytest.mark.quick)
        if "xdist_group" not in names:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


@pytest.fixture(autouse=True)
def _quick_tests_start_no_processes(request: pytest.FixtureRequest) -> Iterator[None]:
    """A quick test that starts a child process fails: it belongs to the default tier.

    A test marked ``processes`` collects its garbage before it ends, so that the
    persistent DataLoader workers of iterators it dropped are shut down (and reaped)
    within it, never during a later test of the same process."""
    if request.node.get_closest_marker("quick") is None:
        yield
        if request.node.get_closest_marker("processes") is not None:
            gc.collect()
        return
    children = ChildProcesses()
    yield
    if children.started():
        pytest.fail(
            f"{request.node.nodeid} started a child process, so it is not a quick test: "
            "mark it @pytest.mark.processes (or distributed, megatron, ray, s3, slow)",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def golden_dir() -> Path:
    if not golden_available():
        pytest.skip(f"golden vectors not found at {GOLDEN_DIR}")
    return GOLDEN_DIR


@pytest.fixture(scope="session")
def golden_manifest(golden_dir: Path) -> dict:
    return json.loads((golden_dir / "manifest.json").read_text())
