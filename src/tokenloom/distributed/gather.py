"""An ``all_gather_object`` that gives up after a timeout and names the silent rank.

On a gloo group every exchange first passes ``torch.distributed.monitored_barrier``
(``wait_all_ranks=True``): rank 0 learns which ranks did not arrive within the timeout
and the ranks that did arrive learn that rank 0 stopped waiting, so every rank that is
alive raises a :class:`~tokenloom.errors.DistributedError` within about two timeouts.
Other backends (NCCL has no monitored barrier) run the collective in a helper thread
and stop waiting after the timeout; the collective cannot be cancelled there, so the
error says which exchange timed out but cannot tell which rank was missing.

torch is imported only when an exchange runs.
"""

from __future__ import annotations

import datetime
import re
import threading
from collections.abc import Callable
from typing import Any

from tokenloom.errors import DistributedError

_MISSING = re.compile(r"[Rr]anks?\s+([\d,\s]+?)\s+failed to pass monitoredBarrier")


def _missing_ranks(message: str) -> list[int]:
    found = _MISSING.search(message)
    return [int(r) for r in re.findall(r"\d+", found.group(1))] if found else []


def _timeout_error(rank: int, seconds: float, message: str) -> DistributedError:
    missing = _missing_ranks(message)
    if missing:
        who = f"rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}"
        return DistributedError(
            f"rank {rank}: {who} did not answer within {seconds:g} s (it crashed, hangs, or "
            "builds other datasets than this rank); see its log, or raise "
            "TOKENLOOM_DISTRIBUTED_TIMEOUT_S if its index build is just slow"
        )
    return DistributedError(
        f"rank {rank}: rank 0 did not confirm that every rank arrived within {seconds:g} s; "
        f"rank 0's error names the rank that did not answer (torch: {message.strip()[:300]})"
    )


def _gloo_barrier(dist: Any, group: Any, seconds: float) -> None:
    try:
        dist.monitored_barrier(
            group=group, timeout=datetime.timedelta(seconds=seconds), wait_all_ranks=True
        )
    except RuntimeError as error:
        raise _timeout_error(dist.get_rank(group), seconds, str(error)) from None


def _threaded(dist: Any, out: list[Any], obj: Any, group: Any, seconds: float) -> None:
    failure: list[BaseException] = []

    def run() -> None:
        try:
            dist.all_gather_object(out, obj, group=group)
        except BaseException as error:  # handed to the waiting thread
            failure.append(error)

    thread = threading.Thread(target=run, name="tokenloom-all-gather", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise DistributedError(
            f"rank {dist.get_rank(group)}: an exchange with the other ranks did not complete "
            f"within {seconds:g} s; one rank crashed, hangs or builds other datasets (see the "
            "other ranks' logs), or raise TOKENLOOM_DISTRIBUTED_TIMEOUT_S"
        )
    if failure:
        raise failure[0]


def bounded_all_gather(group: Any, seconds: float) -> Callable[[Any], list[Any]]:
    """``all_gather(obj)`` over ``group`` (None: the default group) bounded by ``seconds``."""

    def all_gather(obj: Any) -> list[Any]:
        import torch.distributed as dist

        out: list[Any] = [None] * dist.get_world_size(group)
        if dist.get_backend(group) == "gloo":
            _gloo_barrier(dist, group, seconds)
            dist.all_gather_object(out, obj, group=group)
        else:
            _threaded(dist, out, obj, group, seconds)
        return out

    return all_gather


__all__ = ["bounded_all_gather"]
