"""``benchmarks/run.py --only scale``: every figure of issue 22 in one target.

The distributed cold build (partition, model, megatron-core's rank 0: bench_coldbuild),
the index memory at scale (bench_scale_memory), the peers side by side
(bench_peers) and preprocessing's peak memory against the input size
(bench_preprocess_memory, with its plot), each with the machine's limits (cores, fd limit, copy bandwidth) in the
rows of the cold build. The pool's cost needs the tree without the pool
(``bench_pool.py --old``) and is not run here.
"""

from __future__ import annotations

from typing import Any


def run(ctx: dict[str, Any]) -> list[dict[str, Any]]:
    """Each part in turn; a part that fails becomes one row with its error."""
    import importlib

    rows: list[dict[str, Any]] = []
    for module, entry in (
        # RSS parts first: a child's ru_maxrss starts at its parent's RSS (Linux keeps it
        # across exec), and the cold build, run in this process, grows it to ~750 MiB
        ("bench_scale_memory", "run"),
        ("bench_peers", "suite_rows"),
        ("bench_coldbuild", "run"),
        ("bench_preprocess_memory", "run"),  # section 4: preprocess peak RSS vs input size
    ):
        try:
            rows += getattr(importlib.import_module(module), entry)(ctx)
        except Exception as error:  # noqa: BLE001 - one broken part must not stop the rest
            rows.append({"target": f"6 scale {module}", "case": "-", "error": repr(error)})
    return rows
