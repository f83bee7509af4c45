"""The builder's ``all_gather_object``, bounded by a timeout that names the silent rank.

Every exchange of :func:`~tokenloom.distributed.build_on_rank0_then_load` (and of the
rank fingerprint check) goes through :func:`bounded_all_gather`, which runs
``torch.distributed.all_gather_object`` through
:func:`tokenloom.distributed.collectives.run_blocking`: on gloo a roll call names the
rank that did not arrive within the timeout on every live rank; on other backends the
exchange is abandoned after the timeout (the error then cannot say which rank was
missing).  torch is imported only when an exchange runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tokenloom.distributed.collectives import run_blocking

STEP = "the dataset build's all_gather_object"


def bounded_all_gather(group: Any, seconds: float, step: str = STEP) -> Callable[[Any], list[Any]]:
    """``all_gather(obj)`` over ``group`` (None: the default group) bounded by ``seconds``."""

    def all_gather(obj: Any) -> list[Any]:
        import torch.distributed as dist

        out: list[Any] = [None] * dist.get_world_size(group)
        run_blocking(
            group, step, lambda: dist.all_gather_object(out, obj, group=group), seconds=seconds
        )
        return out

    return all_gather


__all__ = ["STEP", "bounded_all_gather"]
