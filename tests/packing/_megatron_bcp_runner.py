"""``python _megatron_bcp_runner.py SPEC.json OUT.json``: megatron-core's BalancedCPScheduler.

SPEC is a list of ``{"max_seq_len_per_rank", "dp_cp_size", "sample_id_seqlens"}``;
OUT gets, per case, ``{"seqlen_groups", "sample_id_groups"}`` or ``{"error"}``, and
the scheduling time in seconds.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.packing import _megatron_shims  # noqa: E402

_megatron_shims.install()

from megatron.core.pipeline_parallel.hybrid_cp_schedule import BalancedCPScheduler  # noqa: E402


class Group:
    """Anything with size() is enough for the constructor."""

    def __init__(self, size: int) -> None:
        self._size = size

    def size(self) -> int:
        return self._size


def linear(seq_len, cp_size=None):
    """A stand-in cost model: work grows with the length only."""
    return float(seq_len) / (cp_size or 1)


def one_round(scheduler, items, case) -> dict:
    """``next_hdp_group`` on the length-sorted items, with a chosen estimator and order."""
    ordered = sorted(items, key=lambda item: item[1], reverse=True)
    estimator = linear if case["estimator"] == "linear" else scheduler.get_total_workload
    try:
        seqlens, leftovers, times, ids = scheduler.next_hdp_group(
            ordered, estimator, case["dp_cp_size"], strategy=case["strategy"]
        )
    except Exception as error:  # noqa: BLE001 - recorded for the test
        return {"error": type(error).__name__}
    return {"round": [seqlens, [list(x) for x in leftovers], times, ids]}


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    out = []
    for case in spec:
        scheduler = BalancedCPScheduler(case["max_seq_len_per_rank"], Group(case["dp_cp_size"]))
        items = [tuple(x) for x in case["sample_id_seqlens"]]
        start = time.perf_counter()
        if "strategy" in case:  # one round, megatron-core's next_hdp_group arguments
            out.append(one_round(scheduler, items, case))
            continue
        try:
            seqlens, ids = scheduler.get_groups_and_subsamples(items, None)
            out.append(
                {
                    "seqlen_groups": seqlens,
                    "sample_id_groups": ids,
                    "seconds": time.perf_counter() - start,
                }
            )
        except Exception as error:  # noqa: BLE001 - recorded for the test
            out.append({"error": type(error).__name__})
    Path(sys.argv[2]).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
