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


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    out = []
    for case in spec:
        scheduler = BalancedCPScheduler(case["max_seq_len_per_rank"], Group(case["dp_cp_size"]))
        items = [tuple(x) for x in case["sample_id_seqlens"]]
        start = time.perf_counter()
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
